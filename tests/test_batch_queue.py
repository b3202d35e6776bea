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

    def __init__(self, names: dict[str, str] | None = None, *, find_fails: bool = False) -> None:
        self._held = HeldRequests[str]()
        self.batches: dict[str, list[str]] = {}
        self.names = dict(names or {})
        self.find_fails = find_fails
        self.finds = 0

    async def upload(self, items: Sequence[tuple[str, ModelRequest]]) -> str:
        return self._held.hold([k for k, _ in items], [k for k, _ in items])

    async def create(self, file: str) -> str:
        keys = self._held.take(file, model=MODEL)
        batch = f"batch-{len(self.batches) + 1}"
        self.batches[batch] = keys
        return batch

    async def find(self, file: str) -> str | None:
        self.finds += 1
        await anyio.sleep(0.01)  # the other requests of the batch come meanwhile
        if self.find_fails:
            raise TransientError("the list of batches is unavailable", model=MODEL)
        return self.names.get(file)

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


def _queue(backend: HeldBackend, journal: BatchJournal) -> BatchQueue:
    settings = BatchSettings(size=10, wait_s=0.01, poll_s=0.01)
    return BatchQueue(backend, settings, journal, MODEL, keep=lambda k, r: None, retry=RetryPolicy(max_attempts=1))


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


def test_a_batch_not_found_is_dropped_and_its_requests_sent_again(tmp_path: Path) -> None:
    _journalled_before_create(tmp_path)
    backend = HeldBackend()
    queue = _queue(backend, BatchJournal(tmp_path))
    answers = anyio.run(_ask, queue, KEYS)
    assert answers == {k: f"batch-1:{k}" for k in KEYS}
    assert backend.finds == 1
    assert sorted(backend.batches["batch-1"]) == KEYS
    assert queue.resent == 3
    lines = (tmp_path / "batches.jsonl").read_text()
    assert '"step":"dropped"' in lines
    assert BatchJournal(tmp_path).pending(MODEL, "k2") is None


def test_a_failed_look_up_fails_the_requests_and_keeps_the_entry(tmp_path: Path) -> None:
    _journalled_before_create(tmp_path)
    backend = HeldBackend(find_fails=True)
    queue = _queue(backend, BatchJournal(tmp_path))
    answers = anyio.run(_ask, queue, KEYS)
    assert all(isinstance(a, TransientError) for a in answers.values())
    assert backend.finds == 1
    assert not backend.batches  # nothing sent: the batch may exist
    pending = BatchJournal(tmp_path).pending(MODEL, "k3")
    assert pending is not None
    assert pending.batch is None


@pytest.mark.parametrize(
    "failure",
    [None, TransientError("timed out", model=MODEL), TransientError("bad gateway", model=MODEL, status=502),
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
