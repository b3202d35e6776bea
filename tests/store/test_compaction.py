"""Compaction of a run folder (delta_eval.store.compaction, RunFolder.compact / rewrite): a completed run's many
small batches merged into a few large files, every row once whatever instant a process is killed at, readers
never seeing a row twice or missing while it happens, and the plan of what to merge."""

from __future__ import annotations

import json
import random
import signal
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import anyio
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import delta_eval as de
from delta_eval import interrupts
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.exceptions import RunFolderChangedError, RunFolderError
from delta_eval.schema import Stratum
from delta_eval.store import compaction
from delta_eval.store.compaction import ROW_GROUP_ROWS, copy_rows, plan
from delta_eval.store.conversation_key import conversation_key, pair_key
from delta_eval.store.folder import RunFolder
from delta_eval.store.manifest import RunManifest
from delta_eval.store.remote import RemoteFolder
from delta_eval.store.tables import SCHEMAS
from delta_eval.uris import WORK_DIR_ENV, shown, working_copy
from tests.apart import Apart
from tests.object_store import S3, mirrored


@pytest.fixture(autouse=True)
def small_folders_merge(monkeypatch: pytest.MonkeyPatch) -> None:
    """The folders here are of 20 batches: merged from 16 (a run's threshold is higher; the de.run tests below
    leave more batches than it)."""
    monkeypatch.setattr(compaction, "MIN_BATCHES", 16)


class Killed(Exception):
    """What a test raises where a process would be killed."""


def manifest() -> RunManifest:
    return RunManifest(status="running", fingerprint={}, config={}, source="s", baseline="b", candidate="c")  # type: ignore[arg-type]


def batches(out: Path, n: int = 20, per: int = 3) -> RunFolder:
    """A folder of a population batch and ``n`` batches of ``per`` pairs: verdicts, replays, an error each."""
    folder = RunFolder(out)
    folder.write_manifest(manifest())
    folder.add("strata", [Stratum(stratum="all", population=n * per, sampled=n * per, weight=1.0)])
    folder.commit(note={"kind": "population"})
    for b in range(n):
        pairs = [f"p{b}-{i}" for i in range(per)]
        folder.add("verdicts", [de.Verdict(pair_id=p, conversation_id=f"c{b}", turn_index=i, stage="judge",
                                           outcome="tie") for i, p in enumerate(pairs)])  # fmt: skip
        folder.add("errors", [de.ErrorRecord(stage="replay", message="m", pair_id=pairs[0])])
        folder.commit()
    return folder


def uploaded_batches(s3: S3, name: str) -> tuple[str, RunFolder]:
    """:func:`batches` in the working copy of a run at ``s3``'s ``name``, uploaded, and each write from then on."""
    uri = s3.uri(name)
    empty, remote = mirrored(uri)
    folder = batches(empty.path)
    remote.sync()
    folder.mirror = remote
    return uri, folder


def rows(folder: RunFolder) -> dict[str, list[dict[str, Any]]]:
    return {name: folder.read(name).to_pylist() for name in ("verdicts", "errors", "strata")}


def parts(out: Path, dataset: str) -> list[str]:
    return sorted(p.name for p in (out / dataset).iterdir())


def test_many_batches_become_one_with_every_row_in_order(tmp_path: Path) -> None:
    folder = batches(tmp_path)
    before = rows(folder)
    merged = folder.compact()
    assert merged == [22]
    assert rows(folder) == before  # same rows, same order
    assert parts(tmp_path, "verdicts") == ["part-000022.parquet"]
    assert parts(tmp_path, "strata") == ["part-000001.parquet"]  # the population batch stays apart
    record = json.loads((tmp_path / "_commits" / "000022.json").read_bytes())
    assert record["replaces"] == list(range(2, 22))
    assert record["rows"] == {"verdicts": 60, "errors": 20}
    assert record["derived"] == {"verdict_tallies": ["verdict_tallies/part-000022.parquet"]}  # counted again
    old = json.loads((tmp_path / "_commits" / "000005.json").read_bytes())
    assert old["files"] == {}
    assert old["replaced_by"] == 22
    assert folder.damage() == []
    con = de.open_run(tmp_path)
    assert con.execute("SELECT count(*), count(DISTINCT pair_id) FROM verdicts").fetchone() == (60, 60)
    con.close()
    # Nothing left to merge: compacting again writes nothing.
    assert folder.compact() == []
    assert parts(tmp_path, "verdicts") == ["part-000022.parquet"]


