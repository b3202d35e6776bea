"""The run folder: Parquet datasets written in atomic batches, and the manifest.

Layout::

    RUN_DIR/
      manifest.json            config, versions, seed, start/end, status, counts (see manifest.py)
      replays/part-000001.parquet
      verdicts/part-000001.parquet
      judgements/ errors/ conversations/ strata/
      _commits/000001.json     the files of batch 1: a batch counts only once its commit file exists
      cache.sqlite             the response cache (see cache.py)
      .delta_eval              the marker: this folder is a delta_eval run folder, of this format
      .lock                    held (an OS lock) by the one process writing the folder

Only a folder with the marker (or, from before it existed, a valid delta_eval manifest) is ever written to or
cleaned: a folder of anything else is refused, never deleted from. :meth:`RunFolder.reset` deletes only the files
the library writes.

A batch is written as temporary files renamed into place, then its commit file (also written then renamed). A
process killed at any instant leaves either a committed batch or files no commit names; readers see only
committed files, and resuming deletes the rest. Every row of a pair (its replays, its verdict, its errors) is in one
batch, so a pair is either wholly in the run or not at all, and resuming never writes it twice.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ValidationError

from delta_eval.exceptions import RunFolderError
from delta_eval.redact import describe_invalid
from delta_eval.store.manifest import FORMAT, RunManifest
from delta_eval.store.tables import DATASETS, SCHEMAS, TABLES

__all__ = ["MANIFEST", "MARKER", "FolderLock", "RunFolder", "write_json_atomic"]

MANIFEST = "manifest.json"
MARKER = ".delta_eval"
_COMMITS = "_commits"
_LOCK = ".lock"
_PART = re.compile(r"^(part-\d{6}\.parquet|\.part-\d{6}\.[0-9a-f]{32}\.tmp)$")
_COMMIT_FILE = re.compile(r"^(\d{6}\.json|\.\d{6}\.json\.[0-9a-f]{32}\.tmp)$")


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` so that a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    os.replace(tmp, path)


class RunFolder:
    """A run folder on disk: committed batches, pending rows, the manifest.

    Example::

        folder = RunFolder(Path("runs/demo"))
        folder.recover()                 # drop files of a batch a killed process never committed
        folder.add("verdicts", [verdict])
        folder.commit()                  # one atomic batch
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._pending: dict[str, list[BaseModel]] = {name: [] for name in DATASETS}
        self._next_batch = 1

    # -- reading ---------------------------------------------------------------------------------------------

    def commits(self) -> list[dict[str, Any]]:
        """The commit records, in batch order."""
        folder = self.path / _COMMITS
        if not folder.is_dir():
            return []
        out = []
        for f in sorted(folder.glob("*.json")):
            try:
                out.append(json.loads(f.read_text(encoding="utf-8")))
            except ValueError as exc:
                raise RunFolderError(f"{f} is damaged ({exc}); remove it to drop that batch") from None
        return out

    def committed_files(self) -> dict[str, list[Path]]:
        """The committed part files of every dataset (reading the commit files once)."""
        files: dict[str, list[Path]] = {name: [] for name in DATASETS}
        for c in self.commits():
            for name, rels in c["files"].items():
                files.setdefault(name, []).extend(self.path / rel for rel in rels)
        return files

    def read(self, dataset: str, columns: list[str] | None = None) -> pa.Table:
        """All committed rows of ``dataset`` (an empty table with the right schema when there are none)."""
        files = self.committed_files()[dataset]
        schema = SCHEMAS[dataset]
        if not files:
            return schema.empty_table().select(columns) if columns else schema.empty_table()
        tables = [pq.read_table(f, columns=columns, schema=schema) for f in files]
        return pa.concat_tables(tables)

    def manifest(self) -> RunManifest | None:
        """The manifest, or ``None`` before one was written."""
        p = self.path / MANIFEST
        if not p.exists():
            return None
        try:
            return RunManifest.model_validate_json(p.read_bytes())
        except ValidationError as exc:
            if not self.is_marked():
                raise RunFolderError(f"{self.path} is not a delta_eval run folder ({MANIFEST} is not ours)") from None
            raise RunFolderError(f"{p} is damaged: {describe_invalid(exc)}") from None

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
            write_json_atomic(self.path / MARKER, {"library": "delta_eval", "format": FORMAT})

    def lock(self) -> FolderLock:
        """Take the folder's writer lock (see :class:`FolderLock`)."""
        return FolderLock(self.path)

    # -- writing ---------------------------------------------------------------------------------------------

    def recover(self) -> list[Path]:
        """Delete part and temporary files that no commit names (left by a killed process); return them."""
        commits = self.commits()
        committed = {(self.path / rel).resolve() for c in commits for files in c["files"].values() for rel in files}
        removed = []
        for name in (*DATASETS, _COMMITS, "."):
            folder = self.path / name
            if not folder.is_dir():
                continue
            for f in folder.iterdir():
                stray_part = f.suffix == ".parquet" and name != "." and f.resolve() not in committed
                if f.name.endswith(".tmp") or stray_part:
                    f.unlink()
                    removed.append(f)
        batches = [int(c["batch"]) for c in commits]
        self._next_batch = max(batches, default=0) + 1
        return removed

    def reset(self) -> list[Path]:
        """Remove every part file, commit and the manifest: only files the library writes, by their names (anything
        else in the folder stays, and so does the response cache). Returns what was removed."""
        if not self.is_run_folder():
            raise RunFolderError(f"{self.path} is not a delta_eval run folder; nothing in it is removed")
        removed = []
        for name, pattern in [*((d, _PART) for d in DATASETS), (_COMMITS, _COMMIT_FILE)]:
            folder = self.path / name
            if not folder.is_dir():
                continue
            for f in folder.iterdir():
                if f.is_file() and pattern.match(f.name):
                    f.unlink()
                    removed.append(f)
            if not any(folder.iterdir()):
                folder.rmdir()
        if (self.path / MANIFEST).exists():
            (self.path / MANIFEST).unlink()
            removed.append(self.path / MANIFEST)
        self._next_batch = 1
        return removed

    def write_manifest(self, manifest: RunManifest) -> None:
        """Replace the manifest."""
        self.path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path / MANIFEST, manifest.model_dump(mode="json"))

    def add(self, dataset: str, rows: Iterable[BaseModel]) -> None:
        """Queue rows (instances of the dataset's schema type) for the next batch."""
        self._pending[dataset].extend(rows)

    @property
    def pending_rows(self) -> int:
        """Rows queued and not yet committed."""
        return sum(len(rows) for rows in self._pending.values())

    def commit(self, note: dict[str, Any] | None = None) -> int | None:
        """Write the queued rows as one atomic batch; return its number (``None`` when nothing was queued)."""
        if not self.pending_rows:
            return None
        batch = self._next_batch
        files: dict[str, list[str]] = {}
        counts: dict[str, int] = {}
        for name, rows in self._pending.items():
            if not rows:
                continue
            folder = self.path / name
            folder.mkdir(parents=True, exist_ok=True)
            final = folder / f"part-{batch:06d}.parquet"
            tmp = folder / f".part-{batch:06d}.{uuid.uuid4().hex}.tmp"
            pq.write_table(TABLES[name].to_arrow(rows), tmp, compression="zstd")
            os.replace(tmp, final)
            files[name] = [f"{name}/{final.name}"]
            counts[name] = len(rows)
        commits = self.path / _COMMITS
        commits.mkdir(parents=True, exist_ok=True)
        record = {
            "batch": batch,
            "files": files,
            "rows": counts,
            "at": datetime.now(UTC).isoformat(),
            **(note or {}),
        }
        write_json_atomic(commits / f"{batch:06d}.json", record)
        for rows in self._pending.values():
            rows.clear()
        self._next_batch = batch + 1
        return batch


class FolderLock:
    """The one-writer lock of a run folder: an exclusive OS lock on ``.lock`` (``flock``), released by the OS when
    the process ends, however it ends, and the holder's pid and start time written in the file for the next one.

    Example::

        with RunFolder(out).lock():
            ...  # this process alone writes the folder
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file: Any = None

    def acquire(self) -> FolderLock:
        """Take the lock, or raise :class:`RunFolderError` naming the process that holds it."""
        self.path.mkdir(parents=True, exist_ok=True)
        f = open(self.path / _LOCK, "a+", encoding="utf-8")  # noqa: SIM115 - held open for the session
        try:
            import fcntl

            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # no flock on this platform: one writer is the user's care
            pass
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip()
            f.close()
            try:
                info = json.loads(holder)
                who = f"pid {info.get('pid')}, started {info.get('started')}"
            except ValueError:
                who = "another process"
            raise RunFolderError(
                f"{self.path} is being written by another run ({who}); wait for it to end, or choose another 'out'"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(json.dumps({"pid": os.getpid(), "started": datetime.now(UTC).isoformat()}))
        f.flush()
        self._file = f
        return self

    def release(self) -> None:
        """Let the lock go (closing the file releases it)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
