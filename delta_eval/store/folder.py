"""The run folder: Parquet datasets written in atomic batches, and the manifest.

Layout::

    RUN_DIR/
      manifest.json            config, versions, seed, start/end, status, counts (see manifest.py)
      replays/part-000001.parquet
      verdicts/part-000001.parquet
      judgements/ errors/ conversations/ strata/
      _commits/000001.json     the files of batch 1: a batch counts only once its commit file exists
      cache.sqlite             the response cache (see cache.py)

A batch is written as temporary files renamed into place, then its commit file (also written then renamed). A
process killed at any instant leaves either a committed batch or files no commit names; readers see only
committed files, and resuming deletes the rest. Every row of a pair (its replays, its verdict, its errors) is in one
batch, so a pair is either wholly in the run or not at all, and resuming never writes it twice.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ValidationError

from delta_eval.exceptions import RunFolderError
from delta_eval.store.manifest import RunManifest
from delta_eval.store.tables import DATASETS, SCHEMAS, TABLES

__all__ = ["MANIFEST", "RunFolder", "write_json_atomic"]

MANIFEST = "manifest.json"
_COMMITS = "_commits"


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
            raise RunFolderError(f"{p} is damaged: {exc}") from None

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

    def reset(self) -> None:
        """Remove every dataset, commit and the manifest (the response cache stays)."""
        import shutil

        for name in (*DATASETS, _COMMITS):
            shutil.rmtree(self.path / name, ignore_errors=True)
        (self.path / MANIFEST).unlink(missing_ok=True)
        self._next_batch = 1

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
