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
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from delta_eval.calls import CallStats

__all__ = ["FORMAT", "CacheStats", "RunCounts", "RunManifest", "RunStatus", "Session", "SessionStatus", "versions"]

FORMAT: Literal["delta_eval.run/1"] = "delta_eval.run/1"
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
    """One execution of the run: when, how it ended, what it resumed, and the calls it made per model."""

    started_at: str = Field(default_factory=_now)
    resumed_pairs: int = 0
    cached_responses_at_start: int = 0
    ended_at: str | None = None
    status: SessionStatus = "running"
    seconds: float | None = None
    pairs_decided: int = 0
    calls: dict[str, CallStats] = Field(default_factory=dict)
    cache: CacheStats | None = None

    @property
    def answered(self) -> int:
        """Calls the provider answered in this session, over every model."""
        return sum(c.answered for c in self.calls.values())


class RunCounts(_Model):
    """What the run read, sampled and decided, as of its last session's end."""

    read: int = 0
    read_errors: int = 0
    population: int = 0
    excluded_by_where: int = 0
    sampled: int = 0
    pairs_planned: int = 0
    pairs: int = 0
    conversations_replayed: int = 0
    by_stage: dict[str, int] = Field(default_factory=dict)
    by_outcome: dict[str, int] = Field(default_factory=dict)
    errors: int = 0
    errors_by_stage: dict[str, int] = Field(default_factory=dict)
    calls: CallStats = Field(default_factory=CallStats)

    @classmethod
    def tally(cls, verdicts: pa.Table, errors: pa.Table, **read: int) -> RunCounts:
        """The counts of a run's ``verdicts`` (``stage``, ``outcome``, ``conversation_id``) and ``errors``
        (``stage``), with what reading and sampling found (``read``, ``sampled``, ...)."""
        stages = errors.column("stage").to_pylist()
        return cls(
            **read,
            pairs=verdicts.num_rows,
            conversations_replayed=len(set(verdicts.column("conversation_id").to_pylist())),
            by_stage=dict(Counter(verdicts.column("stage").to_pylist())),
            by_outcome=dict(Counter(verdicts.column("outcome").to_pylist())),
            errors=len(stages),
            errors_by_stage=dict(Counter(stages)),
        )


class RunManifest(_Model):
    """The manifest of a run folder.

    ``fingerprint`` is the part of the configuration that decides which pairs exist and what they contain: a folder
    resumes only a run with the same fingerprint. ``config`` is the whole configuration (secrets redacted), kept
    for people and tools to read; the fields readers of a run need are typed: ``baseline`` and ``candidate``
    describe each side in a line, ``*_model`` name their models, ``equivalence_judge`` and ``judge`` the judges
    of stages 2 and 3 as configured (``rule`` for the rule-based ones).
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
    equivalence_judge: str | None = None
    judge: str = ""
    seed: int = 0
    versions: dict[str, str] = Field(default_factory=versions)
    started_at: str = Field(default_factory=_now)
    ended_at: str | None = None
    sessions: list[Session] = Field(default_factory=list)
    counts: RunCounts = Field(default_factory=RunCounts)
    notes: list[str] = Field(default_factory=list)

    def begin_session(self, *, resumed_pairs: int, cached_responses: int) -> Session:
        """Mark sessions that never recorded their end as killed, and start a new one."""
        for past in self.sessions:
            if past.ended_at is None:
                past.status = "killed"
        self.status = "running"
        session = Session(resumed_pairs=resumed_pairs, cached_responses_at_start=cached_responses)
        self.sessions.append(session)
        return session

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
        self.status = status
        self.ended_at = session.ended_at
        self.counts = counts.model_copy(update={"calls": total})
        self.notes.extend(n for n in notes or () if n not in self.notes)
