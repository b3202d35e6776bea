"""Symbolic links inside a run folder: nothing is ever written or deleted through them, and the error names the link.

Each path the library writes or deletes gets a link planted, to a file and to a folder outside the run folder; the
run (or the analysis) is refused, and the link's target is exactly as it was.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import delta_eval as de
from delta_eval.analysis.html import write_html
from delta_eval.demo import demo_config, demo_conversations
from delta_eval.exceptions import RunFolderLinkError
from delta_eval.store import safe_paths


def small(out: Path, **changes: Any) -> de.RunConfig:
    return demo_config(out, n=4, latency_ms=0.0).model_copy(update={"flush_every": 2, **changes})


def run(out: Path, **changes: Any) -> de.RunManifest:
    return de.run(small(out, **changes), conversations=demo_conversations()).manifest


def outside_file(tmp_path: Path) -> Path:
    """Another application's file: a SQLite database of its own."""
    target = tmp_path / "elsewhere" / "app.db"
    target.parent.mkdir()
    with sqlite3.connect(target) as db:
        db.execute("CREATE TABLE accounts (name TEXT)")
        db.execute("INSERT INTO accounts VALUES ('ada')")
    db.close()
    return target


def outside_folder(tmp_path: Path) -> Path:
    """Another folder, holding files named as a run folder's are (so a glob by name would match them)."""
    target = tmp_path / "elsewhere" / "folder"
    target.mkdir(parents=True)
    (target / "part-000001.parquet").write_bytes(b"PAR1 someone else's data PAR1")
    (target / "000001.json").write_text('{"batch": 1, "files": {}}')
    (target / "stamp.json").write_text("{}")
    return target


def snapshot(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` (or ``path`` itself) with its bytes, and the names in the folder."""
    if path.is_file():
        return {path.name: path.read_bytes()}
    return {p.relative_to(path).as_posix(): p.read_bytes() if p.is_file() else b"" for p in sorted(path.rglob("*"))}


TARGETS: dict[str, Callable[[Path], Path]] = {"file": outside_file, "folder": outside_folder}


def plant(out: Path, name: str, target: Path) -> Path:
    link = out / name
    if link.is_dir() and not link.is_symlink():
        for p in sorted(link.rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        link.rmdir()
    else:
        link.unlink(missing_ok=True)
    link.symlink_to(target)
    return link


@pytest.mark.parametrize("kind", TARGETS)
def test_a_lock_link_in_a_new_folder_is_refused_and_its_target_untouched(tmp_path: Path, kind: str) -> None:
    target = TARGETS[kind](tmp_path)
    before = snapshot(target)
    out = tmp_path / "run"
    out.mkdir()
    plant(out, ".lock", target)
    with pytest.raises(RunFolderLinkError, match=r"run/\.lock is a symbolic link"):
        run(out)
    assert snapshot(target) == before
    assert [p.name for p in out.iterdir()] == [".lock"]  # nothing else written


@pytest.mark.parametrize("kind", TARGETS)
@pytest.mark.parametrize("name", [".lock", "cache.sqlite", "cache.sqlite-wal", "verdicts", "_commits", "manifest.json"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_link_in_a_run_folder_refuses_the_rerun(tmp_path: Path, kind: str, name: str, overwrite: bool) -> None:
    out = tmp_path / "run"
    run(out)
    target = TARGETS[kind](tmp_path)
    before = snapshot(target)
    plant(out, name, target)
    with pytest.raises(RunFolderLinkError, match=rf"run/{name} is a symbolic link \(to {target}\)"):
        run(out, overwrite=overwrite)
    assert snapshot(target) == before
    if kind == "file" and name.startswith("cache"):
        with sqlite3.connect(target) as db:  # no `responses` table in another application's database
            assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("accounts",)]
        db.close()


def test_a_cache_configured_outside_the_folder_is_used_where_it_is(tmp_path: Path) -> None:
    shared = tmp_path / "shared" / "cache.sqlite"
    first = run(tmp_path / "a", cache=shared)
    assert shared.exists()
    assert not (tmp_path / "a" / "cache.sqlite").exists()
    again = run(tmp_path / "b", cache=shared)
    assert first.status == again.status == "completed"
    assert again.sessions[-1].cache is not None
    assert again.sessions[-1].cache.misses == 0


def analyse_and_write(out: Path) -> None:
    a = de.analyze(out)
    a.summary()
    write_html(a)


@pytest.mark.parametrize("kind", TARGETS)
@pytest.mark.parametrize("name", ["analysis", "report.html"])
def test_analysis_and_the_html_report_never_write_through_a_link(tmp_path: Path, kind: str, name: str) -> None:
    out = tmp_path / "run"
    run(out)
    target = TARGETS[kind](tmp_path)
    before = snapshot(target)
    plant(out, name, target)
    with pytest.raises(RunFolderLinkError, match=rf"run/{name} is a symbolic link"):
        analyse_and_write(out)
    assert snapshot(target) == before


def test_a_linked_file_inside_a_dataset_folder_is_neither_written_nor_deleted(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(out)
    target = outside_file(tmp_path)
    before = target.read_bytes()
    stray = plant(out, "verdicts/.part-000009.0123456789abcdef0123456789abcdef.tmp", target)
    with pytest.raises(RunFolderLinkError, match=r"\.part-000009\..*\.tmp is a symbolic link"):
        run(out)
    assert stray.is_symlink()
    assert target.read_bytes() == before


def test_the_helpers_refuse_paths_outside_the_folder_and_links_on_the_way(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(de.RunFolderError, match="outside the run folder"):
        safe_paths.write_text(root, root / ".." / "escape.txt", "x")
    assert not (tmp_path / "escape.txt").exists()
    (root / "sub").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(RunFolderLinkError, match="root/sub is a symbolic link"):
        safe_paths.unlink(root, root / "sub" / "anything")
    linked_root = tmp_path / "linked-root"
    linked_root.symlink_to(root)  # the run folder itself may be a link: the user chose that path
    safe_paths.write_text(linked_root, linked_root / "ok.txt", "fine")
    assert (root / "ok.txt").read_text() == "fine"


def test_every_write_and_delete_in_the_store_and_analysis_goes_through_safe_paths() -> None:
    # The guard holds only if nothing writes around it: a new direct write or delete must say why it may.
    root = Path(de.__file__).parent
    direct = re.compile(r"\.unlink\(|\.write_text\(|\.write_bytes\(|rmtree\(|os\.replace\(|\.rmdir\(|\.rename\(")
    allowed = {
        ("store/cache.py", "damaged.rename(aside)"),  # a cache configured outside the run folder
        ("analysis/html.py", "target.write_text(text"),  # a report written outside the run folder
        ("analysis/ci.py", "path.write_text(text"),  # a CI summary or JUnit file written outside the run folder
    }
    found = []
    for path in sorted([*root.glob("store/*.py"), *root.glob("analysis/*.py")]):
        rel = path.relative_to(root).as_posix()
        if rel == "store/safe_paths.py":
            continue
        for line in path.read_text().splitlines():
            if (
                direct.search(line)
                and "safe_paths." not in line
                and not any(rel == where and what in line for where, what in allowed)
            ):
                found.append(f"{rel}: {line.strip()}")
    assert found == []
