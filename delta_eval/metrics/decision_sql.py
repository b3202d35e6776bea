"""The numbers of a decision computed by DuckDB over verdicts and replays (a run's Parquet views, or Arrow tables
registered in a connection), so that a million pairs become one row per conversation, never a Python object each.

:class:`Source` holds the two tables as views with every column the decision reads (null where a table has none);
:func:`side_metrics_of`, :func:`gate_results`, :func:`check_rates_of` and :func:`audit_of` give what
:func:`~delta_eval.metrics.sides.side_metrics`, :func:`~delta_eval.metrics.gates.evaluate_gates`, the check rates and
the audit give from rows, with the same sums (:mod:`delta_eval.metrics.sql_sums`); :meth:`Source.epoch` is one
epoch's rows (a filter, not a copy). :func:`delta_eval.metrics.decision.decide` assembles the decision; a property
test holds it equal to the decision on the same rows in memory.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from delta_eval.metrics.consistency import Consistency, consistency
from delta_eval.metrics.counted import Counted, shared_memo
from delta_eval.metrics.difference import PRODUCTS, PairedSums, StratumSums
from delta_eval.metrics.estimand import VERDICT_COLUMNS, sql_error_side
from delta_eval.metrics.frames import fetch_table, to_arrow
from delta_eval.metrics.gates import Gate, GateResult, gate_result, side_gate
from delta_eval.metrics.goals import GOAL_METRIC, GOAL_SQL, NO_GOALS, goal_rates
from delta_eval.metrics.sides import (
    Rate,
    SideMetrics,
    cost_ratio_of,
    partitioned_quantile_interval,
    sorted_quantile_interval,
)
from delta_eval.metrics.sql_sums import Metric, _runs, paired_sums, squared_by_weight
from delta_eval.metrics.text_order import text_order
from delta_eval.replay_sums import COST, COUNTS, turn_sums
from delta_eval.sql import quote_ident, quote_literal

__all__ = [
    "Source",
    "audit_of",
    "check_rates_of",
    "figures_only",
    "gate_results",
    "goal_rates_of",
    "shared_latencies",
    "side_latencies",
    "side_metrics_of",
]

_VERDICT_TYPES = {"pair_id": "VARCHAR", "conversation_id": "VARCHAR", "outcome": "VARCHAR", "severity": "VARCHAR",
                  "weight": "DOUBLE", "preference": "DOUBLE", "error": "VARCHAR", "error_side": "VARCHAR",
                  "epoch": "BIGINT", "stage": "VARCHAR", "audit_outcome": "VARCHAR", "stratum": "VARCHAR",
                  "_row": "BIGINT", "candidate_scores": "VARCHAR", "baseline_scores": "VARCHAR",
                  "pair_key": "BIGINT", "conversation_key": "BIGINT"}  # fmt: skip
_REPLAY_TYPES = {"pair_id": "VARCHAR", "conversation_id": "VARCHAR", "side": "VARCHAR", "error": "VARCHAR",
                 "latency_ms": "DOUBLE", "cost_usd": "DOUBLE", "n_tool_calls": "BIGINT",
                 "invalid_tool_calls": "BIGINT", "matches_recorded": "BOOLEAN", "text_instead_of_action": "BOOLEAN",
                 "no_decision": "BOOLEAN", "final_text": "VARCHAR", "epoch": "BIGINT",
                 "conversation_key": "BIGINT", "recorded_acted": "BOOLEAN", "pair_key": "BIGINT"}  # fmt: skip
#: What Python's ``str.strip()`` removes (``str.isspace``), as an RE2 class: a final text of only these is empty.
_SPACE = r"[\t\n\x0b\x0c\r\x1c-\x20\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]*"
#: A row's conversation as the rows path names it (``str`` of it: a missing one is ``"None"``).
_CLUSTER = "coalesce(conversation_id, 'None')"
#: A verdict's sampling weight as the rows path reads it (``weight or 1.0``).
_WEIGHT = "CASE WHEN weight IS NULL OR weight = 0 THEN 1.0 ELSE weight END"
_EPOCH = "coalesce(nullif(epoch, 0), 1)"
#: A verdict the judge could not give: the undecided-rate gate's event.
_UNDECIDED = f"outcome = 'error' AND {sql_error_side()} = 'judge'"
_names = itertools.count()


class Source:
    """Verdicts and replays in a DuckDB connection, as views of the columns the decision reads.

    ``verdicts`` and ``replays`` name tables or views of ``db`` (``replays`` may be ``None``: no side metrics);
    ``replay_tallies`` may name the replays' tallies (:mod:`delta_eval.store.replay_tallies`), which must sum every
    replay of ``replays`` and no other: what is counted of the replays is then read from them, the same integers
    (see :func:`_side_sums`). Views this creates are dropped by :meth:`close`."""

    def __init__(self, db: Any, verdicts: str, replays: str | None, *, raw_replays: str | None = None,
                 replay_tallies: str | None = None, part: bool = False) -> None:  # fmt: skip
        self.db = db
        #: The replays' tallies, where given (with replays).
        self.replay_tallies = replay_tallies if replays is not None else None
        self._made: list[str] = []
        self._known: dict[str, set[str]] = {}
        self._counts: dict[str, Any] | None = None
        self._replay_counts: dict[str, int] | None = None
        #: Whether these are the rows of one epoch of another source (:meth:`epoch`).
        self.part = part
        #: Each side's conversations (an Arrow array of their keys, or of their ids where a replay has no key, in
        #: order) and their costs (NaN where unpriced), as :func:`side_metrics_of` found them: what the cost gate
        #: reads, without rebuilding them from the sides.
        self.costs: dict[str, tuple[pa.Array, np.ndarray]] = {}
        #: What :attr:`costs` names the replays' conversations by (set by :func:`side_metrics_of`): a SQL expression
        #: over the replays' columns.
        self.replay_cluster = f"({_CLUSTER})::VARCHAR"
        #: Each side's turns and errors per conversation (in the order of :attr:`costs`), as
        #: :func:`side_metrics_of` counted them: what the error-rate gate reads when every pair is complete.
        self.turns: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        #: The replays as stored (every column: what the rule's own checks and consistency read).
        self.raw_replays = raw_replays or replays
        try:
            self.verdicts = self._view(verdicts, _VERDICT_TYPES)
            self.replays = self._view(replays, _REPLAY_TYPES) if replays is not None else None
        except BaseException:
            self.close()  # the caller gets no source to close: the views made so far are dropped here
            raise
        #: The verdicts as :func:`~delta_eval.metrics.counted.counted` reads them: the table named, when it has
        #: every column it reads with the type the view gives (a run's view: so the summary's win rates, read from
        #: it, are the same sums as the decision's, see :func:`~delta_eval.metrics.counted.shared_sums`), else the
        #: view.
        self.counted_verdicts = verdicts if self._typed(verdicts, [*VERDICT_COLUMNS, "_row"]) else self.verdicts
        #: Whether the replays have final texts (without, a replay's "no decision" is unknown unless stored).
        self.final_text = replays is not None and "final_text" in self._columns(replays)

    def _columns(self, name: str) -> set[str]:
        if name not in self._known:
            self._known[name] = {str(c) for c in self.db.sql(f"SELECT * FROM {name} LIMIT 0").columns}
        return self._known[name]

    def _typed(self, name: str, columns: Sequence[str]) -> bool:
        """Whether ``name`` has each of ``columns`` with the type the verdicts' view gives it (``_row``, the rows'
        positions, may be missing: null either way)."""
        have = dict(self.db.execute(f"SELECT column_name, column_type FROM (DESCRIBE {name})").fetchall())
        return all(have.get(c) == _VERDICT_TYPES[c] or (c == "_row" and c not in have) for c in columns)

    def _view(self, name: str, types: Mapping[str, str]) -> str:
        have = self._columns(name)
        cols = [f"{quote_ident(c) if c in have else 'NULL'}::{t} AS {quote_ident(c)}" for c, t in types.items()]
        view = f"_decision_{next(_names)}"
        self.db.execute(f"CREATE TEMP VIEW {view} AS SELECT {', '.join(cols)} FROM {name}")
        self._made.append(view)
        return view

    def replays_keyed(self) -> bool:
        """Whether every replay has its conversation's key (:mod:`delta_eval.store.conversation_key`), as a run's
        replays have since they carry one (an older run's batches get theirs only if a later session merges them):
        their conversations are then grouped on it. A replay without one (written before, or of no conversation:
        the ids' text names those apart) has them grouped on the ids' text. Either way the figures are the same
        doubles (see :class:`~delta_eval.metrics.difference.PairedSums`)."""
        return self.replays is not None and not self.replay_counts()["unkeyed"]

    def replay_counts(self) -> dict[str, int]:
        """What the decision counts of the replays before reading them, from one scan (of the replays' tallies where
        given: the same sums; made once; none without replays): the replays without a conversation's key
        (``unkeyed``), the ``recorded`` rows, the replayed turns that did not fail without a stored ``no_decision``
        (``undecided``) or ``recorded_acted`` (``unacted``), the replays of either side without a pair's key
        (``unpaired``), and the most and least tool calls (valid or invalid) of a replayed turn that did not fail
        (``most_calls``, ``least_calls``: 0 without any)."""
        if self._replay_counts is None:
            flags = [k for k in COUNTS if k not in ("most_calls", "least_calls")]
            if self.replay_tallies is not None:  # the tallies' sums of the same flags
                read = ["sum(n) - coalesce(sum(n) FILTER (conversation_key IS NOT NULL), 0)",
                        "sum(n) FILTER (side = 'recorded')", *(f"sum({k})" for k in flags),
                        "max(most_calls)", "min(least_calls)"]  # fmt: skip
            else:
                # Sums of flags rather than filtered counts (half the time); a null flag (a null side) counts none,
                # as a filter does.
                read = ["count(*) - count(conversation_key)", "sum((side = 'recorded')::DOUBLE)",
                        *(f"sum({COUNTS[k]}::DOUBLE)" for k in flags), f"max({COUNTS['most_calls']})",
                        f"min({COUNTS['least_calls']})"]  # fmt: skip
            found = self.db.execute(
                f"SELECT {', '.join(read)} FROM {self.replay_tallies or self.replays}"
            ).fetchall()[0] if self.replays is not None else (0,) * 7  # fmt: skip
            names = ("unkeyed", "recorded", "undecided", "unacted", "unpaired", "most_calls", "least_calls")
            self._replay_counts = {name: int(n or 0) for name, n in zip(names, found, strict=True)}
        return self._replay_counts

    def texts_read(self) -> bool:
        """Whether "no decision" is read from the final texts: only where a replayed turn that did not fail has no
        stored ``no_decision`` (written before the column existed). A run's replays store it on every such turn,
        so their texts (most of a run's bytes) are not read for it."""
        return self.final_text and bool(self.replay_counts()["undecided"])

    def acted_stored(self) -> bool:
        """Whether every replayed turn that did not fail says whether production acted there (``recorded_acted``,
        as a run's replays do since the column exists): read then, rather than joining each pair's recorded row
        (:func:`~delta_eval.metrics.sides.recorded_acted_of`, the rows' rule)."""
        return self.replays is not None and not self.replay_counts()["unacted"]

    def pairs_keyed(self) -> bool:
        """Whether every replay of either side has its pair's key (``pair_key``, as a run's replays have since they
        carry one; an older run's batches get theirs when a later session merges them): the replay gates
        (:func:`_error_gate`, :func:`_replay_gates`) then join the two sides' replays on it, a number, rather than
        on the ids' text (two ids share a key with probability 2**-64, see
        :mod:`delta_eval.store.conversation_key`), and each pair's weight (a verdict's) too where every verdict
        has its key; what else they join to a pair (its recorded rows and checks) is joined on its id."""
        return self.replays is not None and not self.replay_counts()["unpaired"]

    def epochs(self) -> list[int]:
        """The epochs the verdicts hold (a missing or zero epoch is the first), sorted."""
        return sorted(int(e) for e in self.counts()["epochs"])

    def counts(self) -> dict[str, Any]:
        """What the decision counts of the verdicts, from one scan (made once): ``total`` verdicts, judged
        ``losses`` and those ``unknown`` (without a severity), the audit of stage 2 (``stage2``, ``audited``,
        ``different``, ``candidate``, ``baseline``: see :func:`audit_of`), the ``undecided`` verdicts (an error
        of the judge's), those without a pair's key (``unpaired``) or a conversation's (``unkeyed``) and the ``epochs``
        held."""
        if self._counts is None:
            # The verdicts grouped by what is counted of them (a few kinds), added up here: cheaper than a filter
            # per count over every verdict.
            kinds = self.db.execute(
                "SELECT outcome, severity IS NULL, stage = 'equivalence', "
                "CASE WHEN stage = 'equivalence' THEN audit_outcome END, "
                f"CASE WHEN outcome = 'error' THEN {sql_error_side()} = 'judge' END, {_EPOCH}, pair_key IS NULL, "
                f"conversation_key IS NULL, count(*) FROM {self.verdicts} GROUP BY ALL"
            ).fetchall()  # fmt: skip
            counts = dict.fromkeys(("total", "losses", "unknown", "stage2", "audited", "different", "candidate",
                                    "baseline", "undecided", "unpaired", "unkeyed"), 0)  # fmt: skip
            epochs: set[int] = set()
            for outcome, no_severity, stage2, audit, undecided, epoch, unpaired, unkeyed, n in kinds:
                lost = outcome in ("candidate", "baseline")
                for name, holds in (("total", True), ("losses", lost), ("unknown", lost and no_severity),
                                    ("stage2", stage2), ("audited", audit is not None),
                                    ("different", audit in ("candidate", "baseline")),
                                    ("candidate", audit == "candidate"), ("baseline", audit == "baseline"),
                                    ("undecided", undecided), ("unpaired", unpaired),
                                    ("unkeyed", unkeyed)):  # fmt: skip
                    counts[name] += int(n) if holds else 0
                epochs.add(int(epoch))
            self._counts = {**counts, "epochs": sorted(epochs)}
        return self._counts

    def epoch(self, k: int) -> Source:
        """The rows of epoch ``k`` alone (close it after use)."""
        filtered: list[str | None] = []
        for name in (self.verdicts, self.replays, self.raw_replays, self.replay_tallies):
            if name is None:
                filtered.append(None)
                continue
            view = f"_decision_{next(_names)}"
            epoch = _EPOCH if "epoch" in self._columns(name) else "1"  # no epochs stored: one
            self.db.execute(f"CREATE TEMP VIEW {view} AS SELECT * FROM {name} WHERE {epoch} = {int(k)}")
            self._made.append(view)
            filtered.append(view)
        return Source(self.db, str(filtered[0]), filtered[1], raw_replays=filtered[2], replay_tallies=filtered[3],
                      part=True)  # fmt: skip

    def raw_replays_table(self, columns: Sequence[str] | None = None) -> pa.Table | None:
        """The stored replays as an Arrow table (only ``columns``, those they have, when given)."""
        if self.raw_replays is None:
            return None
        picked = "*"
        if columns is not None:
            have = self._columns(self.raw_replays)
            picked = ", ".join(quote_ident(c) for c in columns if c in have)
        return to_arrow(self.db.sql(f"SELECT {picked} FROM {self.raw_replays}"))

    def register(self, table: pa.Table) -> str:
        """``table`` registered in the connection under a fresh name (dropped by :meth:`close`)."""
        name = f"_decision_{next(_names)}"
        self.db.register(name, table)
        self._made.append("!" + name)
        return name

    def close(self) -> None:
        """Drop the views this source made."""
        for name in reversed(self._made):
            if name.startswith("!"):
                self.db.unregister(name[1:])
            else:
                self.db.execute(f"DROP VIEW IF EXISTS {name}")
        self._made = []


def _rate(sums: Any, confidence: float) -> Rate:
    """:func:`~delta_eval.metrics.sides.rate` of a one-sided metric's sums."""
    if sums is None or not (sums.ta > 0).any():
        return Rate(value=None, ci_low=0.0, ci_high=1.0, numerator=0.0, n=0.0)
    r = sums.difference(confidence).a
    return Rate(value=r.value, ci_low=r.ci_low, ci_high=r.ci_high, numerator=float(sums.a.sum()),
                n=float(sums.ta.sum()))  # fmt: skip


def _no_decision(src: Source) -> str:
    """:func:`~delta_eval.metrics.sides.no_decision_of` in SQL, for replayed turns (not the recorded ones)."""
    if not src.texts_read():  # stored on every replayed turn that did not fail: the texts are not read
        return "CASE WHEN error IS NOT NULL THEN NULL ELSE no_decision END"
    # The pattern only for texts that are neither missing nor empty (a CASE evaluates a branch on its rows alone).
    blank = f"CASE WHEN coalesce(final_text, '') = '' THEN true ELSE regexp_full_match(final_text, '{_SPACE}') END"
    from_text = f"(coalesce(n_tool_calls, 0) = 0 AND {blank})" if src.final_text else "NULL::BOOLEAN"
    return f"CASE WHEN error IS NOT NULL THEN NULL WHEN no_decision IS NOT NULL THEN no_decision ELSE {from_text} END"


#: Whether the sides' metrics list each turn's latency and each conversation's cost (see :func:`figures_only`).
_ITEMS: ContextVar[bool] = ContextVar("delta_eval_side_items", default=True)


@contextmanager
def figures_only() -> Iterator[None]:
    """Within the block, the sides' metrics of a decision computed in DuckDB leave out their lists of every turn's
    latency and every conversation's cost (``latencies_ms`` and ``costs_by_conversation`` stay empty): for a caller
    that reads only the figures (the analysis' summary), which are the same, without a Python object for each of a
    million latencies."""
    token = _ITEMS.set(False)
    try:
        yield
    finally:
        _ITEMS.reset(token)


def side_metrics_of(src: Source, confidence: float = 0.95) -> dict[str, SideMetrics]:
    """:func:`~delta_eval.metrics.sides.side_metrics` of the source's replays (without their lists of latencies and
    costs within :func:`figures_only`)."""
    if src.replays is None:
        return {}
    items = _ITEMS.get()
    r = src.replays
    # Whether production acted at each point: stored on the replays, else from the recorded rows, joined only when
    # there are some (a join of every pair: most of what the sides' metrics cost).
    stored = src.acted_stored()
    recorded = not stored and src.replay_counts()["recorded"]
    if stored:
        rows = (f"(SELECT * EXCLUDE (recorded_acted), coalesce(recorded_acted, false) AS recorded_acted, "
                f"{_no_decision(src)} AS nd FROM {r} WHERE side <> 'recorded')")  # fmt: skip
    elif recorded:
        rows = (f"(SELECT r.* EXCLUDE (recorded_acted), coalesce(rec.acted, false) AS recorded_acted, "
                f"{_no_decision(src)} AS nd FROM {r} r "
                f"LEFT JOIN (SELECT pair_id, bool_or(coalesce(n_tool_calls, 0) > 0) AS acted FROM {r} "
                f"WHERE side = 'recorded' GROUP BY pair_id) rec ON rec.pair_id = r.pair_id "
                f"WHERE r.side <> 'recorded')")  # fmt: skip
    else:
        rows = (f"(SELECT * EXCLUDE (recorded_acted), false AS recorded_acted, {_no_decision(src)} AS nd FROM {r} "
                "WHERE side <> 'recorded')")  # fmt: skip
    found, sums = _side_sums(src, rows, stored or bool(recorded), named=items)
    # Each side's conversations (sorted by side: each side's a run of rows) and their costs, None where unpriced, as
    # the rows path gives them.
    priced = found["cost"]
    names: list[str] = found["names"].to_pylist() if items else []
    values: list[float | None] = []
    if items:
        held = priced.astype(object)
        held[np.isnan(priced)] = None
        values = held.tolist()
    costs: dict[str, dict[str, float | None]] = {}
    conversations: dict[str, int] = {}
    known_costs: dict[str, list[float]] = {}
    for side, (start, end) in found["runs"].items():
        # Each side's conversations are distinct (the groups of its rows).
        # In order of name, however the rows were grouped (the same decision, the same listing).
        costs[side] = dict(sorted(zip(names[start:end], values[start:end], strict=True))) if items else {}
        conversations[side] = end - start
        mine = priced[start:end]
        known_costs[side] = mine[~np.isnan(mine)].tolist()
        src.costs[side] = (found["cl"][start:end], mine)
    out: dict[str, SideMetrics] = {}
    sides = sorted(conversations)
    # (Figures only: in any order, each side's quantiles are read by partitioning its latencies; see
    # side_latencies.)
    timed = side_latencies(src.db, src.replays, sides, sort=items)
    memo = shared_memo()
    if memo is not None and not src.part:  # what the summary's latency figures read too (see shared_latencies)
        memo[("latencies", id(src.db), src.raw_replays)] = (src.db, timed)
    products = _products(src)
    for side in sides:
        latencies = timed[side]
        p50 = float(np.median(latencies)) if len(latencies) else None
        interval = sorted_quantile_interval if items else partitioned_quantile_interval
        p95, lo95, hi95 = interval(latencies, 0.95, confidence) if len(latencies) else (None,) * 3
        own, count = costs[side], conversations[side]
        known = known_costs[side]
        mine = sums.get(side, {})
        invalid = mine.get("invalid_tool_call_rate")
        if invalid is not None:
            mine["invalid_tool_call_rate"] = _with_products(src, rows, side, invalid, products.get(side))
        # Built without validation: every field is of its type here, and checking a million latencies one by one
        # costs more than the rest of the side.
        fields: dict[str, Any] = {name: _rate(mine.get(name), confidence) for name in _SIDE_RATES}
        out[side] = SideMetrics.model_construct(
            side=side,
            turns=mine["error_rate"].pairs,  # every turn counts in the error rate
            conversations=count,
            **fields,
            latency_p50_ms=p50,
            latency_p95_ms=p95,
            latency_p95_ci_ms=None if lo95 is None or hi95 is None else (lo95, hi95),
            cost_per_conversation=(math.fsum(known) / len(known)) if known and len(known) == count else None,
            latencies_ms=latencies.tolist() if items else [],
            costs_by_conversation=own,
        )
    return out


#: The rates of each side, in the order :class:`~delta_eval.metrics.sides.SideMetrics` lists them.
_SIDE_RATES = ("error_rate", "invalid_tool_call_rate", "matches_recorded_rate", "text_instead_of_action_rate",
               "no_decision_rate")  # fmt: skip
#: The invalid-tool-call rate as :func:`~delta_eval.metrics.sql_sums.paired_sums` reads it (what the sums below
#: equal; see tests/metrics/test_side_sums.py).
INVALID_TOOL_CALLS = Metric(a="coalesce(invalid_tool_calls, 0)", ta="coalesce(n_tool_calls, 0)",
                            tb="coalesce(n_tool_calls, 0)", where="error IS NULL")  # fmt: skip
#: Below this, a total of integers is the same double whatever the order it is summed in.
_EXACT = 2**53


def _side_sums(src: Source, rows: str, recorded: bool, *, named: bool = True
               ) -> tuple[dict[str, Any], dict[str, dict[str, PairedSums]]]:  # fmt: skip
    """Per side (and conversation), the sums of each side's rates over ``rows`` (the non-recorded replays with
    ``nd`` and ``recorded_acted``) and each conversation's cost: what
    :func:`~delta_eval.metrics.sql_sums.paired_sums` gives of the same metrics (``per_conversation`` as it fills
    it), but for the invalid-tool-call rate's products, which :func:`_with_products` adds.

    Every rate but the invalid tool calls' is of 0/1 events over one unit a turn: its sums are two counts, and
    whether a conversation saw an event or a non-event follows from them. The turns without an error are the
    turns less the errors (no count of their own); the three flags of the invalid tool calls (an invalid call, a
    valid one, any call seen) and whether a turn is unpriced are counts too (each turn's, as
    :func:`delta_eval.replay_sums.turn_sums` defines them).

    Read from the replays' tallies where the source has them and they hold what is read here
    (:func:`_tallied_sums`), else from one GROUP BY over the replays (:func:`_scanned_sums`). The conversations are
    grouped on their keys where every replay has one (:meth:`Source.replays_keyed`: half the time of grouping on the
    ids' text), by side then key; their ids are read too only when ``named`` (the costs listed by conversation).
    Otherwise on the ids, by side then id. The order changes no sum: each is of integers, or (the costs) summed
    apart from it (compensated: see :data:`delta_eval.replay_sums.COST`)."""
    texts = recorded  # without recorded rows production acted nowhere: the rate applies to no turn
    keyed = src.replays_keyed()
    src.replay_cluster = "conversation_key" if keyed else f"({_CLUSTER})::VARCHAR"
    named_too = keyed and named
    # The tallies sum each turn's stored "no decision" and whether production acted (on every replayed turn that
    # did not fail), by conversation key; no conversation's id.
    tallied = (src.replay_tallies is not None and keyed and not named and src.acted_stored()
               and not src.texts_read())  # fmt: skip
    from_tallies = _tallied_sums(src) if tallied else None
    if from_tallies is not None:
        (got, data), order = from_tallies, None  # (in order)
    else:
        got, data = _scanned_sums(src, rows, texts, named_too)
        # By side, then key; else PairedSums.of's order: by side, then by name.
        order = _by_side_then_key(got) if keyed else text_order([got.column("grp"), got.column("cl")])
    if order is not None:  # (None: in that order already)
        got = got.take(order)
        data = {k: v[order] for k, v in data.items()}
    bounds = _runs(got.column("grp"))
    cl = got.column("cl")
    cost = np.where(data["unpriced"] > 0, np.nan, data["cost"].astype(float))
    found = {"runs": bounds, "cl": cl, "cost": cost, "names": got.column("name") if named_too else cl}
    out: dict[str, dict[str, PairedSums]] = {}
    for side, (lo, hi) in bounds.items():
        n, fails = data["n"][lo:hi].astype(float), data["fails"][lo:hi].astype(float)
        src.turns[side] = (n, fails)
        mine = {"error_rate": _binary(n, fails), "matches_recorded_rate": _binary(n - fails, data["m"][lo:hi]),
                "no_decision_rate": _binary(data["nd_n"][lo:hi], data["nd_a"][lo:hi])}  # fmt: skip
        if texts:
            mine["text_instead_of_action_rate"] = _binary(data["t_n"][lo:hi], data["t_a"][lo:hi])
        keep = np.flatnonzero(n - fails > 0)  # the conversations with a turn without an error
        a, t = data["inv"][lo:hi][keep].astype(float), data["calls"][lo:hi][keep].astype(float)
        size = len(keep)
        seen = np.vstack([data[f][lo:hi][keep] > 0 for f in ("s_inv", "s_valid")] + [np.zeros(size, dtype=bool),
                          data["s_calls"][lo:hi][keep] > 0]).reshape(4, -1)  # fmt: skip
        mine["invalid_tool_call_rate"] = PairedSums.from_clusters(
            np.full(size, "", dtype=str),
            a,
            t,
            np.zeros(size),
            t,
            pairs=int((n - fails)[keep].sum()),
            seen=seen,
            iid=np.zeros(len(PRODUCTS)),
        )
        out[side] = mine
    return found, out


def _scanned_sums(src: Source, rows: str, texts: bool, named_too: bool) -> tuple[pa.Table, dict[str, np.ndarray]]:
    """The sums per side and conversation of :func:`_side_sums` from one GROUP BY over the replays ``rows`` (with
    the fewest aggregates: counts are summed four to an aggregate, :func:`_count_sums`, and the invalid calls with
    the calls where both stay small; each aggregate costs about a tenth of the query): the groups (``grp``, ``cl``,
    ``name`` where ``named_too``), and each sum as doubles, in the groups' order."""
    each = turn_sums(nd="nd", acted="recorded_acted")
    counts = ["fails", "m", "nd_n", "nd_a", "unpriced", "s_inv", "s_valid", "s_calls", *(["t_n", "t_a"] if texts
              else [])]  # fmt: skip
    cols = [
        f"{src.replay_cluster} AS cl",
        *([f"({_CLUSTER})::VARCHAR AS name"] if named_too else []),
        "(side)::VARCHAR AS grp",
        "cost_usd",
        *(f"({each[c]})::DOUBLE AS {c}" for c in ("inv", "calls", *counts)),
    ]
    found_counts = src.replay_counts()
    # Under 2**13 calls a turn, none negative: while a conversation has under 2**13 turns of a side (packed), its
    # invalid calls and its calls are each under 2**26, two fields of one exact sum.
    few_calls = found_counts["least_calls"] >= 0 and found_counts["most_calls"] < 2**_FIELD

    def query(packed: bool) -> pa.Table:
        calls = ([f"sum(inv + {2 ** (2 * _FIELD)}::DOUBLE * calls) AS ic"] if packed and few_calls
                 else ["sum(inv) AS inv", "sum(calls) AS calls"])  # fmt: skip
        aggs = [*(["any_value(name) AS name"] if named_too else []), "count(*)::DOUBLE AS n",
                *_count_sums(counts, packed), *calls,
                # A conversation's cost whatever order its rows are read in (see replay_sums.COST); unknown (NaN,
                # in _side_sums) where a turn is unpriced.
                f"{COST} AS cost"]  # fmt: skip
        return fetch_table(src.db, f"WITH rows AS (SELECT {', '.join(cols)} FROM {rows}) SELECT grp, cl, "
                                   f"{', '.join(aggs)} FROM rows GROUP BY grp, cl")  # fmt: skip

    got = query(packed=True)
    n_all = got.column("n").to_numpy()
    packed = not len(n_all) or float(n_all.max()) < 2**_FIELD
    if not packed:  # a conversation of 2**13 turns of a side or more: a sum of each count
        got = query(packed=False)
    data = {k: np.asarray(got.column(k).to_numpy(zero_copy_only=False)) for k in got.column_names
            if k not in ("grp", "cl", "name")}  # fmt: skip
    if packed:
        data.update(_unpacked(data, counts))
        if "ic" in data:
            both = data.pop("ic").astype(np.int64)
            data["inv"] = (both & ((1 << 2 * _FIELD) - 1)).astype(float)
            data["calls"] = (both >> 2 * _FIELD).astype(float)
        for j in range(0, len(counts), 4):
            data.pop(f"pk{j // 4}")
    return got, data


#: The sums :func:`_tallied_sums` reads of the replays' tallies (every count of the side metrics' rates).
_TALLIED = ("n", "fails", "m", "nd_n", "nd_a", "unpriced", "s_inv", "s_valid", "s_calls", "t_n", "t_a", "inv", "calls")


def _by_side_then_key(got: pa.Table) -> np.ndarray | None:
    """The order of the rows of ``got`` by side (``grp``), then conversation key (``cl``): ``None`` where they are
    in it already (the replays' tallies are written in it: one pass to check, not a sort)."""
    grp, cl = got.column("grp").combine_chunks(), got.column("cl")
    if len(grp) < 2:
        return None
    # (No caller's rows have a null side or key; were there one, they are sorted as before.)
    if not grp.null_count and not cl.null_count:
        key = cl.to_numpy()
        before, after = grp.slice(0, len(key) - 1), grp.slice(1)
        if not pc.any(pc.greater(before, after)).as_py():
            same = pc.equal(before, after).to_numpy(zero_copy_only=False)
            if not np.any(same & (key[1:] < key[:-1])):
                return None
    sides = pc.unique(grp).sort()
    return np.lexsort((cl.to_numpy(zero_copy_only=False), pc.index_in(grp, sides).to_numpy(zero_copy_only=False)))


def _tallied_sums(src: Source) -> tuple[pa.Table, dict[str, np.ndarray]] | None:
    """The sums per side and conversation key of :func:`_side_sums` from the replays' tallies, where no side's
    conversation has two tally rows (a compacted run of one epoch: each conversation's turns in one batch), in order
    by side then key; ``None`` otherwise, and the replays are read. Integers: the same doubles as over
    the replays. A conversation's cost is its one row's, its turns' costs summed exactly rounded (the replays' scan
    gives them compensated: the same double but in pathological cases); summed again over several rows, each rounded
    once, it could differ in the last bit (and regrouping the rows and the costs costs as much as the scan)."""
    t = src.replay_tallies
    picked = ", ".join(_TALLIED)
    got = fetch_table(src.db, f"SELECT (side)::VARCHAR AS grp, conversation_key AS cl, {picked}, cost FROM {t} "
                              "WHERE side <> 'recorded'")  # fmt: skip
    order = _by_side_then_key(got)
    if order is not None:
        got = got.take(order)
    grp, key = got.column("grp").combine_chunks(), got.column("cl").to_numpy()
    if len(key) > 1 and np.any(pc.equal(grp.slice(0, len(key) - 1), grp.slice(1)).to_numpy(zero_copy_only=False)
                               & (key[1:] == key[:-1])):  # fmt: skip
        return None
    data = {c: np.asarray(got.column(c).to_numpy(zero_copy_only=False), dtype=float) for c in (*_TALLIED, "cost")}
    return got, data


#: Counts of 0/1 columns are summed four to a sum, in fields of this many bits (below 2**52 in all: exact doubles)
#: while no conversation has 2**13 turns of a side: one aggregate instead of four.
_FIELD = 13


def _count_sums(names: Sequence[str], packed: bool) -> list[str]:
    """The aggregates of the 0/1 columns ``names``: one sum each, or ``packed`` four to a sum (``pk0``, ``pk1``...)
    in fields of :data:`_FIELD` bits (see :func:`_unpacked`)."""
    if not packed:
        return [f"sum({c}) AS {c}" for c in names]
    out = []
    for j in range(0, len(names), 4):
        terms = [c if k == 0 else f"{2 ** (_FIELD * k)}::DOUBLE * {c}" for k, c in enumerate(names[j : j + 4])]
        out.append(f"sum({' + '.join(terms)}) AS pk{j // 4}")
    return out


def _unpacked(data: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
    """Each of the counts ``names`` from the packed sums of :func:`_count_sums`, as doubles."""
    out = {}
    mask = (1 << _FIELD) - 1
    for j in range(0, len(names), 4):
        whole = data[f"pk{j // 4}"].astype(np.int64)
        for k, c in enumerate(names[j : j + 4]):
            out[c] = ((whole >> (_FIELD * k)) & mask).astype(float)
    return out


def _binary(n: np.ndarray, events: np.ndarray) -> PairedSums:
    """The sums of a rate of 0/1 events over one unit a turn, from each conversation's turns ``n`` and events (as
    :func:`~delta_eval.metrics.sql_sums.paired_sums` gives them: the conversations with a turn)."""
    keep = np.flatnonzero(n > 0)
    t, a = n[keep].astype(float), events[keep].astype(float)
    size = len(keep)
    seen = np.vstack([a > 0, t - a > 0, np.zeros(size, dtype=bool), t > 0]).reshape(4, -1)
    sa, st = float(a.sum()), float(t.sum())
    return PairedSums.from_clusters(np.full(size, "", dtype=str), a, t, np.zeros(size), t, pairs=int(st), seen=seen,
                                    iid=np.array([sa, sa, st, 0.0, 0.0, st, 0.0, sa, 0.0, st]))  # fmt: skip


def side_latencies(db: Any, replays: str, sides: Sequence[str], *, sort: bool = True) -> dict[str, np.ndarray]:
    """Each of ``sides``' latencies (ms) of its replayed turns that did not fail (a missing one is 0, as
    :func:`~delta_eval.metrics.sides.side_metrics` reads it), from one scan of the table ``replays`` in ``db``
    (through Arrow: no copy of two million values, as numpy's fetch makes): what a side's latency figures are read
    from, sorted unless ``sort`` is false, for a reader of their quantiles alone (``np.quantile`` and
    :func:`~delta_eval.metrics.sides.partitioned_quantile_interval` take them in any order; a sort of a million
    costs three times as much)."""
    timed = fetch_table(
        db,
        "SELECT list_position(?::VARCHAR[], side) AS k, coalesce(latency_ms, 0.0)::DOUBLE AS x "
        f"FROM {replays} WHERE error IS NULL AND side <> 'recorded'",
        [list(sides)],
    )
    which = timed.column("k").to_numpy(zero_copy_only=False)
    every = np.asarray(timed.column("x").to_numpy(zero_copy_only=False), dtype=float)
    out = {}
    for k, side in enumerate(sides, start=1):
        out[side] = every[which == k]  # a copy already: sorted in place, once
        if sort:
            out[side].sort()
    return out


def shared_latencies(db: Any, replays: str = "replays") -> dict[str, np.ndarray] | None:
    """The sides' :func:`side_latencies` that a decision on the replays ``replays`` in ``db`` read within the
    enclosing :func:`~delta_eval.metrics.counted.shared_sums` block (``None`` if none did): the summary's latency
    figures are of the same turns, so the decision it includes spares it a scan of every latency. In increasing
    order only where the decision listed them (not within :func:`figures_only`): their quantiles are the same."""
    memo = shared_memo()
    found = memo.get(("latencies", id(db), replays)) if memo is not None else None
    return None if found is None else dict(found[1])


def _products(src: Source) -> dict[str, tuple[float, float, float]]:
    """Per side, the totals over its successful turns of the products of the invalid-tool-call rate's events and
    units (invalid calls squared, invalid calls times calls, calls squared): what its as-if-independent variance
    reads, from one small aggregate rather than three more per conversation (or the two columns through numpy,
    which costs more than this query)."""
    if src.replay_tallies is not None:  # the tallies' sums of the same products (integers: the same doubles)
        sql = (f"SELECT (side)::VARCHAR, sum(ii)::DOUBLE, sum(ic)::DOUBLE, sum(cc)::DOUBLE FROM {src.replay_tallies} "
               "WHERE side <> 'recorded' GROUP BY ALL")  # fmt: skip
    else:
        sql = ("SELECT grp, sum(i * i), sum(i * c), sum(c * c) FROM (SELECT (side)::VARCHAR AS grp, "
               "coalesce(invalid_tool_calls, 0)::DOUBLE AS i, coalesce(n_tool_calls, 0)::DOUBLE AS c "
               f"FROM {src.replays} WHERE error IS NULL AND side <> 'recorded') GROUP BY grp")  # fmt: skip
    found = src.db.execute(sql).fetchall()
    return {str(g): (float(aa or 0.0), float(at or 0.0), float(tt or 0.0)) for g, aa, at, tt in found}


def _with_products(src: Source, rows: str, side: str, sums: PairedSums,
                   products: tuple[float, float, float] | None) -> PairedSums:  # fmt: skip
    """The invalid-tool-call rate's sums with the totals of its ``products`` (see :func:`_products`). Totals of
    integers are the same doubles whatever the order they are summed in (per conversation, then over them, before)
    while every partial sum stays below 2**53, which squares below half of it ensure (``|i c| <= (i i + c c) / 2``);
    past that (no run's tool calls come near) the sums per conversation of
    :func:`~delta_eval.metrics.sql_sums.paired_sums`, as before."""
    aa, at, tt = products or (0.0, 0.0, 0.0)
    if aa + tt >= _EXACT / 2:
        return paired_sums(src.db, rows, {"m": INVALID_TOOL_CALLS}, cluster=_CLUSTER, group="side")[side]["m"]
    # PRODUCTS: aa, a ta, ta ta, bb, b tb, tb tb, ab, a tb, ta b, ta tb (no b; tb is ta).
    iid = np.array([aa, at, tt, 0.0, 0.0, tt, 0.0, at, 0.0, tt])
    return PairedSums(sums.strata, sums.a, sums.ta, sums.b, sums.tb, sums.seen, sums.pairs, iid)


_SEVERITIES = {"critical_rate": "('critical')", "severity_rate": "('minor', 'critical')"}
_REPLAY_METRICS = ("error_rate", "invalid_tool_call_rate", "text_instead_of_action_rate", "no_decision_rate")


def gate_results(src: Source, gates: Sequence[Gate], sides: Mapping[str, SideMetrics], *, checks: str | None = None,
                 check_names: Sequence[str] = (), weighted: bool = False, confidence: float = 0.95,
                 counted: Counted | None = None) -> list[GateResult]:  # fmt: skip
    """:func:`~delta_eval.metrics.gates.evaluate_gates` on the source: each gate's result. ``checks`` names a table
    of the rule's check results (``check``, ``pair_id``, ``side``, ``passed``), ``check_names`` the rule's checks;
    ``counted``: the win rate's counted pairs over the source's verdicts, when known (see
    :func:`_none_undecided`)."""
    w = _WEIGHT if weighted else "1.0"
    verdict_side = {g.metric for g in gates} & {"critical_rate", "severity_rate", "undecided_rate", GOAL_METRIC}
    replay_side = sorted({g.metric for g in gates if g.metric in _REPLAY_METRICS or (
        g.metric.startswith("check:") and g.metric.removeprefix("check:") in check_names)})  # fmt: skip
    errors_alone = replay_side == ["error_rate"] and src.replays is not None
    # Weighted, each conversation's weight where its verdicts share one (a run's: see _weighted_conversations),
    # with the verdict gates' sums from the same scan.
    settled, wanted = _verdict_metrics(src, verdict_side)
    per = _weighted_conversations(src, wanted) if weighted and (verdict_side or errors_alone) else None
    found: dict[str, tuple[Any, str]] = {}
    if verdict_side:
        found.update(_verdict_gates(src, settled, wanted, w, counted, per))
    if replay_side and src.replays is not None:
        errors = None
        if errors_alone and not weighted:
            errors = _error_gate(src)
        elif errors_alone and per is not None and _weights_are_the_pairs(src, per.names):
            errors = _error_gate(src, per)
        found.update({"error_rate": errors} if errors else _replay_gates(src, replay_side, w, weighted, checks))
    ratio = _cost_ratio(src) if any(g.metric == "cost_ratio" for g in gates) else None
    out = []
    for gate in gates:
        metric = gate.metric
        if metric in ("latency_p95_s", "cost_ratio"):
            out.append(side_gate(gate, sides, ratio if metric == "cost_ratio" else None))
        elif metric in verdict_side:
            out.append(gate_result(gate, *found[metric], confidence))
        elif src.replays is None:
            out.append(gate_result(gate, None, "no replays", confidence))
        elif metric.startswith("check:") and metric.removeprefix("check:") not in check_names:
            said = f"no check named {metric.removeprefix('check:')!r} in the rule's checks"
            out.append(gate_result(gate, None, said, confidence))
        else:
            out.append(gate_result(gate, *found[metric], confidence))
    return out


def _cost_ratio(src: Source) -> Rate | None:
    """:func:`~delta_eval.metrics.sides.cost_ratio` from the sides' arrays (``None`` without both), at its default
    confidence as :func:`~delta_eval.metrics.gates.side_gate` computes it: the same conversations on both sides in
    a run, in the same order (no lookup)."""
    if "candidate" not in src.costs or "baseline" not in src.costs:
        return None
    (names, y), (theirs, x) = src.costs["candidate"], src.costs["baseline"]
    names, theirs = (a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in (names, theirs))
    y_all = pa.array(y, pa.float64(), mask=np.isnan(y))
    x_all = pa.array(x, pa.float64(), mask=np.isnan(x))
    if not names.equals(theirs):
        x_all = x_all.take(pc.index_in(names, theirs))
    return cost_ratio_of(y_all, x_all)


def _none_undecided(src: Source, w: str, counted: Counted | None) -> StratumSums | None:
    """The undecided rate's sums without grouping the verdicts by conversation, where no verdict is undecided and
    the win rate's counted pairs say how many conversations there are (``None`` otherwise): unweighted, every
    verdict counted in the win rate (so its conversations are the verdicts'), each of a named conversation (so the
    verdicts of no conversation make no cluster of their own there and one here). Its events are then all 0 and
    each conversation's residuals too: what the interval reads of the sums per conversation of
    :func:`~delta_eval.metrics.sql_sums.paired_sums` is the conversations (``g``) and the verdicts (``n``), as
    sums per stratum of one stratum give them (the same interval, to the last bit)."""
    counts = src.counts()
    n = counts["total"]
    if (w != "1.0" or counted is None or not isinstance(counted.sums, StratumSums) or counts["undecided"] or not n
            or counted.pairs != n):  # fmt: skip
        return None
    # One column read, not grouped (a third of what grouping the verdicts by it costs).
    unnamed = src.db.execute(f"SELECT count(*) FROM {src.verdicts} WHERE conversation_id IS NULL "
                             "OR conversation_id = ''").fetchall()[0][0]  # fmt: skip
    if unnamed:
        return None
    g = int(counted.sums.clusters.sum())
    # PRODUCTS: aa, a ta, ta ta, bb, b tb, tb tb, ab, a tb, ta b, ta tb (0/1 events, none; one unit a verdict).
    iid = np.array([0.0, 0.0, float(n), 0.0, 0.0, float(n), 0.0, 0.0, 0.0, float(n)])
    return StratumSums(strata=np.array([""]), clusters=np.array([g]), sums=np.zeros((2, 1)),
                       squares=np.zeros((3, 1)), seen=np.array([[0], [g], [0], [g]]), rates=(0.0, 0.0),
                       units=(float(n), float(n)), pairs=n, iid=iid) if g else None  # fmt: skip


def _verdict_metrics(src: Source, metrics: set[str]) -> tuple[dict[str, tuple[Any, str]], dict[str, Metric]]:
    """The verdict gates of ``metrics`` that are settled without sums (a severity rate where no loss has a
    severity), and the others as :class:`~delta_eval.metrics.sql_sums.Metric`\\ s over the verdicts."""
    counts = src.counts()
    losses, unknown = counts["losses"], counts["unknown"]
    settled: dict[str, tuple[Any, str]] = {}
    wanted = {}
    for m in sorted(metrics):
        if m == "undecided_rate":
            wanted[m] = Metric(a=_UNDECIDED, binary=True)
        elif m == GOAL_METRIC:
            wanted[m] = GOAL_SQL
        elif losses and unknown == losses:
            # Not evaluated whatever its sums: none is computed.
            settled[m] = (None, f"no severity on any of the {losses} judged losses")
        else:
            bad = f"severity IN {_SEVERITIES[m]}"
            wanted[m] = Metric(a=f"outcome = 'baseline' AND {bad}", b=f"outcome = 'candidate' AND {bad}",
                               where="outcome IS DISTINCT FROM 'error'", binary=True, exclusive=True)  # fmt: skip
    return settled, wanted


def _verdict_gates(src: Source, settled: dict[str, tuple[Any, str]], wanted: dict[str, Metric], w: str,
                   counted: Counted | None, per: _Conversations | None) -> dict[str, tuple[Any, str]]:  # fmt: skip
    """The verdict gates' results: those ``settled`` and the sums of those ``wanted``
    (:func:`_verdict_metrics`), from ``per`` where it has them."""
    counts = src.counts()
    total, losses, unknown = counts["total"], counts["losses"], counts["unknown"]
    out, wanted = dict(settled), dict(wanted)
    if "undecided_rate" in wanted:
        none = _none_undecided(src, w, counted)
        if none is not None:
            out["undecided_rate"] = (none, "")
            del wanted["undecided_rate"]
    sums = {m: per.sums[m] for m in wanted if m in per.sums} if per is not None else {}
    rest = {m: metric for m, metric in wanted.items() if m not in sums}
    if rest:
        sums.update(paired_sums(src.db, src.verdicts, rest, cluster=_CLUSTER, weight=w)[""])
    for m in wanted:
        s = sums[m]
        if m == "undecided_rate":
            out[m] = (s, "") if total else (None, "no verdicts")
        elif m == GOAL_METRIC:
            out[m] = (s, "") if s.pairs else (None, NO_GOALS)
        elif s.pairs == 0:
            out[m] = (None, "no decided pairs")
        else:
            out[m] = (s, f"{unknown} of {losses} judged losses without a severity" if unknown else "")
    return out


@dataclass(frozen=True)
class _Conversations:
    """Each conversation's weight where every verdict of it has the same (:func:`_weighted_conversations`): the
    conversations as the replays' sides name them (``names``: their keys or their ids' text, see
    :attr:`Source.replay_cluster`) or by their ids' text, their ``weights``, and weighted sums of verdict metrics."""

    names: pa.Array
    weights: np.ndarray
    sums: dict[str, PairedSums]


def _weighted_conversations(src: Source, metrics: Mapping[str, Metric]) -> _Conversations | None:
    """Where every verdict of each conversation has the same sampling weight (a run's: a conversation is sampled
    whole, with its stratum's weight), each conversation's weight and the weighted sums of the binary ``metrics``
    (0/1 events over one unit a verdict; the others are left to :func:`paired_sums`), from one scan of the verdicts
    grouped by conversation; ``None`` where some conversation's verdicts have two weights (or one that is not a
    finite number).

    The sums are those :func:`~delta_eval.metrics.sql_sums.paired_sums` gives weighted, to the bit (each
    conversation's counts times its weight; their products as
    :func:`~delta_eval.metrics.sql_sums.squared_by_weight` adds them up, in any order of the conversations), without
    grouping the verdicts by weight too or reading their conversations' text where they have keys: the weighted
    decision at a million verdicts spent a tenth of a second on that query alone."""
    counts = src.counts()
    if not counts["total"]:
        return None
    by_key = src.replay_cluster == "conversation_key" and not counts["unkeyed"]
    binary = {m: x for m, x in metrics.items() if x.binary and x.ta.strip() in ("1", "1.0")
              and x.tb.strip() in ("1", "1.0") and x.a.strip() not in ("0", "0.0")}  # fmt: skip
    aggs = ["min(w) AS w", "max(w) AS w_hi"]
    for j, m in enumerate(binary.values()):
        inn = f"coalesce(({m.where})::BOOLEAN, false)"
        a = f"CASE WHEN {inn} THEN coalesce(({m.a})::DOUBLE, 0.0) ELSE 0.0 END"
        b = f"CASE WHEN {inn} THEN coalesce(({m.b})::DOUBLE, 0.0) ELSE 0.0 END"
        aggs += [f"sum({inn}::DOUBLE) AS n{j}", f"sum({a}) AS a{j}"]
        if m.b.strip() not in ("0", "0.0"):
            aggs.append(f"sum({b}) AS b{j}")
            if not m.exclusive:
                aggs.append(f"sum(({a}) * ({b})) AS ab{j}")
    cl = "conversation_key" if by_key else f"({_CLUSTER})::VARCHAR"
    got = fetch_table(src.db, f"SELECT {cl} AS cl, {', '.join(aggs)} FROM (SELECT *, ({_WEIGHT})::DOUBLE AS w "
                              f"FROM {src.verdicts}) GROUP BY cl")  # fmt: skip
    w = np.asarray(got.column("w").to_numpy(zero_copy_only=False), dtype=float)
    if not np.all(np.isfinite(w)) or not np.array_equal(w, got.column("w_hi").to_numpy(zero_copy_only=False)):
        return None
    sums = {}
    for j, name in enumerate(binary):
        n = np.asarray(got.column(f"n{j}").to_numpy(zero_copy_only=False), dtype=float)
        keep = n > 0
        n, wk = n[keep], w[keep]

        def col(c: str, keep: np.ndarray = keep) -> np.ndarray:
            # (0 where the metric has no such sum: no b side, or a and b never both)
            if c not in got.column_names:
                return np.zeros(int(keep.sum()))
            kept: np.ndarray = np.asarray(got.column(c).to_numpy(zero_copy_only=False), dtype=float)[keep]
            return kept

        ua, ub, uab = col(f"a{j}"), col(f"b{j}"), col(f"ab{j}")
        t = n * wk
        # PRODUCTS: aa, a ta, ta ta, bb, b tb, tb tb, ab, a tb, ta b, ta tb (0/1 events, one unit a verdict).
        aa, tt, bb, ab = squared_by_weight(wk, ua, n, ub, uab)
        seen = np.vstack([ua > 0, n - ua > 0, ub > 0, n - ub > 0]).reshape(4, -1)
        sums[name] = PairedSums.from_clusters(np.full(len(n), "", dtype=str), ua * wk, t, ub * wk, t,
                                              pairs=int(n.sum()), seen=seen,
                                              iid=np.array([aa, aa, tt, bb, bb, tt, ab, aa, bb, tt]))  # fmt: skip
    return _Conversations(names=got.column("cl").combine_chunks(), weights=w, sums=sums)


def _weights_are_the_pairs(src: Source, names: pa.Array) -> bool:
    """Whether each candidate replay's pair has the weight of its conversation's verdicts, as the replay gates join
    it (a pair's verdict's weight; 1 without one): where the candidate replays and the verdicts name the same pairs
    in the same conversations, as many times each. Compared as counts and sums of a hash of each (pair,
    conversation), exact integers: two scans and no join of a million pairs (which cost the weighted replay gates
    a third of a second). DuckDB's 64-bit hash is not a cryptographic one: collections made to agree could; two
    that differ by accident agree with a probability of about 2**-64. A pair named in two conversations (malformed:
    the rows path keeps one replay of each side a pair, the SQL joins every one) agrees where the verdicts name it
    twice too."""
    if src.replays is None or pa.types.is_integer(names.type) != (src.replay_cluster == "conversation_key"):
        return False
    pair = "pair_key" if src.pairs_keyed() and not src.counts()["unpaired"] else "pair_id"
    # (The same expression over each table's columns. A hash of the two hashes: DuckDB combines a row's hashes by
    # xor, which a sum could undo.)
    named = f"count(*), sum(hash(hash({pair}, {src.replay_cluster})))"
    mine = src.db.execute(f"SELECT {named} FROM {src.verdicts}").fetchall()[0]
    theirs = src.db.execute(f"SELECT {named} FROM {src.replays} WHERE side = 'candidate'").fetchall()[0]
    return bool(mine[0]) and tuple(mine) == tuple(theirs)


def _error_gate(src: Source, per: _Conversations | None = None) -> tuple[Any, str] | None:
    """The error-rate gate's sums without grouping the pairs of replays by conversation, when every candidate replay
    has exactly one baseline replay of its pair (a complete run; ``None`` otherwise, or before the sides' metrics):
    each conversation's pairs and candidate errors are then the candidate side's turns and errors
    (:attr:`Source.turns`), and one join of the two sides (on the pairs' keys where every replay has one:
    :meth:`Source.pairs_keyed`) says both whether the run is complete and which pairs' baselines failed, grouped by
    conversation only for those. The sums are those of :func:`_replay_gates` (counts: the same doubles),
    unweighted; weighted by ``per`` (each conversation's weight, which every pair of it has: see
    :func:`_weights_are_the_pairs`), each conversation's counts times its weight and their products as
    :func:`~delta_eval.metrics.sql_sums.squared_by_weight` adds them up: :func:`_replay_gates`' doubles too."""
    if "candidate" not in src.turns or "candidate" not in src.costs:
        return None
    r = src.replays
    n, fails = src.turns["candidate"]
    pair = "pair_key" if src.pairs_keyed() else "pair_id"  # (a join on numbers: a third of the time)
    # One join of each candidate replay to the baseline replays of its pair, grouped by the candidate's conversation
    # where the baseline failed (one null group otherwise: a conversation is never null here). Each candidate replay
    # has exactly one baseline replay of its pair where the join's rows are the candidate replays (none has two
    # partners) and so are its matches (none has none); the pairs whose baseline failed are then the groups'.
    found = fetch_table(
        src.db,
        f"SELECT CASE WHEN b.failed THEN c.cl END AS cl, count(*)::DOUBLE AS b, count(b.{pair})::DOUBLE AS matched, "
        "sum(c.failed::DOUBLE) AS ab "
        f"FROM (SELECT {pair}, {src.replay_cluster} AS cl, error IS NOT NULL AS failed FROM {r} "
        f"WHERE side = 'candidate') c LEFT JOIN (SELECT {pair}, error IS NOT NULL AS failed FROM {r} "
        f"WHERE side = 'baseline') b ON b.{pair} = c.{pair} GROUP BY ALL",
    )  # fmt: skip
    total = int(n.sum())
    rows, matched = (float(pc.sum(found.column(c)).as_py() or 0.0) for c in ("b", "matched"))
    if not (rows == matched == total):
        return None
    names = src.costs["candidate"][0]
    names = names.combine_chunks() if isinstance(names, pa.ChunkedArray) else names
    w = None
    if per is not None:
        at = pc.index_in(names, per.names)
        if at.null_count:
            return None  # a conversation of candidate replays without verdicts: no weight of its own here
        w = per.weights[at.to_numpy(zero_copy_only=False).astype(np.int64)]
    b, ab = np.zeros(len(n)), np.zeros(len(n))
    failed = found.filter(pc.is_valid(found.column("cl")))
    if failed.num_rows:
        at = pc.index_in(failed.column("cl"), names).to_numpy(zero_copy_only=False).astype(np.int64)
        b[at] = failed.column("b").to_numpy()
        ab[at] = failed.column("ab").to_numpy()
    if not total:
        return None, "no pair where the metric applies"
    seen = np.vstack([fails > 0, n - fails > 0, b > 0, n - b > 0]).reshape(4, -1)
    strata = np.full(len(n), "", dtype=str)
    if w is None:
        sa, sb, st, sab = float(fails.sum()), float(b.sum()), float(total), float(ab.sum())
        # PRODUCTS: aa, a ta, ta ta, bb, b tb, tb tb, ab, a tb, ta b, ta tb (0/1 events, one unit a pair).
        iid = np.array([sa, sa, st, sb, sb, st, sab, sa, sb, st])
        return PairedSums.from_clusters(strata, fails, n, b, n, pairs=total, seen=seen, iid=iid), ""
    sa, sb, st, sab = squared_by_weight(w, fails, b, n, ab)
    iid = np.array([sa, sa, st, sb, sb, st, sab, sa, sb, st])
    t = n * w
    return PairedSums.from_clusters(strata, fails * w, t, b * w, t, pairs=total, seen=seen, iid=iid), ""


def _replay_gates(src: Source, metrics: Sequence[str], w: str, weighted: bool, checks: str | None
                  ) -> dict[str, tuple[Any, str]]:  # fmt: skip
    r = src.replays
    names = [m.removeprefix("check:") for m in metrics if m.startswith("check:")]

    # The two sides joined on their pairs' keys where every replay has one (a number: half the time of the ids'
    # text; see Source.pairs_keyed), else on the ids.
    pair = "pair_key" if src.pairs_keyed() else "pair_id"

    def side(name: str, p: str) -> str:
        """One side's replays, a row per pair, with what its gates read of each."""
        # (The candidate's id too: what the recorded rows, weights and checks join.)
        keys = dict.fromkeys(["pair_id", pair] if p == "c" else [pair])
        return (f"(SELECT {', '.join(keys)}, conversation_id AS {p}_cl, "
                f"error IS NOT NULL AS {p}_failed, "
                f"invalid_tool_calls AS {p}_invalid, n_tool_calls AS {p}_calls, text_instead_of_action AS {p}_text, "
                f"recorded_acted AS {p}_acted, {_no_decision(src)} AS {p}_nd "
                f"FROM {r} WHERE side = '{name}')")  # fmt: skip

    # The pairs both sides replayed: a join of the two sides (faster than grouping every replay by its pair).
    joins = f"{side('candidate', 'c')} c JOIN {side('baseline', 'b')} b ON b.{pair} = c.{pair}"
    extra = ""
    stored = src.acted_stored()  # whether production acted is on each side's row: no recorded row joined
    if "text_instead_of_action_rate" in metrics and not stored:
        joins += (f" LEFT JOIN (SELECT pair_id, bool_or(coalesce(n_tool_calls, 0) > 0) AS acted FROM {r} "
                  "WHERE side = 'recorded' GROUP BY pair_id) rec ON rec.pair_id = c.pair_id")  # fmt: skip
        extra += ", rec.acted"
    if weighted:
        # Each pair's weight, on the pairs' keys where the verdicts have them too (a third of the time of the ids').
        by = "pair_key" if pair == "pair_key" and not src.counts()["unpaired"] else "pair_id"
        joins += (f" LEFT JOIN (SELECT {by}, any_value({_WEIGHT}) AS pw FROM {src.verdicts} GROUP BY {by}) vw "
                  f"ON vw.{by} = c.{by}")  # fmt: skip
        extra += ", coalesce(vw.pw, 1.0) AS w"
    if names and checks is not None:
        picks = [f"bool_or(passed) FILTER (WHERE \"check\" = {quote_literal(n)} AND side = '{s}') AS {p}_check{j}"
                 for j, n in enumerate(names) for s, p in (("candidate", "c"), ("baseline", "b"))]  # fmt: skip
        joins += (f" LEFT JOIN (SELECT pair_id, {', '.join(picks)} FROM {checks} GROUP BY pair_id) ch "
                  "ON ch.pair_id = c.pair_id")  # fmt: skip
        extra += ", " + ", ".join(f"ch.{p}_check{j}" for j in range(len(names)) for p in ("c", "b"))
    source = f"(SELECT c.*, b.* EXCLUDE ({pair}, b_cl){extra} FROM {joins})"

    def units(p: str, metric: str) -> tuple[str, str]:
        """One side's (events, units), as gates._events."""
        ok = f"NOT {p}_failed"
        if metric == "error_rate":
            return f"{p}_failed", "1.0"
        if metric == "invalid_tool_call_rate":
            return (f"CASE WHEN {ok} THEN coalesce({p}_invalid, 0) ELSE 0 END",
                    f"CASE WHEN {ok} THEN coalesce({p}_calls, 0) ELSE 0 END")  # fmt: skip
        if metric == "text_instead_of_action_rate":
            applies = f"({ok} AND coalesce({f'{p}_acted' if stored else 'acted'}, false))"
            return f"CASE WHEN {applies} THEN coalesce({p}_text, false)::DOUBLE ELSE 0 END", applies
        if metric == "no_decision_rate":
            return f"coalesce({p}_nd, false)", f"{p}_nd IS NOT NULL"
        j = names.index(metric.removeprefix("check:"))
        applies = f"({ok} AND {p}_check{j} IS NOT NULL)"
        return f"CASE WHEN {applies} THEN (NOT {p}_check{j})::DOUBLE ELSE 0 END", applies

    wanted = {}
    for m in metrics:
        (a, ta), (b, tb) = units("c", m), units("b", m)
        if m.startswith("check:") and checks is None:
            a = ta = b = tb = "0.0"
        binary = m == "error_rate"  # failed or not, on every pair
        # (Every other one counts tool calls or flags: whole numbers.)
        wanted[m] = Metric(a=a, ta=ta, b=b, tb=tb, where=f"({ta})::DOUBLE > 0 OR ({tb})::DOUBLE > 0", binary=binary,
                           integral=True)  # fmt: skip
    sums = paired_sums(src.db, source, wanted, cluster="coalesce(c_cl, 'None')", weight="w" if weighted else "1.0")[""]
    return {m: (s, "") if s.pairs else (None, "no pair where the metric applies") for m, s in sums.items()}


def check_rates_of(src: Source, checks: str, names: Sequence[str], confidence: float) -> dict[str, dict[str, Rate]]:
    """Per side, each check's failure rate with its interval, from the table of check results ``checks``."""
    if not names or src.replays is None:
        return {}
    conversation = f"(SELECT pair_id, any_value({_CLUSTER}) AS cl FROM {src.replays} GROUP BY pair_id)"
    rows = f"(SELECT c.*, coalesce(v.cl, c.pair_id) AS cl FROM {checks} c LEFT JOIN {conversation} v USING (pair_id))"
    fails = Metric(a="NOT passed", where="passed IS NOT NULL", binary=True)
    sums = paired_sums(src.db, rows, {"fails": fails}, cluster="cl", group='"check" || chr(0) || side')
    out: dict[str, dict[str, Rate]] = {}
    for name in names:
        for side in ("baseline", "candidate"):
            out.setdefault(side, {})[name] = _rate(sums.get(f"{name}\x00{side}", {}).get("fails"), confidence)
    return out


def goal_rates_of(src: Source, weighted: bool, confidence: float = 0.95) -> dict[str, Rate]:
    """:func:`~delta_eval.metrics.goals.goal_rates` on the source (a turn-level run's verdicts, which score no goal,
    are told apart by one look at their scores before any JSON is read)."""
    v = src.verdicts
    if not src.db.execute(f"SELECT 1 FROM {v} WHERE candidate_scores LIKE '%goal_reached%' LIMIT 1").fetchall():
        return {}
    sums = paired_sums(src.db, v, {"g": GOAL_SQL}, cluster=_CLUSTER, weight=_WEIGHT if weighted else "1.0")[""]["g"]
    return goal_rates(sums, confidence)


def audit_of(src: Source) -> dict[str, int]:
    """What the audit of stage 2 found (see :func:`delta_eval.metrics.decision._audit`)."""
    counts = src.counts()
    return {name: counts[name] for name in ("stage2", "audited", "different", "candidate", "baseline")}


def consistency_of(src: Source) -> dict[str, Consistency]:
    """:func:`~delta_eval.metrics.consistency.consistency` of the source's replays. It compares each side's answers
    (tool calls and normalised text) across epochs, so it reads those columns, for runs of several epochs."""
    table = src.raw_replays_table(["side", "pair_id", "epoch", "conversation_id", "final_text", "steps", "error"])
    return consistency(table) if table is not None else {}