def test_few_batches_are_left_as_they_are(tmp_path: Path) -> None:
    folder = batches(tmp_path, n=compaction.MIN_BATCHES)
    assert folder.compact() == []
    assert len(parts(tmp_path, "verdicts")) == compaction.MIN_BATCHES


def test_a_damaged_folder_is_not_compacted(tmp_path: Path) -> None:
    folder = batches(tmp_path)
    (tmp_path / "verdicts" / "part-000004.parquet").write_bytes(b"not parquet")
    assert folder.compact() == []
    assert len(parts(tmp_path, "verdicts")) == 20


@pytest.mark.parametrize("empties_before_kill", [0, 1, 7, 19])
def test_a_kill_during_the_rewrite_leaves_every_row_once_and_the_next_session_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, empties_before_kill: int
) -> None:
    folder = batches(tmp_path)
    before = rows(folder)
    real = RunFolder._empty
    done = {"n": 0}

    def empty_then_die(self: RunFolder, batch: int, why: dict[str, Any], named: Any = None) -> None:
        if done["n"] == empties_before_kill:
            raise Killed
        done["n"] += 1
        real(self, batch, why, named)

    monkeypatch.setattr(RunFolder, "_empty", empty_then_die)
    with pytest.raises(Killed):
        folder.compact()
    monkeypatch.setattr(RunFolder, "_empty", real)
    # The merged batch is committed: readers take it and leave the batches it replaces, emptied or not.
    after = RunFolder(tmp_path)
    assert after.damage() == []
    assert sorted(map(str, after.read("verdicts").to_pylist())) == sorted(map(str, before["verdicts"]))
    con = de.open_run(tmp_path)
    assert con.execute("SELECT count(*), count(DISTINCT pair_id) FROM verdicts").fetchone() == (60, 60)
    con.close()
    # The next session's repair empties what is left and deletes the replaced files.
    assert len(after.finish_rewrites()) == 20 - empties_before_kill
    after.recover()
    assert parts(tmp_path, "verdicts") == ["part-000022.parquet"]
    assert sorted(map(str, after.read("verdicts").to_pylist())) == sorted(map(str, before["verdicts"]))


def test_a_kill_before_the_merged_batch_is_committed_leaves_the_old_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = batches(tmp_path)
    before = rows(folder)

    def die(self: RunFolder, staged: Any, note: Any) -> int:
        raise Killed

    monkeypatch.setattr(RunFolder, "_commit_staged", die)
    with pytest.raises(Killed):
        folder.compact()
    monkeypatch.undo()
    assert rows(RunFolder(tmp_path)) == before
    assert not any(p.name.endswith(".tmp") for p in (tmp_path / "verdicts").iterdir())  # removed on the way out


def test_a_reader_whose_listing_predates_the_merged_batch_scans_again(tmp_path: Path) -> None:
    """A reader listing the commit files before the merged batch's record exists, and reading a replaced batch's
    record once emptied, would miss its rows: it scans again, and finds the merged batch."""
    folder = batches(tmp_path)
    expected = len(folder.read("verdicts"))
    merged = folder.compact()[0]
    record = tmp_path / "_commits" / f"{merged:06d}.json"
    hidden = record.read_bytes()
    record.unlink()  # as a listing taken before it was written sees the folder
    reader = RunFolder(tmp_path)
    real = reader._scan_once
    calls = {"n": 0}

    def put_back_after_first(*, last: bool = False) -> Any:
        calls["n"] += 1
        found = real(last=last)
        if calls["n"] == 1:
            record.write_bytes(hidden)
        return found

    reader._scan_once = put_back_after_first  # type: ignore[method-assign]
    assert len(reader.read("verdicts")) == expected
    assert calls["n"] >= 2
    # One that never finds it names the batches whose rows went missing, as damage.
    record.unlink()
    damage = RunFolder(tmp_path).damage()
    assert {d.batch for d in damage} == set(range(2, 22))
    assert all(f"moved to batch {merged}" in d.problem for d in damage)


