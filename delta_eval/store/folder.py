"""The run folder: Parquet datasets written in atomic batches, and the manifest.

Layout::

    RUN_DIR/
      manifest.json            config, versions, seed, start/end, status, counts (see manifest.py)
      replays/part-000001.parquet
      verdicts/part-000001.parquet
      judgements/ simulator_calls/ errors/ conversations/ strata/
      media/                   the bytes of each distinct media part, once (see media.py)
      _commits/000001.json     the files of batch 1: a batch counts only once its commit file exists; it also
                               carries the run's identity, so a damaged manifest is rebuilt from the commits
      cache.sqlite             the response cache (see cache.py)
      .delta_eval              the marker: this folder is a delta_eval run folder, of this format
      .lock                    held (an OS lock) by the one process writing the folder
      .commit-lock             held while a batch is numbered, when several processes (a run's shards) commit
      _sent/2                  one byte per model call session 2 sent (see sent.py)
      _progress/2-0.json       live counters of shard 0 of session 2, while a sharded session runs (live_files.py)
      .reserve                 space set aside for the manifest's last write on a full disk (see session.py)

Nothing is written or deleted through a symbolic link inside the folder (see :mod:`delta_eval.store.safe_paths`).

Only a folder with the marker (or, from before it existed, a valid delta_eval manifest) is ever written to or
cleaned: a folder of anything else is refused, never deleted from. :meth:`RunFolder.reset` deletes only the files
the library writes.

A batch is written as temporary files renamed into place, then its commit file (also written then renamed). A
process killed at any instant leaves either a committed batch or files no commit names; readers see only
committed files, and resuming deletes the rest. Readers hold the files of one scan open (:meth:`RunFolder.snapshot`),
and a dropped batch's record is rewritten before its files go, so a rerun repairing the folder never shows a
reader half a batch. Every row of a pair (its replays, its verdict, its errors) is in one
batch, so a pair is either wholly in the run or not at all, and resuming never writes it twice.

A batch may replace others (:meth:`RunFolder.rewrite`: the small batches a completed session merges, see
:meth:`RunFolder.compact`, or a batch without the pairs tried again): its record names them (``replaces``), readers
read it and not them from the instant it is committed, and their records are then emptied (``replaced_by``) and
their files deleted. Every row is in the run once at any instant.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import BaseModel, ValidationError

from delta_eval.exceptions import RunFolderChangedError, RunFolderError, RunFolderWarning
from delta_eval.redact import REDACTED, known_secrets, scrub_known
from delta_eval.schema import SampledConversation
from delta_eval.store import safe_paths
from delta_eval.store.compaction import Keep, copy_rows, plan
from delta_eval.store.derived import DERIVED, DERIVED_FROM, complete, derive, derived_parts, write_derived
from delta_eval.store.layout import COMMITS, MANIFEST, MARKER
from delta_eval.store.live_files import PROGRESS_DIR, remove_progress
from delta_eval.store.manifest import FORMAT, RunManifest
from delta_eval.store.media import restore_media, split_media
from delta_eval.store.sent import SENT_DIR, remove_journals
from delta_eval.store.tables import DATASETS, SCHEMAS, TABLES
from delta_eval.store.tallies import TALLIES

__all__ = [
    "COMMIT_LOCK",
    "HEADER_FIELDS",
    "MANIFEST",
    "MARKER",
    "PER_PAIR",
    "REBUILT_NOTE",
    "RESERVE",
    "WRITTEN",
    "Damage",
    "FolderLock",
    "Mirror",
    "RunFolder",
    "Snapshot",
    "batch_parts",
    "damage_message",
    "moved_to",
    "replaced_batches",
    "write_json_atomic",
]

#: The datasets that hold rows of pairs: one candidate's are its pairs' (:meth:`RunFolder.read_candidate`).
PER_PAIR = ("verdicts", "replays", "judgements", "simulator_calls", "errors")


#: How many scans a reader makes of a folder that changes under it before saying so.
_SNAPSHOT_TRIES = 8
_LOCK = ".lock"
#: Seconds a run waits for a reader that holds the run folder's lock while it pulls an object-store copy.
READER_WAIT_S = 300.0
#: Held (an OS lock) while a process numbers and commits a batch of a folder several processes write.
COMMIT_LOCK = ".commit-lock"
#: Space set aside for the manifest's last write, freed when the disk is full (see :class:`~delta_eval.store.
#: session.FolderSession`).
RESERVE = ".reserve"
_PART = re.compile(r"^(part-\d{6}\.parquet|\.part-\d{6}\.[0-9a-f]{32}\.tmp)$")
_COMMIT_FILE = re.compile(r"^(\d{6}\.json|\.\d{6}\.json\.[0-9a-f]{32}\.tmp)$")
_COMMITTED = re.compile(r"^\d{6}\.json$")
_COMMIT_TMP = re.compile(r"^\.\d{6}\.json\.[0-9a-f]{32}\.tmp$")
#: What the library writes or deletes in a run folder, by name: none of them may be a symbolic link.
WRITTEN = (_LOCK, COMMIT_LOCK, MANIFEST, MARKER, RESERVE, COMMITS, SENT_DIR, PROGRESS_DIR, *DATASETS, "analysis",
           "report.html")  # fmt: skip
#: The fields of a manifest that identify its run, kept in every commit record (see :attr:`RunFolder.header`).
HEADER_FIELDS = frozenset(RunManifest.model_fields) - {
    "status", "stopped_early", "failure", "ended_at", "sessions", "batches", "counts", "notes", "estimate"
}  # fmt: skip
#: How the note of a manifest rebuilt from the commit files begins.
REBUILT_NOTE = "manifest rebuilt"
_ROOT_TMP = re.compile(r"^\.(manifest\.json|\.delta_eval)\.[0-9a-f]{32}\.tmp$")


class Mirror(Protocol):
    """Where a run folder's writes are copied as they are made: the remote of a URI run folder (see
    :class:`~delta_eval.store.remote.RemoteFolder`)."""

    def batch_committed(self, batch: int) -> None:
        """A batch was committed (its record is written)."""

    def batches_dropped(self, dropped: Sequence[tuple[int, list[str] | None]]) -> None:
        """Batches were dropped or replaced: for each, its record (naming no file) is written, its parts deleted
        (those its record named, else every dataset's: ``None``)."""

    def manifest_written(self) -> None:
        """The manifest was written."""


@dataclass(frozen=True, order=True)
class Damage:
    """A damaged batch of a run folder: its number and what is wrong with it."""

    batch: int
    problem: str

    def __str__(self) -> str:
        return f"batch {self.batch}: {self.problem}"


def damage_message(path: Path, damage: list[Damage]) -> str:
    """What is damaged in a run folder, and what to do, in a few lines."""
    lines = [f"{path} has {len(damage)} damaged batch{'es' if len(damage) > 1 else ''}, left out of what is read:"]
    lines += [f"  {d}" for d in damage]
    lines.append("  rerun the run's command to drop and recompute them (answers come from the response cache)")
    return "\n".join(lines)


def _whole_parquet(path: Path, size: int) -> bool:
    """Whether a file ends as a Parquet file does (a truncated one does not)."""
    if size < 12:
        return False
    with open(path, "rb") as f:
        f.seek(-4, os.SEEK_END)
        return f.read(4) == b"PAR1"


def replaced_batches(record: Any, batch: int) -> list[int]:
    """The batches commit record ``record`` of batch ``batch`` says it replaces (:meth:`RunFolder.rewrite`): numbers
    below its own; anything else is ignored."""
    named = record.get("replaces") if isinstance(record, dict) else None
    if not isinstance(named, list):
        return []
    return [n for n in named if isinstance(n, int) and not isinstance(n, bool) and 0 < n < batch]


def batch_parts(batch: int, datasets: Sequence[str] = DATASETS) -> list[str]:
    """Every dataset's (of ``datasets``) part file of batch ``batch``, relative to the run folder: what a batch
    whose record names no file may have left (the folder's and the mirror's deletions of a dropped batch)."""
    return [f"{name}/part-{batch:06d}.parquet" for name in datasets]


def moved_to(record: Any) -> int | None:
    """The batch an emptied commit record says its rows went to (``replaced_by``), if it says one."""
    by = record.get("replaced_by") if isinstance(record, dict) else None
    return by if isinstance(by, int) and not isinstance(by, bool) else None


def _sync(path: Path) -> None:
    """Flush a file's or a folder's contents to the disk (a folder: the names in it; where the OS cannot open a
    folder, as Windows, its own file system orders the renames)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except (PermissionError, IsADirectoryError):
        if path.is_dir():
            return
        raise
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, data: Any, *, root: Path | None = None) -> None:
    """Write JSON to ``path`` so that a reader sees the old file or the new one, never half of one; never through a
    symbolic link inside ``root`` (the run folder; default: the file's own folder); without any credential the
    process knows (:func:`~delta_eval.redact.register_secrets`)."""
    text = json.dumps(scrub_known(data), indent=2, ensure_ascii=False, default=str)
    safe_paths.write_atomic(path.parent if root is None else root, path, text.encode("utf-8"))


def _open_files_budget(wanted: int = 0) -> int:
    """How many files a reader holds open at most: a quarter of the process's allowance, which is first raised
    towards its hard limit when ``wanted`` files need more (a soft limit of 1,024 is the common default, where the
    hard one is far higher): files held stay readable when a rerun or a session's merge removes them, files read
    by name do not. The raised limit is the process's from then on (and its children's); a process past the hard
    limit reads the rest by name."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, ValueError, OSError):
        return 128
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    if wanted > soft // 4 and (hard == resource.RLIM_INFINITY or hard > soft):
        raised = 4 * wanted + 64 if hard == resource.RLIM_INFINITY else min(hard, 4 * wanted + 64)
        # macOS refuses a soft limit past OPEN_MAX (10,240) whatever the hard one says: that, then.
        for limit in (raised, min(raised, 10_240)):
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
            except (ValueError, OSError):
                continue
            soft = limit
            break
    return max(16, soft // 4)


def _named(record: dict[str, Any], name: str) -> list[str]:
    """The part files of dataset ``name`` a commit record names (a derived one's: see :func:`derived_parts`)."""
    return derived_parts(record, name) if name in DERIVED_FROM else record["files"].get(name, [])


def _read_part(path: Path, fd: int, columns: list[str] | None, schema: pa.Schema,
               dictionary: list[str] | None = None) -> pa.Table:  # fmt: skip
    """A part file's rows: from its open descriptor when it is held, else by its name (``dictionary``: text
    columns read dictionary-encoded, as Parquet stores them)."""
    if dictionary is not None:  # an explicit schema would decode them
        schema = pa.schema([pa.field(f.name, pa.dictionary(pa.int32(), f.type)) if f.name in dictionary else f
                            for f in schema])  # fmt: skip
    if fd < 0:
        return pq.read_table(path, columns=columns, schema=schema, read_dictionary=dictionary)
    with os.fdopen(os.dup(fd), "rb") as f:
        return pq.read_table(f, columns=columns, schema=schema, read_dictionary=dictionary)


@dataclass
class Snapshot:
    """The committed files of a run folder as of one scan (:meth:`RunFolder.snapshot`), held open by their OS
    file descriptors until :meth:`close`: what they hold stays readable whatever a rerun removes meanwhile."""

    commits: list[dict[str, Any]]
    damage: list[Damage]
    #: Per dataset, each part's path and open file descriptor.
    files: dict[str, list[tuple[Path, int]]]

    def close(self) -> None:
        """Close every file (what a rerun removed meanwhile is then gone)."""
        for held in self.files.values():
            for _, fd in held:
                if fd >= 0:
                    os.close(fd)
            held.clear()

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _scrubbed_array(arr: Any) -> Any:
    """An Arrow array with every registered credential replaced in its text, however deeply nested."""
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        for secret in known_secrets():
            arr = pc.replace_substring(arr, pattern=secret, replacement=REDACTED)
        return arr
    if pa.types.is_struct(t):
        children = [_scrubbed_array(arr.field(i)) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=arr.is_null())
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        values = _scrubbed_array(arr.values)
        return type(arr).from_arrays(arr.offsets, values, mask=arr.is_null() if arr.null_count else None)
    return arr


def _scrubbed(table: pa.Table) -> pa.Table:
    """``table`` without any registered credential in its text columns (a provider's error that echoed a key read
    from the environment, say): the one place every Parquet row passes before it is written."""
    if not known_secrets():
        return table
    table = table.combine_chunks()
    columns = [_scrubbed_array(col.chunk(0)) if col.num_chunks else col for col in table.columns]
    return pa.Table.from_arrays(columns, schema=table.schema)


class RunFolder:
    """A run folder on disk: committed batches, pending rows, the manifest.

    Example::

        folder = RunFolder(Path("runs/demo"))
        folder.recover()                 # drop files of a batch a killed process never committed
        folder.add("verdicts", [verdict])
        folder.commit()                  # one atomic batch
    """

    def __init__(self, path: Path, *, shared: bool = False) -> None:
        self.path = Path(path)
        #: Whether other processes commit batches into the folder at the same time (the shards of one run, see
        #: :mod:`delta_eval.executors`): batches are then numbered under the folder's commit lock.
        self.shared = shared
        self._pending: dict[str, list[BaseModel]] = {name: [] for name in DATASETS}
        self._next_batch = 1
        #: Called with the batch number after each commit (the session records its progress in the manifest).
        self.on_commit: Callable[[int], None] | None = None
        #: What identifies the run (its manifest's configuration, sides, seed: :data:`HEADER_FIELDS`), written in
        #: every commit record, so that a damaged manifest can be rebuilt from the commit files.
        self.header: dict[str, Any] | None = None
        # The hashes of the media already in the folder or queued (read from the folder when first needed).
        self._media: set[str] | None = None
        #: Where each batch, dropped batch and manifest is copied once written (the remote of a URI run folder).
        self.mirror: Mirror | None = None
        #: Numbers each batch from outside the folder, for a shard writing a working copy of its own of a run in an
        #: object store (see :mod:`delta_eval.executors.shard`): called with the highest number the folder holds,
        #: it returns a number no other shard takes (``None``: numbered here, or under the commit lock).
        self.numbers: Callable[[int], int] | None = None

    # -- reading ---------------------------------------------------------------------------------------------

    def commits(self) -> list[dict[str, Any]]:
        """The commit records of the undamaged batches, in batch order (see :meth:`damage`)."""
        return self.scan()[0]

    def damage(self) -> list[Damage]:
        """What is damaged in the folder, batch by batch: a commit file that is not a valid record, a part file it
        names that is missing or not the size it recorded (or, for commits written before sizes were, not a whole
        Parquet file), a batch number with no commit file below the last one (or below the number of batches the
        manifest counts). Readers skip damaged batches; a rerun drops and recomputes them (:meth:`repair`).

        Files of a batch a killed process never committed are not damage: :meth:`recover` removes them.
        """
        return self.scan()[1]

    def scan(self) -> tuple[list[dict[str, Any]], list[Damage]]:
        """:meth:`commits` and :meth:`damage` from one pass over the commit files.

        A batch another names in its ``replaces`` (a merge, :meth:`compact`, or a rewrite without some rows,
        :meth:`remove_rows`) is neither read nor damage: its rows are in the batch that replaced it, whether or not
        the process writing it lived to empty its record (:meth:`finish_rewrites`)."""
        for attempt in range(_SNAPSHOT_TRIES):
            found = self._scan_once()
            if found is not None:
                return found
            time.sleep(0.01 * (attempt + 1))
        return self._scan_once(last=True) or ([], [])

    def _scan_once(self, *, last: bool = False) -> tuple[list[dict[str, Any]], list[Damage]] | None:
        """One pass of :meth:`scan`; ``None`` when the listing was older than a record read (a batch emptied by the
        rewrite that replaced it, committed after the listing): scanning again sees the new batch. On the ``last``
        pass such a batch is damage instead."""
        read, replaced = self._load_commits()
        numbers = {batch for batch, _, _, _ in read}
        good: list[dict[str, Any]] = []
        damage: list[Damage] = []
        for batch, f, record, problem in read:
            if batch in replaced:
                continue
            rel = f"{COMMITS}/{f.name}"
            if problem is None:
                problem = self._check_parts(record)
            for _ in range(3):
                # A part gone while its record was read: a rerun dropping the batch rewrote the record first, so
                # reading it again finds the batch dropped (not damaged); a record that stays is real damage.
                if problem is None or not problem.endswith(" is missing"):
                    break
                again, problem_again = self._read_commit(f, batch)
                if again == record:
                    break
                record, problem = again, problem_again
            by = moved_to(record) if problem is None else None
            if by is not None and by not in numbers:
                if not last:
                    return None
                problem = f"its rows were moved to batch {by}, whose commit file {COMMITS}/{by:06d}.json is missing"
            if problem is not None:
                damage.append(Damage(batch, f"{rel} {problem}" if problem.startswith("is ") else problem))
                continue
            good.append(self._without_bad_derived(record))
        last_number = max(numbers | {self._counted_batches()})
        damage += [
            Damage(n, f"its commit file {COMMITS}/{n:06d}.json is missing") for n in range(1, last_number + 1)
            if n not in numbers
        ]  # fmt: skip
        return good, sorted(damage)

    def _load_commits(self) -> tuple[list[tuple[int, Path, Any, str | None]], dict[int, int]]:
        """Every commit file's batch, path, record and what is wrong with it as a record (:meth:`_load_commit`), in
        batch order; and each batch a sound record says it replaces, with the batch replacing it."""
        folder = self.path / COMMITS
        files = sorted(f for f in folder.iterdir() if _COMMITTED.match(f.name)) if folder.is_dir() else []
        read = [(int(f.name[:6]), f, *self._load_commit(f, int(f.name[:6]))) for f in files]
        replaced = {old: batch for batch, _, record, problem in read if problem is None
                    for old in replaced_batches(record, batch)}  # fmt: skip
        return read, replaced

    def _load_commit(self, f: Path, batch: int) -> tuple[Any, str | None]:
        """A commit file's record and what is wrong with it as a record (its parts unchecked)."""
        try:
            record = json.loads(f.read_bytes())
        except (OSError, ValueError) as exc:
            return None, f"is not readable JSON ({exc})"
        if not isinstance(record, dict) or record.get("batch") != batch or not isinstance(record.get("files"), dict):
            return record, "is not a commit record of this batch"
        return record, None

    def _read_commit(self, f: Path, batch: int) -> tuple[Any, str | None]:
        """A commit file's record and what is wrong with it and the parts it names."""
        record, problem = self._load_commit(f, batch)
        return record, problem if problem is not None else self._check_parts(record)

    def _check_parts(self, record: dict[str, Any]) -> str | None:
        """What is wrong with the parts a record names (``None``: nothing)."""
        sizes = record.get("sizes") or {}
        for name, rels in record["files"].items():
            if name in DERIVED_FROM:
                continue  # derived: never damage (a record of 8f0ee1d named the tallies among its files)
            for rel in rels if isinstance(rels, list) else [rels]:
                if not isinstance(rel, str) or not _PART.match(Path(rel).name) or ".." in Path(rel).parts:
                    return f"names a file that is not a part of the folder: {rel!r}"
                part = self.path / rel
                try:
                    size = part.stat().st_size
                except OSError:
                    return f"{rel} is missing"
                if rel in sizes:
                    if size != sizes[rel]:
                        return f"{rel} is {size:,} bytes where its commit recorded {sizes[rel]:,}"
                elif not _whole_parquet(part, size):
                    return f"{rel} is not a whole Parquet file"
        return None

    def _without_bad_derived(self, record: dict[str, Any]) -> dict[str, Any]:
        """``record``, or as read here without those of its derived parts that are missing or not the size
        recorded: the batch's rows are sound, and readers read them instead (a merge derives them again)."""
        sizes = record.get("sizes") or {}
        bad = []
        for name in DERIVED_FROM:
            for rel in derived_parts(record, name):
                try:
                    whole = (self.path / rel).stat().st_size == sizes[rel]
                except OSError:
                    whole = False
                if not whole:
                    bad.append(name)
        if not bad:
            return record
        kept = {name: rels for name, rels in record[DERIVED].items() if name not in bad}
        return {**{k: v for k, v in record.items() if k != DERIVED}, **({DERIVED: kept} if kept else {})}

    def _counted_batches(self) -> int:
        """The batches the manifest counts as committed (0 when it says nothing, or cannot be read)."""
        try:
            data = json.loads((self.path / MANIFEST).read_bytes())
        except (OSError, ValueError):
            return 0
        batches = data.get("batches") if isinstance(data, dict) else None
        return batches if isinstance(batches, int) else 0

    def committed_files(self, commits: list[dict[str, Any]] | None = None) -> dict[str, list[Path]]:
        """The part files of every dataset in the undamaged committed batches (of ``commits``, when the caller has
        just scanned them)."""
        files: dict[str, list[Path]] = {name: [] for name in DATASETS}
        for c in self.commits() if commits is None else commits:
            for name, rels in c["files"].items():
                if name not in DERIVED_FROM:  # (the tallies named among the files by 8f0ee1d only)
                    files.setdefault(name, []).extend(self.path / rel for rel in rels)
            for name in DERIVED_FROM:
                files[name].extend(self.path / rel for rel in derived_parts(c, name))
        return files

    def snapshot(self, datasets: Iterable[str] = DATASETS) -> Snapshot:
        """The committed files of ``datasets`` as of one scan, each held open: a rerun that drops a batch meanwhile
        removes its name, not the file a reader holds (close the snapshot when done). A file gone between the
        scan and its opening (a batch dropped just then) means scanning again; a folder that keeps changing
        raises :class:`~delta_eval.exceptions.RunFolderChangedError`, which reading again gets past.

        More files than a quarter of the process's allowance of open files are not held (their descriptors are
        ``-1``): they are read by name, and a reader finding one gone scans again (see :meth:`read`).
        """
        wanted = tuple(datasets)
        for attempt in range(_SNAPSHOT_TRIES):
            commits, damage = self.scan()
            sizes = {rel: size for c in commits for rel, size in (c.get("sizes") or {}).items()}
            opened: dict[str, list[tuple[Path, int]]] = {name: [] for name in wanted}
            count = sum(len(_named(c, name)) for c in commits for name in wanted)
            hold = count <= _open_files_budget(count)
            try:
                for name in wanted:
                    for c in commits:
                        for rel in _named(c, name):
                            if not hold:
                                opened[name].append((self.path / rel, -1))
                                continue
                            fd = os.open(self.path / rel, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                            opened[name].append((self.path / rel, fd))
                            # A part rewritten under the same name after a reset: not the file the scan saw.
                            if rel in sizes and os.fstat(fd).st_size != sizes[rel]:
                                raise FileNotFoundError(rel)
            except FileNotFoundError:
                Snapshot(commits, damage, opened).close()
                time.sleep(0.01 * (attempt + 1))
                continue
            return Snapshot(commits, damage, opened)
        raise RunFolderChangedError(
            f"{self.path} changed while it was read (a run is dropping or rewriting its batches); read it again"
        )

    def read(self, dataset: str, columns: list[str] | None = None) -> pa.Table:
        """All committed rows of ``dataset`` (an empty table with the right schema when there are none), as of
        one :meth:`snapshot`. A derived dataset (``verdict_tallies``, ``replay_tallies``: see
        :mod:`delta_eval.store.derived`) is read only where every batch has its part: else a
        :class:`~delta_eval.exceptions.RunFolderError` says so (its rows would leave out some batches' rows)."""
        whole = None
        if dataset in DERIVED_FROM:
            # (Damaged batches are left out of the rows they derive from too.)
            whole = lambda records, damage: complete(records, dataset)  # noqa: E731
        table = self._read(dataset, columns, whole=whole)
        if table is None:
            source = DERIVED_FROM[dataset]
            raise RunFolderError(
                f"{self.path}: some batches' {source} have no {dataset} (written before they existed, or their part "
                f"is damaged), so they would not count every row: read {source} and derive them "
                f"(delta_eval.store.derived.derive({{{source!r}: folder.read({source!r})}}))"
            )
        return table

    def read_tallies(self) -> pa.Table | None:
        """The verdicts' tallies of every committed batch (see :mod:`delta_eval.store.tallies`), their text columns
        dictionary-encoded as stored, as of one :meth:`snapshot`; ``None`` when some batch with verdicts has none
        (a folder written before tallies existed, until it is merged), so that they would not count every verdict."""
        text = [f.name for f in SCHEMAS[TALLIES] if pa.types.is_string(f.type)]
        return self._read(
            TALLIES, None, dictionary=text, whole=lambda records, damage: not damage and complete(records, TALLIES)
        )

    def _read(self, dataset: str, columns: list[str] | None, *, dictionary: list[str] | None = None,
              whole: Callable[[list[dict[str, Any]], list[Damage]], bool] | None = None
              ) -> pa.Table | None:  # fmt: skip
        """:meth:`read`, the text ``dictionary``-encoded; ``None`` unless ``whole`` holds of the snapshot's commit
        records and damage, when given."""
        schema = SCHEMAS[dataset]
        for _ in range(_SNAPSHOT_TRIES):
            with self.snapshot([dataset]) as snap:
                if whole is not None and not whole(snap.commits, snap.damage):
                    return None
                if not snap.files[dataset]:
                    return schema.empty_table().select(columns) if columns else schema.empty_table()
                try:
                    tables = [_read_part(path, fd, columns, schema, dictionary) for path, fd in snap.files[dataset]]
                except FileNotFoundError:  # a file not held, gone since the scan: scan again
                    continue
            return pa.concat_tables(tables) if dictionary is None else pa.concat_tables(tables).unify_dictionaries()
        raise RunFolderChangedError(
            f"{self.path} changed while it was read (a run is dropping or rewriting its batches); read it again"
        )

    def read_candidate(self, dataset: str, candidate: str) -> pa.Table:
        """The rows of ``dataset`` that are one candidate's in a run of several: its verdicts, and the replays,
        judgements and errors of its pairs (with the errors of no pair); any other dataset whole."""
        table = self.read(dataset)
        if dataset not in PER_PAIR:
            return table
        verdicts = self.read("verdicts")
        mine = verdicts.filter(pc.equal(verdicts["candidate"], candidate))
        if dataset == "verdicts":
            return mine
        keep = pc.is_in(table["pair_id"], value_set=mine["pair_id"])
        if dataset == "errors":
            keep = pc.or_kleene(keep, pc.is_null(table["pair_id"]))
        return table.filter(pc.fill_null(keep, False))

    def read_conversations(self) -> list[SampledConversation]:
        """The sampled conversations of the run, their media bytes restored from the ``media`` dataset (the
        ``conversations`` table names them by hash only)."""
        media = self.read("media", ["sha256", "data"])
        data = dict(zip(media.column("sha256").to_pylist(), media.column("data").to_pylist(), strict=True))
        table = TABLES["conversations"]
        out = []
        for record in (table.parse(row) for row in self.read("conversations").to_pylist()):
            calls = tuple(
                c.model_copy(update={"input": restore_media(c.input, data)}) if c.input is not None else c
                for c in record.calls
            )
            out.append(record.model_copy(update={"messages": restore_media(record.messages, data), "calls": calls}))
        return out

    def manifest(self) -> RunManifest | None:
        """The manifest, or ``None`` before one was written."""
        p = self.path / MANIFEST
        if not p.exists():
            return None
        try:
            data = json.loads(p.read_bytes())
        except (OSError, ValueError) as exc:
            problem = f"not JSON ({exc})"
        else:
            if not isinstance(data, dict):
                problem = f"not a JSON object but a {type(data).__name__}"
            else:
                try:
                    return RunManifest.model_validate(data)
                except ValidationError as exc:
                    fields = sorted({".".join(map(str, e["loc"])) or "(top level)" for e in exc.errors()})
                    problem = f"fields missing or invalid: {', '.join(fields[:8])}"
        if not self.is_marked():
            raise RunFolderError(f"{self.path} is not a delta_eval run folder ({MANIFEST} is not ours)")
        rebuilt = self.rebuild_manifest(problem)
        if rebuilt is None:
            raise RunFolderError(f"{p} is damaged: {problem}")
        warnings.warn(rebuilt.notes[-1], RunFolderWarning, stacklevel=2)
        return rebuilt

    def _header_of(self, commit: Path) -> dict[str, Any] | None:
        try:
            record = json.loads(commit.read_bytes())
        except (OSError, ValueError):
            return None
        header = record.get("run") if isinstance(record, dict) else None
        return header if isinstance(header, dict) else None

    def rebuild_manifest(self, problem: str) -> RunManifest | None:
        """A manifest rebuilt from the intact commit files, for a manifest that is damaged (``problem``: how): the
        run's identity from the last commit record that carries it, the counts from the committed rows. What only
        the manifest held (earlier sessions, what reading and sampling found) is lost, and its notes say so.
        ``None`` when no intact commit carries the run's identity (commits written before they did)."""
        from delta_eval.store.manifest import JUDGEMENT_COLUMNS, SIMULATOR_COLUMNS, VERDICT_COLUMNS, RunCounts

        commits = self.commits()
        headers = [c["run"] for c in commits if isinstance(c.get("run"), dict)]
        if not headers:
            return None
        try:
            manifest = RunManifest.model_validate(headers[-1])
        except ValidationError:
            return None
        manifest.batches = max((int(c["batch"]) for c in commits), default=0)
        manifest.counts = RunCounts.tally(
            self.read("verdicts", VERDICT_COLUMNS), self.read("errors", ["stage"]),
            self.read("judgements", JUDGEMENT_COLUMNS), self.read("simulator_calls", SIMULATOR_COLUMNS),
        )  # fmt: skip
        manifest.notes.append(
            f"{REBUILT_NOTE} from {len(commits)} commit files: its {MANIFEST} was damaged ({problem[:200]}); earlier "
            "sessions and what reading and sampling found are unknown"
        )
        return manifest

    def is_marked(self) -> bool:
        """Whether the folder carries the library's marker."""
        try:
            marker = json.loads((self.path / MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return isinstance(marker, dict) and marker.get("library") == "delta_eval"

    def is_run_folder(self) -> bool:
        """Whether this is a delta_eval run folder: the marker, or (folders from before the marker) a manifest that
        validates as ours."""
        if self.is_marked():
            return True
        try:
            return self.manifest() is not None
        except RunFolderError:
            return False

    def mark(self) -> None:
        """Claim the folder as a run folder (creating it): write the marker."""
        self.path.mkdir(parents=True, exist_ok=True)
        if not self.is_marked():
            write_json_atomic(self.path / MARKER, {"library": "delta_eval", "format": FORMAT}, root=self.path)

    def lock(self) -> FolderLock:
        """Take the folder's writer lock (see :class:`FolderLock`)."""
        return FolderLock(self.path)

    # -- writing ---------------------------------------------------------------------------------------------

    def _library_files(self, commits: re.Pattern[str], root: re.Pattern[str] | None = None) -> list[Path]:
        """The files the library writes, found by their names: part files in the datasets' folders, files of the
        ``commits`` pattern in the commits folder, and of the ``root`` pattern beside the manifest."""
        places = [*((d, _PART) for d in DATASETS), (COMMITS, commits), *([(".", root)] if root else [])]
        found = []
        for name, pattern in places:
            # A linked folder is refused here, before anything in it is deleted; a linked file too.
            folder = self.path / name
            safe_paths.check(self.path, folder)
            if folder.is_dir():
                found += [f for f in folder.iterdir() if pattern.match(f.name) and safe_paths.check(self.path, f)]
        return [f for f in found if f.is_file()]

    def recover(self) -> list[Path]:
        """Delete the library's part and temporary files that no commit names (left by a killed process, or by a
        damaged batch); return them. Files the library does not name so are never touched."""
        committed = {rel for c in self.commits()
                     for rels in [*c["files"].values(), *(derived_parts(c, name) for name in DERIVED_FROM)]
                     for rel in rels}  # fmt: skip
        removed = []
        for f in self._library_files(_COMMIT_TMP, _ROOT_TMP):
            if f.relative_to(self.path).as_posix() not in committed:
                safe_paths.unlink(self.path, f)
                removed.append(f)
        self._next_batch = self._last_on_disk() + 1
        return removed

    def repair(self) -> list[Damage]:
        """Drop every damaged batch (:meth:`drop`), finish the rewrites a killed process left half done
        (:meth:`finish_rewrites`) and remove what it left uncommitted (:meth:`recover`). The pairs of a dropped
        batch are no longer done: a rerun recomputes them (their answers come from the response cache). Returns
        what was dropped."""
        damage = self.damage()
        self._empty_all([(d.batch, {"dropped": d.problem}, None) for d in damage])
        self.finish_rewrites()
        self.recover()
        return damage

    def drop(self, batch: int, reason: str) -> None:
        """Remove a batch: its part files go, and a commit record saying why takes its number (so the numbers stay
        without gaps). Its rows are no longer in the run."""
        self._empty_all([(batch, {"dropped": reason}, None)])

    def _empty_all(self, batches: list[tuple[int, dict[str, Any], list[str] | None]]) -> None:
        """:meth:`_empty` each of ``batches`` (number, why, the parts its record named or ``None``), then the same
        on the :attr:`mirror`, in one go: there the requests go out together (see :meth:`~delta_eval.store.remote.
        RemoteFolder.batches_dropped`). Stopped part way, the mirror keeps the old records, which the next
        session's pull brings back and its repair empties again."""
        for batch, why, named in batches:
            self._empty(batch, why, named)
        if self.mirror is not None and batches:
            self.mirror.batches_dropped([(batch, named) for batch, _, named in batches])

    def _empty(self, batch: int, why: dict[str, Any], named: list[str] | None = None) -> None:
        """Replace a batch's record by one that names no file and says ``why``, then delete its part files (those
        its record ``named``, when known; else every dataset's). Not on the mirror: see :meth:`_empty_all`."""
        commits = safe_paths.mkdir(self.path, self.path / COMMITS)
        names = named if named is not None else batch_parts(batch)
        parts = [safe_paths.check(self.path, self.path / rel) for rel in names]
        record = {"batch": batch, "files": {}, "rows": {}, "at": datetime.now(UTC).isoformat(), **why}
        header = self._header_of(commits / f"{batch:06d}.json")
        if header is not None:
            record["run"] = header  # what a damaged manifest is rebuilt from stays
        # The record first: a reader that scans from now on no longer sees the batch, and one that scanned before
        # holds its files open (see :meth:`snapshot`); the files then go.
        write_json_atomic(commits / f"{batch:06d}.json", record, root=self.path)
        for part in parts:
            safe_paths.unlink(self.path, part, missing_ok=True)
        self._media = None  # the batch may have held media: read what is left when next needed

    def rewrite(self, records: list[dict[str, Any]], reason: str, *, keep: Keep | None = None,
                note: dict[str, Any] | None = None) -> int | None:  # fmt: skip
        """Replace the committed batches of ``records`` by one new batch holding their rows (those ``keep`` keeps),
        in order, with ``note`` in its record; returns its number (``None``: no row was kept, and the batches are
        dropped for ``reason``).

        The new batch is committed naming the batches it ``replaces`` (readers then read it instead of them), and
        only then is each old record emptied (saying ``reason`` and the batch its rows went to) and its files
        deleted: a process killed at any point leaves every row once, in the old batches or in the new one, and
        the next session finishes the job (:meth:`finish_rewrites`). Rows are copied a record batch at a time
        (see :mod:`delta_eval.store.compaction`)."""
        self.catch_up()  # numbered after every batch on disk (a sharded session's shards committed some)
        staged: list[tuple[str, Path, Path, int]] = []
        try:
            for name in DATASETS:
                if name in DERIVED_FROM:
                    continue  # derived from the new parts, below
                sources = [self.path / rel for r in records for rel in r["files"].get(name, [])]
                if not sources:
                    continue
                folder = safe_paths.mkdir(self.path, self.path / name)
                tmp = safe_paths.check(self.path, folder / f".part-000000.{uuid.uuid4().hex}.tmp")
                staged.append((name, folder, tmp, 0))  # before the copy: a copy that fails leaves no file behind
                staged[-1] = (name, folder, tmp, copy_rows(name, sources, tmp, keep))
            # The new parts' derived datasets computed from their rows (whatever the old batches had: none, in a
            # folder written before they existed, or sums of rows a removal took out).
            for name, source in DERIVED_FROM.items():
                part = next((s for s in staged if s[0] == source and s[3]), None)
                if part is None:
                    continue
                folder = safe_paths.mkdir(self.path, self.path / name)
                tmp = safe_paths.check(self.path, folder / f".part-000000.{uuid.uuid4().hex}.tmp")
                staged.append((name, folder, tmp, 0))
                staged[-1] = (name, folder, tmp, write_derived(name, part[2], tmp))
            staged = [s for s in staged if s[3]]
            old = sorted(int(r["batch"]) for r in records)
            if not staged:
                self._empty_all([(batch, {"dropped": reason}, None) for batch in old])
                return None
            carried = {"run": records[-1]["run"]} if "run" in records[-1] else {}  # the header, if none is set here
            for _, _, tmp, _ in staged:
                _sync(tmp)
            batch = self._commit_staged(staged, {**carried, **(note or {}), "replaces": old})
        except BaseException:
            for _, _, tmp, _ in staged:  # a file renamed into place, of a batch never committed: recover() removes it
                safe_paths.unlink(self.path, tmp, missing_ok=True)
            raise
        # On disk before the old rows go: the new batch holds the only copy of them from then on (a power cut
        # must not keep the deletions and lose the data).
        for _, folder, _, _ in staged:
            _sync(folder)
        _sync(self.path / COMMITS / f"{batch:06d}.json")
        _sync(self.path / COMMITS)
        # Their derived parts by their name whatever the scan made of them (one cut short is read as none: it goes
        # too), of the datasets they have (no request for a part never written).
        named = {int(r["batch"]): [*dict.fromkeys([rel for rels in r["files"].values() for rel in rels] + batch_parts(
                    int(r["batch"]), [d for d, source in DERIVED_FROM.items() if r["files"].get(source)]))]
                 for r in records}  # fmt: skip
        self._empty_all([(number, {"replaced_by": batch, "reason": reason}, named[number]) for number in old])
        return batch

    def finish_rewrites(self) -> list[int]:
        """Empty the records of batches a committed rewrite replaces that still name their files (a process killed
        during :meth:`rewrite`), and delete those files; returns their numbers."""
        read, by = self._load_commits()
        done = [batch for batch, _, record, _ in read
                if batch in by and (moved_to(record) != by[batch] or record.get("files"))]  # fmt: skip
        why = "its rows were rewritten into that batch"
        self._empty_all([(batch, {"replaced_by": by[batch], "reason": why}, None) for batch in done])
        return done

    def compact(self) -> list[int]:
        """Merge the folder's many small batches into a few large ones (see :func:`~delta_eval.store.compaction.
        plan` for which): every query over the run opens each batch's files, so a large run reads faster merged.
        Returns the new batches' numbers (none for a folder with damage, which a rerun repairs first). The caller
        holds the folder's lock."""
        commits, damage = self.scan()
        if damage:
            return []
        merged = []
        for group in plan(commits):
            batch = self.rewrite(group, "merged with other batches")
            if batch is not None:
                merged.append(batch)
        return merged

    def remove_rows(self, batch: int, column: str, values: set[Any], reason: str) -> int | None:
        """Take the rows whose ``column`` is one of ``values`` out of a committed batch: the rest of its rows, in
        every dataset, are committed again as a new batch replacing it (:meth:`rewrite`, with the batch's note),
        whose number is returned (``None``: nothing was left, and the batch is dropped). Datasets without
        ``column`` keep all their rows."""
        record = next((c for c in self.commits() if int(c["batch"]) == batch), None)
        if record is None:
            return None
        wanted = pa.array(list(values))

        def keep(name: str, rows: pa.RecordBatch) -> pa.RecordBatch:
            if column not in rows.schema.names:
                return rows
            return rows.filter(pc.invert(pc.fill_null(pc.is_in(rows.column(column), value_set=wanted), False)))

        note = {k: v for k, v in record.items()
                if k not in ("batch", "files", "rows", "sizes", "at", "replaces", DERIVED)}  # fmt: skip
        return self.rewrite([record], reason, keep=keep, note=note)

    def batches_holding(self, dataset: str, column: str, values: set[Any]) -> set[int]:
        """The committed batches whose rows of ``dataset`` have one of ``values`` in ``column``."""
        found = set()
        for c in self.commits():
            for rel in c["files"].get(dataset, []):
                column_values = pq.read_table(self.path / rel, columns=[column]).column(column).to_pylist()
                if values.intersection(column_values):
                    found.add(int(c["batch"]))
        return found

    def reset(self) -> list[Path]:
        """Remove every part file, commit and the manifest: only files the library writes, by their names (anything
        else in the folder stays, and so does the response cache). Returns what was removed."""
        if not self.is_run_folder():
            raise RunFolderError(f"{self.path} is not a delta_eval run folder; nothing in it is removed")
        removed = self._library_files(_COMMIT_FILE)
        manifest = safe_paths.check(self.path, self.path / MANIFEST)
        for f in removed:
            safe_paths.unlink(self.path, f)
        removed += remove_journals(self.path)
        removed += remove_progress(self.path)
        for name in (*DATASETS, COMMITS):
            folder = self.path / name
            if folder.is_dir() and not any(folder.iterdir()):
                safe_paths.rmdir(self.path, folder)
        if manifest.exists():
            safe_paths.unlink(self.path, manifest)
            removed.append(self.path / MANIFEST)
        self._next_batch = 1
        self._media = None
        return removed

    def write_manifest(self, manifest: RunManifest) -> None:
        """Replace the manifest."""
        self.path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path / MANIFEST, manifest.model_dump(mode="json"), root=self.path)
        if self.mirror is not None:
            self.mirror.manifest_written()

    def add(self, dataset: str, rows: Iterable[BaseModel]) -> None:
        """Queue rows (instances of the dataset's schema type) for the next batch.

        A conversation's media bytes are queued apart, to the ``media`` dataset, only when the folder does not hold
        them yet; the conversation row keeps their reference (see :mod:`delta_eval.store.media`). The derived datasets
        (the verdicts' and the replays' tallies) are never added: each batch's are derived from its rows as it is
        written (see :mod:`delta_eval.store.derived`)."""
        if dataset in DERIVED_FROM:
            raise ValueError(
                f"{dataset} are derived from a batch's {DERIVED_FROM[dataset]} as it is written, never added"
            )
        if dataset != "conversations":
            self._pending[dataset].extend(rows)
            return
        if self._media is None:
            self._media = set(self.read("media", ["sha256"]).column("sha256").to_pylist())
        for row in rows:
            assert isinstance(row, SampledConversation), row
            kept, media = split_media(row, self._media)
            self._pending["conversations"].append(kept)
            self._pending["media"].extend(media)

    @property
    def pending_rows(self) -> int:
        """Rows queued and not yet committed."""
        return sum(len(rows) for rows in self._pending.values())

    def commit(self, note: dict[str, Any] | None = None) -> int | None:
        """Write the queued rows as one atomic batch; return its number (``None`` when nothing was queued)."""
        if not self.pending_rows:
            return None
        tables = {name: TABLES[name].to_arrow(rows) for name, rows in self._pending.items() if rows}
        batch = self._write_batch(tables, note)
        for rows in self._pending.values():
            rows.clear()
        if self.on_commit is not None:
            self.on_commit(batch)
        return batch

    def _write_batch(self, tables: dict[str, pa.Table], note: dict[str, Any] | None) -> int:
        """Write ``tables`` as the next batch: its part files, then its commit file (see :meth:`_commit_staged`)."""
        staged: list[tuple[str, Path, Path, int]] = []
        tables = {name: _scrubbed(table) for name, table in tables.items()}
        tables.update(derive(tables))  # from the rows as written
        for name, table in tables.items():
            folder = safe_paths.mkdir(self.path, self.path / name)
            # A shared or outside-numbered folder's number is known at commit only.
            number = 0 if self.shared or self.numbers is not None else self._next_batch
            tmp = safe_paths.check(self.path, folder / f".part-{number:06d}.{uuid.uuid4().hex}.tmp")
            skip = TABLES[name].no_statistics
            stats: bool | list[str] = [c for c in table.column_names if c not in skip] if skip else True
            pq.write_table(table, tmp, compression="zstd", write_statistics=stats)
            staged.append((name, folder, tmp, table.num_rows))
        return self._commit_staged(staged, note)

    def _commit_staged(self, staged: list[tuple[str, Path, Path, int]], note: dict[str, Any] | None) -> int:
        """Commit the part files ``staged`` (dataset, its folder, temporary file, rows) as the next batch: each
        renamed into place, then the batch's commit file. In a :attr:`shared` folder the batch is numbered under the
        folder's commit lock, so that the processes writing it never take the same number nor leave a gap; with
        :attr:`numbers`, by it, once they are."""
        with self._numbering():
            if self.numbers is not None:
                batch = self.numbers(self._last_on_disk())
            else:
                batch = self._last_on_disk() + 1 if self.shared else self._next_batch
            files: dict[str, list[str]] = {}
            derived: dict[str, list[str]] = {}
            sizes: dict[str, int] = {}
            counts: dict[str, int] = {}
            for name, folder, tmp, rows in staged:
                final = safe_paths.check(self.path, folder / f"part-{batch:06d}.parquet")
                safe_paths.replace(self.path, tmp, final)
                sizes[f"{name}/{final.name}"] = final.stat().st_size
                if name in DERIVED_FROM:  # apart from the files: see delta_eval.store.derived.DERIVED
                    derived[name] = [f"{name}/{final.name}"]
                    continue
                files[name] = [f"{name}/{final.name}"]
                counts[name] = rows
            commits = safe_paths.mkdir(self.path, self.path / COMMITS)
            record = {
                "batch": batch,
                "files": files,
                "rows": counts,
                "sizes": sizes,
                "at": datetime.now(UTC).isoformat(),
                **({DERIVED: derived} if derived else {}),
                **(note or {}),
                **({"run": self.header} if self.header is not None else {}),
            }
            write_json_atomic(commits / f"{batch:06d}.json", record, root=self.path)
            if self.mirror is not None:  # under the commit lock: the shards' uploads never interleave
                self.mirror.batch_committed(batch)
        self._next_batch = batch + 1
        return batch

    @contextmanager
    def _numbering(self) -> Iterator[None]:
        """Hold the folder's commit lock (an OS lock on ``.commit-lock``) while a shared folder's batch is numbered
        and committed; nothing to hold for a folder this object alone writes."""
        if not self.shared:
            yield
            return
        with safe_paths.locked(self.path, self.path / COMMIT_LOCK):
            yield

    def _last_on_disk(self) -> int:
        """The highest batch number with a commit file (0: none)."""
        return max(self._numbers_on_disk(), default=0)

    def _numbers_on_disk(self) -> set[int]:
        """The batch numbers with a commit file, committed or dropped."""
        folder = self.path / COMMITS
        return {int(f.name[:6]) for f in folder.iterdir() if _COMMITTED.match(f.name)} if folder.is_dir() else set()

    def fill_gaps(self, reason: str) -> list[int]:
        """Give every number below the highest on disk that has no commit file a dropped record (:meth:`drop`), so
        the numbers stay without gaps: numbers handed out from outside the folder (:attr:`numbers`) to writers
        that stopped before committing. Returns the numbers filled."""
        present = self._numbers_on_disk()
        missing = [batch for batch in range(1, max(present, default=0) + 1) if batch not in present]
        self._empty_all([(batch, {"dropped": reason}, None) for batch in missing])
        return missing

    def catch_up(self) -> None:
        """Number the next batch after every batch on disk (those other processes committed, in a shared
        folder)."""
        self._next_batch = max(self._next_batch, self._last_on_disk() + 1)

    @property
    def last_batch(self) -> int:
        """The number of the last batch this object committed or found committed (0: none)."""
        return self._next_batch - 1


class FolderLock:
    """The one-writer lock of a run folder: an exclusive OS lock on ``.lock`` (``flock``), released by the OS when
    the process ends, however it ends, and the holder's pid and start time written in the file for the next one.

    Example::

        with RunFolder(out).lock():
            ...  # this process alone writes the folder
    """

    def __init__(self, path: Path, *, shared: bool = False) -> None:
        self.path = Path(path)
        #: Whether other processes commit batches into the folder at the same time (the shards of one run, see
        #: :mod:`delta_eval.executors`): batches are then numbered under the folder's commit lock.
        self.shared = shared
        self._file: Any = None
        #: What the lock file held when this process took it: the last holder's pid and start, and what it
        #: recorded there when it could write nothing else (:meth:`record`), e.g. a failure on a full disk.
        self.previous: dict[str, Any] = {}
        self._started = ""

    def acquire(self, *, reading: bool = False) -> FolderLock:
        """Take the lock, or raise :class:`RunFolderError` naming the process that holds it.

        ``reading``: taken to bring a working copy up to date before reading it (see
        :func:`~delta_eval.store.remote.local_run`), which ends by itself: a run or a reader finding the lock held
        by such a reader waits for it (up to :data:`READER_WAIT_S`) instead of failing at once."""
        self.path.mkdir(parents=True, exist_ok=True)
        # Opened without following a link and without truncating: the holder's pid must survive a refused attempt.
        fd = safe_paths.open_write(self.path, self.path / _LOCK, truncate=False)
        f = os.fdopen(fd, "r+", encoding="utf-8")
        try:
            self._lock_waiting_for_readers(f)
        except BaseException:
            f.close()
            raise
        f.seek(0)
        try:
            previous = json.loads(f.read() or "{}")
        except ValueError:
            previous = {}
        self.previous = previous if isinstance(previous, dict) else {}
        self._file = f
        # A last session's end left here stays until the manifest has it (see FolderSession).
        kept = {k: v for k, v in self.previous.items() if k in ("status", "failure", "ended")}
        self.record({**kept, "reading": True} if reading else kept)
        return self

    def _lock_waiting_for_readers(self, f: Any) -> None:
        try:
            import fcntl
        except ImportError:  # no flock on this platform: one writer is the user's care
            return
        deadline = time.monotonic() + READER_WAIT_S
        while True:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                f.seek(0)
                holder = f.read().strip()
            try:
                info = json.loads(holder)
                who = f"pid {info.get('pid')}, started {info.get('started')}"
            except ValueError:
                info, who = {}, "another process"
            reader = isinstance(info, dict) and info.get("reading") is True
            if reader and time.monotonic() < deadline:
                time.sleep(0.05)  # a reader pulling the remote: it ends by itself
                continue
            if reader:
                raise RunFolderError(
                    f"{self.path} is being brought up to date for reading by another process ({who}) for more than "
                    f"{READER_WAIT_S:g} s; wait for it to end, or choose another 'out'"
                )
            raise RunFolderError(
                f"{self.path} is being written by another run ({who}); wait for it to end, or choose another 'out'"
            )

    def record(self, extra: dict[str, Any]) -> None:
        """Rewrite the lock file in place: the holder's pid and start, and ``extra``. The file is small and its
        first block is already on disk, so this works when the disk is full and nothing else can be written."""
        if self._file is None:
            return
        self._started = self._started or datetime.now(UTC).isoformat()
        self._file.seek(0)
        self._file.write(json.dumps({"pid": os.getpid(), "started": self._started, **extra}))
        self._file.truncate()
        self._file.flush()

    def release(self) -> None:
        """Let the lock go (closing the file releases it)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
