"""No secret in any output: a run with a secret in every place a configuration can hold one, then a scan of every
file of its folder (the manifest, each Parquet file through DuckDB, the cache's rows, the errors) and of what the
command printed."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

import delta_eval as de
from delta_eval.cli import main
from delta_eval.demo import behaviours
from delta_eval.metrics import ExitCode
from delta_eval.redact import redact_secrets, redact_text
from delta_eval.schema import Conversation
from delta_eval.testing import FakeAnthropicServer, FakeGeminiServer, FakeOpenAIServer, JSONReply, SimulatedBehaviour
from tests.conftest import demo_source_toml

SECRETS = {
    "inline api_key": "inline-key-5f1d9c0b",
    "header value": "header-value-8a7e6d5c",
    "URL userinfo": "url-password-3b2a1f0e",
    "params.extra token": "extra-token-9c8b7a6f",
    "headers list in params.extra": "listed-header-4d3c2b1a",
    "judge api_key": "judge-key-7e6d5c4b",
    "key-shaped value": "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX",
}


def everything_in(folder: Path) -> str:
    """Every file's content as text: Parquet read through DuckDB, SQLite through its rows, the rest as bytes."""
    parts = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        parts.append(path.read_bytes().decode("utf-8", "replace"))
        if path.suffix == ".parquet":
            rows = duckdb.sql(f"SELECT * FROM read_parquet('{path}')").fetchall()
            assert rows
            parts.append(repr(rows))
        elif path.name == "cache.sqlite":
            with sqlite3.connect(path) as db:
                parts.append(repr(db.execute("SELECT * FROM responses").fetchall()))
    return "\n".join(parts)


def test_no_secret_reaches_the_run_folder_or_the_console(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tau_conversations: list[Conversation]
) -> None:
    s = SECRETS
    # The candidate rewords every reply, so pairs reach the judges.
    behaviour = {**behaviours(latency_ms=0.0), "candidate": SimulatedBehaviour(reword_rate=1.0, latency_ms=0.0)}
    with FakeOpenAIServer(recordings=tau_conversations, behaviour=behaviour) as server:
        url = server.base_url.replace("http://", f"http://scan-user:{s['URL userinfo']}@")
        config = tmp_path / "eval.toml"
        config.write_text(
            'out = "run"\ndescription = "secrets scan"\n'
            + demo_source_toml()
            + f"""
[baseline]
model = "openai:baseline"
[baseline.provider_options]
base_url = "{url}"
api_key = "{s["inline api_key"]}"
headers = {{ X-Team = "{s["header value"]}" }}

[candidate]
model = "openai:candidate"
name = "candidate"
system_prompt = "Be brief. {{{{recorded_system_prompt}}}}"
provider_options = {{ base_url = "{server.base_url}", api_key = "{s["key-shaped value"]}" }}

[candidate.params.extra]
metadata = {{ access_token = "{s["params.extra token"]}" }}
headers = [["X-Auth", "{s["headers list in params.extra"]}"]]

[judges.judge]
model = "openai:judge"
provider_options = {{ base_url = "{server.base_url}", api_key = "{s["judge api_key"]}" }}
"""
        )
        assert main(["run", str(config), "--no-progress"]) == 0
        assert main(["report", str(tmp_path / "run")]) == 0
    printed = capsys.readouterr()
    result = de.open_result(tmp_path / "run")
    assert result.counts.pairs == 3
    assert result.counts.by_stage.get("judge", 0) + result.counts.by_stage.get("equivalence", 0) > 0
    written = everything_in(tmp_path / "run")
    assert "openai:candidate" in written  # the scan reads what the run wrote
    for where, secret in SECRETS.items():
        assert secret not in written, f"the {where} reached the run folder"
        assert secret not in printed.out + printed.err, f"the {where} reached the console"
    # what stands in for them
    baseline = result.manifest.config["baseline"]["provider_options"]
    assert baseline["api_key"] == "***"
    assert baseline["headers"] == {"X-Team": "***"}
    assert baseline["base_url"].startswith("http://***@127.0.0.1:")