def test_removing_rows_rewrites_the_rest_and_a_kill_between_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = batches(tmp_path, n=3)

    def die(self: RunFolder, batch: int, why: dict[str, Any], named: Any = None) -> None:
        raise Killed

    monkeypatch.setattr(RunFolder, "_empty", die)
    with pytest.raises(Killed):
        folder.remove_rows(3, "pair_id", {"p1-0"}, "tried again")
    monkeypatch.undo()
    # Killed after the rewritten batch's commit: the old batch's rows are no longer read, the kept ones once.
    pairs = RunFolder(tmp_path).read("verdicts").column("pair_id").to_pylist()
    assert sorted(pairs) == sorted(f"p{b}-{i}" for b in range(3) for i in range(3) if (b, i) != (1, 0))
    errors = RunFolder(tmp_path).read("errors").column("pair_id").to_pylist()
    assert sorted(errors) == ["p0-0", "p2-0"]
    again = RunFolder(tmp_path)
    assert again.finish_rewrites() == [3]
    # Every row of a batch removed: nothing is rewritten, the batch is dropped.
    assert again.remove_rows(2, "pair_id", {"p0-0", "p0-1", "p0-2"}, "tried again") is None
    assert json.loads((tmp_path / "_commits" / "000002.json").read_bytes())["dropped"] == "tried again"


def test_files_of_an_older_version_are_merged_under_the_current_schema(tmp_path: Path) -> None:
    """A batch written before ``conversation_key`` and ``pair_key`` existed: its rows read with the current schema,
    and their keys are filled in from the conversations' and pairs' ids (none for a row of no conversation), as the
    run writes them now."""
    folder = batches(tmp_path)
    part = tmp_path / "verdicts" / "part-000003.parquet"
    old = pq.read_table(part).drop_columns(["conversation_key", "pair_key"])
    ids = old.column("conversation_id").to_pylist()
    ids[1] = ""  # a pair of no conversation: no key
    old = old.set_column(old.schema.get_field_index("conversation_id"), "conversation_id", pa.array(ids))
    pq.write_table(old, part)
    record_path = tmp_path / "_commits" / "000003.json"
    record = json.loads(record_path.read_bytes())
    record["sizes"]["verdicts/part-000003.parquet"] = part.stat().st_size
    record_path.write_text(json.dumps(record))
    folder.compact()
    merged = folder.read("verdicts")
    keys = dict(zip(merged.column("pair_id").to_pylist(), merged.column("conversation_key").to_pylist(), strict=True))
    assert [keys[f"p1-{i}"] for i in range(3)] == [conversation_key("c1"), None, conversation_key("c1")]
    assert keys["p2-0"] == conversation_key("c2")
    assert len(keys) == 60
    pairs = dict(zip(merged.column("pair_id").to_pylist(), merged.column("pair_key").to_pylist(), strict=True))
    assert all(pairs[p] == pair_key(p) for p in pairs)
    assert merged.schema == SCHEMAS["verdicts"]


def test_replays_of_an_older_version_get_their_conversations_and_pairs_keys_when_merged(tmp_path: Path) -> None:
    """Replays written before ``conversation_key`` and ``pair_key`` existed: a merge fills both in from the ids, as
    a run writes them now (the decision groups conversations and pairs the two sides on them)."""
    folder = batches(tmp_path)
    for b in range(3):
        folder.add("replays", [de.Replay(pair_id=f"q{b}" if b else "", conversation_id=f"c{b}", turn_index=0,
                                         side=side, variant="v", model="m", output=de.TurnOutput(),
                                         finish_reason="stop") for side in ("baseline", "candidate")])  # fmt: skip
        batch = folder.commit()
        part = tmp_path / "replays" / f"part-{batch:06d}.parquet"
        if b < 2:  # two batches of an older version's, one of the current
            pq.write_table(pq.read_table(part).drop_columns(["conversation_key", "pair_key"]), part)
            record_path = tmp_path / "_commits" / f"{batch:06d}.json"
            record = json.loads(record_path.read_bytes())
            record["sizes"][f"replays/part-{batch:06d}.parquet"] = part.stat().st_size
            record_path.write_text(json.dumps(record))
    folder.compact()
    merged = folder.read("replays")
    assert merged.schema == SCHEMAS["replays"]
    assert merged.num_rows == 6
    for row in merged.to_pylist():
        assert row["conversation_key"] == conversation_key(row["conversation_id"])
        assert row["pair_key"] == pair_key(row["pair_id"]) is not None  # an empty id has a key too


def test_copy_rows_writes_row_groups_of_duckdbs_size_and_bounds_its_buffer(tmp_path: Path) -> None:
    folder = batches(tmp_path, n=2, per=1)
    source = tmp_path / "verdicts" / "part-000002.parquet"
    big = pa.concat_tables([pq.read_table(source)] * (ROW_GROUP_ROWS + 10))
    pq.write_table(big, tmp_path / "big.parquet")
    dest = tmp_path / "out.parquet"
    assert copy_rows("verdicts", [tmp_path / "big.parquet", source], dest) == ROW_GROUP_ROWS + 11
    meta = pq.ParquetFile(dest).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [ROW_GROUP_ROWS, 11]
    assert copy_rows("verdicts", [source], tmp_path / "none.parquet", lambda _, b: b.slice(0, 0)) == 0
    assert not (tmp_path / "none.parquet").exists()
    del folder


