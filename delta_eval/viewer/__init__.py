"""A local web app over run folders: the decision, the pairs behind it, each pair side by side, and labels.

``delta-eval view RUN [RUN ...]`` serves it on 127.0.0.1; it reads the run folders through DuckDB and writes only
labels beside them (:mod:`delta_eval.store.labels`). Modules: :mod:`~delta_eval.viewer.queries` (the SQL; its
filters are :mod:`~delta_eval.analysis.pair_filter`'s, shared with the static report, as are the word and JSON
differences of :mod:`~delta_eval.analysis.diff`), :mod:`~delta_eval.viewer.pages` (what a page shows),
:mod:`~delta_eval.viewer.compare` (several runs), :mod:`~delta_eval.viewer.app` (routes and templates),
:mod:`~delta_eval.viewer.server` (uvicorn). Needs the ``view`` extra: ``pip install 'delta-eval[view]'``.
"""

from __future__ import annotations

from delta_eval.viewer.app import create_app
from delta_eval.viewer.queries import PairFilter, RunView
from delta_eval.viewer.server import Server, serve

__all__ = ["PairFilter", "RunView", "Server", "create_app", "serve"]
