"""A session of a run on its folder: start, resume, reset or refuse; the response cache; the manifest's record.

What a run does with the folder it is pointed at:

- not a run folder (no marker, no manifest of ours): it must be new or empty (a response cache may already be
  there); the run claims it and starts afresh. A folder holding anything else is refused, and nothing in it is
  touched;
- a manifest with the same fingerprint: the run resumes; files a killed process left uncommitted are removed,
  damaged batches dropped, and the pairs and conversations already written are skipped, except pairs that ended in
  a retryable provider error (or any error, with ``retry_errors``): their rows are taken out of the batches
  holding them (the batches' other rows are committed again as they were) and the pairs recomputed;
- a manifest with another fingerprint: refused, naming the settings that differ; with ``overwrite`` the library's
  own files are removed (the response cache stays) and the run starts afresh.

One process writes a folder at a time: a session holds the folder's lock (:class:`~delta_eval.store.folder.
FolderLock`) from before it looks at the folder until it has written its manifest's end.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from delta_eval.calls import CallStats
from delta_eval.exceptions import RunFolderError
from delta_eval.fingerprint import comparable
from delta_eval.store import safe_paths
from delta_eval.store.cache import SQLiteCache, refuse_linked_cache
from delta_eval.store.folder import HEADER_FIELDS, REBUILT_NOTE, RESERVE, WRITTEN, Damage, RunFolder
from delta_eval.store.manifest import (
    JUDGEMENT_COLUMNS,
    SIMULATOR_COLUMNS,
    VERDICT_COLUMNS,
    CacheStats,
    RunCounts,
    RunManifest,
    RunStatus,
)
from delta_eval.store.remote import RemoteFolder
from delta_eval.store.sent import SentJournal, sent_by

#: The space :meth:`FolderSession._reserve` sets aside: many times a manifest's size.
_RESERVE_BYTES = 1 << 20

__all__ = ["FolderSession", "Resume", "differences", "errors_to_retry", "grows_candidates", "resume"]


@dataclass
class Resume:
    """What the folder already holds for the run about to start: the manifest to continue (earlier sessions kept)
    and what not to do again."""

    manifest: RunManifest
    done_pairs: set[str] = field(default_factory=set)
    done_conversations: set[str] = field(default_factory=set)
    population_committed: bool = False
    dropped: list[Damage] = field(default_factory=list)
    retried: int = 0


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """The dotted paths at which two configuration fingerprints differ.

    Example:
        >>> differences({"sample": {"n": 100}, "seed": 1}, {"sample": {"n": 200}, "seed": 1})
        ['sample.n']
        >>> differences({}, {"params": {"temperature": 0.9}})
        ['params.temperature']
    """
    if (isinstance(old, dict) and new is None) or (old is None and isinstance(new, dict)):
        # A table at its defaults is left out of a fingerprint: name the settings given, not the whole table.
        old, new = old or {}, new or {}
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            out += differences(old.get(key), new.get(key), f"{path}.{key}" if path else str(key))
        return out
    return [] if old == new else [path or "(configuration)"]


def grows_candidates(before: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether fingerprint ``now`` is ``before`` with candidates added after its own (a run of several candidates
    that gains one): the pairs already decided stay what they were, so the run resumes and replays only the new
    candidates (the baseline's answers come from the response cache).

    Example:
        >>> a, b, c = {"model": "m:a", "name": "a"}, {"model": "m:b", "name": "b"}, {"model": "m:c", "name": "c"}
        >>> grows_candidates({"candidate": a, "candidates": [a, b]}, {"candidate": a, "candidates": [a, b, c]})
        True
        >>> grows_candidates({"candidate": a, "candidates": [a, b]}, {"candidate": a, "candidates": [a, c]})
        False
    """
    old, new = before.get("candidates"), now.get("candidates")
    if not isinstance(old, list) or not isinstance(new, list) or len(old) < 2 or len(new) <= len(old):
        return False
    rest = {k: v for k, v in before.items() if k != "candidates"}
    return rest == {k: v for k, v in now.items() if k != "candidates"} and new[: len(old)] == old


