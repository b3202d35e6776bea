"""``anthropic-vertex:`` models: Claude on Vertex AI, through the ``anthropic`` SDK's ``AsyncAnthropicVertex``.

The Messages wire format of :mod:`.anthropic` (same encoding, decoding, usage, errors); the SDK's Vertex client moves
the model from the body into the path, ``{base}/v1/projects/{project}/locations/{location}/publishers/anthropic/
models/{model}:rawPredict`` (``:streamRawPredict`` when streamed), and the body names Vertex's API version,
``anthropic_version: "vertex-2023-10-16"``. Model ids are Vertex's, ``claude-sonnet-4-5@20250929``.

Project, location and credentials: see :mod:`.vertex_auth` (the project may also come from
``ANTHROPIC_VERTEX_PROJECT_ID``, the SDK's own variable).

Example (Python)::

    de.Variant(model="anthropic-vertex:claude-sonnet-4-5@20250929",
               provider_options={"project": "my-proj", "location": "us-east5"}, params={"max_tokens": 2048})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import anthropic

from delta_eval.adapters.anthropic import AnthropicAdapter, AnthropicOptions
from delta_eval.adapters.base import ClientShards, sdk_client_options
from delta_eval.adapters.options import parse_options
from delta_eval.adapters.registry import AdapterContext
from delta_eval.adapters.vertex_auth import VertexAuthOptions
from delta_eval.calls import ModelRequest

__all__ = ["VERTEX_VERSION", "VertexAnthropicAdapter", "VertexAnthropicOptions", "create"]

#: The API version Vertex AI documents for Claude. The SDK would fill in its own first-party version, which is not one.
VERTEX_VERSION = "vertex-2023-10-16"


class VertexAnthropicOptions(AnthropicOptions, VertexAuthOptions):
    """Options of ``anthropic-vertex:`` models: those of :class:`~delta_eval.adapters.anthropic.AnthropicOptions`
    and of :class:`~delta_eval.adapters.vertex_auth.VertexAuthOptions`; ``anthropic_version`` is the body's API
    version (Vertex's documented one by default)."""

    anthropic_version: str = VERTEX_VERSION


class VertexAnthropicAdapter(AnthropicAdapter):
    """Claude on Vertex AI; everything but the client and the body's version is
    :class:`~delta_eval.adapters.anthropic.AnthropicAdapter`."""

    options: VertexAnthropicOptions

    def encode(self, request: ModelRequest) -> dict[str, Any]:
        """The Messages body with Vertex's ``anthropic_version`` (the SDK takes the model out into the path)."""
        return {**super().encode(request), "anthropic_version": self.options.anthropic_version}

    def post_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """A dict body: the SDK's Vertex client rewrites only those."""
        return {"body": body}

    def cache_identity(self) -> dict[str, Any]:
        """The endpoint, project and location answering (a credential never is)."""
        return {**super().cache_identity(), "project": self.options.project, "location": self.options.location}


def create(model: str, options: Mapping[str, Any], context: AdapterContext) -> VertexAnthropicAdapter:
    """The factory of ``anthropic-vertex:`` model ids."""
    opts = parse_options(VertexAnthropicOptions, model, options)
    project = opts.resolved_project(model, "ANTHROPIC_VERTEX_PROJECT_ID")
    location = opts.resolved_location()
    opts = opts.model_copy(update={"project": project, "location": location})
    token = opts.token()

    def client() -> anthropic.AsyncAnthropicVertex:
        # No token: the SDK loads and refreshes the application default credentials itself.
        return anthropic.AsyncAnthropicVertex(
            region=location,
            project_id=project,
            access_token=token,
            base_url=opts.base_url,
            **sdk_client_options(opts, anthropic),
        )

    # The adapter calls only what every Anthropic client has (post, base_url, close).
    return VertexAnthropicAdapter(model, opts, cast(Any, ClientShards(client, opts.connection_pools)))
