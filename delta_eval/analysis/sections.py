"""A system prompt in sections, and how the candidate's sections differ from the baseline's.

A theme of losses is most often caused by what the candidate's prompt changed, so the attribution of themes
(:func:`~delta_eval.analysis.themes.attribute`) needs to know which sections were added, removed or reworded.
Sections are matched across the two prompts by text first (the same text is ``unchanged``), then by title or word
similarity (a ``reworded`` section); what is left is ``added`` (only the candidate has it) or ``removed`` (only the
baseline has it).

Example:
    >>> before = prompt_sections("# Booking\\n- Ask for the user id first.\\n- Never book for others.")
    >>> after = prompt_sections("# Booking\\n- Ask the user for their user id first.\\n- Confirm before booking.")
    >>> for d in diff_sections(before, after):
    ...     print(d.change, "|", d.section.text)
    reworded | Ask the user for their user id first.
    added | Confirm before booking.
    removed | Never book for others.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["REWORDED_SIMILARITY", "Section", "SectionChange", "SectionDiff", "diff_sections", "prompt_sections",
           "similarity"]  # fmt: skip

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")
_RULE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(.+)$")
_WORD = re.compile(r"\w+")

#: How a section of the candidate's prompt differs from the baseline's.
SectionChange = Literal["added", "removed", "reworded", "unchanged"]

#: Two sections whose words overlap at least this much (:func:`similarity`) are one section reworded. A rule
#: rephrased keeps most of its words (0.8 for "Ask for the user id first." / "Always ask the user for their user id
#: first."); two different rules of one policy share a few ("the", "user", "must") and mostly stay below.
REWORDED_SIMILARITY = 0.5


@dataclass(frozen=True)
class Section:
    """A section of a system prompt: its title (the heading, or the heading and the rule's first words) and text."""

    title: str
    text: str


@dataclass(frozen=True)
class SectionDiff:
    """A section and how it changed: the candidate's section (the baseline's for ``removed``), and for ``reworded``
    and ``unchanged`` the baseline's section it was matched with (``before``)."""

    section: Section
    change: SectionChange
    before: Section | None = None

    @property
    def text(self) -> str:
        """The words a theme is compared with: both wordings of a reworded section (a theme may follow either)."""
        if self.change == "reworded" and self.before is not None:
            return f"{self.section.text} {self.before.text}"
        return self.section.text


def prompt_sections(prompt: str) -> list[Section]:
    """A system prompt split into sections: each markdown heading starts one, and each numbered or bulleted rule
    under it is a section of its own (titled by the heading and the rule's first words).

    Example:
        >>> [s.title for s in prompt_sections("# Booking\\nBook only for the user.\\n- Ask for the user id first.")]
        ['Booking: Ask for the user id first.', 'Booking']
    """
    sections: list[Section] = []
    heading, body = "(top)", list[str]()

    def flush() -> None:
        if body:
            sections.append(Section(heading, " ".join(body)))

    for line in prompt.splitlines():
        if m := _HEADING.match(line):
            flush()
            heading, body = m.group(1), []
        elif m := _RULE.match(line):
            rule = m.group(1).strip()
            words = " ".join(rule.split()[:8])
            sections.append(Section(f"{heading}: {words}", rule))
        elif line.strip():
            body.append(line.strip())
    flush()
    return sections


def similarity(a: str, b: str) -> float:
    """How much two texts' words overlap, from 0 (none shared) to 1 (the same words, in any order): the Dice
    coefficient of their lowercased word multisets.

    Example:
        >>> similarity("Ask for the user id first.", "Always ask the user for their user id first.")
        0.8
    """
    x, y = Counter(_WORD.findall(a.lower())), Counter(_WORD.findall(b.lower()))
    total = sum(x.values()) + sum(y.values())
    return round(2 * sum((x & y).values()) / total, 4) if total else 1.0


def diff_sections(
    baseline: Sequence[Section], candidate: Sequence[Section], *, reworded: float = REWORDED_SIMILARITY
) -> list[SectionDiff]:
    """How the candidate's sections differ from the baseline's: the candidate's sections in their order (each
    ``unchanged``, ``reworded`` or ``added``), then the baseline's ``removed`` ones in theirs. Every section of
    either prompt appears exactly once.

    Identical texts match first (in order, so repeated sections pair up one to one). The rest match greedily, most
    similar first: the same title, or a :func:`similarity` of at least ``reworded``, makes a ``reworded`` pair.
    """
    matched: dict[int, tuple[int, SectionChange]] = {}  # candidate index -> (baseline index, change)
    free = set(range(len(baseline)))
    by_text: dict[str, list[int]] = {}
    for i, s in enumerate(baseline):
        by_text.setdefault(s.text.strip(), []).append(i)
    for j, s in enumerate(candidate):
        if same := by_text.get(s.text.strip()):
            i = same.pop(0)
            matched[j] = (i, "unchanged")
            free.discard(i)
    # Greedy by similarity: a section rewritten a little pairs with its old self before a looser match claims it.
    scored = []
    for j, s in enumerate(candidate):
        if j in matched:
            continue
        for i in free:
            score = 1.0 if s.title == baseline[i].title else similarity(s.text, baseline[i].text)
            if score >= reworded:
                scored.append((-score, j, i))
    for _, j, i in sorted(scored):
        if j not in matched and i in free:
            matched[j] = (i, "reworded")
            free.discard(i)
    out = [
        SectionDiff(s, matched[j][1], baseline[matched[j][0]]) if j in matched else SectionDiff(s, "added")
        for j, s in enumerate(candidate)
    ]
    return out + [SectionDiff(baseline[i], "removed") for i in sorted(free)]
