"""The coding-agent skills shipped with delta_eval (``SKILL.md`` files): ``delta-eval-run`` (configure, run,
resume, read the result) and ``delta-eval-analyze`` (answer follow-up questions through :func:`delta_eval.analyze`).
They point at the library's functions instead of carrying the logic; ``delta-eval skills install DIR`` copies them.

Example:
    >>> sorted(p.parent.name for p in SKILLS)
    ['delta-eval-analyze', 'delta-eval-run']
"""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["SKILLS", "install_skills"]

#: The skill files, one folder per skill.
SKILLS = sorted(Path(__file__).parent.glob("*/SKILL.md"))


def install_skills(target: str | Path) -> list[Path]:
    """Copy every skill folder into ``target`` (created if new; a skill already there is replaced). Returns the
    installed ``SKILL.md`` paths."""
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    installed = []
    for skill in SKILLS:
        dest = target / skill.parent.name
        shutil.copytree(skill.parent, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        installed.append(dest / "SKILL.md")
    return installed
