"""A run folder in an object store (delta_eval.store.remote), against a real S3 protocol on 127.0.0.1 (moto's
server) through pyarrow's S3 filesystem: the same results as a local run, read back from a fresh working copy,
a batch visible only once whole, a killed run resumed on another working copy without asking again what it had
uploaded."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import delta_eval as de
from delta_eval.analysis.report import render_report
from delta_eval.cli import main as cli_main
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.exceptions import ConfigError, RunFolderError, RunFolderWarning
from delta_eval.executors import shard as shard_module
from delta_eval.executors.live import ShardWatch, publish
from delta_eval.progress import RunProgress
from delta_eval.schema import ErrorRecord
from delta_eval.store import remote as remote_module
from delta_eval.store.cache import SQLiteCache
from delta_eval.store.folder import RunFolder
from delta_eval.store.remote import RemoteFolder
from delta_eval.store.shard_copy import shard_copies, shard_copy
from delta_eval.uris import WORK_DIR_ENV, working_copy
from tests.apart import Apart
from tests.killing import kill_when
from tests.object_store import S3, mirrored


def _config(out: str | Path, **update: Any) -> de.RunConfig:
    return demo_config(out, n=12, latency_ms=0.0).model_copy(update={"flush_every": 4, **update})


def _verdicts(run: str | Path) -> list[tuple[Any, ...]]:
    rows = de.open_result(run).table("verdicts").select(["pair_id", "outcome", "stage", "preference"]).to_pylist()
    return sorted(tuple(r.values()) for r in rows)


def _replays(run: str | Path) -> list[tuple[Any, ...]]:
    columns = ["pair_id", "side", "final_text", "input_tokens", "output_tokens"]
    rows = de.open_result(run).table("replays").select(columns).to_pylist()
    return sorted(tuple(r.values()) for r in rows)


def _keys(cache: Path) -> set[str]:
    con = sqlite3.connect(cache)
    try:
        return {row[0] for row in con.execute("SELECT key FROM responses")}
    finally:
        con.close()


class Wrapped:
    """The store as a test's subclass changes it: the methods it overrides, and the store's own for the rest."""

    def __init__(self, fs: pafs.FileSystem) -> None:
        self.fs = fs

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fs, name)


def _uploaded_keys(s3: S3, name: str) -> set[str]:
    keys: set[str] = set()
    for rel in s3.files(name):
        if rel.startswith("_cache/"):
            with s3.fs.open_input_file(f"runs/{name}/{rel}") as f:
                keys |= set(pq.read_table(f, columns=["key"]).column("key").to_pylist())
    return keys


def test_a_run_to_s3_equals_a_local_run_and_reads_back_on_a_fresh_working_copy(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    de.run(_config(tmp_path / "local"), conversations=demo_conversations(), progress=False)
    uri = s3.uri("a")
    result = de.run(_config(uri), conversations=demo_conversations(), progress=False)
    assert result.status == "completed"
    assert result.path == working_copy(uri)
    files = s3.files("a")
    records = sorted(rel for rel in files if rel.startswith("_commits/"))
    assert len(records) > 2
    assert {".delta_eval", "manifest.json"} <= set(files)
    assert any(rel.startswith("verdicts/part-") for rel in files)
    assert any(rel.startswith("_cache/") for rel in files)
    # the URI is kept without its query (connection options) in the manifest
    assert result.manifest.config["remote"] == "s3://runs/a"

    # read back on another machine: a working copy of its own, pulled from the remote alone
    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path / "elsewhere"))
    assert not working_copy(uri).exists()
    assert _verdicts(uri) == _verdicts(tmp_path / "local")
    assert _replays(uri) == _replays(tmp_path / "local")
    again = de.open_result(uri)
    assert again.path == working_copy(uri)
    assert again.path.is_relative_to(tmp_path / "elsewhere")
    assert again.status == "completed"
    assert again.damage == []
    assert again.counts.pairs == de.open_result(tmp_path / "local").counts.pairs
    summary, local = de.analyze(uri).summary(), de.analyze(tmp_path / "local").summary()
    assert summary["run"] == str(again.path)
    assert summary["damage"] == []
    # what does not depend on the latencies measured as each run went (a latency gate's line does)
    for key in ("pairs", "funnel", "outcomes", "win_rate", "by_stratum"):
        assert summary[key] == local[key], key
    assert summary["decision"]["outcome"] == local["decision"]["outcome"]

    assert cli_main(["report", uri]) == 0
    assert cli_main(["analyze", uri, "--json"]) == 0
    con = de.open_run(uri)
    assert con.execute("SELECT count(*) FROM verdicts").fetchone() == (again.counts.pairs,)
    con.close()

    # opened again: one listing, and only the marker and manifest read (records unchanged since are not)
    got: list[str] = []
    get = RemoteFolder._get
    monkeypatch.setattr(RemoteFolder, "_get", lambda self, rel: got.append(rel) or get(self, rel))
    assert _verdicts(uri) == _verdicts(tmp_path / "local")
    assert sorted(got) == [".delta_eval", "manifest.json"]
    monkeypatch.setattr(RemoteFolder, "_get", get)

    # resumed from the URI on that fresh copy: nothing left to do, nothing asked again
    rerun = de.run(_config(uri), conversations=demo_conversations(), progress=False)
    session = rerun.manifest.sessions[-1]
    assert session.resumed_pairs == len(_verdicts(tmp_path / "local"))
    assert sum(s.made for s in session.calls.values()) == 0
    assert sorted(rel for rel in s3.files("a") if rel.startswith("_commits/")) == records


def test_a_delete_the_store_refuses_stops_with_the_objects_name_not_a_bare_os_error(s3: S3) -> None:
    """A dropped batch's parts are deleted on the remote after its record is replaced; a store that refuses the
    delete stops the run with a RunFolderError naming the object (a missing object is no error)."""
    uri = s3.uri("d")
    folder, remote = mirrored(uri)
    folder.add("errors", [ErrorRecord(stage="replay", message="x")])
    assert folder.commit() == 1

    class Refusing(Wrapped):
        def delete_file(self, path: str) -> None:
            if path.endswith("errors/part-000001.parquet"):
                raise OSError("AccessDenied")
            self.fs.delete_file(path)

    store = remote.fs
    assert "errors/part-000001.parquet" in s3.files("d")
    remote.fs = Refusing(store)
    refused = r"cannot delete errors/part-000001.parquet from s3://runs/d: .*rerun"
    with pytest.raises(RunFolderError, match=refused):
        remote.batches_dropped([(1, None)])
    remote.fs = store
    remote.batches_dropped([(1, None)])  # the parts of other datasets were never there: nothing to refuse
    assert "errors/part-000001.parquet" not in s3.files("d")


def test_a_batch_is_on_the_remote_only_once_whole(s3: S3, tmp_path: Path) -> None:
    """Its parts are uploaded before its record, and a pull ignores parts no record names."""
    uri = s3.uri("b")
    folder, remote = mirrored(uri)
    puts: list[str] = []
    put, upload = remote._put, remote._upload

    def record_put(rel: str, data: bytes) -> None:
        puts.append(rel)
        put(rel, data)

    def record_upload(rel: str) -> None:
        puts.append(rel)
        upload(rel)

    remote._put, remote._upload = record_put, record_upload  # type: ignore[method-assign]
    folder.add("errors", [ErrorRecord(stage="replay", message="x")])
    assert folder.commit() == 1
    assert puts == ["errors/part-000001.parquet", "_commits/000001.json"]

    # a batch cut short between its parts and its record: invisible, and a pull of a fresh copy leaves it out
    s3.fs.delete_file("runs/b/_commits/000001.json")
    fresh = tmp_path / "fresh"
    RemoteFolder(uri, fresh).pull()
    assert RunFolder(fresh).commits() == []
    assert RunFolder(fresh).read("errors").num_rows == 0


def test_a_second_writer_of_the_same_uri_is_stopped_before_it_replaces_a_batch(s3: S3, tmp_path: Path) -> None:
    uri = s3.uri("two")

    def machine(name: str) -> RunFolder:
        folder = RunFolder(tmp_path / name)
        remote = RemoteFolder(uri, folder.path)
        remote.pull()
        folder.mark()
        remote.sync()
        folder.recover()  # numbers the next batch after those pulled
        folder.mirror = remote
        return folder

    a = machine("a")
    a.add("errors", [ErrorRecord(stage="replay", message="a1")])
    assert a.commit() == 1
    b = machine("b")  # sees batch 1
    a.add("errors", [ErrorRecord(stage="replay", message="a2")])
    assert a.commit() == 2
    b.add("errors", [ErrorRecord(stage="replay", message="b2")])
    with pytest.raises(RunFolderError, match="another process is writing the same run folder"):
        b.commit()
    fresh = tmp_path / "reader"
    RemoteFolder(uri, fresh).pull()
    assert RunFolder(fresh).damage() == []
    assert RunFolder(fresh).read("errors").column("message").to_pylist() == ["a1", "a2"]


def test_answers_a_killed_session_left_unuploaded_go_up_before_another_machines_are_added(
    s3: S3, tmp_path: Path
) -> None:
    uri = s3.uri("cache")

    def copy(name: str) -> tuple[RemoteFolder, Path]:
        local = tmp_path / name
        cache = local / "cache.sqlite"
        SQLiteCache(cache, root=local).close()
        remote = RemoteFolder(uri, local, cache=cache)
        RunFolder(local).mark()
        remote.sync()
        return remote, cache

    def answer(cache: Path, key: str) -> None:
        with sqlite3.connect(cache) as con:
            con.execute("INSERT INTO responses VALUES (?, 'simulated:x', '{}', 0)", (key,))
        con.close()

    a, a_cache = copy("a")
    answer(a_cache, "paid-by-a-and-uploaded")
    a._push_cache()
    answer(a_cache, "paid-by-a-then-killed")  # never uploaded: the session was killed
    b, b_cache = copy("b")
    answer(b_cache, "paid-by-b")
    b._push_cache()

    a.pull()  # the resume on machine a adds b's answers
    assert _keys(a_cache) == {"paid-by-a-and-uploaded", "paid-by-a-then-killed", "paid-by-b"}
    a._push_cache()  # and the next batch uploads what is new: nothing, all is up
    assert _uploaded_keys(s3, "cache") == {"paid-by-a-and-uploaded", "paid-by-a-then-killed", "paid-by-b"}
    assert len(_uploaded_keys(s3, "cache")) == sum(
        pq.read_metadata(s3.fs.open_input_file(f"runs/cache/{rel}")).num_rows
        for rel in s3.files("cache")
        if rel.startswith("_cache/")
    )  # each answer uploaded once


def _copy_with_answers(uri: str, local: Path, keys: list[str]) -> tuple[RemoteFolder, Path]:
    cache = local / "cache.sqlite"
    SQLiteCache(cache, root=local).close()
    remote = RemoteFolder(uri, local, cache=cache)
    RunFolder(local).mark()
    remote.sync()
    with sqlite3.connect(cache) as con:
        con.executemany("INSERT INTO responses VALUES (?, 'simulated:x', '{}', 0)", [(k,) for k in keys])
    con.close()
    return remote, cache


def _each_uploaded_once(s3: S3, name: str) -> dict[str, int]:
    return {k: n for k, n in Counter(s3.cache_keys(name)).items() if n != 1}


def test_a_copy_killed_between_an_upload_and_its_mark_is_not_uploaded_twice_when_swept(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = s3.uri("between")
    killed, cache = _copy_with_answers(uri, tmp_path / "killed", ["paid-1", "paid-2"])
    put = killed._put

    def put_then_die(rel: str, data: bytes) -> None:
        put(rel, data)
        raise KeyboardInterrupt  # killed as the segment landed, before the copy marked it uploaded

    monkeypatch.setattr(killed, "_put", put_then_die)
    with pytest.raises(KeyboardInterrupt):
        killed._push_cache()
    RemoteFolder(uri, tmp_path / "killed", cache=cache).cache_written()  # the sweep of the killed copy
    assert sorted(s3.cache_keys("between")) == ["paid-1", "paid-2"]


def test_a_copy_killed_while_adding_the_remotes_answers_does_not_upload_them_as_its_own(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = s3.uri("adding")
    other, _ = _copy_with_answers(uri, tmp_path / "other", ["paid-elsewhere"])
    other._push_cache()
    killed, cache = _copy_with_answers(uri, tmp_path / "killed", [])
    save = killed._save_state

    def die_at_the_last_mark(state: dict[str, Any]) -> None:
        if "importing" in state or not state.get("imported"):
            save(state)  # the marks before the rows come in
            return
        raise KeyboardInterrupt  # killed with the rows in, before the mark after them

    monkeypatch.setattr(killed, "_save_state", die_at_the_last_mark)
    with pytest.raises(KeyboardInterrupt):
        killed.pull()
    assert _keys(cache) == {"paid-elsewhere"}
    RemoteFolder(uri, tmp_path / "killed", cache=cache).cache_written()  # the sweep
    assert _each_uploaded_once(s3, "adding") == {}


def test_a_working_copy_deleted_and_pulled_again_takes_the_remotes_answers_and_uploads_its_own(
    s3: S3, tmp_path: Path
) -> None:
    """What a working copy uploaded and added is kept beside it: when the copy (its cache) is deleted and that is
    left, a new copy still takes every answer the remote holds, and uploads the answers it gets next."""
    import shutil

    uri = s3.uri("gone")
    local = tmp_path / "copy"
    cache = local / "cache.sqlite"

    def answer(key: str) -> None:
        with sqlite3.connect(cache) as con:
            con.execute("INSERT INTO responses VALUES (?, 'simulated:x', '{}', 0)", (key,))
        con.close()

    def fresh_copy() -> RemoteFolder:
        SQLiteCache(cache, root=local).close()
        remote = RemoteFolder(uri, local, cache=cache)
        RunFolder(local).mark()
        remote.sync()
        return remote

    first = fresh_copy()
    answer("paid-and-uploaded")
    answer("paid-and-uploaded-too")
    first._push_cache()
    shutil.rmtree(local)  # the user clears the working copy; what is kept beside it stays
    second = fresh_copy()
    second.pull()
    assert _keys(cache) == {"paid-and-uploaded", "paid-and-uploaded-too"}
    answer("paid-next")
    second._push_cache()
    assert _uploaded_keys(s3, "gone") == {"paid-and-uploaded", "paid-and-uploaded-too", "paid-next"}


def test_a_damaged_cache_in_the_working_copy_costs_its_answers_not_the_pull(s3: S3, tmp_path: Path) -> None:
    """As in a local run folder: the damaged file is moved aside (said in a warning), and the remote's answers are
    added to the new one."""
    uri = s3.uri("damaged")
    other = tmp_path / "other"
    SQLiteCache(other / "cache.sqlite", root=other).close()
    with sqlite3.connect(other / "cache.sqlite") as con:
        con.execute("INSERT INTO responses VALUES ('paid-elsewhere', 'simulated:x', '{}', 0)")
    con.close()
    elsewhere = RemoteFolder(uri, other, cache=other / "cache.sqlite")
    RunFolder(other).mark()
    elsewhere.sync()
    elsewhere._push_cache()

    local = tmp_path / "copy"
    local.mkdir()
    (local / "cache.sqlite").write_bytes(b"not a database, garbage " * 100)
    with pytest.warns(RunFolderWarning, match="damaged"):
        RemoteFolder(uri, local, cache=local / "cache.sqlite").pull()
    assert _keys(local / "cache.sqlite") == {"paid-elsewhere"}


def test_a_remote_folder_of_other_files_is_refused(s3: S3) -> None:
    with s3.fs.open_output_stream("runs/c/notes.txt") as f:
        f.write(b"someone else's")
    with pytest.raises(RunFolderError, match="not a delta_eval run folder"):
        de.run(_config(s3.uri("c")), conversations=demo_conversations(), progress=False)
    assert s3.files("c") == {"notes.txt": 14}


def test_shards_apart_write_copies_of_their_own_and_give_the_verdicts_of_a_local_run(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No shard writes the session's working copy nor another shard's: the batches meet on the remote, numbered
    without collision, and a number taken but never uploaded gets a dropped record."""
    de.run(_config(tmp_path / "local"), conversations=demo_conversations(), progress=False)
    copies: list[Path] = []
    opened = shard_module.shard_copy

    @contextmanager
    def recorded(uri: str, *, own_cache: bool = True) -> Iterator[RemoteFolder]:
        with opened(uri, own_cache=own_cache) as remote:
            copies.append(remote.local)
            yield remote

    monkeypatch.setattr(shard_module, "shard_copy", recorded)
    uri = s3.uri("apart")
    result = de.run(_config(uri), conversations=demo_conversations(), progress=False, executor=Apart(skip=3))
    assert result.status == "completed"
    assert len(copies) == 2
    assert len(set(copies)) == 2
    assert all(not p.is_relative_to(result.path) for p in copies)
    assert not any(p.exists() for p in copies)  # removed once their answers were up
    # the session's copy holds the shards' batches (pulled) and counts them
    assert _verdicts(result.path) == _verdicts(tmp_path / "local")
    assert result.counts.pairs == de.open_result(tmp_path / "local").counts.pairs
    fresh = tmp_path / "fresh"
    RemoteFolder(uri, fresh).pull()
    assert RunFolder(fresh).damage() == []
    assert _verdicts(fresh) == _verdicts(tmp_path / "local")
    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path / "reader"))  # read like any run, on another machine
    summary, local = de.analyze(uri).summary(), de.analyze(tmp_path / "local").summary()
    for key in ("pairs", "funnel", "outcomes", "win_rate", "by_stratum", "damage"):
        assert summary[key] == local[key], key
    records = {int(rel[9:15]): rel for rel in s3.files("apart") if rel.startswith("_commits/")}
    assert sorted(records) == list(range(1, len(records) + 1))
    assert len(records) > 4
    dropped = json.loads(s3.fs.open_input_stream(f"runs/apart/{records[3]}").read())
    assert "taken by a shard" in dropped["dropped"]
    # every answer uploaded once: the shards' and the session's copies never upload one another's
    rows = [
        key
        for rel in s3.files("apart")
        if rel.startswith("_cache/")
        for key in pq.read_table(s3.fs.open_input_file(f"runs/apart/{rel}"), columns=["key"]).column("key").to_pylist()
    ]
    assert len(rows) == len(set(rows)) == len(_keys(tmp_path / "local" / "cache.sqlite"))
    assert not [rel for rel in s3.files("apart") if rel.startswith("_progress/")]  # the shards' counters: gone


