"""Provider-neutral reasoning parameters turned into what one model takes, from its catalogue entry.

A variant says ``reasoning_effort`` or ``reasoning_budget`` once; models differ in what they take (an effort from a
list of their own, a token budget within a range, both, or neither, and whether thinking can be turned off). The
functions here choose the nearest setting the model takes and say once, in the run's notes, what was changed and why;
they never return a value the catalogue says the model refuses.

Example:
    >>> from delta_eval.catalog import ModelInfo
    >>> notes = []
    >>> resolve_effort("minimal", ModelInfo(model="openai:o3", reasoning=True, efforts=("low", "medium", "high")),
    ...                notes.append)
    'low'
    >>> notes
    ["reasoning effort 'minimal' sent as 'low': openai:o3 takes low, medium, high"]
"""

from __future__ import annotations

from collections.abc import Callable

from delta_eval.calls import GenerateParams, ReasoningEffort
from delta_eval.catalog import CATALOG_AS_OF, Effort, ModelInfo

__all__ = ["budget_for_effort", "clamp_budget", "effort_for_budget", "refused", "resolve_effort", "wanted_effort"]

Note = Callable[[str], None]

_BUDGET_FOR_EFFORT: dict[str, int] = {
    "none": 0,
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
    "xhigh": 32768,
    "max": 32768,
}


def effort_for_budget(budget: int) -> ReasoningEffort:
    """The reasoning effort nearest a thinking budget in tokens, for models that take only an effort.

    Example:
        >>> effort_for_budget(0), effort_for_budget(2048), effort_for_budget(4096), effort_for_budget(20000)
        ('none', 'low', 'medium', 'high')
    """
    if budget == 0:
        return "none"
    return "low" if budget <= 2048 else "medium" if budget <= 8192 else "high"


def budget_for_effort(effort: str) -> int:
    """A thinking budget in tokens for an effort, for models that take only a budget (0 for ``none``)."""
    return _BUDGET_FOR_EFFORT.get(effort, _BUDGET_FOR_EFFORT["medium"])


def refused(info: ModelInfo, what: str) -> str:
    """Why ``what`` is not sent to ``info``'s model, for a note."""
    if info.known:
        return f"{info.model} takes no {what}"
    return f"{info.model} is unknown to the catalogue of {CATALOG_AS_OF} (see the note about it)"


def wanted_effort(params: GenerateParams, note: Note, *, budget_word: str = "reasoning_budget") -> str | None:
    """The effort a variant asks for: ``reasoning_effort``, else its budget read as an effort (said once)."""
    if params.reasoning_effort is not None:
        return params.reasoning_effort
    if params.reasoning_budget is None:
        return None
    effort = effort_for_budget(params.reasoning_budget)
    note(f"{budget_word}={params.reasoning_budget} sent as reasoning effort {effort!r} (the model takes no budget)")
    return effort


def resolve_effort(wanted: str, info: ModelInfo, note: Note) -> Effort | None:
    """The effort ``info``'s model takes nearest ``wanted`` (``None``, with a note, when it takes none)."""
    if not info.efforts:
        note(f"reasoning effort {wanted!r} dropped: {refused(info, 'reasoning effort')}")
        return None
    exact = next((e for e in info.efforts if e == wanted), None)
    if exact is not None:
        return exact
    got = info.closest_effort(wanted)
    assert got is not None
    why = "it cannot turn reasoning off; " if wanted == "none" else ""
    note(f"reasoning effort {wanted!r} sent as {got!r}: {why}{info.model} takes {', '.join(info.efforts)}")
    return got


def clamp_budget(budget: int, info: ModelInfo, note: Note) -> int:
    """A non-zero thinking budget moved into the model's range (said once when it moves)."""
    low, high = info.budget_min, info.budget_max
    clamped = max(budget, low) if low is not None else budget
    clamped = min(clamped, high) if high is not None else clamped
    if clamped != budget:
        note(
            f"reasoning_budget={budget} sent as {clamped}: {info.model} takes budgets from {low or 1} to "
            f"{high if high is not None else 'its output limit'}"
        )
    return clamped
