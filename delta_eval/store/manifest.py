"""The run manifest (``manifest.json``): what was run, on what, by which versions, and what each session did.

It is written when a session starts and when it ends; a session with no end was killed (SIGKILL, power, OOM).
Everything that reads a run (:mod:`delta_eval.result`, the report) reads it through :class:`RunManifest`.

Example:
    >>> m = RunManifest(fingerprint={}, config={}, source="demo", baseline="b", candidate="c")
    >>> m.begin_session(resumed_pairs=0, cached_responses=0).status
    'running'
"""

from __future__ import annotations

import platform
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from statistics import median
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from delta_eval.calls import CallStats
from delta_eval.pricing import total_cost

__all__ = [
    "FORMAT",
    "JUDGEMENT_COLUMNS",
    "NO_USAGE_NOTE",
    "VERDICT_COLUMNS",
    "CacheStats",
    "RunCounts",
    "RunManifest",
    "RunStatus",
    "Session",
    "SessionStatus",
    "StageSpend",
    "versions",
]

FORMAT: Literal["delta_eval.run/1"] = "delta_eval.run/1"
#: How the manifest's note on calls without usage begins (one such note a run).
NO_USAGE_NOTE = "usage unknown"
RunStatus = Literal["running", "completed", "interrupted", "failed"]
SessionStatus = Literal["running", "completed", "interrupted", "failed", "killed"]

_PACKAGES = ("delta-eval", "pydantic", "anyio", "pyarrow", "duckdb", "openai", "anthropic", "google-genai")


def versions() -> dict[str, str]:
    """Python's version and those of the installed packages a run's results depend on."""
    out = {"python": platform.python_version()}
    for pkg in _PACKAGES:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            continue
    return out


def _now() -> str:
    return datetime.now(UTC).isoformat()


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CacheStats(_Model):
    """Response-cache lookups of one session."""

    hits: int = 0
    misses: int = 0
    writes: int = 0


class Session(_Model):
    """One execution of the run: when, how it ended, what it resumed (and ``retried_pairs``: pairs that had ended in
    an error and were tried again), and the calls it made per model. ``sent`` is every call it sent, from its journal
    (``None`` for a session of an older version); for a killed session, ``lost_at_kill`` the calls it sent and never
    recorded nor found answered in the cache: in flight at the kill (the provider may have billed them)."""

    started_at: str = Field(default_factory=_now)
    resumed_pairs: int = 0
    retried_pairs: int = 0
    cached_responses_at_start: int = 0
    ended_at: str | None = None
    status: SessionStatus = "running"
    seconds: float | None = None
    pairs_decided: int = 0
    calls: dict[str, CallStats] = Field(default_factory=dict)
    cache: CacheStats | None = None
    answered_unrecorded: int = 0
    sent: int | None = None
    lost_at_kill: int = 0

    @property
    def answered(self) -> int:
        """Calls the provider answered in this session, over every model (for a killed session, with those it
        made after it last recorded its calls: ``answered_unrecorded``, found from the response cache)."""
        return sum(c.answered for c in self.calls.values()) + self.answered_unrecorded


class StageSpend(_Model):
    """The judge calls of one stage (``equivalence``, ``judge``, or ``audit``: stage-3 calls auditing stage 2), or
    a session simulator's calls (``user_simulator``, ``tool_simulator``): the pairs they were made for, the calls
    and failed calls, tokens (``None`` when some call reported no usage), dollars (``None`` when some call's price
    or usage is unknown) and the median latency of a call."""

    pairs: int = 0
    calls: int = 0
    failed: int = 0
    input_tokens: int | None = 0
    output_tokens: int | None = 0
    reasoning_tokens: int | None = 0
    cost_usd: float | None = 0.0
    latency_ms_p50: float | None = None

    @classmethod
    def of(cls, rows: list[dict[str, Any]]) -> StageSpend:
        """The spend of judgement rows (``pair_id``, ``answer``, token columns, ``cost_usd``, ``latency_ms``)."""
        if not rows:
            return cls()
        latencies = [r["latency_ms"] for r in rows if r["answer"] != "error"]
        return cls(
            pairs=len({r["pair_id"] for r in rows}),
            calls=len(rows),
            failed=sum(r["answer"] == "error" for r in rows),
            input_tokens=_known_sum(r["input_tokens"] for r in rows),
            output_tokens=_known_sum(r["output_tokens"] for r in rows),
            reasoning_tokens=_known_sum(r["reasoning_tokens"] for r in rows),
            cost_usd=total_cost(r["cost_usd"] for r in rows),
            latency_ms_p50=round(median(latencies), 1) if latencies else None,
        )