def test_shards_apart_show_their_counters_to_the_session_through_the_remote(s3: S3, tmp_path: Path) -> None:
    uri = s3.uri("live")
    mirrored(uri)
    shard, session = RemoteFolder(uri, tmp_path / "shard"), RemoteFolder(uri, tmp_path / "session")
    shard.pull()
    session.pull()
    done = RunProgress()
    done.replayed, done.written = 7, 3

    async def publish_a_while() -> None:
        with anyio.move_on_after(0.3):
            await publish(shard.local, 3, 1, done, dict, every=0.05, remote=shard)

    anyio.run(publish_a_while)
    assert "_progress/3-1.json" in s3.files("live")
    seen = RunProgress()
    watch = ShardWatch(session.local, 3, seen, dict, session)
    assert watch.poll() == 1
    assert (seen.replayed, seen.written) == (7, 3)
    watch.restore()
    assert not [rel for rel in s3.files("live") if rel.startswith("_progress/")]
    assert not (session.local / "_progress").exists()


_KILLED_ATTEMPT = """
import os, sqlite3, sys
from delta_eval.store.cache import SQLiteCache
from delta_eval.store.shard_copy import shard_copy

with shard_copy(sys.argv[1]) as remote:
    SQLiteCache(remote.local / "cache.sqlite", root=remote.local).close()
    with sqlite3.connect(remote.local / "cache.sqlite") as con:
        con.execute("INSERT INTO responses VALUES ('paid-then-killed', 'simulated:x', '{}', 0)")
    os.kill(os.getpid(), 9)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_the_answers_a_killed_attempt_left_in_its_copy_go_up_with_the_next_attempt_on_its_machine(s3: S3) -> None:
    uri = s3.uri("swept")
    mirrored(uri)
    killed = subprocess.run([sys.executable, "-c", _KILLED_ATTEMPT, uri], capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    [left] = [p for p in shard_copies(uri).iterdir() if p.is_dir()]
    assert "paid-then-killed" not in _uploaded_keys(s3, "swept")
    with shard_copy(uri) as running, shard_copy(uri) as other:
        # the next attempt uploaded what the killed one paid, took it back in its pull, and removed its copy
        assert _keys(running.local / "cache.sqlite") == {"paid-then-killed"}
        assert not left.exists()
        assert running.local.exists()  # an attempt that runs is left alone by another's sweep
    assert _uploaded_keys(s3, "swept") == {"paid-then-killed"}
    assert not other.local.exists()
    assert not running.local.exists()


def test_a_run_to_a_uri_over_processes_gives_the_verdicts_of_a_local_run(s3: S3, tmp_path: Path) -> None:
    de.run(_config(tmp_path / "local"), conversations=demo_conversations(), progress=False)
    uri = s3.uri("e")
    result = de.run(_config(uri), conversations=demo_conversations(), progress=False, executor=de.ProcessExecutor(2))
    assert result.status == "completed"
    fresh = tmp_path / "fresh"
    RemoteFolder(uri, fresh).pull()
    assert _verdicts(fresh) == _verdicts(tmp_path / "local")
    assert RunFolder(fresh).damage() == []


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_run_killed_mid_way_resumes_from_the_uri_on_a_fresh_working_copy(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL after some batches are uploaded; the run resumes on another working copy: every pair once, the
    verdicts of a local run, and no answer the killed run had uploaded is asked again."""
    uri = s3.uri("k")
    # 100 conversations: the run is still asking when its second batch goes up (replays run up to the writer's
    # queue, 256 pairs, ahead of what is committed; a smaller demo has all its answers by then)
    cmd = [sys.executable, "-m", "delta_eval", "demo", "--out", uri, "-n", "100", "--latency-ms", "40",
           "--no-progress"]  # fmt: skip
    env = {**os.environ, WORK_DIR_ENV: str(tmp_path / "killed")}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    # the population batch and at least two batches of pairs uploaded
    kill_when(proc, lambda: sum(r.startswith("_commits/") for r in s3.files("k")) >= 3)
    uploaded = _uploaded_keys(s3, "k")
    assert uploaded

    # the same run, complete, in a local folder: what the resumed one must end as
    config = demo_config(tmp_path / "reference", n=100, latency_ms=40.0)
    de.run(config, conversations=demo_conversations(), progress=False)
    every_answer = _keys(tmp_path / "reference" / "cache.sqlite")
    assert uploaded < every_answer

    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path / "fresh"))
    result = de.run(demo_config(uri, n=100, latency_ms=40.0), conversations=demo_conversations(), progress=False)
    assert result.status == "completed"
    assert result.path.is_relative_to(tmp_path / "fresh")
    con = result.connect()
    total, distinct = con.execute("SELECT count(*), count(DISTINCT pair_id) FROM verdicts").fetchone()
    assert total == distinct == result.counts.pairs_planned
    assert _verdicts(uri) == _verdicts(tmp_path / "reference")
    assert [s.status for s in result.manifest.sessions] == ["killed", "completed"]
    answered = sum(s.answered for s in result.manifest.sessions[-1].calls.values())
    # every answer the resumed run got was one the killed run had not uploaded, each asked once
    assert answered == len(every_answer - uploaded)
    assert _keys(result.path / "cache.sqlite") == every_answer
    assert json.loads((result.path / "manifest.json").read_text())["status"] == "completed"


