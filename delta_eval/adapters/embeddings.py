"""Text embeddings through a provider's SDK, for clustering judges' reasons into themes in a model's vector space
instead of TF-IDF (see :mod:`delta_eval.analysis.themes`). ``openai:`` (and any OpenAI-compatible server with
``base_url``) and ``azure:`` embedding models, through the official SDK's ``embeddings.create``.

Example::

    embed = Embedder("openai:text-embedding-3-small")
    vectors = embed(["skipped the required call", "asked the user to confirm"])   # one row per text
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import openai

from delta_eval.adapters.openai_common import OpenAIOptions, make_client, map_openai_error
from delta_eval.adapters.options import parse_options
from delta_eval.calls import split_model_id
from delta_eval.exceptions import ConfigError
from delta_eval.sync import run_sync

__all__ = ["Embedder"]

#: Texts per request (OpenAI takes up to 2,048 inputs; smaller batches keep each request well under its limits).
BATCH = 256


class Embedder:
    """``embedder(texts)``: one vector (a list of floats) per text, from ``model`` (``openai:name``)."""

    def __init__(self, model: str, options: Mapping[str, Any] | None = None, *, dimensions: int | None = None) -> None:
        prefix, name = split_model_id(model)
        if prefix != "openai":
            raise ConfigError(f"embeddings come from openai: models (or an OpenAI-compatible base_url), not {model!r}")
        self.model, self.name, self.dimensions = model, name, dimensions
        self.options = parse_options(OpenAIOptions, model, options or {})
        self.__qualname__ = f"Embedder({model})"  # names the cached themes computed with it

    async def aembed(self, texts: list[str]) -> list[list[float]]:
        """The vectors, asked for in batches of :data:`BATCH`."""
        client = make_client(self.options, self.model)
        extra: dict[str, Any] = {"dimensions": self.dimensions} if self.dimensions else {}
        vectors: list[list[float]] = []
        try:
            for start in range(0, len(texts), BATCH):
                batch = [t or " " for t in texts[start : start + BATCH]]  # the API refuses empty strings
                try:
                    reply = await client.embeddings.create(model=self.name, input=batch, **extra)
                except openai.APIError as exc:
                    raise map_openai_error(exc, model=self.model, secrets=self.options.secrets()) from None
                vectors += [list(d.embedding) for d in sorted(reply.data, key=lambda d: d.index)]
        finally:
            await client.close()
        return vectors

    def __call__(self, texts: list[str]) -> list[list[float]]:
        return run_sync(lambda: self.aembed(texts))