def record(n: int, size: int, note: dict[str, Any] | None = None) -> dict[str, Any]:
    rel = f"verdicts/part-{n:06d}.parquet"
    return {"batch": n, "files": {"verdicts": [rel]}, "sizes": {rel: size}, **(note or {})}


def test_a_batch_merged_before_is_merged_again_only_with_as_much_new() -> None:
    merged = record(1, 100, {"replaces": [0]})
    few = [record(n, 1) for n in range(2, 19)]  # 17 new batches, 17 bytes: the merged batch stays
    assert [[r["batch"] for r in g] for g in plan([merged, *few], target=1_000, at_least=16)] == [list(range(2, 19))]
    many = [record(n, 6) for n in range(2, 19)]  # 102 bytes: at least its size, merged with them
    assert [[r["batch"] for r in g] for g in plan([merged, *many], target=1_000, at_least=16)] == [list(range(1, 19))]
    # Two merged batches the new ones outweigh are not merged with each other alone: every group has a new batch.
    two = [record(1, 250, {"replaces": [0]}), record(2, 250, {"replaces": [0]})]
    new = [record(n, 15) for n in range(3, 40)]
    groups = plan([*two, *new], target=600, at_least=16)
    assert groups
    assert all(any("replaces" not in r for r in g) for g in groups)
    # Merged batches alone never make a folder worth merging.
    assert plan([record(n, 1, {"replaces": [0]}) for n in range(1, 40)], target=1_000, at_least=16) == []


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=400), max_size=60),
    noted=st.sets(st.integers(min_value=0, max_value=59), max_size=5),
    target=st.integers(min_value=10, max_value=1_000),
    at_least=st.integers(min_value=0, max_value=20),
)
def test_the_plan_merges_small_plain_batches_in_order_within_the_target(
    sizes: list[int], noted: set[int], target: int, at_least: int
) -> None:
    records = [record(n + 1, s, {"kind": "population"} if n in noted else None) for n, s in enumerate(sizes)]
    groups = plan(records, target=target, at_least=at_least)
    mergeable = [r for r in records if "kind" not in r and r["sizes"][r["files"]["verdicts"][0]] < target // 2]
    if len(mergeable) <= at_least:
        assert groups == []
        return
    merged = [r for g in groups for r in g]
    assert [r["batch"] for r in merged] == sorted(r["batch"] for r in merged)  # in batch order, each once
    assert all(r in mergeable for r in merged)
    for g in groups:
        assert len(g) > 1
        assert sum(r["sizes"][r["files"]["verdicts"][0]] for r in g) <= target
    # Greedy: a batch left out of every group is one that fit no group (a group of one).
    left = [r for r in mergeable if r not in merged]
    assert len(left) <= len(mergeable) - len(merged)


def test_a_completed_run_is_left_compacted_with_the_verdicts_of_one_that_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = demo_config(tmp_path / "merged", n=24, latency_ms=0.0).model_copy(update={"flush_every": 2})
    merged = de.run(config, conversations=demo_conversations(), progress=False)
    monkeypatch.setattr(RunFolder, "compact", lambda self: [])
    plain = de.run(config.model_copy(update={"out": tmp_path / "plain"}), conversations=demo_conversations(),
                   progress=False)  # fmt: skip
    assert len(parts(tmp_path / "merged", "verdicts")) < 4 < len(parts(tmp_path / "plain", "verdicts"))
    for name in ("verdicts", "replays", "judgements", "conversations", "errors"):
        a = de.open_result(merged.path).table(name).to_pylist()
        b = de.open_result(plain.path).table(name).to_pylist()
        kept = [
            [{k: v for k, v in r.items() if "latency" not in k and not k.endswith("_at")} for r in t] for t in (a, b)
        ]
        clean = [sorted(json.dumps(r, sort_keys=True, default=str) for r in t) for t in kept]
        assert clean[0] == clean[1], name
    assert merged.manifest.counts.pairs == plain.manifest.counts.pairs
    assert merged.manifest.batches > plain.manifest.batches  # the merged batches took new numbers
    # Resumed: nothing to do, nothing merged again.
    again = de.run(config, conversations=demo_conversations(), progress=False)
    assert again.manifest.sessions[-1].resumed_pairs == merged.manifest.counts.pairs
    assert again.manifest.batches == merged.manifest.batches


def test_a_compacted_run_in_an_object_store_reads_back_on_a_fresh_working_copy(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, folder = uploaded_batches(s3, "c")
    before = rows(folder)
    deleted: list[str] = []
    delete = RemoteFolder._delete
    monkeypatch.setattr(RemoteFolder, "_delete", lambda self, rel: deleted.append(rel) or delete(self, rel))
    folder.compact()
    # A request for each part the merged batches' records named (their verdicts, tallies and errors), no other.
    assert sorted(deleted) == sorted(f"{d}/part-{n:06d}.parquet" for n in range(2, 22)
                                     for d in ("verdicts", "verdict_tallies", "errors"))  # fmt: skip
    files = s3.files("c")
    assert sorted(rel for rel in files if rel.startswith("verdicts/")) == ["verdicts/part-000022.parquet"]
    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path / "elsewhere"))
    fresh = RunFolder(working_copy(uri))
    RemoteFolder(uri, fresh.path).pull()
    assert fresh.path != folder.path
    assert rows(fresh) == before


