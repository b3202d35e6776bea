"""A run folder in an object store (``s3://bucket/prefix``, ``gs://...``, any URI
:func:`pyarrow.fs.FileSystem.from_uri` understands), written and read through a local working copy.

What needs POSIX semantics stays local, in the working copy (a folder named by a hash of the URI, see
:func:`~delta_eval.uris.working_copy`): the writer's lock, the commit lock of a sharded session, the SQLite response
cache, the sent-call journals, the live counters. The run itself is the remote folder, the same layout as a local one::

    URI/.delta_eval  URI/manifest.json  URI/_commits/000001.json  URI/<dataset>/part-000001.parquet ...
    URI/_cache/<hex>.parquet      the response cache's rows, uploaded with each batch (see below)
    URI/_progress/S-K.json        while shards on several machines run: shard K's live counters (see below)

- **A batch is visible only when whole**: its part files are uploaded first, then its commit record (one object
  written whole: an object store shows a reader the whole object or none). A batch dropped on resume has its
  record replaced (by the dropped record) before its parts are deleted, as locally.
- **The remote is the run.** Opening a URI run (to write or to read) brings the working copy to the remote's
  state first (:meth:`RemoteFolder.pull`): committed batches it lacks are downloaded, and batches only the
  working copy holds (committed here, killed before their upload) are taken out of it; their pairs are then
  recomputed, their answers coming from the response cache. So a killed run resumes on any machine with the URI,
  and a fresh working copy is rebuilt from the remote alone. Opening it again reads only the records changed since.
- **Nothing paid twice**: the response cache's rows written since the last upload go up with each batch, before
  its commit record, and a pull adds the uploaded rows to the working copy's cache. A resume on another machine
  asks again only the answers obtained after the last batch uploaded (on the same machine: none).

- **Shards on several machines** (:class:`~delta_eval.executors.RayExecutor`): each attempt at a shard works in
  a working copy of its own on its machine, pulled as it starts, and numbers its batches through the run's
  numbering actor, so no two shards take a number (see :mod:`delta_eval.store.shard_copy`); the session pulls
  their batches into its own copy at the end, where a number a killed attempt took and never uploaded gets a
  dropped record (a reader reading meanwhile sees that number as a missing batch, as it sees a batch still
  uploading). Shards do not see each other's answers while they run: a request two shards make (the same
  conversation twice in the source) is paid by each. Their live counters reach the session through ``_progress/``
  (see :mod:`delta_eval.executors.live`).

Not guaranteed: two runs writing the same URI at once (each holds only its own working copy's lock, so their
batch numbers collide: a batch whose number the remote already holds is refused before anything of it is
uploaded, which stops the second writer in most cases, not all); a response cache configured outside the run
folder (``cache=``) is not uploaded; provider batch jobs (``batch=``), ``pseudonyms.json`` and what readers write
beside a run (analysis caches, ``report.html``, labels) stay in the working copy.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from delta_eval.exceptions import RunFolderError
from delta_eval.store import safe_paths
from delta_eval.store.derived import DERIVED_FROM, derived_parts
from delta_eval.store.folder import FolderLock, RunFolder, batch_parts, moved_to, replaced_batches
from delta_eval.store.layout import COMMITS, MANIFEST, MARKER
from delta_eval.store.live_files import PROGRESS_DIR
from delta_eval.store.tables import DATASETS
from delta_eval.uris import folder_id, hide, is_uri, shown, working_copy

__all__ = [
    "CACHE_DIR",
    "REQUEST_THREADS",
    "RemoteFolder",
    "local_run",
]

#: Requests sent at once when batches are dropped or replaced (:meth:`RemoteFolder.batches_dropped`): each costs a
#: round trip of tens of milliseconds on a real store, and a merge of 1,000 batches sends some 3,000.
REQUEST_THREADS = 16
#: How many times a pull lists the remote folder while a rewrite there makes its listing stale.
_LISTINGS = 5
#: The remote folder of the response cache's uploaded rows.
CACHE_DIR = "_cache"
_RECORD = re.compile(rf"^{COMMITS}/\d{{6}}\.json$")
_PART = re.compile(r"^(?P<dataset>[a-z_]+)/part-\d{6}\.parquet$")
_PROGRESS = re.compile(rf"^{PROGRESS_DIR}/\d+-\d+\.json$")
_SEGMENT = re.compile(rf"^{CACHE_DIR}/[0-9a-f]{{32}}\.parquet$")
_CACHE_SCHEMA = pa.schema(
    [("key", pa.string()), ("model", pa.string()), ("response", pa.string()), ("created", pa.float64())]
)


def local_run(path: str | Path) -> Path:
    """The local folder to read the run at ``path``: a local path as it is; for a URI, its working copy, first
    brought to the remote's state (:meth:`RemoteFolder.pull`) unless a run on this machine is writing it (the
    working copy is then at least as new as the remote)."""
    if not is_uri(path):
        return Path(path)
    uri = str(path)
    try:
        local = working_copy(uri)
    except ValueError as exc:
        raise RunFolderError(str(exc)) from None
    if uri.startswith("file://"):
        return local
    remote = RemoteFolder(uri, local)
    lock = FolderLock(local)
    try:
        lock.acquire(reading=True)  # another reader's pull is waited for
    except RunFolderError:
        return local  # being written here: what the writer committed is in the copy already
    try:
        remote.pull()
        # The parts of batches dropped or merged on the remote since the copy last took them: no record names them
        # now, and a copy read again and again would keep every version of the run otherwise.
        RunFolder(local).recover()
    finally:
        lock.release()
    if not (local / MANIFEST).is_file():
        raise RunFolderError(f"{shown(uri)} holds no delta_eval run (no {MANIFEST})")
    return local


def _submit(pool: ThreadPoolExecutor, fn: Callable[..., None], *args: Any) -> Future[None]:
    """``pool.submit(fn, *args)``, or the call made at once when the pool takes no more work: the interpreter is
    exiting (a caller's event loop ended while the session's end, on a thread of its own, still merged), and the
    requests then go out one at a time, in the same order."""
    try:
        return pool.submit(fn, *args)
    except RuntimeError:
        done: Future[None] = Future()
        try:
            fn(*args)
        except Exception as exc:  # raised with the others' failures, as a pool's would be
            done.set_exception(exc)
        else:
            done.set_result(None)
        return done


class RemoteFolder:
    """The remote side of a URI run folder and its working copy ``local``: :meth:`pull` brings the copy to the
    remote's state; the ``*_written`` / ``batch_*`` methods upload what the copy's :class:`~delta_eval.store.
    folder.RunFolder` just wrote (it calls them); :meth:`sync` makes the remote the copy's state after a resume.

    ``cache``: the response cache file to upload and fill (``None``: it is not mirrored).
    """

    def __init__(self, uri: str, local: Path, *, cache: Path | None = None) -> None:
        self.uri = uri
        self.local = Path(local)
        self.cache = cache
        try:
            self.fs, root = _filesystem(uri)
        except (ValueError, OSError, pa.ArrowException) as exc:
            # pyarrow's message may quote the URI whole, keys and all
            raise RunFolderError(f"cannot open the run folder {shown(uri)}: {hide(str(exc), uri)}") from None
        self.root = root.rstrip("/")
        # What this working copy has uploaded and downloaded of the cache, kept beside it (not inside: a run
        # folder holds only the library's files).
        self._state_path = self.local.with_name(self.local.name + ".remote.json")
        # The cache's upload marks are read, changed and saved by one thread at a time: a batch's upload (the
        # writer's thread) and the manifest's (the estimate's thread) would each upload the same rows otherwise.
        self._cache_lock = threading.RLock()

    @classmethod
    def of_run(cls, uri: str | None, out: Path, cache: Path) -> RemoteFolder | None:
        """The remote of a run writing the working copy ``out`` (``None``: the run folder is local); its response
        cache ``cache`` is mirrored when it is the run folder's own (inside ``out``), not one shared by runs."""
        if uri is None:
            return None
        return cls(uri, out, cache=cache if safe_paths.inside(out, cache) else None)

    # -- paths and objects -----------------------------------------------------------------------------------

    def _said(self, exc: BaseException) -> str:
        """What an error of the store says, without the URI's query or userinfo (connection options, keys)."""
        return hide(str(exc), self.uri)

    def _at(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def _listing(self) -> dict[str, tuple[int, int | None]]:
        """Every file under the remote folder: its path relative to the folder, its size and when it was last
        written (nanoseconds; ``None`` where the store does not say)."""
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.root, recursive=True, allow_not_found=True))
        except OSError as exc:
            raise RunFolderError(f"cannot list the run folder {shown(self.uri)}: {self._said(exc)}") from None
        prefix = self.root + "/"
        return {
            info.path[len(prefix) :]: (int(info.size or 0), info.mtime_ns)
            for info in infos
            if info.type == pafs.FileType.File and info.path.startswith(prefix)
        }

    def _get(self, rel: str) -> bytes:
        try:
            with self.fs.open_input_stream(self._at(rel)) as f:
                data: bytes = f.read()
        except OSError as exc:
            raise self._not_read(rel, exc) from None
        return data

    def _not_read(self, rel: str, exc: OSError) -> RunFolderError:
        return RunFolderError(f"cannot read {rel} from {shown(self.uri)}: {self._said(exc)}; try again")

    def _put(self, rel: str, data: bytes) -> None:
        """Write one object whole (a reader sees it all or not at all)."""
        try:
            with self.fs.open_output_stream(self._at(rel)) as f:
                f.write(data)
        except OSError as exc:
            raise self._not_uploaded(rel, exc) from None

    def _upload(self, rel: str) -> None:
        try:
            with open(self.local / rel, "rb") as src, self.fs.open_output_stream(self._at(rel)) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except OSError as exc:
            raise self._not_uploaded(rel, exc) from None

    def _not_uploaded(self, rel: str, exc: OSError) -> RunFolderError:
        return RunFolderError(
            f"cannot upload {rel} to {shown(self.uri)}: {self._said(exc)}; the run stops, and its rerun recomputes "
            "what was not uploaded (answers come from the response cache of the working copy)"
        )

    def _download(self, rel: str) -> None:
        """Copy a remote file into the working copy: into a temporary file renamed over the old one."""
        dest = safe_paths.check(self.local, self.local / rel)
        safe_paths.mkdir(self.local, dest.parent)
        tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.tmp")
        try:
            with self.fs.open_input_stream(self._at(rel)) as src, open(tmp, "xb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            safe_paths.replace(self.local, tmp, dest)
        except BaseException as exc:
            safe_paths.unlink(self.local, tmp, missing_ok=True)
            if isinstance(exc, OSError):  # the store's read or the working copy's write
                raise RunFolderError(
                    f"cannot download {rel} from {shown(self.uri)} into {self.local}: {self._said(exc)}; try again"
                ) from None
            raise

    def _delete(self, rel: str) -> None:
        try:
            self.fs.delete_file(self._at(rel))
        except FileNotFoundError:  # deleted already (by an earlier attempt)
            pass
        except OSError as exc:
            raise RunFolderError(
                f"cannot delete {rel} from {shown(self.uri)}: {self._said(exc)}; the run stops, and its rerun "
                "deletes it (a part no commit record names is never read meanwhile)"
            ) from None

    # -- remote to working copy ------------------------------------------------------------------------------

    def pull(self) -> None:
        """Bring the working copy to the remote's state: the marker, the committed batches (record last, each
        batch's parts downloaded again whenever its record changed), the manifest, and the cache rows not yet
        added. Committed batches only the working copy holds are taken out of it (the remote is the run: they
        were never uploaded, or the run was since rewritten elsewhere). A remote folder holding files but no
        marker is refused. The caller holds the working copy's lock.

        A commit record is read again only when its object changed since this copy took it (its size or the time
        it was written, as the listing gives them): opening a run again costs one listing and two small reads. A
        record rewritten elsewhere within the store's time resolution (a second on S3) at the same size would be
        missed; the library rewrites a record only when a later session drops or replaces its batch (a record emptied
        when its batch is replaced is smaller than the record it replaces)."""
        self.local.mkdir(parents=True, exist_ok=True)
        for attempt in range(_LISTINGS):
            listing = self._listing()
            if listing and MARKER not in listing:
                raise RunFolderError(
                    f"{shown(self.uri)} holds files and is not a delta_eval run folder; choose an empty or new 'out'"
                )
            records = sorted(rel for rel in listing if _RECORD.match(rel))
            state = self._state()
            seen: dict[str, list[Any]] = state.get("records", {})
            fetched: dict[str, tuple[bytes, bool]] = {}
            for rel in records:
                mine = self.local / rel
                if seen.get(rel) == list(listing[rel]) and listing[rel][1] is not None and mine.is_file():
                    # The object this copy took last time, unchanged (same size, same time written): not read again.
                    fetched[rel] = (mine.read_bytes(), True)
                else:
                    data = self._get(rel)
                    fetched[rel] = (data, mine.is_file() and mine.read_bytes() == data)
            # A record emptied by a rewrite committed after the listing was taken: the listing lacks the batch its
            # rows went to. Listed again, it has it.
            parsed = {rel: _parsed(data) for rel, (data, _) in fetched.items()}
            targets = {n for record in parsed.values() if (n := moved_to(record)) is not None}
            if all(f"{COMMITS}/{n:06d}.json" in listing for n in targets):
                break
            time.sleep(0.05 * (attempt + 1))
        commits = self.local / COMMITS
        if commits.is_dir():
            for f in commits.iterdir():
                if _RECORD.match(f"{COMMITS}/{f.name}") and f"{COMMITS}/{f.name}" not in listing:
                    safe_paths.unlink(self.local, f)
        batches = {rel: int(rel[len(COMMITS) + 1 :][:6]) for rel in fetched}
        replaced = {n for rel, record in parsed.items() for n in replaced_batches(record, batches[rel])}

        def order(rel: str) -> tuple[int, int]:
            # The copy stays readable throughout: a batch that replaces others is in place (its parts first) before
            # the records of those it replaces change, and a record emptied by a rewrite comes last.
            batch = batches[rel]
            return (2 if moved_to(parsed[rel]) is not None else 1 if batch in replaced else 0, batch)

        for rel in sorted(fetched, key=order):
            data, same = fetched[rel]
            if batches[rel] not in replaced:  # a replaced batch's rows are read from its successor
                for part in _parts_named(data):
                    # A changed record's parts are fetched again (a batch rewritten elsewhere keeps its part names).
                    if part in listing and (not same or _size(self.local / part) != listing[part][0]):
                        self._download(part)
            if not same:
                safe_paths.mkdir(self.local, commits)
                safe_paths.write_atomic(self.local, self.local / rel, data)
        state["records"] = {rel: list(listing[rel]) for rel in records}
        self._save_state(state)
        for name in (MARKER, MANIFEST):
            if name in listing:
                safe_paths.write_atomic(self.local, self.local / name, self._get(name))
            elif name == MANIFEST:
                # An empty remote (a new run, or one deleted there) leaves no run in the copy either: the copy's
                # marker stays, so a run started here resets what is left (its cache stays, and answers).
                safe_paths.unlink(self.local, self.local / name, missing_ok=True)
        self._import_cache(sorted(rel for rel in listing if _SEGMENT.match(rel)))

    def _import_cache(self, segments: list[str]) -> None:
        """Add the rows of the cache segments not added before to the working copy's cache."""
        with self._cache_lock:
            self._import_cache_held(segments)

    def _import_cache_held(self, segments: list[str]) -> None:
        if self.cache is None or not segments:
            return
        state = self._cache_state()
        done = set(state.get("imported", []))
        todo = [rel for rel in segments if rel not in done]
        if not todo:
            return
        # This copy's rows not uploaded yet (a session killed here) go first: the rows added below move the mark
        # of what was uploaded past them.
        self._push_cache()
        state = self._cache_state()
        self.cache.parent.mkdir(parents=True, exist_ok=True)
        from delta_eval.store.cache import SQLiteCache

        SQLiteCache(self.cache, root=self.local).close()  # the table, the key-version mark
        # Marked before the rows come in: a copy killed while adding them would otherwise upload them as its own
        # when swept (see _settled).
        state["importing"] = True
        self._save_state(state)
        db = sqlite3.connect(self.cache, timeout=30)
        try:
            for rel in todo:
                rows = pq.read_table(pa.BufferReader(self._get(rel)), schema=_CACHE_SCHEMA).to_pylist()
                with db:
                    db.executemany(
                        "INSERT OR IGNORE INTO responses (key, model, response, created) VALUES (?, ?, ?, ?)",
                        [(r["key"], r["model"], r["response"], r["created"]) for r in rows],
                    )
            # What was just added came from the remote: not uploaded again.
            last = db.execute("SELECT rowid, key FROM responses ORDER BY rowid DESC LIMIT 1").fetchone()
        finally:
            db.close()
        state["imported"] = sorted(set(state.get("imported", [])) | set(todo))
        if last is not None and last[0] >= int(state.get("cache_rowid", 0)):
            state["cache_rowid"], state["cache_key"] = last
        del state["importing"]
        self._save_state(state)

    # -- working copy to remote ------------------------------------------------------------------------------

    def batch_committed(self, batch: int) -> None:
        """Upload a batch the working copy just committed: the cache rows written since the last upload, its part
        files, then its commit record (the batch is then visible, and whole)."""
        rel = f"{COMMITS}/{batch:06d}.json"
        data = (self.local / rel).read_bytes()
        self._refuse_taken(rel, data)
        self._push_cache()
        for part in _parts_named(data):
            self._upload(part)
        self._put(rel, data)

    def _refuse_taken(self, rel: str, data: bytes) -> None:
        """Refuse to upload a batch under a number the remote already has another record for (another process,
        on another machine, writing the same URI): before any of its parts, which would replace that batch's."""
        try:
            # Read at once rather than asked about: on S3 a missing key costs one request this way, two otherwise.
            with self.fs.open_input_stream(self._at(rel)) as f:
                there: bytes | None = f.read()
        except FileNotFoundError:
            there = None
        except OSError as exc:
            raise self._not_read(rel, exc) from None
        if there is not None and there != data:
            raise RunFolderError(
                f"{shown(self.uri)} already has a batch {rel.split('/')[-1][:6]} this run did not write: another "
                "process is writing the same run folder (one writer per URI; nothing of this batch was uploaded)"
            )

    def batches_dropped(self, dropped: Sequence[tuple[int, list[str] | None]]) -> None:
        """Replace the records of dropped (or replaced) batches on the remote, each then followed by the deletion of
        its parts there: those its record named, else (``None``) every dataset's part of its number.

        The requests go out :data:`REQUEST_THREADS` at a time (a merge of 1,000 batches sends some 3,000, each a
        round trip): a batch's parts are deleted only once its emptied record is written (a reader never finds a
        record naming a deleted part), with no order between batches. A request that fails is raised once the
        others have ended; the parts of a batch whose record was not replaced stay, as that record names them."""
        if not dropped:
            return
        failed: list[tuple[int, BaseException]] = []
        pool = ThreadPoolExecutor(max_workers=REQUEST_THREADS, thread_name_prefix="delta-eval-store")
        try:
            records = {_submit(pool, self._put_record, batch): (batch, parts) for batch, parts in dropped}
            deletions: dict[Future[None], int] = {}
            for done in as_completed(records):
                batch, parts = records[done]
                if (exc := done.exception()) is not None:
                    failed.append((batch, exc))
                    continue
                names = parts if parts is not None else batch_parts(batch)
                deletions.update({_submit(pool, self._delete, part): batch for part in names})
            for done in as_completed(deletions):
                if (exc := done.exception()) is not None:
                    failed.append((deletions[done], exc))
        finally:
            # Interrupted: what is under way ends, what is not yet sent is not (a kill leaves as much).
            pool.shutdown(wait=True, cancel_futures=True)
        if failed:
            batch, first = min(failed, key=lambda f: f[0])
            if len(failed) > 1:
                first.add_note(f"{len(failed) - 1} other request(s) to {shown(self.uri)} failed too")
            raise first

    def _put_record(self, batch: int) -> None:
        rel = f"{COMMITS}/{batch:06d}.json"
        self._put(rel, (self.local / rel).read_bytes())

    def manifest_written(self) -> None:
        """Upload the manifest the working copy just wrote, after the cache rows written since the last upload (a
        session ending with answers no batch holds yet, an interrupted one, keeps them)."""
        self._push_cache()
        self._put(MANIFEST, (self.local / MANIFEST).read_bytes())

    def cache_written(self) -> None:
        """Upload the response cache's rows written since the last upload: the answers a writer ending without a
        batch to carry them holds (an interrupted shard, see :mod:`delta_eval.store.shard_copy`)."""
        self._push_cache()

    def sync(self) -> None:
        """Make the remote the working copy's state (after a resume, which may have reset or repaired it):
        records the copy no longer has are deleted first, then parts no record names (left by an upload cut
        short); records the remote lacks are uploaded with their parts; the marker and manifest last."""
        listing = self._listing()
        local_records = {
            f"{COMMITS}/{f.name}": f.read_bytes()
            for f in sorted((self.local / COMMITS).glob("*.json"))
            if _RECORD.match(f"{COMMITS}/{f.name}")
        }
        for rel in listing:
            if _RECORD.match(rel) and rel not in local_records:
                self._delete(rel)
        named = {part for data in local_records.values() for part in _parts_named(data)}
        for rel in listing:
            if _PART.match(rel) and rel not in named:
                self._delete(rel)
        for rel, data in local_records.items():
            if rel not in listing or listing[rel][0] != len(data):
                self._push_cache()
                for part in _parts_named(data):
                    self._upload(part)
                self._put(rel, data)
        for name in (MARKER, MANIFEST):
            if (self.local / name).is_file():
                self._put(name, (self.local / name).read_bytes())
            else:
                self._delete(name)

    # -- the live counters of shards apart (see delta_eval.executors.live) ------------------------------------

    def progress_written(self, path: Path) -> None:
        """Upload the counters file a shard just wrote at ``path`` in the working copy (a display only: an upload
        that fails is left for the next)."""
        with contextlib.suppress(RunFolderError):
            self._upload(path.relative_to(self.local).as_posix())

    def pull_progress(self, session: int) -> None:
        """Download the counters files the shards of session ``session`` uploaded into the working copy."""
        for rel in self._progress_files():
            if rel.startswith(f"{PROGRESS_DIR}/{session}-"):
                with contextlib.suppress(RunFolderError):
                    self._download(rel)

    def remove_progress(self) -> None:
        """Delete the shards' counters files from the remote (a display only: what cannot be deleted stays)."""
        for rel in self._progress_files():
            with contextlib.suppress(RunFolderError):
                self._delete(rel)

    def _progress_files(self) -> list[str]:
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self._at(PROGRESS_DIR), allow_not_found=True))
        except OSError:
            return []
        prefix = self.root + "/"
        return [
            info.path[len(prefix) :]
            for info in infos
            if info.type == pafs.FileType.File and _PROGRESS.match(info.path[len(prefix) :])
        ]

    def _push_cache(self) -> None:
        """Upload the response cache's rows written since the last upload, as one segment."""
        with self._cache_lock:
            self._push_cache_held()

    def _push_cache_held(self) -> None:
        if self.cache is None or not self.cache.is_file():
            return
        state = self._settled(self._cache_state())
        since = int(state.get("cache_rowid", 0))
        db = sqlite3.connect(f"file:{self.cache}?mode=ro", uri=True, timeout=30)
        try:
            rows = db.execute(
                "SELECT rowid, key, model, response, created FROM responses WHERE rowid > ? ORDER BY rowid", (since,)
            ).fetchall()
        except sqlite3.OperationalError:
            raise  # a lock held too long: the run's to report
        except sqlite3.DatabaseError:
            # A damaged cache costs its answers, never the run (as in a local folder): opening it moves it aside.
            return
        finally:
            db.close()
        if not rows:
            return
        table = pa.Table.from_pylist(
            [{"key": k, "model": m, "response": r, "created": c} for _, k, m, r, c in rows], schema=_CACHE_SCHEMA
        )
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        rel = f"{CACHE_DIR}/{uuid.uuid4().hex}.parquet"
        # Marked before it goes up: a copy killed between the upload and the mark after it would otherwise upload
        # the same rows again when swept (see _settled).
        state["pending"] = {"segment": rel, "rowid": rows[-1][0], "key": rows[-1][1]}
        self._save_state(state)
        self._put(rel, sink.getvalue().to_pybytes())
        del state["pending"]
        state["cache_rowid"], state["cache_key"] = rows[-1][0], rows[-1][1]
        state["imported"] = [*state.get("imported", []), rel]  # this copy's own rows: never added back
        self._save_state(state)

    def _settled(self, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` with what a copy killed mid-way left settled: a segment it was uploading that reached the
        remote counts as uploaded (one that did not is uploaded again with the rows after it), and rows it was
        adding from the remote's segments count as uploaded (none of them is the copy's own: its own rows went up
        before the import began, and a killed copy adds none after)."""
        pending, importing = state.pop("pending", None), state.pop("importing", None)
        if pending is None and importing is None:
            return state
        if pending is not None and self._exists(pending["segment"]):
            state["cache_rowid"], state["cache_key"] = pending["rowid"], pending["key"]
            state["imported"] = [*state.get("imported", []), pending["segment"]]
        if importing is not None and self.cache is not None:
            db = sqlite3.connect(f"file:{self.cache}?mode=ro", uri=True, timeout=30)
            try:
                last = db.execute("SELECT rowid, key FROM responses ORDER BY rowid DESC LIMIT 1").fetchone()
            finally:
                db.close()
            if last is not None and last[0] > int(state.get("cache_rowid", 0)):
                state["cache_rowid"], state["cache_key"] = last
        self._save_state(state)
        return state

    def _exists(self, rel: str) -> bool:
        try:
            return bool(self.fs.get_file_info(self._at(rel)).type == pafs.FileType.File)
        except OSError as exc:
            raise self._not_read(rel, exc) from None

    def _state(self) -> dict[str, Any]:
        try:
            state = json.loads(self._state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return state if isinstance(state, dict) and state.get("uri") == folder_id(self.uri) else {}

    def _cache_state(self) -> dict[str, Any]:
        """The state, its marks of the cache (the last row uploaded, the segments added) dropped when they are not
        about the cache file there now: the row they end at is not there under the key it had (the working copy
        was deleted and this file, kept beside it, was not; the cache was moved aside as damaged). Its rows are
        then all uploaded again and every segment added again (each kept once: INSERT OR IGNORE)."""
        state = self._state()
        rowid = int(state.get("cache_rowid", 0))
        if rowid == 0:
            return state
        row = None
        if self.cache is not None and self.cache.is_file():
            db = sqlite3.connect(f"file:{self.cache}?mode=ro", uri=True, timeout=30)
            try:
                row = db.execute("SELECT key FROM responses WHERE rowid = ?", (rowid,)).fetchone()
            except sqlite3.OperationalError:
                raise  # a lock held too long: the run's to report
            except sqlite3.DatabaseError:
                row = None  # a damaged file: not the cache the marks are about
            finally:
                db.close()
        if row is not None and row[0] == state.get("cache_key"):
            return state
        return {k: v for k, v in state.items() if k not in ("cache_rowid", "cache_key", "imported")}

    def _save_state(self, state: dict[str, Any]) -> None:
        state["uri"] = folder_id(self.uri)
        safe_paths.write_atomic(self._state_path.parent, self._state_path, json.dumps(state).encode())


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """pyarrow's filesystem of ``uri`` and the folder's path in it. On S3, an object smaller than an upload part is
    sent in one PUT (``allow_delayed_open``) rather than a multipart upload of three requests, unless the URI says
    otherwise: every commit record, manifest and most parts are that small."""
    found: tuple[pafs.FileSystem, str] | None = None
    if uri.startswith("s3://") and "allow_delayed_open" not in uri:
        with contextlib.suppress(pa.ArrowInvalid):  # a pyarrow without the option: multipart uploads, as atomic
            found = pafs.FileSystem.from_uri(uri + ("&" if "?" in uri else "?") + "allow_delayed_open=true")
    return found if found is not None else pafs.FileSystem.from_uri(uri)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _parsed(record: bytes) -> Any:
    """A commit record's JSON (``None``: not readable; reading the folder then reports it as damage)."""
    try:
        return json.loads(record)
    except ValueError:
        return None


def _parts_named(record: bytes) -> list[str]:
    """The part files a commit record names, each checked to be a part of a dataset (never a path out of the
    folder); an unreadable record names none (reading the folder then reports it as damage)."""
    try:
        data = json.loads(record)
    except ValueError:
        return []
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        return []
    out = []
    for rels in [*files.values(), *(derived_parts(data, name) for name in DERIVED_FROM)]:
        for rel in rels if isinstance(rels, list) else [rels]:
            match = _PART.match(rel) if isinstance(rel, str) else None
            if match is not None and match["dataset"] in DATASETS:
                out.append(rel)
    return out