_APART_RUN = """
import sys
import delta_eval as de
from delta_eval.demo import demo_config, demo_conversations
from tests.apart import Apart

de.run(demo_config(sys.argv[1], n=30, latency_ms=40.0), conversations=demo_conversations(), progress=False,
       executor=Apart())
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_run_of_shards_apart_killed_mid_way_resumes_without_a_gap_and_asks_nothing_uploaded_again(
    s3: S3, tmp_path: Path
) -> None:
    """The session and its shards (each in a copy of its own) killed at once; the rerun on the same machine takes
    over what the killed copies left, drops the numbers taken and never uploaded, and asks again no answer that was
    uploaded."""
    uri = s3.uri("ka")
    root = str(Path(__file__).parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", _APART_RUN, uri], stdout=subprocess.DEVNULL, env=env)
    kill_when(proc, lambda: sum(r.startswith("_commits/") for r in s3.files("ka")) >= 4)
    uploaded = s3.cache_keys("ka")
    assert uploaded

    config = demo_config(tmp_path / "reference", n=30, latency_ms=40.0)
    de.run(config, conversations=demo_conversations(), progress=False)
    result = de.run(
        demo_config(uri, n=30, latency_ms=40.0), conversations=demo_conversations(), progress=False, executor=Apart()
    )
    assert result.status == "completed"
    assert [s.status for s in result.manifest.sessions] == ["killed", "completed"]
    con = result.connect()
    total, distinct = con.execute("SELECT count(*), count(DISTINCT pair_id) FROM verdicts").fetchone()
    assert total == distinct == result.counts.pairs_planned
    assert _verdicts(uri) == _verdicts(tmp_path / "reference")
    fresh = tmp_path / "fresh"
    RemoteFolder(uri, fresh).pull()
    assert RunFolder(fresh).damage() == []
    every = Counter(s3.cache_keys("ka"))
    assert {key: every[key] for key in uploaded if every[key] != 1} == {}
    assert not [p for p in shard_copies(uri).iterdir() if p.is_dir()]  # the killed copies were taken over


def test_a_manifest_the_store_refuses_fails_the_run_and_leaves_its_cache_closed(
    s3: S3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store refuses the manifest from its third upload on (the session's last write too): the run stops
    saying so, and the session still closes its response cache."""
    from delta_eval.store import session as session_module

    opened: list[SQLiteCache] = []

    class Tracked(SQLiteCache):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            opened.append(self)

    class Flaky(Wrapped):
        manifests = 0

        def open_output_stream(self, path: str) -> Any:
            if path.endswith("/manifest.json"):
                self.manifests += 1
                if self.manifests >= 3:
                    raise OSError("the object store went away")
            return self.fs.open_output_stream(path)

    opened_fs = remote_module._filesystem
    monkeypatch.setattr(remote_module, "_filesystem", lambda uri: (Flaky(opened_fs(uri)[0]), opened_fs(uri)[1]))
    monkeypatch.setattr(session_module, "SQLiteCache", Tracked)
    with pytest.raises(BaseException, match=r"cannot upload manifest.json to s3://runs/m|unhandled errors"):
        de.run(_config(s3.uri("m")), conversations=demo_conversations(), progress=False)
    assert opened
    for cache in opened:
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            cache._db.execute("SELECT 1")


