"""A batch queue in front of a provider that takes its requests in the create call (``stores_input`` false): a
batch journalled before its create call, which never returned, is looked for once at the provider when the run
resumes, however many of its requests ask; found, it is polled and nothing is sent again; not found, it is dropped
from the journal and its requests go into a new batch, counted as sent again; a failed look-up fails its
requests and keeps the journal's entry for a later session."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from delta_eval.adapters.batch import BatchQueue, BatchSettings, Ended, HeldRequests
from delta_eval.adapters.retry import RetryPolicy
from delta_eval.calls import ModelRequest, ModelResponse
from delta_eval.exceptions import BadRequestError, ProviderError, RateLimitError, TransientError
from delta_eval.schema import Message
from delta_eval.store.batches import BatchJournal

MODEL = "fake:model"


class HeldBackend:
    """A provider like Anthropic's or Gemini's inline batches, in memory: ``existing`` are batches it created
    (id -> keys) whose creator may never have heard of them; ``find`` answers from ``names`` (file -> id)."""

    stores_input = False

    def __init__(self, names: dict[str, str] | None = None, *, find_fails: int = 0, finds_created: bool = True,
                 unanswered: int = 0) -> None:  # fmt: skip
        self._held = HeldRequests[str]()
        self.batches: dict[str, list[str]] = {}
        self.names = dict(names or {})
        self.find_fails = find_fails  # look-ups that fail, first
        self.finds_created = finds_created
        self.unanswered = unanswered  # create calls that create their batch, then fail without an answer, first
        self.finds = 0

    async def create(self, file: str) -> str:
        keys = self._held.get(file, model=MODEL)
        batch = f"batch-{len(self.batches) + 1}"
        self.batches[batch] = list(keys)
        self.names[file] = batch
        if self.unanswered:
            self.unanswered -= 1
            raise TransientError("the connection dropped", model=MODEL)
        self._held.take(file, model=MODEL)
        return batch

    async def upload(self, items: Sequence[tuple[str, ModelRequest]]) -> str:
        return self._held.hold([k for k, _ in items], [k for k, _ in items])

    async def find(self, file: str) -> str | None:
        self.finds += 1
        await anyio.sleep(0.01)  # the other requests of the batch come meanwhile
        if self.find_fails:
            self.find_fails -= 1
            raise TransientError("the list of batches is unavailable", model=MODEL)
        return self.names.get(file) if self.finds_created else None

    async def poll(self, batch: str) -> Ended | None:
        return Ended({k: ModelResponse(message=Message(role="assistant", content=f"{batch}:{k}"))
                      for k in self.batches[batch]})  # fmt: skip


def _request(key: str) -> ModelRequest:
    return ModelRequest(model=MODEL, messages=(Message(role="user", content=key),))


async def _ask(queue: BatchQueue, keys: list[str]) -> dict[str, str | ProviderError]:
    answers: dict[str, str | ProviderError] = {}

    async def one(key: str) -> None:
        try:
            answers[key] = str((await queue.generate(key, _request(key))).message.content)
        except ProviderError as exc:
            answers[key] = exc

    async with anyio.create_task_group() as tg:
        for key in keys:
            tg.start_soon(one, key)
    return answers


def _queue(backend: HeldBackend, journal: BatchJournal, attempts: int = 1) -> BatchQueue:
    settings = BatchSettings(size=10, wait_s=0.01, poll_s=0.01)
    retry = RetryPolicy(max_attempts=attempts, initial_wait=0.0, max_wait=0.0)
    return BatchQueue(backend, settings, journal, MODEL, keep=lambda k, r: None, retry=retry)


KEYS = ["k1", "k2", "k3"]
FILE = HeldRequests[str]().hold(KEYS, KEYS)  # the name an earlier session held these keys under


def _journalled_before_create(folder: Path) -> None:
    """An earlier session journalled the batch of ``KEYS`` and was killed during its create call."""
    earlier = BatchJournal(folder)
    earlier.uploaded(MODEL, FILE, KEYS)
    earlier.close()


def test_a_batch_found_at_the_provider_is_polled_and_nothing_is_sent_again(tmp_path: Path) -> None:
    _journalled_before_create(tmp_path)
    backend = HeldBackend({FILE: "batch-0"})
    backend.batches["batch-0"] = list(KEYS)  # the provider did create it
    queue = _queue(backend, BatchJournal(tmp_path))
    answers = anyio.run(_ask, queue, KEYS)
    assert answers == {k: f"batch-0:{k}" for k in KEYS}
    assert backend.finds == 1  # one look-up for the three requests of the batch
    assert list(backend.batches) == ["batch-0"]  # no batch created
    assert (queue.resumed, queue.resent) == (["batch-0"], 0)
    assert BatchJournal(tmp_path).pending(MODEL, "k1") is None  # done


@pytest.mark.parametrize("finds_created", [True, False])
def test_a_batch_not_found_is_dropped_and_its_requests_sent_again(tmp_path: Path, finds_created: bool) -> None:
    _journalled_before_create(tmp_path)
    backend = HeldBackend(finds_created=finds_created)
    queue = _queue(backend, BatchJournal(tmp_path))
    answers = anyio.run(_ask, queue, KEYS)
    assert answers == {k: f"batch-1:{k}" for k in KEYS}
    assert backend.finds == 1
    assert sorted(backend.batches["batch-1"]) == KEYS
    # counted as maybe paid twice only where the provider could not say it has no such batch
    assert queue.resent == (0 if finds_created else 3)
    lines = (tmp_path / "batches.jsonl").read_text()
    assert '"step":"dropped"' in lines
    assert BatchJournal(tmp_path).pending(MODEL, "k2") is None


def test_a_failed_look_up_fails_the_requests_and_keeps_the_entry(tmp_path: Path) -> None:
    _journalled_before_create(tmp_path)
    backend = HeldBackend({FILE: "batch-0"}, find_fails=1)
    backend.batches["batch-0"] = list(KEYS)
    queue = _queue(backend, BatchJournal(tmp_path))
    answers = anyio.run(_ask, queue, KEYS)
    assert all(isinstance(a, TransientError) for a in answers.values())
    assert backend.finds == 1
    assert list(backend.batches) == ["batch-0"]  # nothing sent: the batch may exist
    pending = BatchJournal(tmp_path).pending(MODEL, "k3")
    assert pending is not None
    assert pending.batch is None
    # a later request looks again (the failure is not kept), finds the batch, and it answers every request
    assert anyio.run(_ask, queue, KEYS) == {k: f"batch-0:{k}" for k in KEYS}
    assert backend.finds == 2


def test_a_stopped_look_up_fails_the_requests_waiting_on_it(tmp_path: Path) -> None:
    _journalled_before_create(tmp_path)
    backend = HeldBackend({FILE: "batch-0"})
    queue = _queue(backend, BatchJournal(tmp_path))
    answers: dict[str, object] = {}

    async def stopped() -> None:
        with anyio.move_on_after(0.002):  # the first request looks (10 ms), and is stopped meanwhile
            answers[KEYS[0]] = await queue.generate(KEYS[0], _request(KEYS[0]))

    async def waiting(key: str) -> None:
        try:
            answers[key] = await queue.generate(key, _request(key))
        except ProviderError as exc:
            answers[key] = exc

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(stopped)
            for key in KEYS[1:]:
                tg.start_soon(waiting, key)

    anyio.run(main)
    assert backend.finds == 1
    assert KEYS[0] not in answers
    assert all(isinstance(answers[k], TransientError) and "stopped" in str(answers[k]) for k in KEYS[1:])


def test_a_create_call_without_an_answer_is_retried_only_after_a_look_up(tmp_path: Path) -> None:
    # the provider can be asked: the batch the first attempt created is found, none created twice
    backend = HeldBackend(unanswered=1)
    queue = _queue(backend, BatchJournal(tmp_path), attempts=3)
    assert anyio.run(_ask, queue, ["k1"]) == {"k1": "batch-1:k1"}
    assert list(backend.batches) == ["batch-1"]
    assert (backend.finds, queue.resent) == (1, 0)
    assert (queue.created, queue.resumed) == (["batch-1"], [])  # this session's batch, sent by it
    # it cannot be: created again, and counted as maybe paid twice
    blind = HeldBackend(unanswered=1, finds_created=False)
    (tmp_path / "blind").mkdir()
    queue = _queue(blind, BatchJournal(tmp_path / "blind"), attempts=3)
    assert anyio.run(_ask, queue, ["k1"]) == {"k1": "batch-2:k1"}
    assert list(blind.batches) == ["batch-1", "batch-2"]
    assert queue.resent == 1


def test_a_journal_line_cut_short_does_not_swallow_the_next_one(tmp_path: Path) -> None:
    journal = BatchJournal(tmp_path)
    journal.uploaded(MODEL, "f1", ["k1"])
    journal.close()
    with (tmp_path / "batches.jsonl").open("ab") as f:
        f.write(b'{"step":"created","file":"f1","ba')  # a kill in the middle of a line
    again = BatchJournal(tmp_path)
    again.created("f1", "b1")
    again.close()
    pending = BatchJournal(tmp_path).pending(MODEL, "k1")
    assert pending is not None
    assert pending.batch == "b1"


@pytest.mark.parametrize(
    "failure",
    [None, TransientError("timed out", model=MODEL), TransientError("bad gateway", model=MODEL, status=502),
     TransientError("internal", model=MODEL, status=500), BadRequestError("not found", model=MODEL, status=499),
     BadRequestError("too large", model=MODEL, status=400), RateLimitError("slow down", model=MODEL, status=429)],
)  # fmt: skip
def test_a_batch_is_journalled_before_its_create_call(tmp_path: Path, failure: ProviderError | None) -> None:
    backend = HeldBackend()
    journal = BatchJournal(tmp_path)
    queue = _queue(backend, journal)

    async def create(file: str) -> str:
        # the journal already names the batch's requests when the provider is asked to create it
        assert journal.pending(MODEL, "k1") is not None
        if failure is not None:
            raise failure
        return await HeldBackend.create(backend, file)

    backend.create = create  # type: ignore[method-assign]
    answers = anyio.run(_ask, queue, ["k1"])
    assert answers["k1"] is failure if failure else answers["k1"] == "batch-1:k1"
    # A create call that failed without the provider's refusal (no answer, a 5xx) may have created the batch all
    # the same: the entry stays for a later look-up. A refusal (4xx) created nothing: the entry is dropped.
    unsure = failure is not None and (failure.status is None or failure.status >= 500)
    assert (BatchJournal(tmp_path).pending(MODEL, "k1") is not None) == unsure


def test_a_fresh_upload_is_created_without_a_look_up(tmp_path: Path) -> None:
    # (a provider that keeps the input, as OpenAI's files: only an earlier session's upload may have a batch)
    backend = HeldBackend()
    backend.stores_input = True
    queue = _queue(backend, BatchJournal(tmp_path))
    assert anyio.run(_ask, queue, KEYS) == {k: f"batch-1:{k}" for k in KEYS}
    assert backend.finds == 0


def test_two_callers_of_one_request_both_fail_when_its_look_up_fails(tmp_path: Path) -> None:
    _journalled_before_create(tmp_path)
    backend = HeldBackend(find_fails=1)
    queue = _queue(backend, BatchJournal(tmp_path))
    failed: list[BaseException] = []

    async def one() -> None:
        try:
            await queue.generate("k1", _request("k1"))
        except ProviderError as exc:
            failed.append(exc)

    async def main() -> None:
        with anyio.fail_after(5):  # (a caller left waiting would hang here)
            async with anyio.create_task_group() as tg:
                tg.start_soon(one)
                tg.start_soon(one)

    anyio.run(main)
    assert len(failed) == 2
    assert all(isinstance(e, TransientError) for e in failed)
