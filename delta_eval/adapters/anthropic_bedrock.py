"""``bedrock:`` / ``anthropic-bedrock:`` models: Claude on Amazon Bedrock, through the ``anthropic`` SDK's
``AsyncAnthropicBedrock`` (which signs requests with SigV4 through ``boto3``: ``pip install 'delta-eval[bedrock]'``).

The Messages wire format of :mod:`.anthropic` (same encoding, decoding, usage, errors); the SDK's Bedrock client moves
the model from the body into the path, ``{base}/model/{modelId}/invoke`` (``/invoke-with-response-stream`` when
streamed, framed as AWS event-stream messages, which the SDK decodes with ``botocore``), and the body names Bedrock's
API version, ``anthropic_version: "bedrock-2023-05-31"``. Model ids are Bedrock's, e.g.
``anthropic.claude-sonnet-4-5-20250929-v1:0`` or an inference profile ``us.anthropic.claude-sonnet-4-5-20250929-v1:0``.

Options beyond :class:`~delta_eval.adapters.anthropic.AnthropicOptions`:

- ``region``: the AWS region (default ``AWS_REGION`` / ``AWS_DEFAULT_REGION`` / the profile's);
- ``aws_profile``: a named profile of the AWS configuration;
- ``aws_access_key_env`` / ``aws_secret_key_env`` / ``aws_session_token_env``: variables holding explicit credentials
  (or ``aws_access_key`` ... inline); with none, boto3's default chain (``AWS_ACCESS_KEY_ID`` ..., the profile, an
  instance role) signs;
- ``api_key`` / ``api_key_env``: a Bedrock API key (bearer token) instead of SigV4 (the SDK also reads
  ``AWS_BEARER_TOKEN_BEDROCK``).

Example (Python)::

    de.Variant(model="bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0", provider_options={"region": "us-east-1"},
               params={"max_tokens": 2048})
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, cast

import anthropic
from pydantic import SecretStr

from delta_eval.adapters.anthropic import AnthropicAdapter, AnthropicOptions
from delta_eval.adapters.base import ClientShards, sdk_client_options
from delta_eval.adapters.options import parse_options
from delta_eval.adapters.registry import AdapterContext
from delta_eval.calls import ModelRequest
from delta_eval.exceptions import ConfigError

__all__ = ["BEDROCK_VERSION", "BedrockAnthropicAdapter", "BedrockAnthropicOptions", "create"]

#: The API version Bedrock documents for Claude. The SDK would fill in its own first-party version, which is not one.
BEDROCK_VERSION = "bedrock-2023-05-31"
#: Variables boto3 reads credentials from: scrubbed from messages like the options' own secrets.
_AWS_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK")


class BedrockAnthropicOptions(AnthropicOptions):
    """Options of ``bedrock:`` models (see the module's docstring)."""

    region: str | None = None
    aws_profile: str | None = None
    aws_access_key_env: str | None = None
    aws_secret_key_env: str | None = None
    aws_session_token_env: str | None = None
    aws_access_key: SecretStr | None = None
    aws_secret_key: SecretStr | None = None
    aws_session_token: SecretStr | None = None
    anthropic_version: str = BEDROCK_VERSION

    def aws(self, name: str) -> str | None:
        """The AWS credential ``name`` (``access_key``, ``secret_key``, ``session_token``): inline, else from its
        ``*_env`` variable; ``None`` leaves it to boto3's default chain."""
        inline: SecretStr | None = getattr(self, f"aws_{name}")
        if inline is not None:
            return inline.get_secret_value()
        env: str | None = getattr(self, f"aws_{name}_env")
        return os.environ.get(env) or None if env else None

    def secrets(self) -> list[str]:
        """The secrets of :class:`~delta_eval.adapters.options.ProviderOptions`, the AWS credentials given, and those
        boto3 would read from the environment."""
        given = [self.aws(n) for n in ("access_key", "secret_key", "session_token")]
        found = [os.environ.get(name) for name in _AWS_SECRET_ENV]
        return [*super().secrets(), *(v for v in (*given, *found) if v)]


class BedrockAnthropicAdapter(AnthropicAdapter):
    """Claude on Amazon Bedrock; everything but the client and the body's version is
    :class:`~delta_eval.adapters.anthropic.AnthropicAdapter`."""

    options: BedrockAnthropicOptions

    def encode(self, request: ModelRequest) -> dict[str, Any]:
        """The Messages body with Bedrock's ``anthropic_version`` (the SDK takes the model out into the path)."""
        return {**super().encode(request), "anthropic_version": self.options.anthropic_version}

    def post_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """A dict body: the SDK's Bedrock client rewrites only those."""
        return {"body": body}

    def cache_identity(self) -> dict[str, Any]:
        """The endpoint (which names the region) answering (a credential never is)."""
        return {**super().cache_identity(), "region": self.options.region or ""}


def create(model: str, options: Mapping[str, Any], context: AdapterContext) -> BedrockAnthropicAdapter:
    """The factory of ``bedrock:`` and ``anthropic-bedrock:`` model ids."""
    opts = parse_options(BedrockAnthropicOptions, model, options)
    key = opts.key(None, model=model, required=False)
    access, secret, session = (opts.aws(n) for n in ("access_key", "secret_key", "session_token"))
    if key is not None and (access or secret or session or opts.aws_profile):
        raise ConfigError(f"{model}: give a Bedrock API key or AWS credentials, not both")

    def client() -> anthropic.AsyncAnthropicBedrock:
        return anthropic.AsyncAnthropicBedrock(
            aws_access_key=access,
            aws_secret_key=secret,
            aws_session_token=session,
            aws_region=opts.region,
            aws_profile=opts.aws_profile,
            api_key=key,
            base_url=opts.base_url,
            **sdk_client_options(opts, anthropic),
        )

    try:
        shards = ClientShards(client, opts.connection_pools)
    except ValueError as exc:  # no region anywhere: the SDK says which variables it read
        raise ConfigError(f"{model}: {exc}") from None
    opts = opts.model_copy(update={"region": shards.first.aws_region})
    # The adapter calls only what every Anthropic client has (post, base_url, close).
    return BedrockAnthropicAdapter(model, opts, cast(Any, shards))
