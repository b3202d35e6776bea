"""A run's outputs, read back from its folder: counts, win rates, and a DuckDB connection for everything else.

Example:
    >>> result = open_result("runs/demo")                    # doctest: +SKIP
    >>> print(result.win_rate())                              # doctest: +SKIP
    >>> result.connect().sql("SELECT * FROM pairs WHERE outcome = 'baseline'").df()  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from delta_eval.exceptions import RunFolderError, RunFolderWarning
from delta_eval.metrics import Decision, DecisionRule, ExitCode, FailOn, decide
from delta_eval.metrics.counted import counted, shared_memo
from delta_eval.metrics.decision_sql import figures_only
from delta_eval.metrics.estimand import Estimand
from delta_eval.metrics.tallied import GROUPS as TALLIED_GROUPS
from delta_eval.metrics.tallied import tallied
from delta_eval.metrics.winrate import win_rate_of
from delta_eval.store.folder import Damage, RunFolder
from delta_eval.store.manifest import RunCounts, RunManifest, RunStatus
from delta_eval.store.remote import local_run
from delta_eval.store.views import open_run, replay_tallies_of, tallies_of

__all__ = ["RunResult", "open_result", "shared_tallies"]

#: The counts of what was read and sampled: the same for every candidate of a run.
_SAMPLE_COUNTS = ("read", "read_errors", "population", "excluded_by_where", "sampled", "greetings_skipped",
                  "strata_without_pairs")  # fmt: skip


class RunResult:
    """The outputs of one run folder.

    A run of several candidates (``candidates=``) is read one candidate at a time: ``candidate`` names it (default:
    the first), and every table, view, count, win rate and decision is then that candidate's against the baseline,
    as if it had been a run of its own; :attr:`candidates` lists them, :meth:`of` opens another.
    """

    def __init__(self, path: str | Path, candidate: str | None = None) -> None:
        # An object-store URI is read from its local working copy, first brought up to date (store.remote).
        self.path = local_run(path)
        self._folder = RunFolder(self.path)
        manifest = self._folder.manifest()
        if manifest is None:
            raise RunFolderError(f"{self.path} is not a delta_eval run folder (no manifest.json)")
        #: The names of the run's candidates (one: ``[]``, the run has a single candidate side).
        self.candidates: list[str] = [str(v.get("name")) for v in manifest.config.get("candidates") or ()]
        #: The candidate this result reads (``None`` in a run of one candidate).
        self.candidate: str | None = None
        if self.candidates:
            self.candidate = candidate or self.candidates[0]
            if self.candidate not in self.candidates:
                raise RunFolderError(f"{self.path} has no candidate {candidate!r}; it has {', '.join(self.candidates)}")
        elif candidate not in (None, "candidate", (manifest.config.get("candidate") or {}).get("name")):
            raise RunFolderError(f"{self.path} is a run of one candidate, not of several: no candidate {candidate!r}")
        #: The damaged batches of the folder, left out of every table and view (a rerun repairs them).
        self.damage: list[Damage] = self._folder.damage()
        # The damage warnings this result has given (see _open).
        self._warned: set[str] = set()
        self.manifest: RunManifest = manifest if self.candidate is None else self._candidate_manifest(manifest)

    def of(self, candidate: str) -> RunResult:
        """The same run folder read for another of its candidates."""
        return RunResult(self.path, candidate)

    @property
    def analysis_dir(self) -> Path:
        """Where analyses of this result are kept: ``RUN/analysis``, or ``RUN/analysis/<candidate>`` for one
        candidate of several."""
        return self.path / "analysis" if self.candidate is None else self.path / "analysis" / self.candidate

    def _planned(self, manifest: RunManifest, pairs: int) -> int:
        """This candidate's share of the run's planned pairs: the sample's turns, or, for a candidate screening left
        out, the pairs it had when it was (the run planned those of the others in full)."""
        if self.candidate in manifest.screened_out:
            return pairs
        all_verdicts = self._folder.read("verdicts", ["candidate"])["candidate"].to_pylist()
        screened = sum(c in manifest.screened_out for c in all_verdicts)
        going_on = len(self.candidates) - sum(c in manifest.screened_out for c in self.candidates)
        return (manifest.counts.pairs_planned - screened) // max(going_on, 1)

    def _candidate_manifest(self, manifest: RunManifest) -> RunManifest:
        """The manifest as this candidate's own run would have it: its side, its model, its counts."""
        variant = next(v for v in manifest.config["candidates"] if v.get("name") == self.candidate)
        verdicts = self.table("verdicts")
        counts = RunCounts.tally(
            verdicts,
            self.table("errors"),
            self.table("judgements"),
            self.table("simulator_calls"),
            **{k: getattr(manifest.counts, k) for k in _SAMPLE_COUNTS},
            pairs_planned=self._planned(manifest, verdicts.num_rows),
            calls=manifest.counts.calls,
        )
        config = {**manifest.config, "candidate": variant}
        # the candidate's own part of the fingerprint: what makes two runs' candidates the same candidate
        parts = [v for v in manifest.fingerprint.get("candidates") or () if isinstance(v, dict)]
        own = next((v for v in parts if v.get("name") == self.candidate), None)
        fingerprint = {**manifest.fingerprint, "candidate": own} if own is not None else manifest.fingerprint
        return manifest.model_copy(
            update={
                "candidate": manifest.candidates.get(str(self.candidate)) or str(variant.get("model")),
                "candidate_model": variant.get("model", ""),
                "config": config,
                "fingerprint": fingerprint,
                "counts": counts,
            }
        )

    @property
    def status(self) -> RunStatus:
        """``completed``, ``interrupted``, ``failed`` or ``running`` (a session is still going, or was killed)."""
        return self.manifest.status

    @property
    def counts(self) -> RunCounts:
        """Counts recorded in the manifest when the run ended (read, sampled, pairs by stage and outcome, errors)."""
        return self.manifest.counts

    def table(
        self,
        name: Literal[
            "replays", "verdicts", "judgements", "simulator_calls", "errors", "conversations", "strata", "media"
        ],
    ) -> pa.Table:
        """One dataset of the run as an Arrow table (``.to_pandas()`` for a DataFrame). The messages of
        ``conversations`` name their media by hash; ``media`` holds the bytes, once each
        (:meth:`delta_eval.store.folder.RunFolder.read_conversations` joins them back). For one candidate of several,
        ``verdicts``, ``replays``, ``judgements``, ``simulator_calls`` and ``errors`` hold only its pairs (and the
        errors of no pair)."""
        if self.candidate is None:
            return self._folder.read(name)
        return self._folder.read_candidate(name, self.candidate)

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
        # Summed per stratum from the verdicts' tallies where they serve (about a row per conversation: see
        # store.tallies), else by DuckDB over the run's Parquet files (a row per conversation only for the bootstrap,
        # which resamples them): no pair is read into Python.
        e = Estimand(over=over, weighted=weighted, soft=soft, errors=errors)
        groups = self._tallied(e, by) if method != "bootstrap" else None
        if groups is None:
            con = open_run(self.path, candidate=self.candidate, datasets=("verdicts",))  # the one view it reads
            try:
                groups = counted("verdicts", e, by=by, null="None", con=con, per_conversation=method == "bootstrap")
            finally:
                con.close()
        options: dict[str, Any] = {"method": method, "confidence": confidence, "seed": self.manifest.seed}
        if by is not None:
            return [win_rate_of(c, e, stratum=name, **options) for name, c in sorted(groups.items())]
        return win_rate_of(groups[""], e, **options)

    def _tallied(self, e: Estimand, by: str | None) -> dict[str, Any] | None:
        """:func:`~delta_eval.metrics.tallied.tallied` over this candidate's tallies; ``None`` where they cannot
        serve."""
        if e.soft or (by is not None and by not in TALLIED_GROUPS):
            return None  # (what tallies cannot give: not read)
        tallies = self.tallies()
        return tallied(tallies, e, by=by, null="None") if tallies is not None else None

    def tallies(self) -> pa.Table | None:
        """The verdicts' tallies (:mod:`delta_eval.store.tallies`) of this run, or of its candidate: what
        :meth:`win_rate` sums, about a row per conversation (the decision reads those of its connection's snapshot:
        :func:`~delta_eval.store.views.tallies_of`). ``None`` where they may not count every verdict (a batch
        written before tallies existed, until a merge counts it; any damage, whose warning :func:`open_run` gives):
        the verdicts are read then."""
        if self.damage:
            return None
        tallies = self._folder.read_tallies()
        if tallies is not None and self.candidate is not None:
            tallies = tallies.filter(pc.equal(tallies.column("candidate").cast(pa.string()), self.candidate))
        return tallies

    def decision(self, rule: DecisionRule | None = None, *, con: Any = None, lists: bool = False) -> Decision:
        """The decision on this run: APPROVED, PARTIAL or REJECTED, what decided it, and every number behind it
        (see :mod:`delta_eval.metrics.decision`). ``rule`` defaults to the one the run was configured with; ``con``:
        a connection of :meth:`connect` to compute it in (default: a new one). ``lists=True`` also lists each
        side's latency of every turn and cost of every conversation (``SideMetrics.latencies_ms`` and
        ``costs_by_conversation``, empty otherwise): a Python object each, millions on a large run, for the same
        figures (the ``replays`` table holds every value, for a query).

        Example::

            d = result.decision(de.DecisionRule(margin=0.03))
            print(d)               # the outcome, the gate or test that decided, the intervals
        """
        if rule is None:
            rule = DecisionRule.model_validate(self.manifest.config.get("decision") or {})
        # In DuckDB over the run's Parquet files: one row per conversation reaches Python, whatever the run's size;
        # the win rates from the verdicts' tallies of the same snapshot, where it has them.
        db = con if con is not None else self._open(("verdicts", "replays"))
        try:
            with contextlib.nullcontext() if lists else figures_only():
                return decide(
                    "verdicts",
                    "replays",
                    rule,
                    con=db,
                    tallies=shared_tallies(db),
                    replay_tallies=replay_tallies_of(db),
                )
        finally:
            if con is None:
                db.close()

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

    def connect(self, datasets: Collection[str] | None = None) -> Any:
        """A DuckDB connection with views ``replays``, ``verdicts``, ``judgements``, ``errors``, ``conversations``,
        ``strata``, ``media``, ``pairs`` and ``tool_calls`` (see :func:`delta_eval.open_run`), and ``verdict_tallies``
        where they count every verdict. ``datasets``: the views of these alone (and their tallies), for a caller
        that reads one or two (each view reads its files' footers when it is made)."""
        return self._open(None if datasets is None else tuple(datasets))

    def _open(self, datasets: tuple[str, ...] | None = None) -> Any:
        # A damaged folder's warning once per result, however many connections it opens (the decision's, then
        # connect's, in `delta-eval ci`): Python's once-per-line registry does not hold, as any warnings filter set
        # meanwhile (metrics.frames sets one) clears it.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RunFolderWarning)
            con = open_run(self.path, candidate=self.candidate, datasets=datasets, tallies=True)
        for w in caught:
            if not issubclass(w.category, RunFolderWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)  # (as given)
            elif str(w.message) not in self._warned:
                self._warned.add(str(w.message))
                warnings.warn(w.message, w.category, stacklevel=3)  # (names the caller's line)
        return con

    def __repr__(self) -> str:
        which = f", candidate={self.candidate!r}" if self.candidate is not None else ""
        return f"RunResult({str(self.path)!r}{which}, status={self.status!r}, pairs={self.counts.pairs})"


def shared_tallies(con: Any) -> pa.Table | None:
    """:func:`~delta_eval.store.views.tallies_of` the connection, read once per connection within
    :func:`~delta_eval.metrics.counted.shared_sums` (the summary's win rates and its decision read the same table,
    whose sums are then computed once too: see :func:`~delta_eval.metrics.tallied.tallied_or_counted`)."""
    memo = shared_memo()
    if memo is None:
        return tallies_of(con)
    key = ("tallies_of", id(con))
    if key not in memo:
        memo[key] = (con, tallies_of(con))  # the connection kept alive: its id names no other meanwhile
    table: pa.Table | None = memo[key][1]
    return table


def open_result(path: str | Path, candidate: str | None = None) -> RunResult:
    """The :class:`RunResult` of an existing run folder (of one of its candidates, in a run of several)."""
    return RunResult(path, candidate)