def test_a_merge_on_an_object_store_sends_its_requests_together_each_part_after_its_record(
    s3: S3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replaced batches' requests go out together (two emptied records are written at once: sent one after
    another, the first would wait for the second in vain), the merged batch's record before any of them, and each
    part deleted only once its batch's emptied record is written."""
    _, folder = uploaded_batches(s3, "together")
    before = rows(folder)
    done: list[str] = []  # each request, as it ends
    lock = threading.Lock()
    both = threading.Barrier(2, timeout=20)
    arrived = [0]
    put, delete = RemoteFolder._put, RemoteFolder._delete

    def put_logged(self: RemoteFolder, rel: str, data: bytes) -> None:
        if rel.startswith("_commits/") and rel != "_commits/000022.json":
            with lock:
                arrived[0] += 1
                first_two = arrived[0] <= 2
            if first_two:
                both.wait()  # raises once the wait is over with the other never come
        put(self, rel, data)
        with lock:
            done.append(f"PUT {rel}")

    def delete_logged(self: RemoteFolder, rel: str) -> None:
        delete(self, rel)
        with lock:
            done.append(f"DELETE {rel}")

    monkeypatch.setattr(RemoteFolder, "_put", put_logged)
    monkeypatch.setattr(RemoteFolder, "_delete", delete_logged)
    assert folder.compact() == [22]
    assert not both.broken
    _merged_in_order(done, s3.files("together"))
    assert rows(folder) == before


def _merged_in_order(done: list[str], files: Any) -> None:
    """The merge of :func:`uploaded_batches`' 20 batches into batch 22 as the store saw its requests (``done``,
    ``PUT rel`` / ``DELETE rel`` as each ended) and left its ``files``: every emptied record after the merged one,
    each of the 60 parts of theirs deleted after its own batch's record, only the merged (and population) parts
    left."""
    merged = done.index("PUT _commits/000022.json")
    emptied = {int(r[13:19]): i for i, r in enumerate(done) if r.startswith("PUT _commits/") and i != merged}
    assert sorted(emptied) == list(range(2, 22))
    assert merged < min(emptied.values())
    deletions = [(i, r) for i, r in enumerate(done) if r.startswith("DELETE ")]
    assert len(deletions) == 60  # the verdicts, tallies and errors parts of 20 batches
    assert all(emptied[int(r.split("part-")[1][:6])] < i for i, r in deletions)
    assert sorted(rel for rel in files if rel.endswith(".parquet") and "_cache" not in rel) == [
        "errors/part-000022.parquet", "strata/part-000001.parquet", "verdict_tallies/part-000022.parquet",
        "verdicts/part-000022.parquet",
    ]  # fmt: skip


