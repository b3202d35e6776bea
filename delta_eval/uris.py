"""Run folders named by a URI (``s3://bucket/prefix``, ``gs://...``): how a URI is told from a path, shown without
its connection options, and where its local working copy lives (see :mod:`delta_eval.store.remote`).

Example:
    >>> is_uri("s3://bucket/runs/a"), is_uri("runs/a")
    (True, False)
    >>> shown("s3://b/run?endpoint_override=127.0.0.1:9000&scheme=http")
    's3://b/run'
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

__all__ = [
    "WORK_DIR_ENV", "folder_id", "hide", "is_uri", "masked", "shown", "without_credentials", "work_dir", "working_copy",
]  # fmt: skip

#: The environment variable naming where working copies of URI run folders are kept.
WORK_DIR_ENV = "DELTA_EVAL_WORK_DIR"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# Schemes pyarrow reads as one filesystem.
_SAME_SCHEME = {"gcs": "gs"}
# The userinfo of a URI's authority (``s3://KEY:SECRET@bucket``: pyarrow reads S3 keys there), up to its last ``@``.
_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#]*)@")

# Query options that carry credentials (pyarrow's S3 ``access_key``, ``secret_key``, ``session_token``, GCS's
# ``access_token``, ...).
_CREDENTIAL_OPTION = re.compile(r"key|secret|token|password|credential", re.IGNORECASE)


def is_uri(value: object) -> bool:
    """Whether ``value`` is a URI (``scheme://...``) rather than a local path (a :class:`~pathlib.Path` never is)."""
    return isinstance(value, str) and _SCHEME.match(value) is not None


def shown(uri: str) -> str:
    """A URI as messages and manifests show it: without its query (connection options, possibly credentials) and
    its userinfo (keys).

    Example:
        >>> shown("s3://KEY:SECRET@b/run/?region=x")
        's3://b/run'
    """
    return _USERINFO.sub(r"\g<scheme>", uri.split("?", 1)[0], count=1).rstrip("/")


def masked(uri: str) -> str:
    """``uri`` with its userinfo and the values of its credential options as ``***``, its other options kept: how
    a message may show the command to run again.

    Example:
        >>> masked("s3://KEY:SECRET@b/run?endpoint_override=minio:9000&secret_key=SECRET")
        's3://***@b/run?endpoint_override=minio:9000&secret_key=***'
    """
    return _credentials(uri, "***")


def without_credentials(uri: str) -> str:
    """``uri`` without its userinfo and its credential options, its other options kept: how a manifest may name a
    URI that is opened again later, its keys then taken from the environment.

    Example:
        >>> without_credentials("s3://KEY:SECRET@b/run?endpoint_override=minio:9000&secret_key=SECRET")
        's3://b/run?endpoint_override=minio:9000'
    """
    return _credentials(uri, None)


def _credentials(uri: str, mask: str | None) -> str:
    # ``uri`` with its userinfo and credential options' values as ``mask``, or without them (``None``).
    base, _, query = uri.partition("?")
    base = _USERINFO.sub(r"\g<scheme>" + (f"{mask}@" if mask is not None else ""), base, count=1)
    options = []
    for option in filter(None, query.split("&")):
        name, has_value, _ = option.partition("=")
        if has_value and _CREDENTIAL_OPTION.search(name):
            if mask is None:
                continue
            option = f"{name}={mask}"
        options.append(option)
    return f"{base}?{'&'.join(options)}" if options else base


def hide(text: str, uri: str) -> str:
    """``text`` (an error's message, which may quote ``uri`` whole) with ``uri`` shown as :func:`shown` shows it,
    and its query and userinfo nowhere (``***``)."""
    text = text.replace(uri, shown(uri))
    found = _USERINFO.match(uri)
    for secret in (uri.partition("?")[2], found["userinfo"] if found else ""):
        for spelt in {secret, unquote(secret)} - {""}:
            text = text.replace(spelt, "***")
    return text


def work_dir() -> Path:
    """Where working copies are kept: ``$DELTA_EVAL_WORK_DIR``, else ``~/.cache/delta_eval/remote``."""
    given = os.environ.get(WORK_DIR_ENV)
    return Path(given) if given else Path.home() / ".cache" / "delta_eval" / "remote"


def folder_id(uri: str) -> str:
    """The remote folder ``uri`` names, one spelling for all of pyarrow's: without query and userinfo (see
    :func:`shown`), ``gcs://`` as ``gs://``, the path's percent-escapes decoded (pyarrow decodes them).

    Example:
        >>> folder_id("gcs://KEY@b/runs%2Fa/?endpoint_override=x")
        'gs://b/runs/a'
    """
    scheme, _, rest = shown(uri).partition("://")
    return f"{_SAME_SCHEME.get(scheme, scheme)}://{unquote(rest)}".rstrip("/")


def working_copy(uri: str) -> Path:
    """The local folder of the run folder at ``uri``: a ``file://`` URI's own path; for any other, its working
    copy under :func:`work_dir`, named by a hash of :func:`folder_id` (the same run reached through another
    endpoint setting, or spelt another way, has the same copy). A ``file://`` URI with a host raises ValueError.

    Example:
        >>> working_copy("file:///tmp/runs/a").as_posix()
        '/tmp/runs/a'
    """
    if uri.startswith("file://"):
        parts = urlsplit(uri)
        if parts.netloc:
            # ``file://runs/a`` names host ``runs`` and path ``/a``: not a path to guess at (pyarrow refuses it too)
            raise ValueError(
                f"{shown(uri)} names a host ({parts.netloc!r}); a file URI names a path on this machine: "
                "file:///absolute/path"
            )
        return Path(unquote(parts.path))
    return work_dir() / hashlib.sha256(folder_id(uri).encode()).hexdigest()[:24]
