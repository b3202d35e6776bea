"""Calls that need no answer right away, sent through a provider's batch API at about half the price.

A :class:`BatchQueue` stands in front of one model's adapter: a request missing from the response cache is queued;
the queue is sent as one batch when it holds ``size`` requests, or ``wait_s`` after its first one came (so a run
whose stage cannot fill a batch never waits for one that never fills); the batch is polled every ``poll_s`` until
the provider has finished it, and each result goes into the response cache and to the caller waiting for it. A
request the provider failed (a line of the batch's error file) raises its :class:`ProviderError` for its caller
alone: the others of the batch succeed (partial results).

Each step of a batch is written to the run's journal (:mod:`delta_eval.store.batches`) before the next is taken,
keyed by the requests' cache keys: a run killed while a batch is processed finds it when it resumes, polls it, and
sends none of its requests again. Nothing is paid twice: a request answered before the kill is in the cache, one
in a batch still running is answered by that batch.

What a provider does is a :class:`BatchBackend` (``openai:``: :mod:`.openai_batch`, ``anthropic:``:
:mod:`.anthropic_batch`, ``gemini:``: :mod:`.gemini_batch`): upload the requests, create the batch from them, find
a batch created from an upload (after a kill between the two), and poll it. Requests of one queue go to one model,
as OpenAI and Gemini require of a batch. A provider whose batch is created from the requests themselves (Anthropic,
Gemini's inline requests: ``stores_input`` false) has nothing to upload: its ``upload`` only holds the requests in
memory. Every batch is journalled just before its create call, so that a kill between the provider creating it
and the journal's ``created`` line (one round trip) leaves a trace: the resumed run asks the provider for it
(OpenAI: by its input file; Gemini: by the display name it was created with, unique to it) and polls it if
found, or sends its requests again if not. A create call that failed without the provider's refusal (a timeout, a
5xx) is retried only after such a look-up. Anthropic's Message Batches carry no name or metadata to find one by
(``finds_created`` false): there such requests are sent again, and may be paid twice, which the run's notes count
(:attr:`BatchQueue.resent`).

Example::

    queue = BatchQueue(backend, BatchSettings(size=100), journal, "openai:gpt-4.1", keep=cache_and_count)
    response = await queue.generate(key, request)
"""

from __future__ import annotations

import hashlib
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import anyio
from pydantic import BaseModel, ConfigDict, Field

from delta_eval.adapters.retry import RetryPolicy, call_with_retry
from delta_eval.calls import ModelRequest, ModelResponse
from delta_eval.exceptions import BadRequestError, ProviderError, TransientError

__all__ = [
    "BATCH_DISCOUNT",
    "BATCH_PROVIDERS",
    "BatchBackend",
    "BatchJournal",
    "BatchQueue",
    "BatchSettings",
    "Ended",
    "HeldRequests",
    "Outcome",
    "PendingBatch",
    "batch_cost",
]

#: What a batch call costs relative to the same call made interactively. Each provider documents half the price:
#: OpenAI ("a 50% cost discount compared to synchronous APIs", platform.openai.com/docs/guides/batch), Anthropic
#: ("all usage is charged at 50% of the standard API prices", docs.anthropic.com, Message Batches) and Gemini
#: ("at 50% of the standard cost", ai.google.dev/gemini-api/docs/batch-mode). The model catalogue has no batch
#: price of its own, so the run's price is scaled by this.
BATCH_DISCOUNT = 0.5


def batch_cost(dollars: float | None, batch: bool) -> float | None:
    """What a call priced ``dollars`` interactively cost, ``batch``: sent through a batch API.

    Example:
        >>> batch_cost(0.02, True), batch_cost(0.02, False), batch_cost(None, True)
        (0.01, 0.02, None)
    """
    return dollars * BATCH_DISCOUNT if dollars is not None and batch else dollars


