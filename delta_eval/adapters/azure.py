"""``azure:`` (Chat Completions) and ``azure-responses:`` (Responses) models on Azure OpenAI.

The model id names the deployment (``azure:my-gpt-4o``). Two ways to reach it:

- the classic API: ``endpoint`` (or ``AZURE_OPENAI_ENDPOINT``) and ``api_version`` (or ``OPENAI_API_VERSION``);
  calls go to ``{endpoint}/openai/deployments/{deployment}/...?api-version=...``;
- the v1 API (``v1 = true``): ``{endpoint}/openai/v1/``, no api version, the deployment as the model.

The key comes from ``AZURE_OPENAI_API_KEY`` (or ``api_key_env``); with ``ad_token_env``, an Entra ID token from
that variable is sent instead. Everything else is the OpenAI adapters' (:mod:`.openai_chat`,
:mod:`.openai_responses`).

Example (TOML)::

    [candidate]
    model = "azure:gpt-4o-eval"
    provider_options = { endpoint = "https://my-resource.openai.azure.com", api_version = "2024-10-21" }
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import openai

from delta_eval.adapters.base import ClientShards, sdk_client_options
from delta_eval.adapters.openai_chat import ChatCompletionsAdapter
from delta_eval.adapters.openai_common import OpenAIOptions
from delta_eval.adapters.openai_responses import ResponsesAdapter
from delta_eval.adapters.options import parse_options
from delta_eval.adapters.registry import AdapterContext
from delta_eval.calls import ModelRequest, split_model_id
from delta_eval.exceptions import ConfigError
from delta_eval.redact import register_secrets

__all__ = ["AzureOptions", "create_chat", "create_responses", "make_azure_client"]


class AzureOptions(OpenAIOptions):
    """Options of ``azure:`` models (and those of the OpenAI adapters).

    - ``endpoint``: ``https://{resource}.openai.azure.com`` (default: ``AZURE_OPENAI_ENDPOINT``);
    - ``api_version``: the classic API's version (default: ``OPENAI_API_VERSION``);
    - ``v1``: use the v1 API instead (no api version);
    - ``deployment``: the deployment, when it differs from the model id's name;
    - ``base_model``: the OpenAI model the deployment serves (``gpt-4.1-mini``), which decides the parameters it
      takes (from the model catalogue); default: the deployment's name, read as a model name;
    - ``ad_token_env``: a variable holding an Entra ID token, used instead of a key.
    """

    endpoint: str | None = None
    api_version: str | None = None
    v1: bool = False
    deployment: str | None = None
    base_model: str | None = None
    ad_token_env: str | None = None


def make_azure_client(options: AzureOptions, model: str, *, deployment: str | None = None) -> openai.AsyncOpenAI:
    """The SDK client for an Azure deployment, with the SDK's retries off.

    ``deployment`` puts the classic API's ``/openai/deployments/{deployment}`` in the client's base URL (Chat
    Completions); without it the SDK would route by the body's ``model``, which it cannot read from the pre-encoded
    bodies the adapters send. The Responses API has no deployment path and takes the deployment as the model.
    """
    endpoint = options.endpoint or os.environ.get("AZURE_OPENAI_ENDPOINT")
    if not endpoint:
        raise ConfigError(f"{model}: no Azure endpoint; give endpoint or set AZURE_OPENAI_ENDPOINT")
    token = os.environ.get(options.ad_token_env) if options.ad_token_env else None
    register_secrets([token])  # an Entra ID token read from the environment: scrubbed from what the run writes
    if options.ad_token_env and not token:
        raise ConfigError(f"{model}: no Entra ID token; set {options.ad_token_env}")
    key = None if token else options.key("AZURE_OPENAI_API_KEY", model=model)
    if options.v1:
        return openai.AsyncOpenAI(
            api_key=token or key,
            base_url=f"{endpoint.rstrip('/')}/openai/v1/",
            **sdk_client_options(options, openai),
        )
    version = options.api_version or os.environ.get("OPENAI_API_VERSION")
    if not version:
        raise ConfigError(f"{model}: no Azure api_version; give api_version, set OPENAI_API_VERSION, or use v1")
    return openai.AsyncAzureOpenAI(
        azure_endpoint=endpoint,
        azure_deployment=deployment,
        api_version=version,
        api_key=key,
        azure_ad_token=token,
        **sdk_client_options(options, openai),
    )


def _options(model: str, options: Mapping[str, Any]) -> tuple[AzureOptions, str]:
    opts = parse_options(AzureOptions, model, options)
    # Azure's server takes max_completion_tokens, as OpenAI's does.
    opts = opts.model_copy(update={"max_tokens_field": opts.max_tokens_field or "max_completion_tokens"})
    return opts, opts.deployment or split_model_id(model)[1]


def _identity(options: AzureOptions, deployment: str) -> dict[str, Any]:
    # What decides a deployment's answers: its endpoint, deployment and API (a key never does).
    return {
        "endpoint": options.endpoint or os.environ.get("AZURE_OPENAI_ENDPOINT", ""),
        "deployment": deployment,
        "api": "v1" if options.v1 else options.api_version or os.environ.get("OPENAI_API_VERSION", ""),
    }


#: The Chat Completions fields a classic api-version declares, where it declares fewer than OpenAI's API (from
#: Azure's published inference spec, ``stable/2024-10-21/inference.json``: no ``stream_options``, no
#: ``reasoning_effort``). Azure answers 400 "Unrecognized request argument supplied" for anything else.
_DECLARED_FIELDS: dict[str, frozenset[str]] = {
    "2024-10-21": frozenset({
        "model", "messages", "data_sources", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs",
        "max_tokens", "max_completion_tokens", "n", "presence_penalty", "parallel_tool_calls", "response_format",
        "seed", "stop", "stream", "temperature", "top_p", "tools", "tool_choice", "function_call", "functions", "user",
    }),
}  # fmt: skip


class AzureChatAdapter(ChatCompletionsAdapter):
    """An Azure OpenAI deployment through Chat Completions. Under a classic api-version that declares fewer fields
    than OpenAI's API, the others are left out, each with a note (a streamed answer then carries no usage)."""

    max_concurrency = 16

    def _declared(self, body: dict[str, Any]) -> dict[str, Any]:
        assert isinstance(self.options, AzureOptions)
        version = None if self.options.v1 else self.options.api_version or os.environ.get("OPENAI_API_VERSION")
        declared = _DECLARED_FIELDS.get(version or "")
        if declared is None:
            return body
        for key in sorted(body.keys() - declared):
            self.note(f"{key} dropped: Azure api-version {version} does not declare it")
        return {key: value for key, value in body.items() if key in declared}

    def encode(self, request: ModelRequest) -> dict[str, Any]:
        """The request body, with only the fields the api-version declares."""
        return self._declared(super().encode(request))

    def stream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The streamed body, with only the fields the api-version declares."""
        return self._declared(super().stream_body(body))

    def cache_identity(self) -> dict[str, Any]:
        """The endpoint, deployment and API version (a key never is)."""
        assert isinstance(self.options, AzureOptions)
        return _identity(self.options, self.wire_model)

    def catalogue_hints(self) -> dict[str, Any]:
        """The deployment is looked up as the model it serves."""
        assert isinstance(self.options, AzureOptions)
        return {"base_model": self.options.base_model or self.wire_model}


class AzureResponsesAdapter(ResponsesAdapter):
    """An Azure OpenAI deployment through the Responses API."""

    max_concurrency = 16

    def cache_identity(self) -> dict[str, Any]:
        """The endpoint, deployment and API version (a key never is)."""
        assert isinstance(self.options, AzureOptions)
        return _identity(self.options, self.wire_model)

    def catalogue_hints(self) -> dict[str, Any]:
        """The deployment is looked up as the model it serves."""
        assert isinstance(self.options, AzureOptions)
        return {"base_model": self.options.base_model or self.wire_model}


def create_chat(model: str, options: Mapping[str, Any], context: AdapterContext) -> ChatCompletionsAdapter:
    """The factory of ``azure:`` model ids."""
    opts, deployment = _options(model, options)
    clients = ClientShards(lambda: make_azure_client(opts, model, deployment=deployment), opts.connection_pools)
    return AzureChatAdapter(model, opts, clients, wire_model=deployment)


def create_responses(model: str, options: Mapping[str, Any], context: AdapterContext) -> ResponsesAdapter:
    """The factory of ``azure-responses:`` model ids."""
    opts, deployment = _options(model, options)
    clients = ClientShards(lambda: make_azure_client(opts, model), opts.connection_pools)
    return AzureResponsesAdapter(model, opts, clients, wire_model=deployment)
