"""Where a Vertex AI model's project, location and access token come from, for every ``*vertex*`` prefix.

Options and their defaults:

- ``project``: ``GOOGLE_CLOUD_PROJECT`` (then any extra variables a platform names, such as
  ``ANTHROPIC_VERTEX_PROJECT_ID``);
- ``location``: ``GOOGLE_CLOUD_LOCATION`` (then ``CLOUD_ML_REGION``), else ``global``;
- ``access_token_env``: the variable holding an OAuth access token (default ``GOOGLE_VERTEX_ACCESS_TOKEN``), e.g. the
  output of ``gcloud auth print-access-token``; such a token is not refreshed, so a run must end before it expires;
- ``access_token``: the token itself (prefer ``access_token_env``; a :class:`~pydantic.SecretStr`, it never prints).

Without a token, the provider SDK loads Google's application default credentials and refreshes them itself.

Example:
    >>> VertexAuthOptions(project="p", access_token="ya29.x").secrets()
    ['ya29.x']
"""

from __future__ import annotations

import os

from pydantic import SecretStr

from delta_eval.adapters.options import ProviderOptions
from delta_eval.exceptions import ConfigError
from delta_eval.redact import register_secrets

__all__ = ["DEFAULT_TOKEN_ENV", "VertexAuthOptions"]

#: The variable an access token is read from when ``access_token_env`` is not given.
DEFAULT_TOKEN_ENV = "GOOGLE_VERTEX_ACCESS_TOKEN"


class VertexAuthOptions(ProviderOptions):
    """The Vertex AI options (see the module's docstring), beside those of
    :class:`~delta_eval.adapters.options.ProviderOptions`."""

    project: str | None = None
    location: str | None = None
    access_token_env: str | None = None
    access_token: SecretStr | None = None

    def token(self) -> str | None:
        """The access token: inline, else from ``access_token_env`` (or ``GOOGLE_VERTEX_ACCESS_TOKEN``)."""
        if self.access_token is not None:
            return self.access_token.get_secret_value()
        token = os.environ.get(self.access_token_env or DEFAULT_TOKEN_ENV) or None
        register_secrets([token])  # read from the environment: scrubbed from whatever the run writes
        return token

    def resolved_project(self, model: str, *more_env: str) -> str:
        """The project: the option, else ``GOOGLE_CLOUD_PROJECT`` or ``more_env``; none is a
        :class:`~delta_eval.exceptions.ConfigError` naming what to set."""
        for value in (self.project, *(os.environ.get(name) for name in ("GOOGLE_CLOUD_PROJECT", *more_env))):
            if value:
                return value
        raise ConfigError(
            f"{model}: no Google Cloud project; set GOOGLE_CLOUD_PROJECT or give provider_options project"
        )

    def resolved_location(self) -> str:
        """The location: the option, else ``GOOGLE_CLOUD_LOCATION`` or ``CLOUD_ML_REGION``, else ``global``."""
        return self.location or os.environ.get("GOOGLE_CLOUD_LOCATION") or os.environ.get("CLOUD_ML_REGION") or "global"

    def secrets(self) -> list[str]:
        """The secrets of :class:`~delta_eval.adapters.options.ProviderOptions` and the access token."""
        token = self.token()
        return [*super().secrets(), *([token] if token else [])]
