"""A run's outputs, read back from its folder: counts, win rates, and a DuckDB connection for everything else.

Example:
    >>> result = open_result("runs/demo")                    # doctest: +SKIP
    >>> print(result.win_rate())                              # doctest: +SKIP
    >>> result.connect().sql("SELECT * FROM pairs WHERE outcome = 'baseline'").df()  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pyarrow as pa

from delta_eval.exceptions import RunFolderError
from delta_eval.metrics import Decision, DecisionRule, ExitCode, FailOn, WinRate, decide, win_rate, win_rates_by
from delta_eval.store.folder import Damage, RunFolder
from delta_eval.store.manifest import RunCounts, RunManifest, RunStatus
from delta_eval.store.views import open_run

__all__ = ["RunResult", "open_result"]


class RunResult:
    """The outputs of one run folder."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._folder = RunFolder(self.path)
        manifest = self._folder.manifest()
        if manifest is None:
            raise RunFolderError(f"{self.path} is not a delta_eval run folder (no manifest.json)")
        self.manifest: RunManifest = manifest
        #: The damaged batches of the folder, left out of every table and view (a rerun repairs them).
        self.damage: list[Damage] = self._folder.damage()

    @property
    def status(self) -> RunStatus:
        """``completed``, ``interrupted``, ``failed`` or ``running`` (a session is still going, or was killed)."""
        return self.manifest.status

    @property
    def counts(self) -> RunCounts:
        """Counts recorded in the manifest when the run ended (read, sampled, pairs by stage and outcome, errors)."""
        return self.manifest.counts

    def table(
        self, name: Literal["replays", "verdicts", "judgements", "errors", "conversations", "strata", "media"]
    ) -> pa.Table:
        """One dataset of the run as an Arrow table (``.to_pandas()`` for a DataFrame). The messages of
        ``conversations`` name their media by hash; ``media`` holds the bytes, once each
        (:meth:`delta_eval.store.folder.RunFolder.read_conversations` joins them back)."""
        return self._folder.read(name)

    def win_rate(
        self,
        *,
        over: Literal["judged", "all"] = "all",
        weighted: bool | Literal["auto"] = "auto",
        soft: bool = False,
        errors: Literal["loss", "exclude"] = "loss",
        method: Literal["auto", "cluster", "wilson", "bootstrap", "iid"] = "auto",
        confidence: float = 0.95,
        by: str | None = None,
    ) -> Any:
        """The candidate's win rate with a confidence interval (see :mod:`delta_eval.metrics`).

        ``over="all"`` counts pairs found equivalent as ties; ``"judged"`` only pairs the judge decided.
        ``weighted=True`` reweights to the population by the sampling weights (``"auto"``, the default: whenever
        they vary); ``soft=True`` scores judged pairs by their preference (the continuous win rate);
        ``errors="loss"`` counts a failed replay as a loss of the side that failed (see
        :mod:`delta_eval.metrics.estimand`). Intervals treat each conversation as a cluster (``method``: see
        :mod:`delta_eval.metrics.winrate`). ``by="stratum"`` (or another verdict column) returns one
        :class:`WinRate` per value.
        """
        verdicts = self.table("verdicts")
        options: dict[str, Any] = {
            "over": over,
            "weighted": weighted,
            "soft": soft,
            "errors": errors,
            "method": method,
            "confidence": confidence,
            "seed": self.manifest.seed,
        }
        if by is not None:
            return win_rates_by(verdicts, by, **options)
        result: WinRate = win_rate(verdicts, **options)
        return result

    def decision(self, rule: DecisionRule | None = None) -> Decision:
        """The decision on this run: APPROVED, PARTIAL or REJECTED, what decided it, and every number behind it
        (see :mod:`delta_eval.metrics.decision`). ``rule`` defaults to the one the run was configured with.

        Example::

            d = result.decision(de.DecisionRule(margin=0.03))
            print(d)               # the outcome, the gate or test that decided, the intervals
        """
        if rule is None:
            rule = DecisionRule.model_validate(self.manifest.config.get("decision") or {})
        return decide(self.table("verdicts"), self.table("replays"), rule)

    def unfinished(self) -> str | None:
        """Why this run gives no decision to gate on, in words, or ``None`` when it does: it did not complete
        (failed, interrupted, still running or killed), or it has no pair that did not end in an error (a decision
        on nothing would read as "undecided", hiding a broken run)."""
        if self.status != "completed":
            said = {
                "running": "is still running, or was killed",
                "interrupted": "was interrupted (finished pairs are saved: the same command resumes it)",
            }.get(self.status, self.status)
            return f"the run {said}" + (f": {self.manifest.failure}" if self.manifest.failure else "")
        outcomes = self.table("verdicts").column("outcome").to_pylist()
        if not outcomes:
            return "the run has no pairs"
        if all(o == "error" for o in outcomes):
            return f"every one of the {len(outcomes)} pairs ended in an error (the errors table says why)"
        return None

    def exit_code(self, fail_on: FailOn = "rejected", decision: Decision | None = None) -> ExitCode:
        """The exit status of a merge gate on this run (see :class:`~delta_eval.metrics.decision.ExitCode`):
        ``INCOMPLETE`` when the run gives no decision (:meth:`unfinished`), else the decision's code at ``fail_on``
        (``decision`` defaults to :meth:`decision`)."""
        if self.unfinished() is not None:
            return ExitCode.INCOMPLETE
        return (decision or self.decision()).exit_code_at(fail_on)

    def connect(self) -> Any:
        """A DuckDB connection with views ``replays``, ``verdicts``, ``judgements``, ``errors``, ``conversations``,
        ``strata``, ``media``, ``pairs`` and ``tool_calls`` (see :func:`delta_eval.open_run`)."""
        return open_run(self.path)

    def __repr__(self) -> str:
        return f"RunResult({str(self.path)!r}, status={self.status!r}, pairs={self.counts.pairs})"


def open_result(path: str | Path) -> RunResult:
    """The :class:`RunResult` of an existing run folder."""
    return RunResult(path)
