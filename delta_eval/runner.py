"""One session of a run: open what the stages need, run them, and record how the session ended.

In order: the conversation source; one :class:`~delta_eval.adapters.pool.ModelPool` for both sides and the judges,
with every model's client and the judges built (so an unknown model, a missing SDK or key, or bad provider options
stop the run before anything is written); the run folder's session (resume, reset or refuse; the response cache;
the manifest's start, see :mod:`delta_eval.store.session`); the sample; then the streaming stages of
:mod:`delta_eval.pipeline`, with the cost estimate made beside them on a thread of its own. Whatever ends the
session (completion, Ctrl-C, cancellation, a failure), the pool's adapters are closed and the manifest records the
end.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import anyio

from delta_eval.adapters.pool import ModelPool
from delta_eval.calls import CallStats
from delta_eval.config import RunConfig
from delta_eval.estimate import EstimateCancelled, estimate_sample
from delta_eval.exceptions import ConfigError
from delta_eval.executors.base import Executor, Shard, deal, shard_config
from delta_eval.executors.live import ShardWatch
from delta_eval.failures import describe_failure
from delta_eval.ingest.source import ConversationSource, open_source
from delta_eval.interrupts import deferred_signals
from delta_eval.judges.cascade import JudgeCascade, SupportsDecide
from delta_eval.judges.session import SessionJudging
from delta_eval.metrics import decide
from delta_eval.pipeline import Stages, VerdictCallback, run_stages
from delta_eval.pricing import total_cost
from delta_eval.progress import RunProgress
from delta_eval.replay.engine import Replayer, SupportsReplay
from delta_eval.replay.points import replay_calls
from delta_eval.replay.session import SessionReplayer
from delta_eval.replay.tools import ToolSimulator
from delta_eval.replay.user_simulator import UserSimulator
from delta_eval.run_models import build_models
from delta_eval.sampling.population import iter_selected
from delta_eval.sampling.stratified import SampleResult
from delta_eval.schema import Conversation
from delta_eval.store import safe_paths
from delta_eval.store.batches import BatchJournal
from delta_eval.store.folder import RunFolder
from delta_eval.store.live_files import remove_progress
from delta_eval.store.manifest import RunManifest, RunStatus
from delta_eval.store.remote import RemoteFolder
from delta_eval.store.session import FolderSession
from delta_eval.store.shard_copy import sweep
from delta_eval.uris import without_credentials

__all__ = ["execute"]


def _source(config: RunConfig, conversations: ConversationSource | Iterable[Conversation] | None) -> ConversationSource:
    if conversations is not None:
        return ConversationSource.of(conversations)
    if config.source is None:
        raise ConfigError("no conversations given and the config has no [source]")
    return open_source(config.source)


def interrupted(exc: BaseException) -> bool:
    """Whether a run ended because it was interrupted (Ctrl-C, a stop signal, cancellation): the exception, or every
    exception of a group, is one of those."""
    if isinstance(exc, BaseExceptionGroup):
        return all(interrupted(e) for e in exc.exceptions)
    return isinstance(exc, KeyboardInterrupt | anyio.get_cancelled_exc_class())


def _write_pseudonyms(config: RunConfig, source: ConversationSource) -> None:
    """``pseudonyms.json`` in the run folder when the source's ``Pseudonymize`` asks (``keep_mapping``): salted
    sha256 of each real value -> its fake value and kind. The real values and the salt are never written."""
    p = source.pseudonymizer
    path = config.out / "pseudonyms.json"
    if p is None or not p.config.keep_mapping:
        # An earlier run in this folder (overwritten) may have kept one: it belongs to that run, not this one.
        safe_paths.unlink(config.out, path, missing_ok=True)
        return
    rows = [{"hash": h, "fake": fake, "kind": kind} for h, (fake, kind) in sorted(p.mapping.items())]
    data = {"hash": "hmac-sha256(salt, real value)", "pseudonyms": rows}
    safe_paths.write_atomic(config.out, path, json.dumps(data, indent=1, ensure_ascii=False).encode())


#: At most how long the estimate waits for the run's first calls to be out (see :meth:`_Estimate.start`).
_ESTIMATE_WAIT = 1.0


class _Estimate:
    """The cost estimate of the whole sample, kept in the manifest once per run for the report to set beside what
    the run cost, made on a thread of its own while the run replays: it needs no model, and the first calls'
    round trips leave the event loop's thread idle (it starts once they are out: started before, it took the
    interpreter from the loop while the loop sent them, and they went out later). The manifest takes it as soon as
    it is made, under the lock that every write of the manifest during the run takes (the batches' checkpoints
    write it from the writer's thread). An estimate that cannot be made is a note, never the run's failure; a
    manifest that cannot be written is the run's failure, as every write of it is (:meth:`check`)."""

    def __init__(self, config: RunConfig, source: ConversationSource, session: FolderSession, notes: list[str]) -> None:
        self.config, self.source, self.session, self.notes = config, source, session, notes
        self.lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._failed: BaseException | None = None
        self._now = threading.Event()
        self._stop = threading.Event()

    def start(
        self,
        sample: SampleResult,
        conversations: list[tuple[int, Conversation]] | None,
        after: Callable[[], bool] | None = None,
    ) -> None:
        """Make the estimate of ``sample`` (its ``conversations`` where already read) on a thread of its own, once
        ``after()`` is true (checked every few milliseconds, for at most :data:`_ESTIMATE_WAIT` seconds)."""
        self._thread = threading.Thread(
            target=self._record, args=(sample, conversations, after), name="delta-eval-estimate", daemon=True
        )
        self._thread.start()

    def _record(
        self,
        sample: SampleResult,
        conversations: list[tuple[int, Conversation]] | None,
        after: Callable[[], bool] | None,
    ) -> None:
        deadline = time.monotonic() + _ESTIMATE_WAIT
        while after is not None and time.monotonic() < deadline:
            try:
                if after():
                    break
            except Exception:  # counters read while the event loop changes them: not worth waiting on
                break
            if self._now.wait(0.005):  # the run is over (join): no reason to wait any longer
                break
        try:
            estimated = estimate_sample(
                self.config, self.source, sample, conversations=conversations, cancelled=self._stop.is_set
            )
        except EstimateCancelled:
            return  # the run stopped first: no estimate (a rerun makes it)
        except BaseException as exc:
            # A user's render function may fail (or exit) here as it would in the run; a thread has no caller to
            # raise to, so a note says so (a SystemExit too: it ended the thread without a word).
            self.notes.append(f"no cost estimate: {type(exc).__name__}: {exc}"[:300])
            return
        try:
            with self.lock:
                self.session.manifest.estimate = estimated.to_dict()
                self.session.folder.write_manifest(self.session.manifest)
        except BaseException as exc:  # a full disk, an object store gone: raised in the run by check()
            self._failed = exc

    def join(self, *, stop: bool = False) -> None:
        """Wait until the estimate is made (the session's last manifest holds it), started now if it still waits;
        with ``stop`` (a run interrupted or failed), left unmade where it is not yet."""
        if stop:
            self._stop.set()
        self._now.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def check(self) -> None:
        """Raise what writing the manifest with the estimate raised, if it failed."""
        if self._failed is not None:
            raise self._failed


def _first(sample: SampleResult, n: int) -> SampleResult:
    """The first ``n`` conversations of the sample (in source order): the screening's share of it."""
    kept = dict(sorted(sample.selected.items())[:n])
    return sample.model_copy(update={"selected": kept})


def _screen_failures(config: RunConfig, folder: RunFolder, key: str) -> list[str]:
    """The screening gates candidate ``key`` failed on its pairs so far (none: it goes on)."""
    assert config.screen is not None
    if key == "candidate":  # the run's one candidate: every row is its
        verdicts, replays = folder.read("verdicts"), folder.read("replays")
    else:
        verdicts, replays = folder.read_candidate("verdicts", key), folder.read_candidate("replays", key)
    rule = config.decision.model_copy(update={"gates": config.screen.gates})
    return [str(g) for g in decide(verdicts, replays, rule).gates if g.passed is False]


async def _screen(
    stages: Stages,
    sample: SampleResult,
    sides: dict[str, SupportsReplay],
    cascade: SupportsDecide,
    session: FolderSession,
) -> None:
    """Screening (:class:`~delta_eval.config.Screen`): every candidate on the first conversations, its gates checked
    there, and the candidates that failed them left out of the rest of the run (the manifest says why)."""
    c, p = stages.config, stages.progress
    assert c.screen is not None
    p.phase = "screening"
    await run_stages(stages, _first(sample, c.screen.conversations), sides, cascade)
    failed = {}
    for key in stages.candidates:
        said = await anyio.to_thread.run_sync(_screen_failures, c, stages.folder, key)
        if said:
            failed[key] = f"failed on the first {c.screen.conversations} conversations: {'; '.join(said)}"
    stages.active = tuple(k for k in stages.candidates if k not in failed)
    # the screened pairs are done: the rest of the run replays the sample's other turns
    decided = stages.folder.read("verdicts", ["pair_id", "candidate"]).to_pylist()
    stages.state.done_pairs |= {row["pair_id"] for row in decided}
    left_out = sum((row["candidate"] or "candidate") in failed for row in decided)
    p.pairs_total = stages.points_total * len(stages.active) + left_out
    session.manifest.screened_out = {**session.manifest.screened_out, **failed}
    stages.notes += [f"screening: {'candidate' if k == 'candidate' else k} {why}" for k, why in failed.items()]


def _refuse_sharding(c: RunConfig, on_verdict: VerdictCallback | None, executor: Executor) -> None:
    """What a sharded run does not do (yet): say so before anything starts."""
    said = {
        "stop_early": c.stop_early,  # its sequential test watches the verdicts in the order they are written
        "screen": c.screen is not None,
        "batch": c.batch is not None,
        "streaming verdicts (de.stream)": on_verdict is not None,
        "session mode": c.mode == "session",
    }
    refused = [name for name, used in said.items() if used]
    if refused:
        raise ConfigError(f"a run with an executor does not support {', '.join(refused)}; run it without executor")


@dataclass
class _Sharded:
    """What the shards of a session did, added up: calls by model and response-cache use."""

    calls: dict[str, CallStats] = field(default_factory=dict)
    cache: tuple[int, int, int] = (0, 0, 0)


async def _run_sharded(
    executor: Executor,
    stages: Stages,
    sample: SampleResult,
    session: FolderSession,
    pool: ModelPool,
    tool_simulator: ToolSimulator | None,
    out: _Sharded,
) -> None:
    """Cut the sample into shards by conversation, have ``executor`` run them, and add up their reports into the
    session's progress and ``out`` (the shards commit their own batches; the session writes the manifest); where
    they fail, ``out`` gets the calls they published."""
    c, p, folder = stages.config, stages.progress, stages.folder
    n = executor.shard_count()  # here, not on a worker thread: Ray connects from the thread that runs the session
    items = stages.conversations  # kept by sampling where the source is small, else read again
    if items is None:
        items = await anyio.to_thread.run_sync(lambda: list(iter_selected(stages.source, sample.selected)))
    # Dealt by the model calls their replays make if they do what was recorded, not by their pairs: a pair's
    # calls range from one to max_tool_rounds + 1, and the shards should end together.
    sizes = {
        position: sum(replay_calls(point.recorded, c.max_tool_rounds) for point in stages.points_of(conv)[1])
        for position, conv in items
    }
    by_position = dict(items)
    each = shard_config(c, n)
    # Shards that may run apart from the session's folder (a Ray run into an object store) number their batches
    # through the executor; their batches reach the session's copy from the URI.
    numbers = executor.batch_numbers() if c.remote is not None else None
    assert folder.header is not None
    shards = [
        Shard(
            index=k,
            config=each,
            sample=sample.model_copy(update={"selected": {q: sample.selected[q] for q in positions}}),
            conversations=[(q, by_position[q]) for q in positions],
            source_name=stages.source.name,
            session=len(session.manifest.sessions),
            manifest=session.manifest,
            header=folder.header,
            tool_simulator=tool_simulator,
            numbers=numbers,
        )
        for k, positions in enumerate(q for q in deal(sizes, n) if q)
    ]
    p.phase, p.replay_started = "replaying", time.monotonic()
    # While the shards run, the session's progress shows what they publish in the folder; their reports, exact,
    # replace it once they are done.
    remove_progress(folder.path)  # what a session killed before it was recorded left under the same number
    apart = folder.mirror if numbers is not None and isinstance(folder.mirror, RemoteFolder) else None
    if apart is not None:
        apart.remove_progress()  # shards apart publish their counters through the remote
    watch = ShardWatch(folder.path, len(session.manifest.sessions), p, pool.stats, apart)
    own_calls, p.call_stats = p.call_stats, watch.calls
    failed: BaseException | None = None
    ran = False
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch.watch)
            try:
                reports = await executor.run(shards, pool.limits())
            except BaseException as exc:
                # Raised as it is below, not wrapped in the task group's ExceptionGroup: the executor's own error
                # (ShardFailedError) is what a caller catches. A cancellation is raised again by the group itself.
                failed = exc
            tg.cancel_scope.cancel()
        if failed is not None:
            raise failed
        ran = True
    finally:
        if not ran:
            # No report comes back from a failed or interrupted sharded session: what the shards published (each
            # once more as it ends) is what the manifest records of their calls, rather than none.
            with contextlib.suppress(Exception):
                watch.poll()
            out.calls = watch.shard_calls()
        watch.restore()
        p.call_stats = own_calls
        if numbers is not None:
            assert c.remote is not None
            if ran:
                _gather(folder, c.remote)
            else:
                with contextlib.suppress(Exception):  # the run's own error is the one to see
                    _gather(folder, c.remote)
        folder.catch_up()  # the shards' batches are counted in the manifest
    for r in reports:
        for name, value in r.counters.items():
            setattr(p, name, getattr(p, name) + value)
        p.cost_usd = total_cost((p.cost_usd, r.cost_usd))
        for model, stats in r.calls.items():
            out.calls[model] = out.calls.get(model, CallStats()) + stats
        out.cache = (out.cache[0] + r.cache[0], out.cache[1] + r.cache[1], out.cache[2] + r.cache[2])
        stages.notes += [note for note in r.notes if note not in stages.notes]
    folder.recover()  # what a shard's killed worker left uncommitted


