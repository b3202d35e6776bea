"""The working copy of one attempt at a shard of a run in an object store, when the shards run on machines that
share no file system (:class:`~delta_eval.executors.RayExecutor` with ``out="s3://..."``).

Each attempt works in a folder of its own on its machine, beside the run's working copy there (see
:func:`~delta_eval.uris.working_copy`)::

    WORK_DIR/<hash>.shards/<attempt>/              the attempt's working copy, pulled from the URI as it starts
    WORK_DIR/<hash>.shards/<attempt>.remote.json   what it uploaded and took of the response cache

Pulled as the attempt starts, the copy holds every batch committed so far (a retried shard skips the pairs its
killed attempt committed) and every answer uploaded (it asks none of them again). The attempt uploads each batch
it commits with the answers obtained since (:class:`~delta_eval.store.remote.RemoteFolder`), numbered so that no
other shard takes the number (:attr:`~delta_eval.store.folder.RunFolder.numbers`), and as it ends, the answers
no batch took (an interrupted shard's); its folder is then removed. A folder left by an attempt that was killed
is removed by the next attempt of the run on the same machine, or by the session there, once its answers are
uploaded (:func:`sweep`): what a killed attempt paid is lost only when its machine is.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from delta_eval.exceptions import RunFolderError
from delta_eval.store import safe_paths
from delta_eval.store.folder import FolderLock
from delta_eval.store.layout import MARKER
from delta_eval.store.remote import RemoteFolder
from delta_eval.uris import working_copy

__all__ = ["CACHE_NAME", "shard_copies", "shard_copy", "sweep"]

#: The response cache's file in an attempt's working copy.
CACHE_NAME = "cache.sqlite"
_SWEEP_LOCK = ".sweep-lock"


def shard_copies(uri: str) -> Path:
    """The folder of the working copies of the attempts at shards of the run at ``uri`` on this machine."""
    run = working_copy(uri)
    return run.with_name(run.name + ".shards")


@contextmanager
def shard_copy(uri: str, *, own_cache: bool = True) -> Iterator[RemoteFolder]:
    """A new working copy of the run at ``uri`` for one attempt at a shard: locked, pulled from the URI, its
    :attr:`~RemoteFolder.local` folder removed at the end once the answers it holds are uploaded (when they cannot
    be, it stays, for :func:`sweep`). ``own_cache``: the response cache is the copy's own, and mirrored (a cache
    configured outside the run folder is neither: ``False``)."""
    sweep(uri, own_cache=own_cache)
    local = shard_copies(uri) / uuid.uuid4().hex
    lock = FolderLock(local).acquire()
    remote = RemoteFolder(uri, local, cache=local / CACHE_NAME if own_cache else None)
    try:
        remote.pull()
        yield remote
    finally:
        uploaded = False
        # Raised or not, the run's outcome is the one to see: a copy whose answers cannot go up stays for sweep.
        with contextlib.suppress(RunFolderError, OSError, sqlite3.Error):
            remote.cache_written()
            uploaded = True
        lock.release()
        if uploaded:
            _remove(local)


def sweep(uri: str, *, own_cache: bool = True) -> None:
    """Remove the working copies that ended attempts at shards of the run at ``uri`` left on this machine (killed
    ones; those whose last upload failed), each after uploading the answers it holds that no batch took. A copy
    whose attempt runs (it holds its lock) or has not pulled yet (no marker) is left alone."""
    root = shard_copies(uri)
    if not root.is_dir():
        return
    with _sweeping(root):
        for local in sorted(root.iterdir()):
            if not local.is_dir() or not (local / MARKER).is_file():
                continue
            lock = FolderLock(local)
            try:
                lock.acquire()
            except RunFolderError:
                continue  # its attempt runs
            try:
                cache = local / CACHE_NAME
                if own_cache and cache.is_file():
                    RemoteFolder(uri, local, cache=cache).cache_written()
            finally:
                lock.release()
            _remove(local)


@contextmanager
def _sweeping(root: Path) -> Iterator[None]:
    """Hold the machine's sweep of ``root`` (an OS lock, waited for): an attempt starting while another uploads
    what a killed copy left pulls once that is up, rather than asking those answers again."""
    with safe_paths.locked(root, root / _SWEEP_LOCK):
        yield


def _remove(local: Path) -> None:
    """An attempt's working copy and its state beside it (the library's own folder under the work dir); what
    cannot be removed now is left for the next sweep."""
    with contextlib.suppress(OSError):
        safe_paths.rmtree(local.parent, local)
        safe_paths.unlink(local.parent, local.with_name(local.name + ".remote.json"), missing_ok=True)