def _known_sum(values: Iterable[int | None]) -> int | None:
    """The sum, or ``None`` when a value is unknown (a call that reported no usage)."""
    total = 0
    for v in values:
        if v is None:
            return None
        total += v
    return total


#: The judgements columns :meth:`RunCounts.tally` reads.
JUDGEMENT_COLUMNS = ["pair_id", "stage", "audit", "answer", "input_tokens", "output_tokens", "reasoning_tokens",
                     "cost_usd", "latency_ms"]  # fmt: skip
#: The simulator_calls columns :meth:`RunCounts.tally` reads.
SIMULATOR_COLUMNS = ["pair_id", "role", "request_key", "cached", "side", "answered_at", "input_tokens",
                     "output_tokens", "reasoning_tokens", "cost_usd", "latency_ms"]  # fmt: skip
#: The verdicts columns :meth:`RunCounts.tally` reads.
VERDICT_COLUMNS = ["stage", "outcome", "conversation_id", "orders_agree", "audit_outcome", "details"]


class RunCounts(_Model):
    """What the run read, sampled and decided, as of its last session's end.

    ``strata_without_pairs`` names the strata the sample drew from whose conversations have no turn to replay, with
    why: they are in no estimate and no decision, and the report says so.
    """

    read: int = 0
    read_errors: int = 0
    population: int = 0
    excluded_by_where: int = 0
    sampled: int = 0
    pairs_planned: int = 0
    greetings_skipped: int = 0
    strata_without_pairs: dict[str, str] = Field(default_factory=dict)
    pairs: int = 0
    conversations_replayed: int = 0
    by_stage: dict[str, int] = Field(default_factory=dict)
    by_outcome: dict[str, int] = Field(default_factory=dict)
    errors: int = 0
    errors_by_stage: dict[str, int] = Field(default_factory=dict)
    calls: CallStats = Field(default_factory=CallStats)
    judging: dict[str, StageSpend] = Field(default_factory=dict)
    simulating: dict[str, StageSpend] = Field(default_factory=dict)
    orders_compared: int = 0
    orders_disagree: int = 0
    one_order: int = 0
    audited: int = 0
    audit_found_difference: int = 0

    @classmethod
    def tally(
        cls,
        verdicts: pa.Table,
        errors: pa.Table,
        judgements: pa.Table | None = None,
        simulator_calls: pa.Table | None = None,
        **read: Any,
    ) -> RunCounts:
        """The counts of a run's ``verdicts`` (:data:`VERDICT_COLUMNS`), ``errors`` (``stage``), ``judgements``
        (:data:`JUDGEMENT_COLUMNS`) and ``simulator_calls`` (:data:`SIMULATOR_COLUMNS`), with what reading and
        sampling found (``read``, ``sampled``, ...).

        ``judging`` is the judge calls per stage; ``simulating`` the session simulators' calls per role, each request
        as often as the provider answered it (both sides asking the same question were answered by one call and the
        response cache, unless they asked at once); ``orders_compared`` / ``orders_disagree``
        the pairs stage 3 judged in both orders (audits included) and those whose orders disagreed; ``one_order`` the
        pairs meant to be judged in both orders that only one order answered; ``audited`` / ``audit_found_difference``
        the stage-2 "equivalent" pairs audited by stage 3, and those where stage 3 preferred one side (a false
        equivalence).
        """
        stages = errors.column("stage").to_pylist()
        names = set(verdicts.column_names)
        agree = verdicts.column("orders_agree").to_pylist() if "orders_agree" in names else []
        audits = [a for a in verdicts.column("audit_outcome").to_pylist() if a] if "audit_outcome" in names else []
        details = verdicts.column("details").to_pylist() if "details" in names else []
        rows = judgements.to_pylist() if judgements is not None else []
        judging = {
            stage: StageSpend.of(own)
            for stage in ("equivalence", "judge", "audit")
            if (own := [r for r in rows if ("audit" if r["audit"] else r["stage"]) == stage])
        }
        # Each request as often as the provider answered it: every answer not from the response cache (both sides
        # asking at once, before either answer was cached, are two calls), or once when every one was cached (a
        # resumed session answered from the cache of the one that paid for it). One call is one answer however
        # many pairs hold its row (a baseline session shared by the pairs of several candidates).
        by_key: dict[tuple[str, str], dict[tuple[Any, ...], dict[str, Any]]] = {}
        for r in simulator_calls.to_pylist() if simulator_calls is not None else []:
            call = (r.get("side"), r.get("answered_at"), r.get("cached"))
            by_key.setdefault((r["role"], r["request_key"]), {}).setdefault(call, {**r, "answer": "ok"})
        asked: dict[str, list[dict[str, Any]]] = {}
        for (role, _), calls in by_key.items():
            same = list(calls.values())  # a failed call ends its session: every row is an answer
            asked.setdefault(role, []).extend([r for r in same if not r.get("cached")] or same[:1])
        return cls(
            **read,
            pairs=verdicts.num_rows,
            conversations_replayed=len(set(verdicts.column("conversation_id").to_pylist())),
            by_stage=dict(Counter(verdicts.column("stage").to_pylist())),
            by_outcome=dict(Counter(verdicts.column("outcome").to_pylist())),
            errors=len(stages),
            errors_by_stage=dict(Counter(stages)),
            judging=judging,
            simulating={role: StageSpend.of(rows) for role, rows in sorted(asked.items())},
            orders_compared=sum(a is not None for a in agree),
            orders_disagree=sum(a is False for a in agree),
            one_order=sum('"one_order"' in (d or "") for d in details),
            audited=len(audits),
            audit_found_difference=sum(a in ("candidate", "baseline") for a in audits),
        )