def test_a_merge_whose_pool_takes_no_work_sends_its_requests_one_at_a_time(
    s3: S3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the interpreter's exit (a caller's loop ended while the session's end merged on its thread) a pool
    refuses new work: the requests then go out one by one, each batch's record before its parts, and the merge
    completes as it would."""
    from concurrent.futures import ThreadPoolExecutor

    _, folder = uploaded_batches(s3, "exiting")
    before = rows(folder)

    def refuse(self: ThreadPoolExecutor, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    done: list[str] = []
    put, delete = RemoteFolder._put, RemoteFolder._delete
    monkeypatch.setattr(RemoteFolder, "_put", lambda self, rel, data: (put(self, rel, data), done.append(f"PUT {rel}")))
    monkeypatch.setattr(RemoteFolder, "_delete", lambda self, rel: (delete(self, rel), done.append(f"DELETE {rel}")))
    monkeypatch.setattr(ThreadPoolExecutor, "submit", refuse)
    assert folder.compact() == [22]
    _merged_in_order(done, s3.files("exiting"))
    assert rows(folder) == before


def test_requests_of_a_merge_that_fail_are_raised_after_the_rest_and_the_next_session_finishes_them(
    s3: S3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two emptied records the store refuses: every other batch is emptied and its parts deleted before the error
    is raised, the refused batches' parts stay (their records name them), and the next session's repair finishes
    the merge on the remote."""
    uri, folder = uploaded_batches(s3, "refused")
    before = rows(folder)
    put = RemoteFolder._put

    def refuse(self: RemoteFolder, rel: str, data: bytes) -> None:
        if rel in ("_commits/000005.json", "_commits/000009.json"):
            raise RunFolderError(f"cannot upload {rel}: refused")
        put(self, rel, data)

    monkeypatch.setattr(RemoteFolder, "_put", refuse)
    with pytest.raises(RunFolderError, match=r"000005\.json: refused") as raised:
        folder.compact()
    assert raised.value.__notes__ == [f"1 other request(s) to {shown(uri)} failed too"]
    monkeypatch.setattr(RemoteFolder, "_put", put)
    verdicts = sorted(rel for rel in s3.files("refused") if rel.startswith("verdicts/"))
    assert verdicts == ["verdicts/part-000005.parquet", "verdicts/part-000009.parquet", "verdicts/part-000022.parquet"]
    # The next session: its pull takes the remote's records, its repair empties them there too.
    remote = RemoteFolder(uri, folder.path)
    remote.pull()
    again = RunFolder(folder.path)
    again.mirror = remote
    assert again.repair() == []
    assert sorted(rel for rel in s3.files("refused") if rel.startswith("verdicts/")) == ["verdicts/part-000022.parquet"]
    record = json.loads(s3.fs.open_input_stream("runs/refused/_commits/000005.json").read())
    assert record["files"] == {}
    assert record["replaced_by"] == 22
    assert rows(again) == before


def test_a_reader_s_working_copy_keeps_no_part_of_batches_merged_since_it_last_read(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, folder = uploaded_batches(s3, "r")
    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path / "reader"))
    con = de.open_run(uri)  # the reader's copy takes the run's 20 batches
    assert con.execute("SELECT count(*) FROM verdicts").fetchone() == (60,)
    con.close()
    reader = working_copy(uri)
    assert len(parts(reader, "verdicts")) == 20
    folder.compact()
    con = de.open_run(uri)
    assert con.execute("SELECT count(*), count(DISTINCT pair_id) FROM verdicts").fetchone() == (60, 60)
    con.close()
    assert parts(reader, "verdicts") == ["part-000022.parquet"]


@pytest.mark.slow
def test_readers_see_every_row_once_while_batches_are_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    monkeypatch.setattr(RunFolder, "compact", lambda self: [])  # many small batches, to rewrite as the test goes
    de.run(demo_config(out, n=24, latency_ms=0.0).model_copy(update={"flush_every": 2}),
           conversations=demo_conversations(), progress=False)  # fmt: skip
    monkeypatch.undo()
    pairs = de.open_result(out).counts.pairs
    stop, rewrites = threading.Event(), [0]

    def churn() -> None:
        rng = random.Random(0)
        folder = RunFolder(out)
        while not stop.is_set():
            live = [c for c in folder.commits() if c.get("files") and "kind" not in c]
            if len(live) > 1:
                folder.rewrite(rng.sample(live, min(len(live), rng.randint(2, 4))), "churn")
                rewrites[0] += 1

    thread = threading.Thread(target=churn, daemon=True)
    problems: list[str] = []
    thread.start()
    deadline = time.monotonic() + 5
    try:
        while time.monotonic() < deadline:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    result = de.open_result(out)
                    assert result.damage == []
                    con = result.connect()
                    seen = con.execute("SELECT count(*), count(DISTINCT pair_id) FROM verdicts").fetchone()
                    replays = con.execute("SELECT count(*) FROM replays").fetchone()
                    con.close()
            except RunFolderChangedError:
                continue
            if seen != (pairs, pairs) or replays != (3 * pairs,):
                problems.append(f"{seen} verdicts, {replays} replays where {pairs} pairs")
    finally:
        stop.set()
        thread.join(timeout=30)
    assert problems == []
    assert rewrites[0] > 5
    assert RunFolder(out).damage() == []