def _gather(folder: RunFolder, uri: str) -> None:
    """Take into the session's working copy the batches the shards uploaded from copies of their own, after the
    answers killed attempts left on this machine (:func:`~delta_eval.store.shard_copy.sweep`); a number an attempt
    took and never uploaded (it was killed) gets a dropped record, so the numbers stay without gaps."""
    remote = folder.mirror
    assert isinstance(remote, RemoteFolder)
    sweep(uri, own_cache=remote.cache is not None)
    remote.pull()
    folder.fill_gaps("its number was taken by a shard stopped before it uploaded the batch")


def session_stages(
    c: RunConfig,
    pool: ModelPool,
    turns: dict[str, Replayer],
    cascade: JudgeCascade,
    tool_simulator: ToolSimulator | None,
) -> tuple[dict[str, SupportsReplay], SupportsDecide]:
    """Session mode (:class:`~delta_eval.config.Session`): each side's turn replayer rolled forward by one user
    simulator, and the cascade behind the sessions' outcome check."""
    s = c.session
    user = pool.client(s.user, s.user_options, label="user") if s.user is not None else None
    tools = pool.client(s.tool_model, s.tool_options, label="tools") if s.tool_model is not None else None
    simulator = UserSimulator(user, goal=s.goal, seed=c.seed, prices=c.all_prices)
    sides: dict[str, SupportsReplay] = {
        key: SessionReplayer(
            replayer,
            simulator,
            scripted=s.scripted,
            max_turns=s.max_turns,
            stop_tools=s.stop_tools,
            custom_tools=tool_simulator,
            tool_model=tools,
            prices=c.all_prices,
        )
        for key, replayer in turns.items()
    }
    return sides, SessionJudging(cascade, s.expected, s.ignore)


