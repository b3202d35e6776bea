"""The streaming orchestration: source -> sample -> replay points -> replays -> judging -> run folder.

Stages run concurrently in one anyio task group and pass typed messages through bounded memory object streams, so
a slow stage makes the earlier ones wait (backpressure) and memory stays flat however large the source is::

    load --(_Pair, side)--> replay (2 x concurrency tasks, one side each) --_Pair--> judge (judge_concurrency) --+
       \\--SampledConversation----------------------------------------------------------------------> write <--+

The loader sends pairs a window at a time, the longest recorded turns first (:func:`longest_first`): a long chain of
tool rounds started last would be the run's tail. The writer commits a batch every ``flush_every`` pairs (the
first batches of a session smaller: :meth:`Stages.batch_size`), at least every 5 seconds, once when the session's
last pairs are in flight (:meth:`Stages.in_the_tail`: it commits what it holds while they finish, so that the end
commits only them), and at the end; a pair's rows always land in one batch.
With ``stop_early``, conversations go in a seeded random order and the run stops as soon as the anytime-valid test
of :mod:`delta_eval.stopping` settles. Cancelling the run (Ctrl-C, a cancelled scope) commits the pairs already
finished and marks the manifest ``interrupted``; a killed process loses at most the pairs of its last uncommitted
batch, whose model calls are in the response cache. Running again on the same folder resumes: finished pairs are
skipped, nothing is written twice.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from delta_eval.adapters.recordings import RecordingIndex
from delta_eval.config import RunConfig
from delta_eval.exceptions import SourceError
from delta_eval.ingest.source import ConversationSource
from delta_eval.judges.cascade import Decision, SupportsDecide
from delta_eval.progress import RunProgress
from delta_eval.replay.engine import SideReplay, SupportsReplay, recorded_replay
from delta_eval.replay.points import (
    count_turns,
    epochs,
    pair_weight,
    replay_calls,
    replay_points,
    select_turns,
)
from delta_eval.replay.session import session_point
from delta_eval.sampling.kept import KeptReading
from delta_eval.sampling.plan import sample_source
from delta_eval.sampling.population import iter_selected
from delta_eval.sampling.stratified import SampleResult, Stratified
from delta_eval.schema import Conversation, ReplayPoint, SampledConversation, Side, Usage, Verdict
from delta_eval.stopping import EarlyStop, random_order
from delta_eval.store.folder import RunFolder
from delta_eval.store.session import Resume

__all__ = ["FIRST_BATCH", "Stages", "VerdictCallback", "candidate_pair_id", "longest_first", "run_stages"]

#: The pairs of a session's first batches (see :meth:`Stages.batch_size`).
FIRST_BATCH = 50

VerdictCallback = Callable[[Verdict], Awaitable[None] | None]

T = TypeVar("T")


#: Items a stage takes from its stream in a row without yielding to the event loop (see :class:`_Takes`).
_RUN = 32


class _Takes(AsyncIterator[T]):
    """The items of a memory stream as they come, up to ``run`` in a row taken without yielding to the event loop.

    ``receive()`` first yields to the event loop, so a stage iterating a stream with it takes at most one item per
    pass of the loop, however many wait. With hundreds of calls in flight a pass takes milliseconds: the writer and
    the judges fell behind the replays once short turns finished many pairs a pass, and the replay workers waited on
    them (at 200 ms / 256 in flight, 20 of the 256 on average over a run). Taken here while some are ready, and
    waited for (yielding) only when none is, or after ``run`` in a row, so that a busy stage still lets the loop
    run (and a cancellation reach it) now and then.
    """

    __slots__ = ("_recv", "_run", "_streak")

    def __init__(self, recv: MemoryObjectReceiveStream[T], run: int = _RUN) -> None:
        self._recv = recv
        self._run = run
        self._streak = 0

    def __aiter__(self) -> _Takes[T]:
        return self

    async def __anext__(self) -> T:
        if self._streak < self._run:
            try:
                item = self._recv.receive_nowait()
            except anyio.WouldBlock:
                pass
            except anyio.EndOfStream:
                raise StopAsyncIteration from None
            else:
                self._streak += 1
                return item
        self._streak = 0
        try:
            return await self._recv.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


async def _put(send: MemoryObjectSendStream[T], item: T) -> None:
    """Send ``item`` on ``send``, yielding to the event loop only when the stream is full (see :class:`_Takes`)."""
    try:
        send.send_nowait(item)
    except anyio.WouldBlock:
        await send.send(item)
    except anyio.BrokenResourceError:
        # The receiver is gone because the run was cancelled (stopped early, interrupted): say that, as send()
        # would have by checking for cancellation first, not that the stream broke.
        await anyio.lowlevel.checkpoint_if_cancelled()
        raise


@dataclass
class _Pair:
    """A replay point on its way through the stages: replayed on the baseline and on each candidate still to
    decide (``candidates``: the keys of :meth:`RunConfig.sides`), then decided per candidate."""

    point: ReplayPoint
    stratum: str
    weight: float
    candidates: tuple[str, ...] = ("candidate",)
    replays: dict[str, SideReplay] = field(default_factory=dict)
    #: Per candidate: the baseline's replay named for its pair, and the decision on it.
    decisions: dict[str, tuple[SideReplay, Decision]] = field(default_factory=dict)

    def of(self, candidate: str) -> ReplayPoint:
        """The point as the pair of ``candidate`` names it: its own pair id in a run of several candidates."""
        if candidate == "candidate":
            return self.point
        return self.point.model_copy(update={"pair_id": candidate_pair_id(self.point.pair_id, candidate)})


def candidate_pair_id(point_pair_id: str, candidate: str) -> str:
    """The pair id of a point and one candidate of several: ``conversation#turn~name`` (a one-candidate run keeps
    ``conversation#turn``).

    Example:
        >>> candidate_pair_id("t1#3", "gpt-5-mini")
        't1#3~gpt-5-mini'
    """
    return point_pair_id if candidate == "candidate" else f"{point_pair_id}~{candidate}"


#: The writer commits once the pairs left are 1/_TAIL of those replayed at once (see :meth:`Stages.in_the_tail`).
_TAIL = 4

#: Pairs per unit of concurrency the loader orders at a time (see :func:`longest_first`).
_LOOKAHEAD = 32


def longest_first(pairs: list[_Pair], max_tool_rounds: int) -> list[_Pair]:
    """The pairs in the order to start them: the longest recorded turns (the most model calls, see
    :func:`~delta_eval.replay.points.replay_calls`) first, the rest in their order.

    A turn's replay is a chain of calls, one after the other: started last, a long tool-round chain is the tail of
    the run, with every other worker idle. Started first, it runs beside the short ones. The order changes when a
    pair is replayed, never what it is asked or answers (its cache key and the simulated model's draws are its
    own), so the results are the same.
    """
    return sorted(pairs, key=lambda pair: -replay_calls(pair.point.recorded, max_tool_rounds))


def _as_pair(side: SideReplay, point: ReplayPoint) -> SideReplay:
    """The baseline's replay of a point, named for one candidate's pair (replayed once, stored with each pair)."""
    if side.replay.pair_id == point.pair_id:
        return side
    error = side.error.model_copy(update={"pair_id": point.pair_id}) if side.error is not None else None
    calls = tuple(c.model_copy(update={"pair_id": point.pair_id}) for c in side.simulator_calls)
    return replace(
        side, replay=side.replay.model_copy(update={"pair_id": point.pair_id}), error=error, simulator_calls=calls
    )


@dataclass
class Stages:
    """The stage coroutines of one session, and what they share: the run's configuration and source, its folder
    and what it already holds, the live counters, the simulated model's recordings (when a side uses it), the
    caller's verdict callback, and ``notes`` for the manifest (what sampling found worth saying)."""

    config: RunConfig
    source: ConversationSource
    folder: RunFolder
    state: Resume
    progress: RunProgress
    recordings: RecordingIndex | None
    on_verdict: VerdictCallback | None
    since_commit: int = 0
    last_commit: float = 0.0
    #: Whether the writer made its commit of the tail (see :meth:`in_the_tail`).
    tail_committed: bool = False
    stop: EarlyStop | None = None
    wake: anyio.Event = field(default_factory=anyio.Event)
    notes: list[str] = field(default_factory=list)

    #: The candidates still replayed (``None``: all of them); screening (:class:`~delta_eval.config.Screen`)
    #: leaves out those that failed its gates.
    active: tuple[str, ...] | None = None
    #: Pairs per candidate in the whole sample (set by :meth:`sample`).
    points_total: int = 0
    #: The sample's conversations at their positions, already read (a shard of a sharded run is given its own;
    #: :meth:`sample` keeps them where the source is small); ``None``: :meth:`load` reads them from the source.
    conversations: list[tuple[int, Conversation]] | None = None

    @property
    def candidates(self) -> tuple[str, ...]:
        """The candidates' keys still replayed: ``("candidate",)``, or each candidate's name in a run of several."""
        every = tuple(self.config.sides())[1:]
        return every if self.active is None else tuple(k for k in every if k in self.active)

    def _early_stop(
        self, items: list[tuple[int, Conversation]], sample: SampleResult
    ) -> list[tuple[int, Conversation]]:
        """Set up early stopping: the conversations in random order, how many pairs each will have and its weight,
        and what the folder already decided fed to the test first (see :mod:`delta_eval.stopping`)."""
        c = self.config
        ordered = random_order(items, c.seed)
        planned = {}
        for position, conv in ordered:
            n_every, points = self.points_of(conv)
            weight = pair_weight(sample.selected[position][1], n_every, len(points))
            planned[conv.id] = (len(points) * c.epochs, weight)
        rule = c.decision
        stop = EarlyStop(rule.margin, 1 - rule.confidence, planned, rule.estimand)
        columns = ["conversation_id", "outcome", "preference", "error_side", "error"]
        done = self.folder.read("verdicts", columns).to_pylist()
        rank = {conv.id: k for k, (_, conv) in enumerate(ordered)}
        for row in sorted(done, key=lambda r: rank.get(r["conversation_id"], len(rank))):
            stop.add(row["conversation_id"], row)
        self.stop = stop
        return ordered

    def points_of(self, conv: Conversation) -> tuple[int, list[ReplayPoint]]:
        """How many points ``conv`` has, and the ones this run replays: its turns (at most
        ``max_turns_per_conversation``), or in session mode its one session (none when it has nothing after the
        opening)."""
        c = self.config
        if c.mode == "session":
            start = session_point(conv, c.session.start)
            return (0, []) if start is None else (1, [start])
        every = list(replay_points(conv, greetings=c.replay_greetings))
        return len(every), select_turns(every, c.max_turns_per_conversation, c.seed)

    async def load(
        self,
        sample: SampleResult,
        send: MemoryObjectSendStream[tuple[_Pair, str]],
        write: MemoryObjectSendStream[_Pair | SampledConversation],
    ) -> None:
        async with send, write:
            given = self.conversations
            if given is not None:  # those of ``sample`` (screening replays the first of them)
                given = [(position, conv) for position, conv in given if position in sample.selected]
            iterator: Iterator[tuple[int, Conversation]] = iter(
                iter_selected(self.source, sample.selected) if given is None else given
            )
            if self.config.stop_early:
                # A random order, so that the conversations finished at any moment are a random subset.
                items = await anyio.to_thread.run_sync(list, iterator)
                iterator = iter(await anyio.to_thread.run_sync(self._early_stop, items, sample))
            # Pairs are sent a window at a time, the longest recorded turns first (see longest_first); with
            # stop_early, in the conversations' random order, one at a time.
            lookahead = 0 if self.config.stop_early else _LOOKAHEAD * self.config.concurrency
            window: list[_Pair] = []
            taken = 0
            while True:
                if self.stop is not None and self.stop.settled:
                    break
                if given is None:  # read from the source: off the event loop
                    position, conv = await anyio.to_thread.run_sync(next, iterator, (-1, None))
                else:  # in memory: taken here, the event loop let run now and then
                    position, conv = next(iterator, (-1, None))
                    taken += 1
                    if taken % _RUN == 0:
                        await anyio.lowlevel.checkpoint()
                if conv is None:
                    break
                stratum, weight = sample.selected[position]
                n_all, points = self.points_of(conv)
                if self.recordings is not None:
                    self.recordings.add([conv])
                if conv.id not in self.state.done_conversations:
                    record = SampledConversation.of(
                        conv,
                        position=position,
                        stratum=stratum,
                        weight=weight,
                        n_turns=n_all,
                        n_pairs=len(points) * self.config.epochs,
                    )
                    await _put(write, record)
                each = pair_weight(weight, n_all, len(points))
                for point in epochs(points, self.config.epochs):
                    todo = tuple(
                        k for k in self.candidates if candidate_pair_id(point.pair_id, k) not in self.state.done_pairs
                    )
                    if todo:
                        window.append(_Pair(point, stratum, each, todo))
                if len(window) >= lookahead:
                    await self._send(longest_first(window, self.config.max_tool_rounds) if lookahead else window, send)
                    window = []
            await self._send(longest_first(window, self.config.max_tool_rounds) if lookahead else window, send)

    @staticmethod
    async def _send(pairs: list[_Pair], send: MemoryObjectSendStream[tuple[_Pair, str]]) -> None:
        for pair in pairs:
            await _put(send, (pair, "baseline"))  # once, whatever the number of candidates
            for key in pair.candidates:
                await _put(send, (pair, key))

    async def replay(
        self,
        recv: MemoryObjectReceiveStream[tuple[_Pair, str]],
        send: MemoryObjectSendStream[_Pair],
        sides: Mapping[str, SupportsReplay],
    ) -> None:
        # Each side of a pair is replayed on its own: a side that finishes early frees its worker for other work
        # instead of holding it while the other side takes more tool rounds. The second side to finish sends the
        # pair on (workers share one event loop, so the check and the send cannot interleave).
        async with recv, send:
            async for pair, key in _Takes(recv):
                side: Side = "baseline" if key == "baseline" else "candidate"
                done = pair.replays[key] = await sides[key].replay(pair.of(key) if side == "candidate" else pair.point,
                                                                   side)  # fmt: skip
                self.progress.add_spend(done.replay.usage, done.replay.cost_usd)
                for call in done.simulator_calls:
                    # The other side's asking of the same question was answered by this call, from the cache.
                    if not call.cached:
                        self.progress.add_spend(call.usage, call.cost_usd)
                if len(pair.replays) == 1 + len(pair.candidates):
                    self.progress.replayed += len(pair.candidates)
                    await _put(send, pair)

    async def judge(
        self,
        recv: MemoryObjectReceiveStream[_Pair],
        write: MemoryObjectSendStream[_Pair | SampledConversation],
        cascade: SupportsDecide,
    ) -> None:
        async with recv, write:
            async for pair in _Takes(recv):
                for key in pair.candidates:  # each candidate against the baseline
                    point = pair.of(key)
                    base, cand = _as_pair(pair.replays["baseline"], point), pair.replays[key]
                    decision = await cascade.decide(
                        point,
                        base.replay,
                        cand.replay,
                        baseline_request=base.request,
                        candidate_request=cand.request,
                        stratum=pair.stratum,
                        weight=pair.weight,
                    )
                    if key != "candidate":
                        decision = replace(decision, verdict=decision.verdict.model_copy(update={"candidate": key}))
                    pair.decisions[key] = (base, decision)
                    for judgement in decision.judgements:
                        # A rule-based judge calls no model: no tokens, and no price to have (its cost is None).
                        free = judgement.cost_usd is None and judgement.usage == Usage()
                        self.progress.add_spend(judgement.usage, 0.0 if free else judgement.cost_usd)
                    self.progress.count_verdict(decision.verdict.stage)
                await _put(write, pair)

    def sample(self) -> SampleResult:
        """Read the source once, draw the sample, count its pairs; write the population's rows once per run. Keeps
        the drawn conversations in :attr:`conversations` where the source is small enough (see
        :mod:`delta_eval.sampling.kept`)."""
        c, p = self.config, self.progress

        def n_pairs(conv: Conversation) -> int:
            if c.mode == "session":
                return c.epochs * (session_point(conv, c.session.start) is not None)
            n = count_turns(conv, greetings=c.replay_greetings)
            return c.epochs * (n if c.max_turns_per_conversation is None else min(n, c.max_turns_per_conversation))

        def greetings(conv: Conversation) -> int:
            return 0 if c.replay_greetings else count_turns(conv, greetings=True) - count_turns(conv)

        counters = {"n_pairs": n_pairs, "greetings": greetings}
        # The conversations read here are kept for the estimate and the loader where the source's pairs fit the
        # loader's window (which holds them all at once anyway): they are not parsed twice more.
        reading = KeptReading(self.source, n_pairs, _LOOKAHEAD * c.concurrency)
        plan = sample_source(reading, c.sample or Stratified(), counters=counters)
        if self.conversations is None:
            self.conversations = reading.selected(plan.sample.selected)
        p.read, p.read_errors = plan.read, plan.read_errors
        self.points_total = plan.totals["n_pairs"]
        p.pairs_total = self.points_total * len(self.candidates)  # a pair per point and candidate
        p.greetings_skipped = plan.totals["greetings"]
        p.strata_without_pairs = plan.strata_without_turns()
        self.notes += plan.sample.notes
        p.population, p.excluded, p.sampled = plan.sample.population, plan.sample.excluded, len(plan.sample.selected)
        if not self.state.population_committed:
            self.folder.add("errors", plan.errors)
            self.folder.add("strata", plan.sample.strata)
            self.folder.commit(note={"kind": "population"})
            p.error_rows += len(plan.errors)
        why = plan.nothing_to_run(self.source.name)
        if why is None and (why := plan.nothing_to_replay(self.source.name)) is not None:
            why += f": {self.source.describe()}"  # what the mapping looked for and what the records hold
        if why is not None:
            raise SourceError(why)  # never "completed, 0 pairs" in silence; the bad records are written above
        return plan.sample

    def batch_size(self) -> int:
        """The pairs the writer commits in a batch now: ``flush_every``, reached from smaller first batches
        (:data:`FIRST_BATCH` pairs, then a quarter of the pairs the session has written), so that a run killed in
        its first minutes loses little and a long run still commits few, large batches.

        Example: with the default ``flush_every`` of 1,000, a session's batches hold 50, 50, 50, 50, 50, 62, 78,
        97, ... pairs, and 1,000 from its 4,000th pair on."""
        return min(self.config.flush_every, max(FIRST_BATCH, self.progress.written // 4))

    def in_the_tail(self) -> bool:
        """Whether the session's pairs yet to reach the writer are down to a quarter of those it replays at once
        (:data:`_TAIL`), the first time it is asked since they are: the last of them are in flight, the event loop
        mostly waits for their answers, and the writer commits what it holds then rather than after the last pair
        (the run's end waited for that write: ~0.1 s for 250 pairs). Never in a session that does not know its
        pairs (a shard's counters start from none), nor in one whose pairs all run at once from its start."""
        p, at_once = self.progress, self.config.concurrency
        taken = p.written + self.since_commit  # by the writer: committed, or held for the next batch
        if self.tail_committed or p.pairs_to_do <= at_once or p.pairs_to_do - taken > at_once // _TAIL:
            return False
        self.tail_committed = True
        return True

    def _commit(self) -> None:
        if self.folder.commit() is not None:
            self.progress.written += self.since_commit
            self.since_commit = 0
            self.last_commit = time.monotonic()

    async def write(self, recv: MemoryObjectReceiveStream[_Pair | SampledConversation]) -> None:
        folder = self.folder
        try:
            async with recv:
                async for item in _Takes(recv):
                    if isinstance(item, SampledConversation):
                        folder.add("conversations", [item])
                        continue
                    for key, (base, decision) in item.decisions.items():
                        # a pair's rows, one pair per candidate: the baseline's replay is stored with each
                        cand = item.replays[key]
                        folder.add("replays", [base.replay, cand.replay, recorded_replay(item.of(key))])
                        folder.add("verdicts", [decision.verdict])
                        verdict = decision.verdict
                        if self.stop is not None and self.stop.add(verdict.conversation_id, verdict.model_dump()):
                            self.progress.phase = "stopped early"
                            self.wake.set()
                        folder.add("judgements", decision.judgements)
                        folder.add("simulator_calls", [*base.simulator_calls, *cand.simulator_calls])
                        errors = [e for e in (base.error, cand.error) if e is not None] + decision.errors
                        folder.add("errors", errors)
                        self.progress.error_rows += len(errors)
                        self.since_commit += 1
                        if self.on_verdict is not None and (out := self.on_verdict(decision.verdict)) is not None:
                            await out
                    tail = self.since_commit > 0 and self.in_the_tail()
                    if tail or self.since_commit >= self.batch_size() or time.monotonic() - self.last_commit > 5:
                        # Parquet encoding releases the GIL: on a thread, replays go on while a batch is written.
                        # Only this task adds rows, and it waits here, so the batch cannot change under the write.
                        await anyio.to_thread.run_sync(self._commit)
        finally:
            # Runs on cancellation too (synchronously, so it cannot be cancelled): keep every finished pair.
            self._commit()
            self.wake.set()


async def run_stages(
    stages: Stages, sample: SampleResult, sides: Mapping[str, SupportsReplay], cascade: SupportsDecide
) -> None:
    """Run the stages on ``sample`` until every pair is written (or the run is cancelled)."""
    c = stages.config
    points_send, points_recv = anyio.create_memory_object_stream[tuple[_Pair, str]](2 * c.replays_in_flight)
    pairs_send, pairs_recv = anyio.create_memory_object_stream[_Pair](c.judges_in_flight)
    # pairs waiting for the writer hold their rows: as many as a batch holds, and never more than 256
    write_send, write_recv = anyio.create_memory_object_stream[_Pair | SampledConversation](min(c.flush_every, 256))
    stages.progress.phase = "replaying"
    stages.progress.replay_started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(stages.load, sample, points_send, write_send.clone())
        for _ in range(len(sides) * c.replays_in_flight):  # a worker per side of ``concurrency`` pairs
            tg.start_soon(stages.replay, points_recv.clone(), pairs_send.clone(), sides)
        for _ in range(c.judges_in_flight):  # a batching run holds a batch's worth of pairs waiting
            tg.start_soon(stages.judge, pairs_recv.clone(), write_send.clone(), cascade)
        tg.start_soon(stages.write, write_recv)
        if c.stop_early:
            tg.start_soon(_stop_when_settled, stages, tg.cancel_scope)
        for stream in (points_recv, pairs_send, pairs_recv, write_send):
            stream.close()


async def _stop_when_settled(stages: Stages, scope: anyio.CancelScope) -> None:
    # Woken when the test settles (or when the writer is done): on a settled test, stop every stage; the writer
    # commits what it has on its way out.
    await stages.wake.wait()
    if stages.stop is not None and stages.stop.settled:
        scope.cancel()
