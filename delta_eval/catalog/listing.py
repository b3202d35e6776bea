"""``delta-eval models``: what the catalogue knows, as a table or JSON.

Example:
    >>> print(models_text("o3-pro", today=dt.date(2026, 12, 3)).splitlines()[0])
    Model catalogue of 2026-12-03 (litellm ...), 2 models matching 'o3-pro':
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
from typing import Any

from delta_eval.catalog.info import ModelInfo
from delta_eval.catalog.lookup import CATALOG_AS_OF, CATALOG_SOURCE, catalog

__all__ = ["matching_models", "models_json", "models_text"]


def matching_models(
    pattern: str | None = None, *, retired: bool = False, today: dt.date | None = None
) -> list[ModelInfo]:
    """The catalogued models whose id contains ``pattern`` (or matches it as a glob: ``anthropic:*opus*``), without
    retired ones unless ``retired``."""
    out = []
    for key, info in catalog().items():
        if pattern and pattern not in key and not fnmatch.fnmatch(key, pattern):
            continue
        if info.retired(today) and not retired:
            continue
        out.append(info)
    return out


def _thinking(info: ModelInfo) -> str:
    if not info.reasoning:
        return "-"
    parts = []
    if info.adaptive:
        parts.append("adaptive")
    if info.efforts:
        parts.append("/".join(info.efforts))
    if info.budget:
        parts.append(f"budget {info.budget_min or 1}-{info.budget_max or 'max'}")
    if not info.thinking_off:
        parts.append("always on")
    return ", ".join(parts) or "on"


def _price(info: ModelInfo) -> str:
    p = info.price
    if p is None:
        return "unknown"
    cached = f" cached {p.cached_input:g}" if p.cached_input is not None else ""
    return f"{p.input:g} in / {p.output:g} out{cached}"


def models_text(pattern: str | None = None, *, retired: bool = False, today: dt.date | None = None) -> str:
    """A table of the matching models: thinking controls, sampling, limits, prices (USD per million tokens) and
    retirement dates, headed by the catalogue's date."""
    models = matching_models(pattern, retired=retired, today=today)
    head = f"Model catalogue of {CATALOG_AS_OF} ({CATALOG_SOURCE.split(' model_prices')[0]}), {len(models)} models"
    head += f" matching {pattern!r}:" if pattern else ":"
    rows = [("model", "thinking", "sampling", "context", "max out", "USD / 1M tokens", "retires")]
    for info in models:
        rows.append(
            (
                info.model,
                _thinking(info),
                "yes" if info.sampling else "no",
                f"{info.context_window:,}" if info.context_window else "?",
                f"{info.max_output_tokens:,}" if info.max_output_tokens else "?",
                _price(info),
                str(info.deprecation_date or ""),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [head, *("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)]
    if not retired:
        lines.append("(retired models left out: --retired lists them)")
    lines.append("Override any of it per model under `models` in a run's configuration.")
    return "\n".join(lines)


def models_json(pattern: str | None = None, *, retired: bool = False, today: dt.date | None = None) -> str:
    """The matching models as JSON: ``{"as_of", "source", "models": [...]}``."""
    data: dict[str, Any] = {
        "as_of": CATALOG_AS_OF,
        "source": CATALOG_SOURCE,
        "models": [m.describe() for m in matching_models(pattern, retired=retired, today=today)],
    }
    return json.dumps(data, indent=1, default=str)