def test_an_out_uri_names_its_working_copy_and_leaves_the_fingerprint_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path / "work"))
    uri = "s3://bucket/runs/a?endpoint_override=127.0.0.1:9&scheme=http"
    config = _config(uri)
    assert config.remote == uri
    assert config.out == working_copy(uri)
    assert config.out.parent == tmp_path / "work"
    assert working_copy("s3://bucket/runs/a") == config.out  # the endpoint is not the run
    assert config.fingerprint() == _config(tmp_path / "local").fingerprint()
    assert config.public_dump()["remote"] == "s3://bucket/runs/a"
    local = _config(f"file://{tmp_path}/plain")
    assert (local.out, local.remote) == (tmp_path / "plain", None)
    again = de.RunConfig.model_validate(dict(config))  # what the runner does: the working copy stays
    assert (again.out, again.remote) == (config.out, uri)
    moved = de.RunConfig.model_validate({**dict(config), "out": tmp_path / "here"})  # de.run(config, out=...)
    assert (moved.out, moved.remote) == (tmp_path / "here", None)
    (tmp_path / "run.toml").write_text(
        'out = "s3://bucket/runs/b"\n[baseline]\nmodel = "simulated:a"\n[candidate]\nmodel = "simulated:b"\n'
    )
    loaded = de.load_config(tmp_path / "run.toml")
    assert loaded.remote == "s3://bucket/runs/b"  # not made relative to the file's folder
    with pytest.raises(RunFolderError, match=r"cannot open the run folder foo://x/y: .*filesystem"):
        de.run(_config("foo://x/y"), conversations=demo_conversations(), progress=False)
    assert not (tmp_path / "work").exists()  # nothing written for a URI no filesystem reads


