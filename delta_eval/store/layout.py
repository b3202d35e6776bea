"""The names of a run folder's own files, one place for the local folder and its copy in an object store."""

from __future__ import annotations

__all__ = ["COMMITS", "MANIFEST", "MARKER"]

#: The run's manifest (written at each session's start and end).
MANIFEST = "manifest.json"
#: The file that marks a folder as a run folder (nothing else in it is ever deleted by the library without it).
MARKER = ".delta_eval"
#: The folder of commit records: a batch is part of the run once its record is there.
COMMITS = "_commits"
