"""Writing and deleting inside a run folder without ever following a symbolic link out of it.

Every file the library writes or deletes in a run folder (the lock, the manifest and marker, part and commit files,
the response cache when it lives in the folder, ``report.html``, ``analysis/``) goes through these functions: each
checks that the path is inside the folder and that no part of it below the folder is a symbolic link, and opens
files for writing with ``O_NOFOLLOW``. A link is refused with :class:`~delta_eval.exceptions.RunFolderLinkError`
naming it, and nothing is written or deleted: a ``.lock`` linked to a user's file, a ``verdicts`` linked to another
folder or a ``cache.sqlite`` linked to another application's database are left as they are.

The run folder itself may be a link (the user chose that path); only what is inside it is checked. Reading follows
links as usual: only writes and deletes are guarded.

Example:
    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> write_text(root, root / "a" / "note.txt", "hi")
    >>> (root / "b").symlink_to(root / "a")
    >>> write_text(root, root / "b" / "note.txt", "no")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    delta_eval.exceptions.RunFolderLinkError: .../b is a symbolic link (to .../a); ...
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from delta_eval.exceptions import RunFolderError, RunFolderLinkError

__all__ = [
    "check",
    "inside",
    "locked",
    "mkdir",
    "open_write",
    "refuse_links",
    "rename",
    "replace",
    "rmdir",
    "rmtree",
    "unlink",
    "write_atomic",
    "write_text",
]

# Not every platform has it (Windows): there a link is still found by the check before the open.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _link_error(link: Path) -> RunFolderLinkError:
    try:
        target = os.readlink(link)
    except OSError:
        target = "?"
    return RunFolderLinkError(
        f"{link} is a symbolic link (to {target}); delta_eval never writes or deletes through a link inside a run "
        "folder, so remove the link (or choose another 'out')"
    )


def inside(root: Path, path: Path) -> bool:
    """Whether ``path`` is ``root`` or below it, by its name (``..`` resolved by the name, links not followed)."""
    try:
        Path(os.path.abspath(path)).relative_to(os.path.abspath(root))
    except ValueError:
        return False
    return True


def check(root: Path, path: Path) -> Path:
    """``path``, once found inside ``root`` with no symbolic link below ``root`` on the way to it (``path``
    included); otherwise :class:`RunFolderLinkError` naming the link (or :class:`RunFolderError` for a path outside
    the folder)."""
    base = Path(os.path.abspath(root))
    full = Path(os.path.abspath(path))
    try:
        rel = full.relative_to(base)
    except ValueError:
        raise RunFolderError(f"{path} is outside the run folder {root}; nothing is written there") from None
    cur = base
    for part in rel.parts:
        cur = cur / part
        if cur.is_symlink():
            raise _link_error(cur)
    return full


def refuse_links(root: Path, names: tuple[str, ...]) -> None:
    """Refuse the folder when any of ``names`` in it is a symbolic link: checked before anything is written, so a
    refused folder is left exactly as it was."""
    for name in names:
        if (Path(root) / name).is_symlink():
            raise _link_error(Path(root) / name)


def mkdir(root: Path, path: Path) -> Path:
    """Create the folder ``path`` (and its parents) inside ``root``."""
    full = check(root, path)
    full.mkdir(parents=True, exist_ok=True)
    check(root, full)  # a link that took a new folder's place while it was being made
    return full


def open_write(root: Path, path: Path, *, truncate: bool = True, exclusive: bool = False, append: bool = False) -> int:
    """An OS file descriptor of ``path`` opened for reading and writing (created if missing), never through a link;
    with ``append``, every write goes to the end of the file, whoever else writes it."""
    full = check(root, path)
    flags = os.O_RDWR | os.O_CREAT | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    flags |= (os.O_TRUNC if truncate else 0) | (os.O_EXCL if exclusive else 0) | (os.O_APPEND if append else 0)
    try:
        return os.open(full, flags, 0o666)
    except OSError as exc:
        if full.is_symlink():  # ELOOP: a link planted after the check
            raise _link_error(full) from None
        raise exc


@contextmanager
def locked(root: Path, path: Path) -> Iterator[None]:
    """Hold an exclusive OS lock (``flock``, waited for) on the file ``path`` inside ``root``, made if missing;
    released when the block ends, or by the OS when the process does. Where there is no ``flock``, nothing is held
    (as :class:`~delta_eval.store.folder.FolderLock` does)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = open_write(root, path, truncate=False)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def write_text(root: Path, path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` in place, creating its folder."""
    mkdir(root, Path(path).parent)
    with os.fdopen(open_write(root, path), "w", encoding="utf-8") as f:
        f.write(text)


def write_atomic(root: Path, path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the new one, never half of one: a new
    temporary file (created exclusively, so never a link) renamed over it."""
    full = check(root, path)
    tmp = full.with_name(f".{full.name}.{uuid.uuid4().hex}.tmp")
    try:
        with os.fdopen(open_write(root, tmp, exclusive=True), "wb") as f:
            f.write(data)
        replace(root, tmp, full)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)  # a link is never created by us, so this removes our own file only
        raise


def replace(root: Path, src: Path, dst: Path) -> None:
    """Rename ``src`` over ``dst`` (both inside ``root``; ``dst`` must not be a link)."""
    os.replace(check(root, src), check(root, dst))


def rename(root: Path, src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst`` inside ``root`` (``src`` must not be a link, nor ``dst``)."""
    check(root, src).rename(check(root, dst))


def unlink(root: Path, path: Path, *, missing_ok: bool = False) -> None:
    """Delete the file ``path`` (never through a linked folder; a link itself is refused, not deleted)."""
    check(root, path).unlink(missing_ok=missing_ok)


def rmdir(root: Path, path: Path) -> None:
    """Remove the empty folder ``path``."""
    check(root, path).rmdir()


def rmtree(root: Path, path: Path) -> None:
    """Delete the folder ``path`` and everything in it (a missing folder is nothing to do). Links inside it are
    removed as links: their targets are untouched."""
    full = check(root, path)
    if full.exists():
        shutil.rmtree(full)