def test_credentials_in_a_uri_reach_no_message_manifest_or_working_copy_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyarrow takes S3 keys in the URI's userinfo (``s3://KEY:SECRET@bucket/...``) and its query: neither is shown,
    kept in the configuration a run folder records, nor makes the same run another working copy."""
    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path / "work"))
    secret = "wJalrXUtnFEMI%2FK7MDENG"
    uri = f"s3://AKIAQWERTYUIOPASDFGH:{secret}@runs/a?endpoint_override=127.0.0.1:9&scheme=http"
    config = _config(uri)
    assert config.public_dump()["remote"] == "s3://runs/a"
    assert config.out == working_copy("s3://runs/a")  # the same run, reached with keys or without
    # a URI pyarrow cannot parse: its error quotes the whole URI
    bad = f"s3://AKIAQWERTYUIOPASDFGH:{secret}@runs/a?endpoint_override=127.0.0.1:9&secret_key=SEKRIT2&x=%zz"
    with pytest.raises(RunFolderError) as raised:
        RemoteFolder(bad, tmp_path / "copy")
    said = str(raised.value)
    assert "cannot open the run folder s3://runs/a" in said
    for leaked in ("AKIAQWERTYUIOPASDFGH", secret, "wJalrXUtnFEMI/K7MDENG", "SEKRIT2"):
        assert leaked not in said


def test_one_remote_folder_spelt_two_ways_has_one_working_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spellings pyarrow reads as the same folder (its GCS schemes, percent-escapes it decodes, a trailing slash)
    share a working copy, so its lock keeps two runs on this machine from writing the folder at once; folders
    pyarrow tells apart do not."""
    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path / "work"))
    assert working_copy("gcs://b/runs/a") == working_copy("gs://b/runs/a/")
    assert working_copy("s3://b/runs%2Fa") == working_copy("s3://b/r%75ns/a") == working_copy("s3://b/runs/a")
    assert len({working_copy(u) for u in ("s3://b/runs/a", "s3://b/runs/b", "s3://b//runs/a", "gs://b/runs/a")}) == 4


