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
when neither is set); see :mod:`.vertex_auth`.

Example (Python)::

    de.Variant(model="vertex:gemini-2.5-flash", provider_options={"project": "my-proj", "location": "europe-west4"})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google import genai
from google.oauth2.credentials import Credentials

from delta_eval.adapters.base import ClientShards
from delta_eval.adapters.gemini import GeminiAdapter, GeminiOptions, http_options
from delta_eval.adapters.options import parse_options
from delta_eval.adapters.registry import AdapterContext
from delta_eval.adapters.vertex_auth import VertexAuthOptions

__all__ = ["VertexGeminiAdapter", "VertexGeminiOptions", "create"]


class VertexGeminiOptions(GeminiOptions, VertexAuthOptions):
    """Options of ``vertex:`` models: those of :class:`~delta_eval.adapters.gemini.GeminiOptions` and of
    :class:`~delta_eval.adapters.vertex_auth.VertexAuthOptions` (project, location, access token).

    ``api_key`` / ``api_key_env`` select express mode (no project); without them and without a token, application
    default credentials are used. ``api_version`` is the SDK's Vertex default (``v1beta1``) unless given.
    """

    api_version: str | None = None  # type: ignore[assignment]  # Vertex's paths, not the Gemini API's v1beta


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
    if key is not None:
        # Express mode: the key alone names the project; project and location would be refused beside it.
        opts = opts.model_copy(update={"project": None, "location": None})

        def express() -> genai.Client:
            options_ = http_options(opts, api_version=opts.api_version)
            return genai.Client(vertexai=True, api_key=key, http_options=options_)

        return VertexGeminiAdapter(model, opts, ClientShards(express, opts.connection_pools))
    project = opts.resolved_project(model)
    location = opts.resolved_location()
    opts = opts.model_copy(update={"project": project, "location": location})
    token = opts.token()
    # A bare token is wrapped as credentials that never refresh; None lets the SDK load the application defaults.
    credentials = Credentials(token) if token else None  # type: ignore[no-untyped-call]

    def client() -> genai.Client:
        return genai.Client(
            vertexai=True,
            project=project,
            location=location,
            credentials=credentials,
            http_options=http_options(opts, api_version=opts.api_version),
        )

    return VertexGeminiAdapter(model, opts, ClientShards(client, opts.connection_pools))