#: The model prefixes whose adapters send batches (their ``batch_backend``), for what prices a run before building
#: any adapter (:mod:`delta_eval.estimate`). Their Azure, Bedrock and Vertex AI forms have no batch wired in.
BATCH_PROVIDERS = frozenset({"openai", "anthropic", "gemini"})

T = TypeVar("T")
R = TypeVar("R")

#: One request's outcome in a finished batch.
Outcome = ModelResponse | ProviderError


@dataclass(frozen=True)
class Ended:
    """What an ended batch returned: each request's outcome by custom id, and ``rest``, the error of the requests
    it returned nothing for (a batch that expired, was cancelled or failed validation; ``None``: none expected)."""

    outcomes: Mapping[str, Outcome]
    rest: ProviderError | None = None


class BatchSettings(BaseModel):
    """How judge calls are batched (``RunConfig.batch``).

    - ``size``: requests per batch at most (OpenAI takes up to 50,000 in one);
    - ``wait_s``: a batch not yet full is sent this long after its first request came;
    - ``poll_s``: how often a submitted batch is asked whether it is done (providers finish within 24 hours, most
      batches much sooner);
    - ``replays``: the sides' replays go through batches too (each model call of a replay: one with tool rounds
      waits for a batch per round). Off by default: the judges' calls are what can wait, while the replays are
      what a run's answer waits on first; turn it on for a run nobody waits for (a nightly comparison).
      Replays answered in a batch share the response cache with interactive ones, so nothing is paid twice
      whichever way a call went.

    Example:
        >>> BatchSettings(size=200).poll_s
        30.0
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    size: int = Field(default=1000, ge=1, le=50_000)
    wait_s: float = Field(default=10.0, ge=0)
    poll_s: float = Field(default=30.0, gt=0)
    replays: bool = False


class PendingBatch(Protocol):
    """A batch the journal knows and has not seen finish."""

    @property
    def file(self) -> str: ...
    @property
    def keys(self) -> tuple[str, ...]: ...
    @property
    def batch(self) -> str | None: ...


class BatchJournal(Protocol):
    """Where a run keeps the steps of its batches (see :class:`delta_eval.store.batches.BatchJournal`)."""

    def pending(self, model: str, key: str) -> PendingBatch | None:
        """The batch not yet done that holds request ``key`` of ``model``."""

    def uploaded(self, model: str, file: str, keys: Sequence[str]) -> None:
        """The provider holds the input ``file`` of a batch of ``keys``."""

    def created(self, file: str, batch: str) -> None:
        """The provider created ``batch`` from ``file``."""

    def dropped(self, file: str) -> None:
        """No batch was created from ``file``: its requests may be sent again."""

    def done(self, batch: str) -> None:
        """The results of ``batch`` are kept."""


class HeldRequests(Generic[R]):
    """The requests of batches not created yet, for a provider that takes them in the create call (``stores_input``
    false): :meth:`hold` keeps them under a name made of their keys and unique to the hold (what ``upload``
    returns), :meth:`take` gives them to ``create`` once (or :meth:`discard` drops them: their batch was found).

    Example:
        >>> held = HeldRequests[str]()
        >>> name = held.hold(["k1", "k2"], ["r1", "r2"])
        >>> name.startswith("held-"), held.take(name, model="m")
        (True, ['r1', 'r2'])
    """

    def __init__(self) -> None:
        self._held: dict[str, list[R]] = {}

    def hold(self, keys: Sequence[str], requests: list[R]) -> str:
        """Keep ``requests`` (their cache ``keys``, in order) until :meth:`take`; the name they are held under."""
        # Unique to this hold, though the same keys come again (a rerun of failed requests): Gemini finds a batch
        # by the name it was created with, which must not be an older batch's.
        name = "held-" + hashlib.sha256("\n".join(keys).encode()).hexdigest()[:24] + "-" + secrets.token_hex(8)
        self._held[name] = requests
        return name

    def get(self, name: str, *, model: str) -> list[R]:
        """The requests held under ``name`` (still held); a :class:`BadRequestError` when none are."""
        requests = self._held.get(name)
        if requests is None:
            raise BadRequestError(f"the requests of {name} are no longer held", model=model)
        return requests

    def discard(self, name: str) -> None:
        """No longer hold the requests of ``name``, if held."""
        self._held.pop(name, None)

    def take(self, name: str, *, model: str) -> list[R]:
        """The requests held under ``name``, no longer held."""
        requests = self.get(name, model=model)
        del self._held[name]
        return requests


class BatchBackend(Protocol):
    """One provider's batch API, as a :class:`BatchQueue` uses it. Each method raises :class:`ProviderError`."""

    #: Whether ``upload`` leaves the requests at the provider (a file a batch is created from, found again after
    #: a kill), rather than in this process until ``create`` sends them.
    stores_input: bool
    #: Whether ``find`` can tell a batch created from an upload (``None`` then means there is none), rather than
    #: always answering ``None``.
    finds_created: bool

    async def upload(self, items: Sequence[tuple[str, ModelRequest]]) -> str:
        """Hand the provider the requests (custom id: their cache key); what names the upload."""

    async def create(self, file: str) -> str:
        """Create a batch from an upload; its id."""

    async def find(self, file: str) -> str | None:
        """The batch already created from ``file``, if the provider has one (and can tell)."""

    async def poll(self, batch: str) -> Ended | None:
        """``None`` while ``batch`` runs; once it has ended, what it returned."""


