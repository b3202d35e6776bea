"""Keep secrets out of everything a run writes: manifests, reports and error messages.

Example:
    >>> redact_secrets({"api_key": "sk-123", "api_key_env": "OPENAI_API_KEY", "base_url": "http://x"})
    {'api_key': '***', 'api_key_env': 'OPENAI_API_KEY', 'base_url': 'http://x'}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["REDACTED", "redact_secrets"]

_SECRET_KEY = re.compile(r"(api[_-]?key|secret|token|password|passwd|authorization|credential)", re.IGNORECASE)
REDACTED = "***"


def redact_secrets(value: Any) -> Any:
    """``value`` with every entry whose key names a secret (``api_key``, ``token``, ...) replaced by ``***``.

    Names of environment variables that hold a secret (``api_key_env``) are kept: they are not secrets.
    """
    if isinstance(value, Mapping):
        return {
            k: REDACTED
            if _SECRET_KEY.search(str(k)) and not str(k).lower().endswith("_env") and v is not None
            else redact_secrets(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_secrets(v) for v in value]
    return value