def test_a_run_of_shards_apart_into_an_object_store_is_compacted_once_their_batches_meet(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shards number their batches from outside the session's copy (as on Ray); the session merges them at its
    end and uploads the merged batch: a fresh copy reads the verdicts of a local run, without damage or a gap."""
    config = demo_config(tmp_path / "local", n=24, latency_ms=0.0).model_copy(update={"flush_every": 2})
    local = de.run(config, conversations=demo_conversations(), progress=False)
    uri = s3.uri("shards")
    result = de.run(config.model_copy(update={"out": uri}), conversations=demo_conversations(), progress=False,
                    executor=Apart())  # fmt: skip
    assert result.status == "completed"
    on_remote = [rel for rel in s3.files("shards") if rel.startswith("verdicts/")]
    assert 0 < len(on_remote) < 4
    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path / "reader"))
    fresh = RunFolder(working_copy(uri))
    RemoteFolder(uri, fresh.path).pull()
    assert fresh.damage() == []
    got = sorted(fresh.read("verdicts").select(["pair_id", "outcome", "stage"]).to_pylist(), key=str)
    want = sorted(RunFolder(local.path).read("verdicts").select(["pair_id", "outcome", "stage"]).to_pylist(), key=str)
    assert got == want
    numbers = sorted(int(rel[9:15]) for rel in s3.files("shards") if rel.startswith("_commits/"))
    assert numbers == list(range(1, len(numbers) + 1))


def test_a_pull_whose_listing_predates_the_merged_batch_lists_again(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader lists the remote, the writer then commits its merged batch and empties the old records, and the
    reader's reads of those records come after: it lists again and takes the merged batch."""
    uri, folder = uploaded_batches(s3, "stale")
    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path / "reader"))
    stale = RemoteFolder(uri, working_copy(uri))._listing()  # the reader's listing, before the merged record
    folder.compact()
    real = RemoteFolder._listing
    listings = []

    def listing(self: RemoteFolder) -> dict[str, tuple[int, int | None]]:
        listings.append(1)
        return stale if len(listings) == 1 else real(self)

    monkeypatch.setattr(RemoteFolder, "_listing", listing)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # damage would warn
        con = de.open_run(uri)
    assert con.execute("SELECT count(*), count(DISTINCT pair_id) FROM verdicts").fetchone() == (60, 60)
    con.close()
    assert len(listings) == 2


def test_a_reader_of_a_working_copy_mid_pull_sees_the_old_batches_or_the_merged_one(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, folder = uploaded_batches(s3, "window")
    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path / "reader"))
    de.open_run(uri).close()  # the reader's copy holds the 20 batches
    reader = RunFolder(working_copy(uri))
    folder.compact()
    seen: list[tuple[int, list[int]]] = []
    real = RemoteFolder._download

    def download(self: RemoteFolder, rel: str) -> None:
        real(self, rel)
        seen.append((len(reader.read("verdicts")), [d.batch for d in reader.damage()]))  # another reader, mid-pull

    monkeypatch.setattr(RemoteFolder, "_download", download)
    de.open_run(uri).close()
    assert seen
    assert all(s == (60, []) for s in seen)


class Death(BaseException):
    """What a test raises where a process would die (nothing catches it)."""


def test_a_session_killed_while_it_merges_is_recorded_completed_and_the_next_finishes_the_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = demo_config(tmp_path / "run", n=24, latency_ms=0.0).model_copy(update={"flush_every": 2})
    real = RunFolder._empty
    emptied = {"n": 0}

    def die_midway(self: RunFolder, batch: int, why: dict[str, Any], named: Any = None) -> None:
        if "replaced_by" in why and emptied["n"] == 5:
            raise Death
        emptied["n"] += 1
        real(self, batch, why, named)

    monkeypatch.setattr(RunFolder, "_empty", die_midway)
    with pytest.raises(Death):
        de.run(config, conversations=demo_conversations(), progress=False)
    monkeypatch.undo()
    pairs = _completed_once(config.out).counts.pairs
    again = de.run(config, conversations=demo_conversations(), progress=False)
    assert again.manifest.sessions[-1].resumed_pairs == pairs
    assert len(parts(again.path, "verdicts")) < 4
    assert de.open_result(again.path).table("verdicts").num_rows == pairs