def test_a_config_keeps_its_uri_when_the_work_dir_changes_before_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner validates the config again: a working copy made under another ``DELTA_EVAL_WORK_DIR`` (set
    after the config was made, or a config dumped under another home) is still that URI's, not a local ``out``
    the run would write without uploading anything."""
    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path / "first"))
    uri = "s3://bucket/runs/a?endpoint_override=127.0.0.1:9&scheme=http"
    config = _config(uri)
    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path / "second"))
    again = de.RunConfig.model_validate(dict(config))
    assert (again.out, again.remote) == (config.out, uri)


def test_the_cli_shows_an_out_uri_without_its_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What ``delta-eval demo --out URI`` prints (the run folder; on Ctrl-C, the command that resumes) goes to
    terminals and CI logs: the URI's keys are masked there, its other options kept."""
    import delta_eval.api

    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path / "work"))

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(delta_eval.api, "run", interrupted)
    uri = "s3://AKIAQWERTYUIOPASDFGH:SEKRIT1@runs/a?endpoint_override=127.0.0.1:9&secret_key=SEKRIT2&session_token=SEKRIT3"
    assert cli_main(["demo", "--out", uri, "--no-progress"]) == 1
    said = capsys.readouterr().err
    assert "run folder s3://runs/a" in said
    assert "--out 's3://***@runs/a?endpoint_override=127.0.0.1:9&secret_key=***&session_token=***'" in said
    for leaked in ("AKIAQWERTYUIOPASDFGH", "SEKRIT"):
        assert leaked not in said


