"""The model catalogue: a dated snapshot shipped in the wheel (``models.json``, built by
``scripts/update_catalog.py`` from LiteLLM's maintained model data), looked up by model id.

A model id's prefix names where it runs; the catalogue is keyed by the model's family (``openai``, ``anthropic``,
``gemini``), so Azure deployments, Claude on Vertex or Bedrock and Gemini on Vertex find the same entry as the
provider's own API (``azure:`` deployments through ``base_model``; Bedrock's ``us.anthropic.claude-...-v1:0`` and
Vertex's ``claude-...@20250929`` ids are read as the model they name). A dated snapshot (``-2025-08-07``,
``-20250929``) falls back to its model's entry.

Example:
    >>> info = model_info("openai-responses:o3-2025-04-16")
    >>> info.reasoning, info.sampling, "minimal" in info.efforts
    (True, False, False)
    >>> model_info("anthropic-bedrock:us.anthropic.claude-opus-4-8-v1:0").adaptive
    True
    >>> model_info("openai:gpt-9-imaginary").known
    False
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any

from delta_eval.catalog.info import ModelInfo, ModelOverride, Price

__all__ = ["CATALOG_AS_OF", "CATALOG_SOURCE", "catalog", "catalog_key", "model_info"]

#: Model-id prefix -> the catalogue family its models belong to.
FAMILIES = {
    "openai": "openai",
    "openai-responses": "openai",
    "azure": "openai",
    "azure-responses": "openai",
    "anthropic": "anthropic",
    "anthropic-vertex": "anthropic",
    "anthropic-bedrock": "anthropic",
    "bedrock": "anthropic",
    "gemini": "gemini",
    "vertex": "gemini",
}
_SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|\d{3})$")
_BEDROCK = re.compile(r"^(?:[a-z]{2,6}\.)?anthropic\.(?P<name>.+?)(?:-v\d+(?::\d+)?)?$")


@functools.cache
def _snapshot() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(resources.files("delta_eval.catalog").joinpath("models.json").read_text())
    return data


def _as_of() -> str:
    return str(_snapshot()["as_of"])


#: The date the shipped catalogue was taken, and where from.
CATALOG_AS_OF: str = _as_of()
CATALOG_SOURCE: str = str(_snapshot()["source"])


@functools.cache
def catalog() -> dict[str, ModelInfo]:
    """Every model of the shipped snapshot, by ``family:name``."""
    out: dict[str, ModelInfo] = {}
    for key, entry in _snapshot()["models"].items():
        fields = dict(entry)
        if "price" in fields:
            fields["price"] = Price(**fields["price"])
        out[key] = ModelInfo(model=key, source=f"catalogue of {CATALOG_AS_OF}", **fields)
    return out


def catalog_key(model: str, *, base_model: str | None = None) -> str | None:
    """The ``family:name`` a model id is catalogued under (``None`` for a prefix of no known family).

    Example:
        >>> catalog_key("anthropic-vertex:claude-sonnet-4-5@20250929")
        'anthropic:claude-sonnet-4-5-20250929'
        >>> catalog_key("azure:my-deployment", base_model="gpt-4.1-mini")
        'openai:gpt-4.1-mini'
    """
    prefix, _, name = model.partition(":")
    family = FAMILIES.get(prefix)
    if family is None:
        return None
    name = (base_model or name).strip().lower().removeprefix("models/")
    name = re.sub(r"@(default|latest)$", "", name).replace("@", "-")  # Vertex: claude-...@20250929, @default
    bedrock = _BEDROCK.match(name)
    if bedrock:
        name = bedrock.group("name")
    return f"{family}:{name}"


def _simulated(model: str) -> ModelInfo:
    # The in-process simulated model takes every parameter and costs nothing.
    return ModelInfo(
        model=model,
        reasoning=True,
        efforts=("none", "minimal", "low", "medium", "high", "xhigh", "max"),
        budget=True,
        adaptive=True,
        price=Price(input=0.0, output=0.0),
        source="simulated",
    )


def _unknown(model: str) -> ModelInfo:
    return ModelInfo(
        model=model,
        known=False,
        thinking_off=True,
        sampling=False,
        stop=False,
        parallel_tool_calls=False,
        source=f"not in the catalogue of {CATALOG_AS_OF}: conservative defaults",
    )


def model_info(
    model: str,
    overrides: Mapping[str, ModelOverride] | None = None,
    *,
    base_model: str | None = None,
) -> ModelInfo:
    """What the library knows of ``model``: the catalogue's entry (or its dated snapshot's model), with the
    user's ``overrides`` applied: those keyed by a glob the id matches (``"openai:Qwen/*"``), then by
    ``family:name``, then by the model id itself (the most specific wins).

    A model the catalogue does not know gets conservative defaults: no sampling, stop, parallel-tool-call or
    reasoning parameters are sent, since a model may refuse any of them. A self-hosted model (vLLM, Ollama) is
    described by an override: ``ModelOverride(sampling=True, stop=True)``.
    """
    overrides = overrides or {}
    key = catalog_key(model, base_model=base_model)
    if model.startswith("simulated:"):
        info = _simulated(model)
    else:
        table = catalog()
        candidates = [key] if key else []
        candidates += [_SNAPSHOT.sub("", c) for c in candidates if _SNAPSHOT.search(c)]
        found = next((table[c] for c in candidates if c in table), None)
        info = found.model_copy(update={"model": model}) if found else _unknown(model)
    for pattern, override in overrides.items():
        if "*" in pattern and pattern not in (key, model) and fnmatch.fnmatchcase(model, pattern):
            info = override.apply(info)
    for name in dict.fromkeys((key, model)):
        if name is not None and name in overrides:
            info = overrides[name].apply(info)
    return info
