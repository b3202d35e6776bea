"""Sharded runs (delta_eval.executors): the same verdicts as a one-process run, batches numbered without clash or
gap when several writers commit into one folder, resuming pays for nothing twice, limits stay within the model's."""

from __future__ import annotations

import functools
import importlib.util
import json
import multiprocessing
import threading
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

import delta_eval as de
from delta_eval.adapters.limits import ModelLimiter, ModelLimits
from delta_eval.adapters.registry import adapter_modules, known_prefixes
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.executors import live
from delta_eval.executors.base import SplitLimiters, deal
from delta_eval.executors.local import SHARD_MODULES, shard_modules
from delta_eval.installed import installed
from delta_eval.progress import RunProgress
from delta_eval.schema import Conversation, Message, ToolCall, Verdict
from delta_eval.store.folder import RunFolder


def _config(out: Path, **update: Any) -> de.RunConfig:
    return demo_config(out, n=12, latency_ms=0.0).model_copy(update={"flush_every": 4, **update})


def _verdicts(out: Path) -> list[tuple[Any, ...]]:
    rows = de.open_result(out).table("verdicts").select(["pair_id", "outcome", "stage", "preference"]).to_pylist()
    return sorted(tuple(r.values()) for r in rows)


def test_a_sharded_run_gives_the_verdicts_of_a_one_process_run(tmp_path: Path) -> None:
    de.run(_config(tmp_path / "one"), conversations=demo_conversations(), progress=False)
    result = de.run(
        _config(tmp_path / "sharded"),
        conversations=demo_conversations(),
        progress=False,
        executor=de.InProcessExecutor(3),
    )
    assert result.status == "completed"
    got = _verdicts(tmp_path / "sharded")
    assert got == _verdicts(tmp_path / "one")
    assert len({row[0] for row in got}) == len(got) > 0
    assert result.counts.pairs == len(got)
    # the shards' calls and progress reach the manifest
    session = result.manifest.sessions[-1]
    assert sum(s.answered for s in session.calls.values()) > 0
    assert session.pairs_decided == len(got)
    assert RunFolder(tmp_path / "sharded").damage() == []


