from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import delta_eval as de
from delta_eval.config import load_config
from delta_eval.exceptions import ConfigError
from delta_eval.ingest import open_source
from delta_eval.redact import redact_secrets


def test_yaml_config_with_a_sql_source_and_relative_paths(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "eval.yaml"
    path.write_text(
        f"""
out: runs/x
source:
  sql: SELECT * FROM read_json('{de.demo.DEMO_CONVERSATIONS}') WHERE task_id < 3
  messages: traj
  id: "{{task_id}}/{{trial}}"
  metadata: [task_id]
baseline: {{model: "simulated:a", params: {{temperature: 0.3}}}}
candidate: {{model: "simulated:b", tools: "{de.demo.DEMO_TOOLS}"}}
sample: {{n: 4, seed: 2}}
"""
    )
    cfg = load_config(path)
    assert cfg.out == tmp_path / "conf" / "runs" / "x"
    assert cfg.baseline.params.temperature == 0.3
    assert cfg.candidate.tools is not None
    assert len(cfg.candidate.tools) == 14
    assert cfg.source is not None
    good, bad = open_source(cfg.source).load()
    assert (len(good), bad) == (12, [])
    assert load_config(path, out=tmp_path / "elsewhere").out == tmp_path / "elsewhere"


def test_config_errors_name_the_file_and_the_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        'out = "x"\n[baseline]\nmodel = "simulated:a"\ntemprature = 1\n[candidate]\nmodel = "simulated:b"\n'
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value)
    assert "temprature" in str(info.value)
    path.write_text("out = [")
    with pytest.raises(ConfigError, match="cannot parse"):
        load_config(path)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ValueError, match="exactly one of 'path' or 'sql'"):
        de.SourceConfig()
    path.write_text('out = "x"\n[source]\nsql = "SELECT 1"\npath = "a.jsonl"\n')
    with pytest.raises(ConfigError, match="exactly one of 'path' or 'sql'"):
        load_config(path)


def test_sides_are_named_and_must_differ() -> None:
    cfg = de.RunConfig(baseline=de.Variant(model="simulated:a"), candidate=de.Variant(model="simulated:a"), out="x")
    assert (cfg.baseline.name, cfg.candidate.name) == ("baseline", "candidate")
    with pytest.raises(ValueError, match="different names"):
        de.RunConfig(
            baseline=de.Variant(model="simulated:a", name="v"),
            candidate=de.Variant(model="simulated:b", name="v"),
            out="x",
        )


def test_secrets_are_redacted_wherever_they_nest() -> None:
    value = {"api_key": "sk-1", "headers": {"Authorization": "Bearer x"}, "api_key_env": "KEY", "n": [{"token": 1}]}
    assert redact_secrets(value) == {
        "api_key": "***",
        "headers": {"Authorization": "***"},
        "api_key_env": "KEY",
        "n": [{"token": "***"}],
    }


def test_how_the_session_simulators_are_reached_is_not_part_of_the_fingerprint(tmp_path: Path) -> None:
    """A session run resumed with its user or tool simulator on another URL or key variable (a fake server on a
    new port) is the same run, as it is for the sides' and judges' ``provider_options``; what the simulator is asked
    (a model option) still is part of it."""
    from delta_eval.demo import demo_config

    def config(**session: Any) -> de.RunConfig:
        base = demo_config(tmp_path / "run", n=2, latency_ms=0.0)
        s = de.Session(user="simulated:user", tool_model="simulated:tools", **session)
        return base.model_copy(update={"mode": "session", "session": s})

    first = config(user_options={"base_url": "http://127.0.0.1:1/v1", "api_key_env": "A"},
                   tool_options={"base_url": "http://127.0.0.1:1/v1", "api_key": "k1"})  # fmt: skip
    moved = config(user_options={"base_url": "http://127.0.0.1:2/v1", "api_key_env": "B"},
                   tool_options={"base_url": "http://127.0.0.1:2/v1", "api_key": "k2"})  # fmt: skip
    assert first.fingerprint() == moved.fingerprint()
    assert config(tool_options={"temperature": 0.5}).fingerprint() != config().fingerprint()