@dataclass
class _Waiter:
    done: anyio.Event = field(default_factory=anyio.Event)
    outcome: Outcome | None = None
    since: float = field(default_factory=time.perf_counter)

    def settle(self, outcome: Outcome) -> None:
        if not self.done.is_set():
            if isinstance(outcome, ModelResponse):  # what the caller waited, queueing and the provider's turn
                outcome = outcome.model_copy(update={"latency_ms": (time.perf_counter() - self.since) * 1000})
            self.outcome = outcome
            self.done.set()


@dataclass
class _Lookup:
    """A look-up of an earlier session's batch at the provider: what it found, or why it failed."""

    done: anyio.Event = field(default_factory=anyio.Event)
    found: str | None = None
    failed: ProviderError | None = None


class _Followed:
    """What a look-up tells the other requests of a batch found at the provider: the first one follows it."""


_FOLLOWED = _Followed()


@dataclass
class _Open:
    """The batch being filled."""

    items: list[tuple[str, ModelRequest]] = field(default_factory=list)
    taken: anyio.Event = field(default_factory=anyio.Event)


class BatchQueue:
    """Queues one model's requests into provider batches (see the module's docstring).

    ``keep(key, response)`` is called with every result of a batch, waited for or not (it caches and counts it);
    ``on_send(n)`` as ``n`` requests are submitted. The task whose request opens a batch, or fills it, sends it and
    polls it for everyone waiting on it.
    """

    def __init__(
        self,
        backend: BatchBackend,
        settings: BatchSettings,
        journal: BatchJournal,
        model: str,
        *,
        keep: Callable[[str, ModelResponse], None],
        on_send: Callable[[int], None] | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.backend = backend
        self.settings = settings
        self.journal = journal
        self.model = model
        self._keep = keep
        self._on_send = on_send
        self._retry = retry or RetryPolicy()
        self._rng = random.Random()
        self._open = _Open()
        self._waiters: dict[str, _Waiter] = {}
        self._followed: set[str] = set()  # uploads some task of this session is following
        #: Batches this queue created (their ids), and batches of an earlier session it followed.
        self.created: list[str] = []
        self.resumed: list[str] = []
        #: Requests sent again after a create call that did not return (a kill, a timeout, a 5xx), where the
        #: provider cannot be asked whether it created that batch (``finds_created`` false): maybe paid twice.
        self.resent = 0
        self._lookups: dict[str, _Lookup] = {}  # journalled batches being looked for at the provider
        self._unsure: set[str] = set()  # requests of a dropped batch the provider could not say it has

    async def generate(self, key: str, request: ModelRequest) -> ModelResponse:
        """The response to ``request`` (cache key ``key``) once its batch is done; raises its
        :class:`ProviderError` when the provider failed it."""
        waiter = self._waiters.get(key)
        if waiter is None:
            waiter = self._waiters[key] = _Waiter()
            try:
                await self._enter(key, request)
            except BaseException as exc:
                if self._waiters.get(key) is waiter and not waiter.done.is_set():
                    del self._waiters[key]
                    # Another caller of the same key may wait on it: it fails too, rather than waiting forever.
                    stopped = TransientError(f"the request {key} was stopped before it was sent", model=self.model)
                    waiter.settle(exc if isinstance(exc, ProviderError) else stopped)
                raise
        await waiter.done.wait()
        if self._waiters.get(key) is waiter:
            del self._waiters[key]
        assert waiter.outcome is not None
        if isinstance(waiter.outcome, ProviderError):
            raise waiter.outcome
        return waiter.outcome

    async def _enter(self, key: str, request: ModelRequest) -> None:
        pending = self.journal.pending(self.model, key)
        if pending is not None and pending.file in self._followed:
            return  # a task of this session creates or polls its batch: its results settle this request too
        batch_id = pending.batch if pending is not None else None
        if pending is not None and batch_id is None and not self.backend.stores_input:
            # Journalled before a create call that did not return (a kill; a timeout, a 5xx): the batch may exist.
            found = await self._look_for(pending)
            if isinstance(found, _Followed):
                return  # another request of the batch found it and follows it for every one of its requests
            batch_id = found
            if found is None:
                pending = None
        if pending is not None:
            # Sent by an earlier session (or earlier in this one) and not yet done: answered by that batch.
            self._followed.add(pending.file)
            if batch_id is not None:
                self.resumed.append(batch_id)
            await self._follow(pending.file, pending.keys, batch_id, earlier=True)
            return
        if key in self._unsure:  # of a batch the provider could not say it has: maybe in two batches now
            self._unsure.discard(key)
            self.resent += 1
        batch = self._open
        batch.items.append((key, request))
        if len(batch.items) >= self.settings.size:
            await self._take(batch)
        elif len(batch.items) == 1:
            with anyio.move_on_after(self.settings.wait_s):
                await batch.taken.wait()
            if not batch.taken.is_set():
                await self._take(batch)

    async def _look_for(self, pending: PendingBatch) -> str | _Followed | None:
        """Ask the provider for the batch of ``pending`` (journalled, its create call did not return), once however
        many of its requests ask: its id, journalled, to the first request, which follows it; ``_FOLLOWED`` to the
        others; ``None`` when the provider has none or cannot tell (the entry dropped: the requests are sent
        again). A failed look-up raises for every request waiting on it (the entry stays: a later request looks
        again)."""
        lookup = self._lookups.get(pending.file)
        if lookup is not None:
            await lookup.done.wait()
            if lookup.failed is not None:
                raise lookup.failed
            return _FOLLOWED if lookup.found is not None else None
        lookup = self._lookups[pending.file] = _Lookup()
        try:
            lookup.found = await self._call(lambda: self.backend.find(pending.file))
            if lookup.found is None:
                self.journal.dropped(pending.file)
                if not self.backend.finds_created:
                    self._unsure.update(pending.keys)
            else:
                self.journal.created(pending.file, lookup.found)
        except BaseException as exc:
            stopped = TransientError(f"the look-up of {pending.file} was stopped", model=self.model)
            lookup.failed = exc if isinstance(exc, ProviderError) else stopped
            raise
        finally:
            # Settled: later requests are routed by the journal (created: followed; dropped: a new batch).
            del self._lookups[pending.file]
            lookup.done.set()
        return lookup.found

    async def _take(self, batch: _Open) -> None:
        """Close ``batch`` to new requests, send it, and follow it to its end."""
        self._open = _Open()
        batch.taken.set()
        keys = [k for k, _ in batch.items]
        try:
            file = await self._call(lambda: self.backend.upload(batch.items))
        except ProviderError as exc:
            self._settle(keys, exc)
            return
        # Journalled before the batch is created: a kill during the create call leaves a trace of a batch that may
        # exist (the provider holds the input, or, for held requests, the call may have reached it).
        self.journal.uploaded(self.model, file, keys)
        self._followed.add(file)
        await self._follow(file, tuple(keys), None, earlier=False)

    async def _follow(self, file: str, keys: Sequence[str], batch_id: str | None, *, earlier: bool) -> None:
        """Create the batch of ``file`` if it is not yet (``earlier``: journalled by an earlier session, which may
        have created it), poll it to its end, and hand out its results."""
        try:
            if batch_id is None:
                batch_id = await self._create(file, len(keys), earlier=earlier)
                self.journal.created(file, batch_id)
            ended = batch_id
            # Polled on a clock, not woken by an event: the provider tells nobody when a batch is done.
            while (results := await self._call(lambda: self.backend.poll(ended))) is None:  # noqa: ASYNC110
                await anyio.sleep(self.settings.poll_s)
        except ProviderError as exc:
            # The batch may still finish: it stays in the journal, and a later request of it polls it again.
            self._followed.discard(file)
            self._settle(keys, exc)
            return
        missing = results.rest or TransientError(
            f"the batch {batch_id} ended without a result for this request", model=self.model
        )
        for key in keys:
            outcome = results.outcomes.get(key, missing)
            if isinstance(outcome, ModelResponse):
                self._keep(key, outcome)
            self._settle([key], outcome)
        self.journal.done(batch_id)
        self._followed.discard(file)

    async def _create(self, file: str, count: int, *, earlier: bool) -> str:
        """The batch of ``file`` (``count`` requests), created, or found at the provider where an earlier attempt
        (or an ``earlier`` session's) may have created it: a create call that failed without the provider's refusal
        (a timeout, a dropped connection, a 5xx) is retried only after a look-up where the provider can be asked,
        else counted as possibly paid twice. A create refused every time (4xx) created nothing: the journal drops
        the entry."""
        unsure = earlier  # a batch of an earlier session's upload may exist already
        tried, refused = False, True

        async def attempt() -> str:
            nonlocal unsure, refused, tried
            if unsure and self.backend.finds_created:
                found = await self.backend.find(file)
                if found is not None:
                    if tried:  # created by this session's attempt that got no answer: sent, and billed, by it
                        self._sent(found, count)
                    return found
            blind = unsure and not self.backend.finds_created
            try:
                tried = True
                created = await self.backend.create(file)
            except ProviderError as exc:
                unsure = exc.status is None or exc.status >= 500
                refused = refused and not unsure
                if blind and unsure:
                    self.resent += count  # maybe in two batches now: the last attempt's, and this one's
                raise
            if blind:
                self.resent += count  # the last attempt may have created one too
            self._sent(created, count)
            return created

        try:
            return await self._call(attempt)
        except ProviderError:
            if refused and not self.backend.stores_input:
                self.journal.dropped(file)  # refused: the provider created nothing, and holds no input
            raise

    def _sent(self, batch: str, count: int) -> None:
        self.created.append(batch)
        if self._on_send is not None:
            self._on_send(count)

    def _settle(self, keys: Sequence[str], outcome: Outcome) -> None:
        for key in keys:
            waiter = self._waiters.get(key)
            if waiter is not None:
                waiter.settle(outcome)

    async def _call(self, fn: Callable[[], Awaitable[T]]) -> T:
        result, _ = await call_with_retry(fn, self._retry, rng=self._rng)
        return result