def _check_writable(folder: RunFolder) -> None:
    """Create the folder if it is new; refuse a path that cannot be created, or a folder not writable (a file is
    refused before, by :func:`_refuse_foreign`)."""
    try:
        folder.path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunFolderError(f"cannot create the run folder {folder.path}: {exc.strerror or exc}") from None
    if not os.access(folder.path, os.W_OK):
        raise RunFolderError(f"cannot write in the run folder {folder.path}: permission denied")


def _refuse_foreign(folder: RunFolder) -> None:
    """Refuse a folder that holds anything but a run (or a response cache): nothing in it is ours to touch."""
    if folder.path.is_file():
        raise RunFolderError(f"'out' is a file, not a folder: {folder.path}")
    if folder.is_run_folder() or not folder.path.exists():
        return
    if any(p for p in folder.path.iterdir() if p.name not in ("cache.sqlite", ".lock")):
        raise RunFolderError(f"{folder.path} exists and is not a delta_eval run folder; choose an empty or new 'out'")


def errors_to_retry(folder: RunFolder, *, everything: bool = False) -> set[str]:
    """The pairs that ended in an error and are tried again: those with an error the provider called retryable (a
    rate limit, a server error, a lost connection), or with ``everything``, all of them."""
    verdicts = folder.read("verdicts", ["pair_id", "outcome"]).to_pydict()
    failed = {p for p, o in zip(verdicts["pair_id"], verdicts["outcome"], strict=True) if o == "error"}
    if everything or not failed:
        return failed
    errors = folder.read("errors", ["pair_id", "retryable"]).to_pydict()
    return {p for p, again in zip(errors["pair_id"], errors["retryable"], strict=True) if again and p in failed}


def resume(folder: RunFolder, fresh: RunManifest, *, overwrite: bool = False, retry_errors: bool = False) -> Resume:
    """Decide what to do with ``folder`` for the run ``fresh`` describes (see the module docstring).

    Nothing is written into a folder that is not a run folder; the caller begins the new session.
    """
    if not folder.is_run_folder():
        _refuse_foreign(folder)
        return Resume(fresh)
    try:
        previous = folder.manifest()
    except RunFolderError as exc:
        if not overwrite:
            raise RunFolderError(f"{exc}; overwrite it (--overwrite, overwrite=True) to start afresh") from None
        previous = None
    if previous is None:  # marked, but the first session never wrote its manifest (or it is damaged: overwrite)
        folder.reset()
        return Resume(fresh)
    # Compared without connection settings: folders written before they were left out still resume.
    before, now = comparable(previous.fingerprint), comparable(fresh.fingerprint)
    grown = grows_candidates(before, now)
    if before != now and not grown:
        if not overwrite:
            changed = ", ".join(differences(before, now)[:8])
            compared = ", ".join(sorted(set(before) | set(now), key=str))
            raise RunFolderError(
                f"{folder.path} holds a run with a different configuration (differs in: {changed}); resume it with "
                "the same configuration, choose another 'out', or overwrite it (--overwrite, overwrite=True). "
                f"Compared: {compared}, each at its non-default settings; a model's connection (base_url, "
                "endpoint, timeout, connection_pools, headers, keys and the variables they are read from) may differ"
            )
        folder.reset()
        return Resume(fresh)
    dropped = folder.repair()
    retried = errors_to_retry(folder, everything=retry_errors)
    for batch in sorted(folder.batches_holding("verdicts", "pair_id", retried)):
        # Only the retried pairs leave: the batch's other pairs (a context-length error among them) stay done,
        # where dropping the whole batch would call their models again.
        folder.remove_rows(batch, "pair_id", retried, "tried again: it held pairs that had ended in an error")
    decided = set(folder.read("verdicts", ["pair_id"]).column("pair_id").to_pylist())
    conversations = folder.read("conversations", ["conversation_id"]).column("conversation_id").to_pylist()
    rebuilt = [n for n in previous.notes if n.startswith(REBUILT_NOTE)]  # said once, in the manifest it now has
    return Resume(
        manifest=fresh.model_copy(
            update={
                "sessions": previous.sessions,
                "started_at": previous.started_at,
                "notes": [*fresh.notes, *rebuilt],
                # made when the run began, on the whole sample; made again for candidates added since
                "estimate": None if grown else previous.estimate,
            }
        ),
        done_pairs=decided,
        done_conversations=set(conversations),
        population_committed=any(c.get("kind") == "population" for c in folder.commits()),
        dropped=dropped,
        retried=len(retried),
    )


