"""Names for themes from an LLM: one call per theme through a model client, with the response cache of the run, so
naming the themes of a run again costs nothing.

The model is shown the theme's most distinctive terms and a few of its reasons and answers JSON
``{"theme_name": "..."}``: a short name of the behaviour the reasons share. By default :class:`Analysis.themes`
uses the run's own stage-3 judge model (its provider options as the manifest keeps them: a key comes from the
environment, as ``api_key_env`` says).

Example::

    namer = LLMNamer("openai:gpt-4.1-mini", cache_path="runs/demo/cache.sqlite")
    namer(["skipped", "get_reservation_details"], ["reply B skipped the required get_reservation_details call"])
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from delta_eval.adapters.pool import ModelPool
from delta_eval.adapters.registry import AdapterContext
from delta_eval.calls import GenerateParams, ModelRequest, ResponseFormat
from delta_eval.redact import REDACTED
from delta_eval.schema import Message
from delta_eval.store.cache import SQLiteCache
from delta_eval.sync import run_sync

__all__ = ["LLMNamer"]

_SYSTEM = (
    "You name themes in an LLM judge's reasons for preferring one reply of an AI agent over another. Given the "
    "theme's most distinctive terms and example reasons, answer with a name of at most eight words for the behaviour "
    "they share, keeping tool and argument names (e.g. 'Skips get_reservation_details before changes')."
)
_SCHEMA = {
    "type": "object",
    "properties": {"theme_name": {"type": "string", "maxLength": 120}},
    "required": ["theme_name"],
    "additionalProperties": False,
}


class LLMNamer:
    """Names themes with ``model`` (``provider:name``) built with ``options``; answers cached in ``cache_path``
    (never opened through a symbolic link inside the run folder ``root``, when given)."""

    def __init__(
        self,
        model: str,
        options: Mapping[str, Any] | None = None,
        *,
        cache_path: str | Path,
        root: str | Path | None = None,
    ) -> None:
        self.model = model
        # Settings the manifest redacted are left out: the adapter then finds its key in the environment.
        self.options = {k: v for k, v in (options or {}).items() if v != REDACTED}
        self.cache_path = Path(cache_path)
        self.root = Path(root) if root is not None else None

    def request(self, terms: list[str], examples: list[str]) -> ModelRequest:
        """The request naming one theme."""
        listed = "\n".join(f"- {e[:400]}" for e in examples[:5])
        user = f"<terms>{', '.join(terms)}</terms>\n<examples>\n{listed}\n</examples>"
        fmt = ResponseFormat(name="theme_name", json_schema=_SCHEMA)
        return ModelRequest(
            model=self.model,
            messages=(Message(role="system", content=_SYSTEM), Message(role="user", content=user)),
            params=GenerateParams(temperature=0.0, max_tokens=64, response_format=fmt),
        )

    def name_all(self, themes: list[tuple[list[str], list[str]]]) -> list[str]:
        """Names of several themes (``(terms, examples)`` each), asked concurrently; a theme whose call fails or
        answers no name is named by its top terms."""
        import json

        import anyio

        async def main() -> list[str]:
            cache = SQLiteCache(self.cache_path, root=self.root)
            pool = ModelPool(cache, context=AdapterContext())
            names = [", ".join(terms[:3]) for terms, _ in themes]
            try:
                client = pool.client(self.model, self.options, label="theme names")

                async def one(k: int, terms: list[str], examples: list[str]) -> None:
                    try:
                        result = await client.generate(self.request(terms, examples), namespace="analysis:theme")
                        said = json.loads(result.response.message.content or "{}").get("theme_name")
                    except Exception:  # a failed name is no reason to fail the analysis: the terms name it
                        return
                    if isinstance(said, str) and said.strip():
                        names[k] = said.strip()[:120]

                async with anyio.create_task_group() as tg:
                    for k, (terms, examples) in enumerate(themes):
                        tg.start_soon(one, k, terms, examples)
            finally:
                await pool.aclose()
                cache.close()
            return names

        return run_sync(main)

    def __call__(self, terms: list[str], examples: list[str]) -> str:
        return self.name_all([(terms, examples)])[0]