def test_a_file_uri_with_a_host_is_refused_not_read_as_another_path(tmp_path: Path) -> None:
    """``file://runs/a`` names host ``runs``: it is refused (pyarrow refuses it too), not written to ``/a``."""
    from pydantic import ValidationError

    with pytest.raises((ValidationError, ConfigError), match=r"file:///"):
        _config("file://runs/a")
    with pytest.raises(RunFolderError, match=r"file:///"):
        de.open_result("file://runs/a")
    assert working_copy(f"file://{tmp_path}/a") == tmp_path / "a"


def test_reading_a_uri_that_holds_no_run_says_so(s3: S3) -> None:
    with pytest.raises(RunFolderError, match=r"s3://runs/none holds no delta_eval run"):
        de.open_result(s3.uri("none"))


def test_a_run_deleted_from_the_remote_starts_afresh_answered_from_the_working_copys_cache(s3: S3) -> None:
    uri = s3.uri("f")
    first = de.run(_config(uri), conversations=demo_conversations(), progress=False)
    for rel in s3.files("f"):
        s3.fs.delete_file(f"runs/f/{rel}")
    again = de.run(_config(uri), conversations=demo_conversations(), progress=False)
    assert len(again.manifest.sessions) == 1  # the remote is the run: the copy's old batches are not brought back
    assert again.manifest.sessions[0].resumed_pairs == 0
    assert sum(s.made for s in again.manifest.sessions[0].calls.values()) == 0
    assert _verdicts(uri) == _verdicts(first.path)
    # the remote holds the new run whole again: the working copy's batches, each record's parts, the manifest
    files = s3.files("f")
    records = sorted(rel for rel in files if rel.startswith("_commits/"))
    assert records == sorted(f"_commits/{f.name}" for f in (again.path / "_commits").glob("*.json"))
    assert records
    assert {".delta_eval", "manifest.json"} <= set(files)
    for rel in records:
        for part in json.loads((again.path / rel).read_text())["files"].values():
            assert set(part) <= set(files)