async def execute(
    config: RunConfig,
    conversations: ConversationSource | Iterable[Conversation] | None = None,
    *,
    tool_simulator: ToolSimulator | None = None,
    on_verdict: VerdictCallback | None = None,
    progress: RunProgress | None = None,
    executor: Executor | None = None,
) -> RunManifest:
    """Run (or resume) ``config`` and return the final manifest.

    ``conversations`` overrides ``config.source``. ``on_verdict`` is called with each verdict as its pair is
    written; ``progress`` receives live counters. ``executor`` shards the pairs over processes or a Ray cluster
    (see :mod:`delta_eval.executors`); without one, the run is replayed and judged in this process.
    """
    # Validate again: a config changed with model_copy(update=...) skipped validation (and side naming).
    c = RunConfig.model_validate(dict(config))
    if executor is not None:
        _refuse_sharding(c, on_verdict, executor)
    source = _source(c, conversations)
    p = progress or RunProgress()
    started, p.phase = time.monotonic(), "reading"
    folder = RunFolder(c.out)
    fresh = RunManifest(
        fingerprint={**c.fingerprint(), "source_name": source.name},
        config=c.public_dump(),
        source=source.name,
        baseline=c.baseline.describe(),
        candidate=c.the_candidate.describe(),
        description=c.description,
        baseline_model=c.baseline.model,
        candidate_model=c.the_candidate.model,
        candidates={v.name: v.describe() for v in c.candidates},
        equivalence_judge=c.judges.names()[0],
        judge=c.judges.names()[1],
        judge_models=c.judges.models(),
        noise_floor=without_credentials(str(c.noise_floor)) if c.noise_floor is not None else None,
        seed=c.seed,
    )
    # Models and judges are built before anything is written: an unknown model, a missing SDK or key, or bad
    # provider options stop the run here, with the folder untouched.
    models = await build_models(c, source.name, tool_simulator)
    pool, turns, judges, recordings = models.pool, models.sides, models.cascade, models.recordings
    try:
        sides: dict[str, SupportsReplay] = dict(turns)
        cascade: SupportsDecide = judges
        if c.mode == "session":
            sides, cascade = session_stages(c, pool, turns, judges, tool_simulator)
        session = FolderSession(
            folder,
            fresh,
            c.cache_path,
            overwrite=c.overwrite,
            retry_errors=c.retry_errors,
            remote=RemoteFolder.of_run(c.remote, c.out, c.cache_path),
        )
    except BaseException:
        await pool.aclose()
        raise
    pool.use_cache(session.cache)
    pool.use_journal(session.journal.record)
    batches = BatchJournal(folder.path) if c.batch is not None else None
    if batches is not None:
        pool.use_batches(batches)
    p.call_stats = pool.stats  # live counters: a progress display reads calls, retries and 429s from them
    p.pairs_resumed = len(session.state.done_pairs)
    stages = Stages(c, source, folder, session.state, p, recordings, on_verdict, last_commit=time.monotonic())
    estimate = _Estimate(c, source, session, stages.notes)

    def checkpoint(batch: int) -> None:
        # After each batch, the manifest records it and this session's calls so far: a killed session's are counted.
        # The counts first, then the answers they count committed: every answer the manifest says was got is in the
        # cache (a killed session's answers after its last record are those found there: see begin_session).
        calls = session.cache.committed_counts(pool.stats())
        with estimate.lock:  # the estimate's thread writes the manifest too
            session.checkpoint(batch, pairs_decided=p.decided, calls=calls)

    folder.on_commit = checkpoint
    status: RunStatus = "failed"
    failure: str | None = None
    sharded = _Sharded()
    try:
        if stages.candidates and executor is not None:
            executor.prepare(c)  # its workers start while this process samples
        sample = await anyio.to_thread.run_sync(stages.sample)
        if session.manifest.estimate is None:
            # Beside the replays, once each replay worker has its first call out (of a sharded run, as its shards
            # publish them; one of them may replay in this process), or at most a second after the sample.
            workers = len(sides) * c.replays_in_flight

            def first_out() -> bool:
                calls = p.calls()
                return calls.made + calls.cached >= min(workers, p.pairs_to_do)

            estimate.start(sample, stages.conversations, after=first_out)
            if any(variant.render is not None for variant in c.sides().values()):
                # A render function of the user's is called by the estimate and by the replays: not from two
                # threads at once (it may not be thread-safe, as a tokenizer's chat template is not).
                await anyio.to_thread.run_sync(estimate.join)
        _write_pseudonyms(c, source)
        if c.screen is not None:
            await _screen(stages, sample, sides, cascade, session)
        if stages.candidates and executor is not None:
            await _run_sharded(executor, stages, sample, session, pool, tool_simulator, sharded)
            session.cache.hits, session.cache.misses, session.cache.writes = sharded.cache
        elif stages.candidates:
            await run_stages(stages, sample, sides, cascade)
        await anyio.to_thread.run_sync(estimate.join)
        estimate.check()
        status = "completed"
    except BaseException as exc:
        if interrupted(exc):
            status = "interrupted"
            if isinstance(exc, BaseExceptionGroup):
                raise KeyboardInterrupt from None  # a second Ctrl-C landed inside a task: say it plainly
        else:
            failure = describe_failure(exc)
        raise
    finally:
        with deferred_signals():  # a second Ctrl-C waits until the last batch and the manifest are written
            with anyio.CancelScope(shield=True):  # a run that did not complete leaves its estimate unmade
                await anyio.to_thread.run_sync(functools.partial(estimate.join, stop=status != "completed"))
            if executor is not None:
                with anyio.CancelScope(shield=True):  # off the loop (it joins processes), and even when cancelled
                    await anyio.to_thread.run_sync(executor.release)
            await pool.aclose()
            if batches is not None:
                batches.close()
            # What the display shows while the session ends: a completed one may merge its batches (seconds, on a
            # large run); the status once the manifest says it.
            p.phase = "saving"
            try:
                close = functools.partial(
                    session.close,
                    status,
                    seconds=time.monotonic() - started,
                    pairs_decided=p.decided,
                    calls={**pool.stats(), **sharded.calls} if sharded.calls else pool.stats(),
                    read=p.sampling_counts(),
                    notes=[*stages.notes, *pool.notes()],
                    stopped_early=stages.stop.reason if stages.stop is not None else None,
                    failure=failure,
                )
                # Off the loop: counting the run's rows and merging its batches take seconds on a large run, which a
                # caller awaiting the run in a loop of its own would otherwise lose. Nothing else touches the
                # session by now (the pool is closed, the estimate joined), and its cache may be closed from
                # another thread.
                with anyio.CancelScope(shield=True):
                    manifest = await anyio.to_thread.run_sync(close)
            except Exception:
                if status == "completed":
                    raise
                # The run's own error is on its way out and is the one to see (a full disk fails this write too).
            finally:
                p.phase = status
    return manifest