def test_a_rejected_secret_is_never_echoed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = "sk-live-0123456789abcdefghij"
    for body in (
        f'[baseline]\nmodel = "simulated:a"\nparams = {{ temperature = "{secret}" }}\n',
        f'[baseline]\nmodel = "openai:gpt-4o"\nprovider_options = {{ apikey = "{secret}" }}\n',
        f'[baseline]\nmodel = "openai:gpt-4o"\nprovider_options = {{ headers = [["Authorization", "{secret}"]] }}\n',
        f'[baseline]\nmodel = "openai:gpt-4o"\nprovider_options = {{ timeout = "{secret}" }}\n',
    ):
        config = tmp_path / "bad.toml"
        config.write_text(
            f'out = "x"\n[source]\npath = "{de.demo.DEMO_CONVERSATIONS}"\nmessages = "traj"\n{body}'
            '[candidate]\nmodel = "simulated:b"\n'
        )
        assert main(["run", str(config), "--no-progress"]) == 1
        err = capsys.readouterr().err
        assert "error" in err
        assert secret not in err
        assert not (tmp_path / "x").exists()


def test_redaction_covers_names_headers_urls_and_key_shapes() -> None:
    cases = [
        ({"base_url": "https://me:pw123456@proxy.example/v1"}, {"base_url": "https://***@proxy.example/v1"}),
        ({"max_tokens": 512, "max_tokens_field": "max_tokens"}, {"max_tokens": 512, "max_tokens_field": "max_tokens"}),
        ({"thinking": {"budget_tokens": 1024}}, {"thinking": {"budget_tokens": 1024}}),
        ({"api_key_env": "MY_KEY"}, {"api_key_env": "MY_KEY"}),
        ({"note": "call with Bearer abcdefgh12345678"}, {"note": "call with ***"}),
        ({"refresh_token": "r-1"}, {"refresh_token": "***"}),
        ({"headers": [["X-Api", "v1"], ["X-Other", "v2"]]}, {"headers": [["X-Api", "***"], ["X-Other", "***"]]}),
    ]
    for given, redacted in cases:
        assert redact_secrets(given) == redacted


# -- the cloud-platform prefixes: a credential echoed back by an error never reaches the error ----------------------

TOKEN = "ya29.platform-token-1a2b3c4d"
AWS = {"aws_access_key": "AKIAPLATFORMTESTKEY0", "aws_secret_key": "aws-secret-5e6f7a8b9c0d",
       "aws_session_token": "aws-session-1f2e3d4c5b6a", "region": "us-east-1"}  # fmt: skip