def test_a_batch_committed_here_but_never_uploaded_is_recomputed_from_the_cache(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upload that fails (the network, the store) fails the run, saying so; the rerun takes the batches the
    working copy alone holds out of it and recomputes their pairs from the response cache: nothing asked twice,
    no pair written twice."""
    de.run(_config(tmp_path / "local"), conversations=demo_conversations(), progress=False)
    uri = s3.uri("g")
    seen: list[str] = []

    class Flaky(Wrapped):
        """The store, failing the upload of every commit record from the third on (gone for good)."""

        def open_output_stream(self, path: str) -> Any:
            if "/_commits/" in path:
                seen.append(path.split("/", 2)[2])
                if len(seen) >= 3:
                    raise OSError("the object store went away")
            return self.fs.open_output_stream(path)

    opened = remote_module._filesystem
    monkeypatch.setattr(remote_module, "_filesystem", lambda uri: (Flaky(opened(uri)[0]), opened(uri)[1]))
    with pytest.raises(BaseException, match=r"cannot upload _commits/000003.json to s3://runs/g|unhandled errors"):
        de.run(_config(uri), conversations=demo_conversations(), progress=False)
    manifest = json.loads((working_copy(uri) / "manifest.json").read_text())
    assert manifest["failure"].startswith("cannot upload _commits/000003.json to s3://runs/g")
    assert sorted(rel for rel in s3.files("g") if rel.startswith("_commits/")) == seen[:2]
    assert (working_copy(uri) / "_commits" / "000003.json").is_file()  # committed here, never uploaded
    monkeypatch.setattr(remote_module, "_filesystem", opened)

    answered = _keys(working_copy(uri) / "cache.sqlite")
    every_answer = _keys(tmp_path / "local" / "cache.sqlite")
    assert answered < every_answer

    result = de.run(_config(uri), conversations=demo_conversations(), progress=False)
    assert result.status == "completed"
    # only what the failed run had not been answered is asked, once each
    # (answered, not made: the simulated candidate fails some calls on purpose, and a failed call is made again)
    assert sum(s.answered for s in result.manifest.sessions[-1].calls.values()) == len(every_answer - answered)
    assert _keys(working_copy(uri) / "cache.sqlite") == every_answer
    assert _verdicts(uri) == _verdicts(tmp_path / "local")
    con = result.connect()
    assert con.execute("SELECT count(*) = count(DISTINCT pair_id) FROM verdicts").fetchone() == (True,)


def test_an_aa_run_in_an_object_store_is_a_noise_floor_by_its_uri(
    s3: S3, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = _config(s3.uri("aa"))
    aa = de.run(
        base.model_copy(update={"candidate": base.baseline}), conversations=demo_conversations(), progress=False
    )
    floor = aa.win_rate(over="all")
    keyed = s3.uri("aa").replace("s3://", "s3://testing:testing@")  # pyarrow reads S3 keys in the userinfo

    # configured: the manifest names the URI without its keys, and the report opens it from there
    run = de.run(_config(tmp_path / "run", noise_floor=keyed), conversations=demo_conversations(), progress=False)
    assert run.manifest.noise_floor == s3.uri("aa")
    report = render_report(run)
    assert f"A/A noise floor {floor.estimate:6.1%}" in report
    assert "an A/A run, s3://runs/aa" in report
    assert "testing" not in report

    # given on the command line
    capsys.readouterr()
    assert cli_main(["report", str(tmp_path / "run"), "--noise-floor", keyed]) == 0
    printed = capsys.readouterr().out
    assert f"A/A noise floor {floor.estimate:6.1%}" in printed
    assert "testing" not in printed