class RunManifest(_Model):
    """The manifest of a run folder.

    ``fingerprint`` is the part of the configuration that decides which pairs exist and what they contain: a folder
    resumes only a run with the same fingerprint. ``config`` is the whole configuration (secrets redacted), kept
    for people and tools to read; the fields readers of a run need are typed: ``baseline`` and ``candidate``
    describe each side in a line (``candidates``: each candidate's, by name, in a run of several; ``screened_out``:
    the candidates screening left out, and why), ``*_model`` name their models, ``equivalence_judge`` and
    ``judge`` the judges of stages 2 and 3 as configured (``rule`` for the rule-based ones), ``judge_models`` the
    models of the LLM judges by stage; ``noise_floor`` is the folder of the A/A run the report compares the win
    rate with;
    ``stopped_early`` says why the last session stopped before the sample was done (``stop_early``);
    ``failure`` says why the last session failed; ``estimate`` is the cost estimate made when the run began
    (:meth:`delta_eval.estimate.CostEstimate.to_dict`), for the report to set beside what the run cost;
    ``batches`` is the number of batches committed (a commit file missing below it is damage, not a batch never
    committed). The manifest is rewritten after every batch, so a
    killed session's calls are counted up to its last batch.
    """

    format: Literal["delta_eval.run/1"] = FORMAT
    status: RunStatus = "running"
    fingerprint: dict[str, Any]
    config: dict[str, Any]
    source: str
    baseline: str
    candidate: str
    description: str | None = None
    baseline_model: str = ""
    candidate_model: str = ""
    candidates: dict[str, str] = Field(default_factory=dict)
    screened_out: dict[str, str] = Field(default_factory=dict)
    equivalence_judge: str | None = None
    judge: str = ""
    judge_models: dict[str, list[str]] = Field(default_factory=dict)
    noise_floor: str | None = None
    stopped_early: str | None = None
    failure: str | None = None
    seed: int = 0
    versions: dict[str, str] = Field(default_factory=versions)
    started_at: str = Field(default_factory=_now)
    ended_at: str | None = None
    sessions: list[Session] = Field(default_factory=list)
    batches: int = 0
    counts: RunCounts = Field(default_factory=RunCounts)
    notes: list[str] = Field(default_factory=list)
    estimate: dict[str, Any] | None = None

    def begin_session(
        self,
        *,
        resumed_pairs: int,
        cached_responses: int,
        retried_pairs: int = 0,
        sent: Callable[[int], int | None] | None = None,
    ) -> Session:
        """Mark sessions that never recorded their end as killed, and start a new one.

        A killed session recorded its calls at its last batch; the answers it got after that are in the response
        cache, which has grown by every answer the session got: the difference is counted as
        ``answered_unrecorded`` (each answer is cached once, so none is counted twice). ``sent`` gives the calls a
        session (numbered from 1) sent, from its journal: those it never recorded nor found in the cache were lost at
        the kill (``lost_at_kill``).
        """
        for number, past in enumerate(self.sessions, start=1):
            if past.ended_at is None and past.status == "running":  # not yet found killed by an earlier session
                past.status = "killed"
                grown = cached_responses - past.cached_responses_at_start
                past.answered_unrecorded = max(0, grown - past.answered)  # answered: what it recorded, so far
                past.sent = sent(number) if sent is not None else None
                if past.sent is not None:
                    # Every call sent ended answered (recorded, or found in the cache), failed (recorded: a retried
                    # attempt or a last one), or not known: in flight at the kill, or failed after the last record.
                    failed = sum(c.retries + c.failed for c in past.calls.values())
                    past.lost_at_kill = max(0, past.sent - past.answered - failed)
        self.status = "running"
        session = Session(
            resumed_pairs=resumed_pairs, cached_responses_at_start=cached_responses, retried_pairs=retried_pairs
        )
        self.sessions.append(session)
        return session

    def checkpoint(self, batch: int, *, pairs_decided: int, calls: dict[str, CallStats]) -> None:
        """Record a committed batch and the current session's progress (its calls and pairs so far), as a killed
        session leaves them."""
        session = self.sessions[-1]
        session.pairs_decided = pairs_decided
        session.calls = {name: stats.model_copy() for name, stats in calls.items()}
        self.batches = max(self.batches, batch)

    def end_session(
        self,
        status: RunStatus,
        *,
        seconds: float,
        pairs_decided: int,
        calls: dict[str, CallStats],
        cache: CacheStats | None,
        counts: RunCounts,
        notes: list[str] | None = None,
    ) -> None:
        """Record how the current session ended and the run's counts; ``counts.calls`` becomes the total of every
        session's calls."""
        session = self.sessions[-1]
        session.ended_at = _now()
        session.status = status
        session.seconds = round(seconds, 3)
        session.pairs_decided = pairs_decided
        session.calls = {name: stats.model_copy() for name, stats in calls.items()}
        session.cache = cache
        total = CallStats()
        for past in self.sessions:
            for stats in past.calls.values():
                total = total + stats
            recorded_made = sum(stats.made for stats in past.calls.values())
            # A killed session's journal counts every call it sent; without one, its answers found in the cache.
            unrecorded = past.sent - recorded_made if past.sent is not None else past.answered_unrecorded
            total = total + CallStats(
                made=max(0, unrecorded), answered=past.answered_unrecorded, lost=past.lost_at_kill
            )
        self.status = status
        self.ended_at = session.ended_at
        self.counts = counts.model_copy(update={"calls": total})
        self.notes.extend(n for n in notes or () if n not in self.notes)
        # Said once for the whole run, however many sessions: the count replaces an earlier session's.
        self.notes = [n for n in self.notes if not n.startswith(NO_USAGE_NOTE)]
        if total.no_usage:
            self.notes.append(
                f"{NO_USAGE_NOTE}: {total.no_usage} of {total.answered} answered model calls reported no token usage; "
                "their tokens and cost are unknown (null), not 0"
            )