def test_a_sharded_run_shows_its_progress_while_its_shards_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "EVERY_S", 0.02)
    config = demo_config(tmp_path / "run", n=12, latency_ms=40.0).model_copy(
        update={"flush_every": 4, "concurrency": 2}
    )
    tracker = RunProgress()
    seen: list[tuple[int, int]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append((tracker.decided, tracker.calls().answered))
            done.wait(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = de.run(
            config, conversations=demo_conversations(), progress=tracker, progress_every=3600,
            executor=de.InProcessExecutor(2),
        )  # fmt: skip
    finally:
        done.set()
        watcher.join()
    total = result.counts.pairs
    assert total > 4
    # Pairs decided and calls answered grew while the shards ran, not only once they ended.
    assert any(0 < decided < total for decided, _ in seen)
    assert any(answered > 0 for decided, answered in seen if decided < total)
    assert tracker.decided == total  # the reports' exact figures at the end
    assert not (tmp_path / "run" / "_progress").exists()  # the live counters are removed


def test_a_sharded_rerun_recomputes_only_what_is_missing_from_the_cache(tmp_path: Path) -> None:
    out = tmp_path / "run"
    de.run(_config(out), conversations=demo_conversations(), progress=False, executor=de.InProcessExecutor(2))
    before = _verdicts(out)
    folder = RunFolder(out)
    lost = max(int(c["batch"]) for c in folder.commits() if c["rows"].get("verdicts"))
    lost_pairs = folder.read("verdicts").num_rows
    folder.drop(lost, "a worker killed before its last batch was committed")  # what a killed shard loses
    lost_pairs -= folder.read("verdicts").num_rows
    assert lost_pairs > 0

    again = de.run(_config(out), conversations=demo_conversations(), progress=False, executor=de.InProcessExecutor(2))
    assert _verdicts(out) == before
    session = again.manifest.sessions[-1]
    assert session.resumed_pairs == len(before) - lost_pairs
    assert session.pairs_decided == lost_pairs
    assert sum(s.made for s in session.calls.values()) == 0  # every answer came from the response cache
    assert sum(s.cached for s in session.calls.values()) > 0


def test_writers_sharing_a_folder_number_their_batches_without_clash_or_gap(tmp_path: Path) -> None:
    RunFolder(tmp_path).mark()
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        folder = RunFolder(tmp_path, shared=True)
        try:
            for i in range(10):
                row = Verdict(pair_id=f"w{k}#{i}", conversation_id=f"w{k}", turn_index=i, stage="deterministic",
                              outcome="tie")  # fmt: skip
                folder.add("verdicts", [row])
                folder.commit()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    folder = RunFolder(tmp_path)
    assert sorted(int(c["batch"]) for c in folder.commits()) == list(range(1, 41))
    assert folder.damage() == []
    assert folder.read("verdicts").num_rows == 40


def test_conversations_are_dealt_by_their_pairs() -> None:
    sizes = {p: (p % 7) + 1 for p in range(50)}
    shards = deal(sizes, 3)
    assert sorted(p for s in shards for p in s) == list(range(50))
    loads = [sum(sizes[p] for p in s) for s in shards]
    assert max(loads) - min(loads) <= max(sizes.values())
    assert deal(sizes, 3) == shards  # the same cut on every rerun


def test_split_limiters_stay_within_the_model_s_limits() -> None:
    made = [SplitLimiters(3)("m:x", ModelLimits(max_concurrency=8, requests_per_minute=600)) for _ in range(3)]
    assert all(isinstance(m, ModelLimiter) for m in made)
    assert sum(m.max_concurrency for m in made if isinstance(m, ModelLimiter)) <= 8


def test_what_a_sharded_run_does_not_do_is_refused(tmp_path: Path) -> None:
    with pytest.raises(de.ConfigError, match="stop_early"):
        de.run(
            _config(tmp_path / "r", stop_early=True),
            conversations=demo_conversations(),
            progress=False,
            executor=de.InProcessExecutor(2),
        )
    assert not (tmp_path / "r").exists()
    with pytest.raises(de.ConfigError, match="session mode"):
        de.run(
            _config(tmp_path / "s", mode="session"),
            conversations=demo_conversations(),
            progress=False,
            executor=de.InProcessExecutor(2),
        )
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_a_run_over_processes_gives_the_verdicts_of_a_one_process_run(tmp_path: Path) -> None:
    de.run(_config(tmp_path / "one"), conversations=demo_conversations(), progress=False)
    result = de.run(
        _config(tmp_path / "procs"), conversations=demo_conversations(), progress=False, executor=de.ProcessExecutor(2)
    )
    assert result.status == "completed"
    assert _verdicts(tmp_path / "procs") == _verdicts(tmp_path / "one")


@pytest.mark.slow
def test_workers_started_before_the_sample_is_cut_end_with_the_run(tmp_path: Path) -> None:
    """ProcessExecutor starts its workers while the session samples (prepare); a worker that gets no shard (fewer
    conversations than workers), and every worker of a run that ends before its shards ran, ends with the run."""
    executor = de.ProcessExecutor(3)
    two = list(demo_conversations())[:2]
    de.run(_config(tmp_path / "one"), conversations=two, progress=False)
    result = de.run(_config(tmp_path / "procs"), conversations=two, progress=False, executor=executor)
    assert result.status == "completed"
    assert _verdicts(tmp_path / "procs") == _verdicts(tmp_path / "one")
    assert executor._ready == []
    assert multiprocessing.active_children() == []

    executor.prepare()
    executor._started()  # prepare starts them on a thread
    workers = [process for process, _ in executor._ready]
    assert len(workers) == 2  # (the first shard runs in this process)
    assert all(p.is_alive() for p in workers)
    executor.release()
    assert executor._ready == []
    assert not any(p.is_alive() for p in workers)


def test_a_failed_sharded_session_records_the_calls_its_shards_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No shard report comes back from a failed session: its manifest records the calls the shards published
    (each once more as it ends), not none, so that what was paid for is on record."""
    import errno

    real, commits = RunFolder.commit, []

    def commit(self: RunFolder, *args: Any, **kwargs: Any) -> Any:
        commits.append(1)
        if len(commits) > 3:  # a few batches in, the disk is full
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(RunFolder, "commit", commit)
    out = tmp_path / "run"
    with pytest.raises(BaseException):  # noqa: B017, PT011 - the disk-full error, however the run wraps it
        de.run(_config(out), conversations=demo_conversations(), progress=False, executor=de.InProcessExecutor(2))
    monkeypatch.undo()
    session = de.open_result(out).manifest.sessions[-1]
    assert session.status == "failed"
    replayed = de.open_result(out).table("replays").filter(pc.field("side") != "recorded").num_rows
    assert replayed > 0
    assert session.sent >= session.answered >= replayed  # each replay committed was answered (nothing cached)


@pytest.mark.slow
def test_a_shard_that_fails_in_this_process_fails_the_run_as_a_worker_s_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ProcessExecutor runs its first shard here: its failure (a full disk, say) ends the run with
    ShardFailedError saying what went wrong and caused by it, every worker joined; the rerun completes, with the
    verdicts of a one-process run."""
    import errno

    from delta_eval.executors import local

    async def full(shard: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "procs" / "verdicts"))

    monkeypatch.setattr(local, "arun_shard", full)  # (this process's: the worker runs its own)
    with pytest.raises(local.ShardFailedError, match=r"shard 0: the disk is full \(writing .*verdicts\)") as failed:
        de.run(_config(tmp_path / "procs"), conversations=demo_conversations(), progress=False,
               executor=de.ProcessExecutor(2))  # fmt: skip
    assert isinstance(failed.value.__cause__, OSError)
    assert multiprocessing.active_children() == []
    monkeypatch.undo()
    again = de.run(_config(tmp_path / "procs"), conversations=demo_conversations(), progress=False,
                   executor=de.ProcessExecutor(2))  # fmt: skip
    assert again.status == "completed"
    de.run(_config(tmp_path / "one"), conversations=demo_conversations(), progress=False)
    assert _verdicts(tmp_path / "procs") == _verdicts(tmp_path / "one")


def test_workers_preload_the_modules_the_run_declares_not_what_the_session_happened_to_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This process has imported adapters the run does not use: a worker must not import them because of that.
    import delta_eval.adapters.gemini_schema  # noqa: F401 - imported for what it adds to sys.modules

    config = _config(tmp_path / "run")  # simulated models only
    expected = [*SHARD_MODULES, *(["uvloop"] if installed("uvloop") else []), "delta_eval.adapters.simulated"]
    assert shard_modules(config) == expected
    assert shard_modules(None) == expected[:-1]  # no model known: the shard's code and its event loop
    openai = shard_modules(config.model_copy(update={"baseline": de.Variant(model="openai:gpt-4o")}))
    assert "delta_eval.adapters.openai_chat" in openai
    assert ("aiohttp" in openai) == installed("aiohttp")  # the transport the openai SDK's client runs on

    started: list[list[str]] = []

    def start(n: int, modules: list[str]) -> list[Any]:
        started.append(modules)
        return []

    monkeypatch.setattr(de.ProcessExecutor, "_start", staticmethod(start))
    executor = de.ProcessExecutor(2)
    executor.prepare(config)
    executor.release()
    assert started == [expected]


def test_workers_preload_the_user_s_judges_and_registered_adapters_modules(tmp_path: Path) -> None:
    # A judge named "module:factory", a factory, a partial of one, an instance: each one's module; an adapter
    # registered as a partial: its function's module, not functools.
    from delta_eval.adapters.registry import register_adapter, unregister_adapter
    from delta_eval.judges.rules import RulePairwiseJudge

    config = _config(tmp_path / "run")
    judges = de.Judges(
        equivalence=[functools.partial(json.loads), "rule"], judge=["my_judges.strict:make", RulePairwiseJudge()]
    )
    declared = shard_modules(config.model_copy(update={"judges": judges}))
    assert declared[-3:] == ["json", "my_judges.strict", "delta_eval.judges.rules"]
    register_adapter("mine", functools.partial(json.loads))
    try:
        assert adapter_modules("mine:x") == ["json"]
    finally:
        unregister_adapter("mine")


def test_every_built_in_adapter_s_declared_modules_exist() -> None:
    # A misspelt name would only be skipped by the worker (it imports what it can), so it is checked here.
    for prefix in known_prefixes():
        for name in adapter_modules(f"{prefix}:some-model"):
            assert name.startswith("delta_eval.") or installed(name), (prefix, name)
            assert importlib.util.find_spec(name) is not None, (prefix, name)


def _turn_with_tools(k: int, rounds: int) -> list[Message]:
    out = [Message(role="user", content=f"question {k}")]
    for r in range(rounds):
        call = ToolCall(id=f"c{k}-{r}", name="look_up", arguments="{}")
        out += [Message(role="assistant", tool_calls=(call,)), Message(role="tool", tool_call_id=call.id, content="x")]
    return [*out, Message(role="assistant", content=f"answer {k}")]


def test_conversations_are_dealt_to_shards_by_their_recorded_calls_not_their_pairs(tmp_path: Path) -> None:
    """One conversation of one turn with five tool rounds (6 calls a side) and two of two plain turns (2 calls):
    dealt by pairs, one shard would get 8 calls and the other 2; by calls, 6 and 4."""
    long = Conversation(id="long", messages=tuple(_turn_with_tools(0, 5)))
    short = [Conversation(id=f"short{k}", messages=(*_turn_with_tools(1, 0), *_turn_with_tools(2, 0))) for k in (1, 2)]
    cut: list[list[str]] = []

    class Recording(de.Executor):
        def shard_count(self) -> int:
            return 2

        async def run(self, shards: list[Any], limits: dict[str, ModelLimits]) -> list[Any]:
            cut.extend(sorted(conv.id for _, conv in shard.conversations) for shard in shards)
            raise de.ShardFailedError("recorded")

    with pytest.raises(de.ShardFailedError, match="recorded"):
        de.run(_config(tmp_path / "run"), conversations=[long, *short], progress=False, executor=Recording())
    assert sorted(cut) == [["long"], ["short1", "short2"]]


def test_a_reset_removes_live_counters_a_killed_session_left_and_nothing_else(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "run")
    folder.mark()
    counters = tmp_path / "run" / "_progress"
    counters.mkdir()
    (counters / "3-1.json").write_text("{}")
    (counters / ".3-1.json.0123456789abcdef0123456789abcdef.tmp").write_text("{")
    (counters / "notes.txt").write_text("mine")
    removed = folder.reset()
    assert {p.name for p in removed} >= {"3-1.json", ".3-1.json.0123456789abcdef0123456789abcdef.tmp"}
    assert [p.name for p in counters.iterdir()] == ["notes.txt"]


def test_a_failed_shard_reaches_the_caller_as_the_executors_own_error(tmp_path: Path) -> None:
    """What an executor raises (a shard failed in its process or on the cluster) is what ``de.run`` raises, not
    wrapped in a group by the watch on the shards' live counters beside it."""

    class Failing(de.Executor):
        def shard_count(self) -> int:
            return 2

        async def run(self, shards: list[Any], limits: dict[str, ModelLimits]) -> list[Any]:
            raise de.ShardFailedError("shard 1: boom (rerun the same command to resume)")

    with pytest.raises(de.ShardFailedError, match="boom"):
        de.run(_config(tmp_path / "run"), conversations=demo_conversations(), progress=False, executor=Failing())
    assert de.open_result(tmp_path / "run").status == "failed"