def test_a_merge_that_fails_is_a_note_and_the_run_completes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(self: RunFolder, name: str, *args: Any) -> int:
        raise pa.ArrowInvalid("cannot merge")

    monkeypatch.setattr(compaction, "copy_rows", fail)
    monkeypatch.setattr("delta_eval.store.folder.copy_rows", fail)
    config = demo_config(tmp_path / "run", n=24, latency_ms=0.0).model_copy(update={"flush_every": 2})
    result = de.run(config, conversations=demo_conversations(), progress=False)
    assert result.status == "completed"
    assert any("were not all merged" in n and "ArrowInvalid: cannot merge" in n for n in result.manifest.notes)
    opened = de.open_result(result.path)
    assert opened.damage == []
    assert opened.table("verdicts").num_rows == result.counts.pairs
    assert not any(p.name.endswith(".tmp") for p in (result.path / "verdicts").iterdir())


def test_views_opened_before_a_merge_still_read_under_a_low_open_file_limit(tmp_path: Path) -> None:
    """A reader holds a run's files open so that a merge removing them changes nothing it reads; under a soft
    limit of 64 open files it raises the limit towards the hard one rather than read 41 files by name (which a
    merge then removes under it)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4 * 41 + 64:
        pytest.skip("the hard limit on open files is too low to raise the soft one")
    folder = batches(tmp_path)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    try:
        con = de.open_run(tmp_path)
        assert con.execute("SELECT count(*) FROM verdicts").fetchone() == (60,)
        folder.compact()
        assert con.execute("SELECT count(*), count(DISTINCT pair_id) FROM verdicts").fetchone() == (60, 60)
        con.close()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_merge_at_a_runs_end_leaves_the_awaiting_callers_event_loop_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A completed run merges its batches off the event loop: a task of the loop awaiting the run goes on while the
    merge is under way (the merge waits for it: on the loop's thread it would wait in vain), and the display says
    "saving" meanwhile."""
    merging, ticked = threading.Event(), threading.Event()
    seen: list[tuple[bool, str]] = []
    progress = de.RunProgress()
    real = RunFolder.compact

    def compact_waiting_for_the_loop(self: RunFolder) -> list[int]:
        merging.set()
        seen.append((ticked.wait(timeout=20), progress.phase))
        return real(self)

    monkeypatch.setattr(RunFolder, "compact", compact_waiting_for_the_loop)
    config = demo_config(tmp_path / "run", n=24, latency_ms=0.0).model_copy(update={"flush_every": 2})

    async def tick() -> None:
        await anyio.to_thread.run_sync(merging.wait, abandon_on_cancel=True)
        ticked.set()  # on the loop's thread: only once the loop is free

    async def main() -> de.RunResult:
        async with anyio.create_task_group() as tg:
            tg.start_soon(tick)
            result = await de.arun(config, conversations=demo_conversations(), progress=progress)
            tg.cancel_scope.cancel()
        return result

    try:
        result = anyio.run(main)
    finally:
        merging.set()  # the waiting thread ends, whatever happened
    assert seen == [(True, "saving")]
    assert result.status == "completed"
    assert progress.phase == "completed"
    assert len(parts(result.path, "verdicts")) < 4


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs pthread_kill")
def test_a_ctrl_c_during_the_merge_waits_for_it_and_the_run_is_recorded_completed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while a completed run merges its batches (on a thread of its own): the merge and the manifest are
    finished first, then the Ctrl-C is raised."""
    real = RunFolder.compact

    def compact_with_a_ctrl_c(self: RunFolder) -> list[int]:
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        deadline = time.monotonic() + 20
        while interrupts._state.held is None and time.monotonic() < deadline:
            time.sleep(0.005)  # until the main thread's handler has held it
        return real(self)

    monkeypatch.setattr(RunFolder, "compact", compact_with_a_ctrl_c)
    config = demo_config(tmp_path / "run", n=24, latency_ms=0.0).model_copy(update={"flush_every": 2})
    with pytest.raises(KeyboardInterrupt):
        de.run(config, conversations=demo_conversations(), progress=False)
    monkeypatch.undo()
    _completed_once(config.out)
    assert len(parts(config.out, "verdicts")) < 4


def _completed_once(out: Path) -> de.RunResult:
    """The run at ``out``, stopped while it merged its batches: completed, undamaged, each pair's verdict once."""
    result = de.open_result(out)
    assert result.status == "completed"
    assert result.damage == []
    assert result.table("verdicts").num_rows == result.counts.pairs
    return result