BEDROCK_KEY = "bedrock-key-7b8c9d0e1f2a"
#: model, fake server, options given the server's URL, the secrets those options hold
Platform = tuple[str, type[FakeGeminiServer | FakeAnthropicServer], Callable[[str], dict[str, object]], list[str]]
PLATFORMS: list[Platform] = [
    ("vertex:gemini-2.5-flash", FakeGeminiServer,
     lambda url: {"base_url": url, "project": "p", "location": "l", "access_token": TOKEN}, [TOKEN]),
    ("anthropic-vertex:claude-sonnet-4-5@20250929", FakeAnthropicServer,
     lambda url: {"base_url": url + "/v1", "project": "p", "location": "l", "access_token": TOKEN}, [TOKEN]),
    ("bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0", FakeAnthropicServer,
     lambda url: {"base_url": url, **AWS}, [v for k, v in AWS.items() if k != "region"]),
    ("anthropic-bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0", FakeAnthropicServer,
     lambda url: {"base_url": url, "api_key": BEDROCK_KEY, "region": "us-east-1"}, [BEDROCK_KEY]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("model", "server_class", "options", "secrets"), PLATFORMS, ids=[p[0].split(":")[0] for p in PLATFORMS]
)
def test_platform_credentials_never_reach_an_error_or_the_request_log(
    model: str,
    server_class: type[FakeGeminiServer | FakeAnthropicServer],
    options: Callable[[str], dict[str, object]],
    secrets: list[str],
) -> None:
    from tests.adapters.support import call, request

    with server_class() as server:
        # A misbehaving proxy that repeats the request's credentials in its error message.
        message = "invalid credentials: " + ", ".join(secrets)
        server.enqueue(JSONReply({"error": {"type": "authentication_error", "message": message}}, status=401))
        with pytest.raises(de.ProviderError) as info:
            call(model, options(server.url), request(model, max_tokens=16), retry=de.RetryPolicy(max_attempts=1))
        logged = repr(server.requests)
    said = str(info.value)
    assert "invalid credentials" in said
    for secret in secrets:
        assert secret not in said, f"{secret} reached the error"
        assert secret not in logged, f"{secret} reached the fake's request log"


def test_redaction_knows_google_tokens_and_aws_key_ids_by_shape() -> None:
    assert redact_text("token ya29.a0AfH6SMBx-abc_def and key AKIAIOSFODNN7EXAMPLE") == "token *** and key ***"


# -- secrets known by where they came from, whatever their shape ----------------------------------------------------


def test_a_key_read_from_the_environment_and_echoed_by_a_provider_reaches_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tau_conversations: list[Conversation],
) -> None:
    env_key = "plainenvkey-0b1c2d3e"  # no known shape: only where it came from says it is a key
    monkeypatch.setenv("DELTA_TEST_PLAIN_KEY", env_key)
    with FakeOpenAIServer(recordings=tau_conversations, behaviour=behaviours(latency_ms=0.0)) as server:
        # A provider that repeats the key it was sent in its refusal (as OpenAI's "Incorrect API key provided").
        echo = {"error": {"message": f"Invalid request with key {env_key}", "type": "invalid_request_error"}}
        server.enqueue(*(JSONReply(echo, status=400) for _ in range(4)))
        config = tmp_path / "eval.toml"
        config.write_text(
            'out = "run"\n'
            + demo_source_toml()
            + f"""
[baseline]
model = "openai:baseline"
provider_options = {{ base_url = "{server.base_url}", api_key_env = "DELTA_TEST_PLAIN_KEY" }}

[candidate]
model = "openai:candidate"
provider_options = {{ base_url = "{server.base_url}", api_key_env = "DELTA_TEST_PLAIN_KEY" }}

[candidate.params.extra]
access_key = "plainvalue-access-77"

[judges.judge]
model = "openai:judge"
provider_options = {{ base_url = "{server.base_url}", api_key_env = "DELTA_TEST_PLAIN_KEY" }}
"""
        )
        # Which of the concurrent calls the four refusals reach is the order they arrive in: every pair an error
        # (no decision), or errors all on one side (REJECTED), or neither. The run completes either way.
        code = main(["run", str(config), "--no-progress"])
        assert code in (ExitCode.OK, ExitCode.REJECTED, ExitCode.INCOMPLETE)
        assert de.open_result(tmp_path / "run").manifest.status == "completed"
        assert main(["report", str(tmp_path / "run")]) == 0
    printed = capsys.readouterr()
    written = everything_in(tmp_path / "run")
    con = de.open_run(tmp_path / "run")
    messages = [m for (m,) in con.execute("SELECT message FROM errors WHERE stage = 'replay'").fetchall()]
    assert messages
    assert all("Invalid request with key ***" in m for m in messages)
    for secret in (env_key, "plainvalue-access-77"):
        assert secret not in written
        assert secret not in printed.out + printed.err


def test_plain_credentials_in_urls_assignments_and_misplaced_settings_are_not_echoed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = "plainvalue"
    assert redact_text(f"https://r.openai.azure.com/x?api-version=2024&api-key={plain}") == (
        "https://r.openai.azure.com/x?api-version=2024&api-key=***"
    )
    assert redact_text(f"GET /v1/models?key={plain}&alt=sse and ?token={plain}") == (
        "GET /v1/models?key=***&alt=sse and ?token=***"
    )
    assert redact_text(f'access_key = "{plain}"') == 'access_key = "***"'
    assert redact_secrets({"access_key": plain, "secret_key": plain, "prompt_cache_key": True}) == {
        "access_key": "***",
        "secret_key": "***",
        "prompt_cache_key": True,
    }
    for body in (
        f'provider_options = "api_key={plain}"\n',
        f'provider_options = {{ base_url = "https://x.example/v1?api-key={plain}", timeout = "api_key={plain}" }}\n',
        f'params = {{ temperature = "token={plain}" }}\n',
    ):
        config = tmp_path / "bad.toml"
        config.write_text(
            f'out = "x"\n[source]\npath = "{de.demo.DEMO_CONVERSATIONS}"\nmessages = "traj"\n'
            f'[baseline]\nmodel = "openai:gpt-4o"\n{body}[candidate]\nmodel = "simulated:b"\n'
        )
        assert main(["run", str(config), "--no-progress"]) == 1
        err = capsys.readouterr().err
        assert "error" in err
        assert plain not in err, err
