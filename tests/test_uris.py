"""URIs as messages and manifests show them: no credential survives, every other option does."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from delta_eval.uris import masked, shown, without_credentials

_token = st.text(alphabet="ABCDEFGHJKLMNPQRSTUVWXYZ0123456789", min_size=12, max_size=24)
_credential = st.sampled_from(["access_key", "secret_key", "session_token", "access_token", "password"])


@given(key=_token, secret=_token, option=_credential, in_userinfo=st.booleans())
def test_no_credential_is_left_in_any_shown_form(key: str, secret: str, option: str, in_userinfo: bool) -> None:
    userinfo = f"{key}:{secret}@" if in_userinfo else ""
    uri = f"s3://{userinfo}bucket/runs/a?endpoint_override=minio:9000&{option}={secret}&scheme=http"
    for form in (masked(uri), without_credentials(uri), shown(uri)):
        assert secret not in form
        assert key not in form or not in_userinfo
        assert form.startswith("s3://")
        assert "bucket/runs/a" in form
    # the options a reader needs to reach the store again are kept where the URI is to be opened again
    assert without_credentials(uri) == "s3://bucket/runs/a?endpoint_override=minio:9000&scheme=http"
    assert masked(uri).count("***") == 1 + in_userinfo
    assert "endpoint_override=minio:9000" in masked(uri)


def test_a_uri_without_credentials_is_unchanged() -> None:
    for uri in ("s3://b/run", "gs://b/run?region=x", "s3://b/run?anonymous=true"):
        assert without_credentials(uri) == masked(uri) == uri
