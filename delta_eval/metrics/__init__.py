"""The numbers a decision rests on: the estimand (which pairs count, and how), win rates and their intervals
(clustered by conversation), the paired question (net preference, sign test, non-inferiority), gates and the
decision matrix, the user's own checks on each side's output, planning, and sequential stopping.

Every function takes verdict (or replay) rows as an Arrow table, a DuckDB relation, a DataFrame or mappings.

The names are imported on first use (see :mod:`delta_eval.lazy`): a process that needs only the decision rule's
configuration (:mod:`delta_eval.metrics.rule`, which every run's configuration holds) imports none of the numerics.
"""

import pkgutil as _pkgutil
import typing as _typing

from delta_eval.lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    from delta_eval.metrics.checks import (
        CHECK_RESULTS_SCHEMA,
        CheckedTurn,
        CheckRate,
        CheckResult,
        check_rates,
        check_results,
    )
    from delta_eval.metrics.decision import Decision, ExitCode, FailOn, decide
    from delta_eval.metrics.difference import Difference, PairedSums
    from delta_eval.metrics.estimand import Estimand, components
    from delta_eval.metrics.gates import GateResult, evaluate_gates
    from delta_eval.metrics.intervals import (
        ClusteredMean,
        bootstrap_interval,
        clopper_pearson,
        clustered_mean,
        t_interval,
        wilson_interval,
    )
    from delta_eval.metrics.multiplicity import benjamini_hochberg, holm
    from delta_eval.metrics.paired import (
        NetPreference,
        NonInferiority,
        SignTest,
        net_preference,
        non_inferiority,
        sign_test,
    )
    from delta_eval.metrics.rule import DEFAULT_GATES, Check, DecisionRule, Gate
    from delta_eval.metrics.sides import Rate, SideMetrics, side_metrics
    from delta_eval.metrics.strata import StratumDecision, by_stratum
    from delta_eval.metrics.winrate import SCORES, WinRate, score_of, win_rate, win_rates_by

_EXPORTS = {
    "delta_eval.metrics.checks": (
        "CHECK_RESULTS_SCHEMA",
        "CheckedTurn",
        "CheckRate",
        "CheckResult",
        "check_rates",
        "check_results",
    ),
    "delta_eval.metrics.decision": ("Decision", "ExitCode", "FailOn", "decide"),
    "delta_eval.metrics.difference": ("Difference", "PairedSums"),
    "delta_eval.metrics.estimand": ("Estimand", "components"),
    "delta_eval.metrics.gates": ("GateResult", "evaluate_gates"),
    "delta_eval.metrics.intervals": (
        "ClusteredMean",
        "bootstrap_interval",
        "clopper_pearson",
        "clustered_mean",
        "t_interval",
        "wilson_interval",
    ),
    "delta_eval.metrics.multiplicity": ("benjamini_hochberg", "holm"),
    "delta_eval.metrics.paired": (
        "NetPreference",
        "NonInferiority",
        "SignTest",
        "net_preference",
        "non_inferiority",
        "sign_test",
    ),
    "delta_eval.metrics.rule": ("Check", "DEFAULT_GATES", "DecisionRule", "Gate"),
    "delta_eval.metrics.sides": ("Rate", "SideMetrics", "side_metrics"),
    "delta_eval.metrics.strata": ("StratumDecision", "by_stratum"),
    "delta_eval.metrics.winrate": ("SCORES", "WinRate", "score_of", "win_rate", "win_rates_by"),
}
if not _typing.TYPE_CHECKING:  # hidden from type checkers, so that a misspelt name stays an error for them
    # every module of the package answers as an attribute too (``delta_eval.metrics.gates``), as it did when the
    # package imported them all
    __getattr__, __dir__ = _lazy_names(__name__, _EXPORTS, tuple(m.name for m in _pkgutil.iter_modules(__path__)))

__all__ = [
    "CHECK_RESULTS_SCHEMA",
    "DEFAULT_GATES",
    "SCORES",
    "Check",
    "CheckRate",
    "CheckResult",
    "CheckedTurn",
    "ClusteredMean",
    "Decision",
    "DecisionRule",
    "Difference",
    "Estimand",
    "ExitCode",
    "FailOn",
    "Gate",
    "GateResult",
    "NetPreference",
    "NonInferiority",
    "PairedSums",
    "Rate",
    "SideMetrics",
    "SignTest",
    "StratumDecision",
    "WinRate",
    "benjamini_hochberg",
    "bootstrap_interval",
    "by_stratum",
    "check_rates",
    "check_results",
    "clopper_pearson",
    "clustered_mean",
    "components",
    "decide",
    "evaluate_gates",
    "holm",
    "net_preference",
    "non_inferiority",
    "score_of",
    "side_metrics",
    "sign_test",
    "t_interval",
    "wilson_interval",
    "win_rate",
    "win_rates_by",
]