class FolderSession:
    """The run folder's side of one session: what to resume, the open response cache, and the manifest, begun
    when the session opens and ended by :meth:`close`.

    Example::

        session = FolderSession(RunFolder(out), fresh_manifest, out / "cache.sqlite")
        # a URI run folder: out is its working copy, remote=RemoteFolder(uri, out, cache=out / "cache.sqlite")
        ...  # the session's work, skipping session.state.done_pairs
        manifest = session.close("completed", pairs_decided=12, calls=pool.stats(), read={"read": 200})
    """

    def __init__(
        self,
        folder: RunFolder,
        fresh: RunManifest,
        cache_path: Path,
        *,
        overwrite: bool = False,
        retry_errors: bool = False,
        remote: RemoteFolder | None = None,
    ) -> None:
        self.folder = folder
        # Before anything is written: a link where the library writes or deletes would lead it out of the folder.
        safe_paths.refuse_links(folder.path, WRITTEN)
        refuse_linked_cache(cache_path, folder.path)
        _refuse_foreign(folder)  # before the lock, whose file would be the first thing written into it
        _check_writable(folder)
        self.lock = folder.lock().acquire()
        try:
            if remote is not None:
                # The remote is the run: the working copy first takes its state, then every write is copied there.
                remote.pull()
                folder.mirror = remote
            self.state = resume(folder, fresh, overwrite=overwrite, retry_errors=retry_errors)
            folder.mark()
            if remote is not None:
                remote.sync()  # what resuming reset or repaired
            self.manifest = self.state.manifest
            folder.header = self.manifest.model_dump(mode="json", include=set(HEADER_FIELDS))
            self.cache = SQLiteCache(cache_path, root=folder.path)
            self._failure_left_in_lock()
            self.manifest.begin_session(
                resumed_pairs=len(self.state.done_pairs),
                cached_responses=len(self.cache),
                retried_pairs=self.state.retried,
                sent=lambda number: sent_by(folder.path, number),
            )
            #: Counts every call this session sends, as it is sent (see :mod:`delta_eval.store.sent`).
            self.journal = SentJournal(folder.path, len(self.manifest.sessions))
            if self.cache.moved_aside is not None:
                self.manifest.notes.append(
                    f"the response cache was damaged; it was moved to {self.cache.moved_aside.name} and a new one "
                    "started"
                )
            self.manifest.notes += [
                f"repaired: batch {d.batch} was damaged ({d.problem}); it was dropped and its pairs recomputed"
                for d in self.state.dropped
            ]
            folder.write_manifest(self.manifest)
            self.lock.record({})  # what the last session left there is in the manifest now
            self._reserve()
        except BaseException:
            self.lock.release()
            raise

    def _reserve(self) -> None:
        """Set space aside for the manifest's last write (:data:`_RESERVE_BYTES` in ``.reserve``): on a disk that
        fills during the session, freeing it lets the session record how it ended (see :meth:`close`)."""
        path = self.folder.path / RESERVE
        try:
            fd = safe_paths.open_write(self.folder.path, path, truncate=False)
            try:
                if os.fstat(fd).st_size < _RESERVE_BYTES:
                    if hasattr(os, "posix_fallocate"):  # real blocks, not a sparse file the disk never gave
                        os.posix_fallocate(fd, 0, _RESERVE_BYTES)
                    else:
                        os.write(fd, b"\0" * _RESERVE_BYTES)
            finally:
                os.close(fd)
        except OSError:
            safe_paths.unlink(self.folder.path, path, missing_ok=True)  # already full: the lock is the fallback

    def _failure_left_in_lock(self) -> None:
        """Record the failure the last session could only write in the lock file (a disk too full for its
        manifest): its session ends ``failed`` with the reason, said in the notes."""
        left = self.lock.previous
        sessions = self.manifest.sessions
        if left.get("status") not in ("failed", "interrupted") or not sessions or sessions[-1].ended_at is not None:
            return
        last = sessions[-1]
        last.status = left["status"]
        last.ended_at = str(left.get("ended") or "") or None
        why = f" ({left['failure']})" if left.get("failure") else ""
        self.manifest.notes.append(
            f"session {len(sessions)} ended {left['status']}{why}, but its manifest could not be written then (the "
            "disk was full): this session recorded it"
        )

    def checkpoint(self, batch: int, *, pairs_decided: int, calls: dict[str, CallStats]) -> None:
        """Record a committed batch and the session's progress in the manifest (see
        :meth:`RunManifest.checkpoint`)."""
        self.manifest.checkpoint(batch, pairs_decided=pairs_decided, calls=calls)
        self.folder.write_manifest(self.manifest)

    def _compact(self) -> None:
        """Merge the run's small batches once its manifest says it completed, and record the merged batches' numbers
        in it. The merge only speeds up reading: whatever stops it (a full disk, memory, an object store refusing an
        upload) is a note, the rows stay once in the run, and the next session finishes a merge begun."""
        try:
            merged = self.folder.compact()
        except Exception as exc:  # nothing about the run's results depends on it
            with contextlib.suppress(Exception):
                self.folder.recover()  # the merge's files not committed
            self.manifest.notes.append(
                f"the run's batches were not all merged into larger files ({type(exc).__name__}: {exc}); every row is "
                "in the run once, and the next session finishes a merge begun"
            )
        else:
            if not merged:
                return
        self.manifest.batches = max(self.manifest.batches, self.folder.last_batch)
        with contextlib.suppress(OSError):  # the manifest written before stands: the same rows, fewer files
            self.folder.write_manifest(self.manifest)

    def close(
        self,
        status: RunStatus,
        *,
        seconds: float,
        pairs_decided: int,
        calls: dict[str, CallStats],
        read: dict[str, Any],
        notes: list[str] | None = None,
        stopped_early: str | None = None,
        failure: str | None = None,
    ) -> RunManifest:
        """End the session: count what the folder holds (with ``read``, what reading and sampling found), record
        the session's calls, cache use and the adapters' notes, write the manifest, close the cache. A completed
        session then merges the run's small batches (:meth:`~delta_eval.store.folder.RunFolder.compact`): a kill
        meanwhile leaves a completed run, its merge finished by the next session."""
        counts = RunCounts.tally(
            self.folder.read("verdicts", VERDICT_COLUMNS),
            self.folder.read("errors", ["stage"]),
            self.folder.read("judgements", JUDGEMENT_COLUMNS),
            self.folder.read("simulator_calls", SIMULATOR_COLUMNS),
            **read,
        )
        hits, misses, writes = self.cache.stats()
        cache = CacheStats(hits=hits, misses=misses, writes=writes)
        self.manifest.sessions[-1].sent = sent_by(self.folder.path, len(self.manifest.sessions))
        if self.cache.damaged is not None:
            notes = [*(notes or []), f"the response cache was found damaged during the session ({self.cache.damaged}); "
                     "the next run moves it aside"]  # fmt: skip
        self.manifest.end_session(
            status, seconds=seconds, pairs_decided=pairs_decided, calls=calls, cache=cache, counts=counts, notes=notes
        )
        self.manifest.stopped_early = stopped_early
        self.manifest.failure = failure
        self.manifest.batches = max(self.manifest.batches, self.folder.last_batch)
        try:
            try:
                self.folder.write_manifest(self.manifest)
            except OSError:
                # Most likely the disk is full: the files of the batch that could not be committed, and the space
                # set aside at the start, free enough for the (small) manifest.
                self.folder.recover()
                safe_paths.unlink(self.folder.path, self.folder.path / RESERVE, missing_ok=True)
                try:
                    self.folder.write_manifest(self.manifest)
                except OSError:
                    # Still no space: the lock file can be rewritten in place; the next session records the end
                    # from it. The run's own error says why.
                    if status != "completed":
                        with contextlib.suppress(OSError):  # nothing more to try: the run's own error says why
                            self.lock.record({"status": status, "failure": failure, "ended": self.manifest.ended_at})
                    raise
            if status == "completed":
                self._compact()
        finally:
            # Also when the manifest could not be written (a full disk, an object store refusing its upload).
            self.cache.close()
            self.journal.close()
            self.lock.release()
        return self.manifest
