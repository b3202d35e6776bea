from __future__ import annotations

import re
from pathlib import Path

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
