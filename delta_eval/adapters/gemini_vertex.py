"""``vertex:`` models: Gemini on Vertex AI, through the ``google-genai`` SDK with ``vertexai=True``.

The wire format is Gemini's (:mod:`.gemini`: same encoding, decoding, usage and errors); only the endpoint and the
credentials differ. Requests go to ``{base}/{api_version}/projects/{project}/locations/{location}/publishers/google/
models/{model}:generateContent`` (``:streamGenerateContent?alt=sse`` when streamed), authorised by a bearer token.

Credentials, first found wins:

- an API key (``api_key`` or ``api_key_env``): Vertex AI express mode, no project or location, path
  ``{base}/{api_version}/publishers/google/models/{model}:...``;
- an access token in the variable ``access_token_env`` names (default ``GOOGLE_VERTEX_ACCESS_TOKEN``), e.g. the
  output of ``gcloud auth print-access-token``; it is not refreshed, so a run must end before it expires;
- else Google's application default credentials (``gcloud auth application-default login``, a service account on
  the machine), loaded and refreshed by the SDK.

``project`` and ``location`` default to ``GOOGLE_CLOUD_PROJECT`` and ``GOOGLE_CLOUD_LOCATION`` (location: ``global``
when neither is set).

Example (Python)::

    de.Variant(model="vertex:gemini-2.5-flash", provider_options={"project": "my-proj", "location": "europe-west4"})
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from google import genai
from google.genai import types
from google.oauth2.credentials import Credentials
from pydantic import SecretStr

from delta_eval.adapters.base import ClientShards, tls_context
from delta_eval.adapters.gemini import GeminiAdapter, GeminiOptions
from delta_eval.adapters.options import parse_options
from delta_eval.adapters.registry import AdapterContext
from delta_eval.exceptions import ConfigError

__all__ = ["DEFAULT_TOKEN_ENV", "VertexGeminiAdapter", "VertexGeminiOptions", "create"]

#: The variable an access token is read from when ``access_token_env`` is not given.
DEFAULT_TOKEN_ENV = "GOOGLE_VERTEX_ACCESS_TOKEN"


class VertexGeminiOptions(GeminiOptions):
    """Options of ``vertex:`` models (and those of :class:`~delta_eval.adapters.gemini.GeminiOptions`).

    - ``project``, ``location``: the Google Cloud project and region (defaults: ``GOOGLE_CLOUD_PROJECT``,
      ``GOOGLE_CLOUD_LOCATION``, then ``global``);
    - ``access_token_env``: the variable holding an OAuth access token (default ``GOOGLE_VERTEX_ACCESS_TOKEN``);
    - ``access_token``: the token itself (prefer ``access_token_env``).

    ``api_key`` / ``api_key_env`` select express mode (no project); without them and without a token, application
    default credentials are used.
    """

    project: str | None = None
    location: str | None = None
    access_token_env: str | None = None
    access_token: SecretStr | None = None

    def token(self) -> str | None:
        """The access token: inline, else from ``access_token_env`` (or ``GOOGLE_VERTEX_ACCESS_TOKEN``)."""
        if self.access_token is not None:
            return self.access_token.get_secret_value()
        return os.environ.get(self.access_token_env or DEFAULT_TOKEN_ENV) or None

    def secrets(self) -> list[str]:
        """The secrets of :class:`ProviderOptions` and the access token."""
        return [*super().secrets(), *(t for t in (self.token(),) if t)]


class VertexGeminiAdapter(GeminiAdapter):
    """Gemini models on Vertex AI; everything but the client is :class:`~delta_eval.adapters.gemini.GeminiAdapter`."""

    options: VertexGeminiOptions

    def cache_identity(self) -> dict[str, Any]:
        """The endpoint, API version, project and location answering (a credential never is)."""
        return {**super().cache_identity(), "project": self.options.project or "", "location": self.options.location}


def create(model: str, options: Mapping[str, Any], context: AdapterContext) -> VertexGeminiAdapter:
    """The factory of ``vertex:`` model ids."""
    opts = parse_options(VertexGeminiOptions, model, options)
    key = opts.key(None, model=model, required=False)
    http: dict[str, Any] = {"timeout": int(opts.timeout * 1000), "async_client_args": {"verify": tls_context()}}
    if opts.base_url:
        http["base_url"] = opts.base_url
    if opts.api_version:
        http["api_version"] = opts.api_version
    if opts.headers:
        http["headers"] = opts.header_values()
    http_options = types.HttpOptions.model_validate(http)
    if key is not None:
        # Express mode: the key alone names the project; project and location would be refused beside it.
        opts = opts.model_copy(update={"project": None, "location": None})

        def express() -> genai.Client:
            return genai.Client(vertexai=True, api_key=key, http_options=http_options)

        return VertexGeminiAdapter(model, opts, ClientShards(express, opts.connection_pools))
    project = opts.project or os.environ.get("GOOGLE_CLOUD_PROJECT")
    if not project:
        raise ConfigError(f"{model}: no Google Cloud project; set GOOGLE_CLOUD_PROJECT or give provider_options project")
    location = opts.location or os.environ.get("GOOGLE_CLOUD_LOCATION") or "global"
    opts = opts.model_copy(update={"project": project, "location": location})
    token = opts.token()
    # A bare token is wrapped as credentials that never refresh; None lets the SDK load the application defaults.
    credentials = Credentials(token) if token else None  # type: ignore[no-untyped-call]

    def client() -> genai.Client:
        return genai.Client(
            vertexai=True, project=project, location=location, credentials=credentials, http_options=http_options
        )

    return VertexGeminiAdapter(model, opts, ClientShards(client, opts.connection_pools))
