"""The options every provider adapter takes (``provider_options`` of a variant), and where its key comes from.

Keys come from the environment: ``api_key_env`` names the variable, defaulting to the provider's usual one
(``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ...). An inline ``api_key`` works but is discouraged; it is a
:class:`~pydantic.SecretStr`, so it never prints, and the run's manifest redacts it.

Example (TOML)::

    [candidate]
    model = "openai:qwen2.5-7b-instruct"
    provider_options = { base_url = "http://localhost:8000/v1", api_key_env = "VLLM_KEY" }
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from delta_eval.exceptions import ConfigError
from delta_eval.redact import describe_invalid, register_secrets

__all__ = ["ProviderOptions", "parse_options"]

OptionsT = TypeVar("OptionsT", bound="ProviderOptions")


class ProviderOptions(BaseModel):
    """Options common to the provider adapters.

    - ``api_key_env``: the environment variable holding the key (default: the provider's usual one);
    - ``api_key``: the key itself (prefer ``api_key_env``);
    - ``base_url``: another endpoint (a proxy, a regional endpoint, an OpenAI-compatible server);
    - ``timeout``: seconds a call may take before it counts as failed (and is retried);
    - ``headers``: extra HTTP headers sent with every call (values are secret: they may carry tokens);
    - ``connection_pools``: SDK clients the calls are spread over (see
      :class:`~delta_eval.adapters.base.ClientShards`); more pays off with more calls in flight.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    api_key_env: str | None = None
    api_key: SecretStr | None = None
    base_url: str | None = None
    timeout: float = Field(default=600.0, gt=0)
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    connection_pools: int = Field(default=8, ge=1, le=64)

    def key(self, default_env: str | None, *, model: str, required: bool = True) -> str | None:
        """The API key: inline, else from ``api_key_env`` (or ``default_env``). A required key that is nowhere is a
        :class:`~delta_eval.exceptions.ConfigError` naming the variable to set."""
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        env = self.api_key_env or default_env
        value = os.environ.get(env) if env else None
        if value:
            register_secrets([value])  # read from the environment: scrubbed from whatever the run writes
            return value
        if required:
            where = f"set {env}" if env else "give api_key_env"
            raise ConfigError(f"{model}: no API key; {where} (or name another variable with api_key_env)")
        return None

    def header_values(self) -> dict[str, str]:
        """The extra headers, revealed for the SDK."""
        return {name: value.get_secret_value() for name, value in self.headers.items()}

    def secrets(self) -> list[str]:
        """Every secret value these options hold, for scrubbing messages (registered process-wide by
        :func:`parse_options`; a key read from the environment is registered by :meth:`key`)."""
        return [
            v for v in (self.api_key.get_secret_value() if self.api_key else None, *self.header_values().values()) if v
        ]


def parse_options(cls: type[OptionsT], model: str, options: Mapping[str, Any]) -> OptionsT:
    """``options`` validated as ``cls``; a bad one is a :class:`~delta_eval.exceptions.ConfigError` that names the
    model and the field, never the value given."""
    try:
        parsed = cls.model_validate(dict(options))
    except ValidationError as exc:
        raise ConfigError(f"bad provider_options for {model}: {describe_invalid(exc)}") from None
    # Every credential the options hold or find in the environment (each kind of options knows its own) is known
    # from here on, and scrubbed from everything written or printed.
    register_secrets(parsed.secrets())
    return parsed
