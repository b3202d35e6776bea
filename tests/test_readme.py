from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command_and_the_readme_gives_two_setup_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.+?)\n```", section)
    assert len(commands) == 2
    demo, tests = commands
    assert demo.startswith("python3 -m venv")
    assert demo.endswith("delta-eval demo")
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines()


def test_every_provider_example_of_the_readme_builds_its_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    import tomllib

    import anyio

    import delta_eval as de
    from delta_eval.adapters.registry import create_adapter

    for name in ("OPENAI_API_KEY", "GEMINI_API_KEY", "ANTHROPIC_API_KEY", "AZURE_OPENAI_API_KEY", "VLLM_API_KEY"):
        monkeypatch.setenv(name, "test-key")
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Use real models", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```toml\n(.+?)\n```", section, flags=re.S)
    assert len(blocks) == 2
    # each table on its own: the second block lists alternatives for one [candidate]
    tables = [t for block in blocks for t in re.split(r"\n(?=\[)", block)]
    variants = []
    for table in tables:
        parsed = tomllib.loads("\n".join(line for line in table.splitlines() if not line.startswith("# or:")))
        variants += [de.Variant.model_validate(v) for v in parsed.values()]
    assert {v.model.split(":")[0] for v in variants} == {"openai", "gemini", "openai-responses", "anthropic", "azure"}
    for variant in variants:
        adapter = create_adapter(variant.model, variant.provider_options)
        anyio.run(adapter.aclose)
