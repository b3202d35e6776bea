"""Themes point at the change: the sections of the two prompts are diffed (added / removed / reworded / unchanged),
a theme is attributed to a changed section first and says how sure that is, and reasons that differ only by the
tool they name are one theme."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from delta_eval.analysis.sections import Section, diff_sections, prompt_sections, similarity
from delta_eval.analysis.themes import Theme, attribute, find_themes, mask_tools, section_label

BASELINE_PROMPT = """# Airline policy
- Transfer the user to a human agent only once they confirm they want one.
- The agent must first obtain the user id before changing a reservation.
- Refunds go to the original payment method.
"""
#: The candidate adds a rule (and rewords one): the losses below follow the added rule.
CANDIDATE_PROMPT = """# Airline policy
- Transfer the user to a human agent only once they confirm they want one.
- The agent must always first obtain the user id before changing any reservation.
- Refunds go to the original payment method.

# Style
- Before any write action, repeat the details back and ask for a yes.
"""
TOOLS = ["get_user_details", "get_reservation_details", "update_reservation_flights", "cancel_reservation"]


def _confirm_reasons() -> list[str]:
    # As the judge words it: what the candidate did, the tool named, nothing of the rule's own words but "ask"
    return [f"reply B asked the user to confirm instead of making the required {tool} call; A follows 2 of 2"
            for tool in TOOLS for _ in range(3)]  # fmt: skip


def test_the_sections_of_two_prompts_are_diffed() -> None:
    diff = diff_sections(prompt_sections(BASELINE_PROMPT), prompt_sections(CANDIDATE_PROMPT))
    assert [(d.change, d.section.text[:30]) for d in diff] == [
        ("unchanged", "Transfer the user to a human a"),
        ("reworded", "The agent must always first ob"),
        ("unchanged", "Refunds go to the original pay"),
        ("added", "Before any write action, repea"),
    ]
    assert diff[1].before == prompt_sections(BASELINE_PROMPT)[1]
    removed = diff_sections(prompt_sections(CANDIDATE_PROMPT), prompt_sections(BASELINE_PROMPT))
    assert [d.change for d in removed][-1] == "removed"


def test_a_theme_is_attributed_to_the_added_rule_not_to_an_unrelated_line_sharing_words() -> None:
    reasons = _confirm_reasons()
    diff = diff_sections(prompt_sections(BASELINE_PROMPT), prompt_sections(CANDIDATE_PROMPT))

    def theme() -> Theme:
        return Theme(0, "asked, confirm, user", len(reasons), 1.0, ["asked", "confirm", "user"], [], reasons[:3])

    # On words alone (the candidate's sections, how they changed unknown), the transfer line wins: it shares "user"
    # and "confirm" with the reasons, the added rule only "ask". This is what the attribution used to say.
    by_words = theme()
    attribute([by_words], {0: reasons}, prompt_sections(CANDIDATE_PROMPT), tools=TOOLS)
    assert by_words.section is not None
    assert by_words.section.startswith("Airline policy: Transfer the user")
    assert by_words.section_change is None

    # Knowing the added rule is the change, and competitive, the theme points at it, and says so.
    pointed = theme()
    attribute([pointed], {0: reasons}, diff, tools=TOOLS)
    assert pointed.section == "Style: Before any write action, repeat the details back"
    assert pointed.section_change == "added"
    assert pointed.runner_up is not None  # the reworded line, sharing "user", is close behind: not "high"
    assert pointed.confidence in ("low", "medium")
    assert pointed.section_margin is not None
    assert 0 < pointed.section_margin < 0.5
    assert "(added, " in section_label(pointed.to_dict())


def test_an_unchanged_section_still_wins_when_no_change_is_competitive() -> None:
    reasons = ["reply B refunded to a gift card, not the original payment method"] * 4
    theme = Theme(0, "refund", 4, 1.0, ["refunded", "payment"], [], reasons[:3])
    attribute([theme], {0: reasons}, diff_sections(prompt_sections(BASELINE_PROMPT), prompt_sections(CANDIDATE_PROMPT)))
    assert theme.section == "Airline policy: Refunds go to the original payment method."
    assert theme.section_change == "unchanged"
    assert theme.confidence == "high"


def test_a_removed_rule_is_a_changed_section_too() -> None:
    before = prompt_sections("- Always look up the reservation before cancelling it.\n- Be polite.")
    after = prompt_sections("- Be polite.")
    reasons = ["reply B cancelled without looking up the reservation first"] * 4
    theme = Theme(0, "cancel", 4, 1.0, ["cancelled"], [], reasons[:3])
    attribute([theme], {0: reasons}, diff_sections(before, after))
    assert theme.section_change == "removed"
    assert theme.section is not None
    assert theme.section.startswith("(top): Always look up")


def test_reasons_differing_only_by_the_tool_named_are_one_theme() -> None:
    texts = [r for i in range(3) for tool in TOOLS for r in (
        f"reply B asked the user to confirm instead of making the required {tool} call; A follows {i} of 2",
        f"reply A called {tool} with a different 'date' argument; A follows {i} of 3 reference calls",
    )]  # fmt: skip
    ids = [f"p{i}" for i in range(len(texts))]
    by_tool = find_themes(texts, ids, seed=0)
    assert len(by_tool) > 2  # on the raw words, the tool names split each behaviour
    themes = find_themes(texts, ids, seed=0, tools=TOOLS)
    behaviours = [{"confirm" if "confirm" in texts[ids.index(m)] else "date" for m in t.members} for t in themes]
    assert sorted(map(sorted, behaviours)) == [["confirm"], ["date"]]
    assert all(t.size == len(TOOLS) * 3 for t in themes)
    # the names are masked only in the space clustered: the terms and examples still say which tools
    assert any(term in TOOLS for t in themes for term in t.terms)
    assert all(any(tool in e for tool in TOOLS) for t in themes for e in t.examples)


_titles = st.sampled_from(["Booking", "Refunds", "Style"])
_rules = st.lists(st.sampled_from(["ask", "for", "the", "user", "id", "book", "never", "refund", "cash", "a", "yes"]),
                  min_size=1, max_size=8).map(" ".join)  # fmt: skip
_sections = st.lists(st.builds(Section, _titles, _rules), max_size=8)


@given(_sections, _sections)
def test_a_diff_accounts_for_every_section_of_both_prompts_once(before: list[Section], after: list[Section]) -> None:
    diff = diff_sections(before, after)
    kept = [d for d in diff if d.change != "removed"]
    assert [d.section for d in kept] == after
    from_before = [d.before for d in kept if d.before is not None] + [d.section for d in diff if d.change == "removed"]
    assert sorted(from_before, key=repr) == sorted(before, key=repr)
    for d in diff:
        assert (d.before is not None) == (d.change in ("reworded", "unchanged"))
        if d.change == "unchanged":
            assert d.before is not None
            assert d.before.text == d.section.text
    # the same diff read the other way round: added and removed swap, the rest keep their kind
    back = diff_sections(after, before)
    counts = {c: sum(d.change == c for d in diff) for c in ("added", "removed", "reworded", "unchanged")}
    assert sum(d.change == "removed" for d in back) == counts["added"]
    assert sum(d.change == "added" for d in back) == counts["removed"]
    assert sum(d.change in ("reworded", "unchanged") for d in back) == counts["reworded"] + counts["unchanged"]


@given(_sections)
def test_a_prompt_diffed_with_itself_is_unchanged(sections: list[Section]) -> None:
    assert all(d.change == "unchanged" for d in diff_sections(sections, sections))


@given(st.text(max_size=40), st.text(max_size=40))
def test_similarity_is_symmetric_and_bounded(a: str, b: str) -> None:
    assert similarity(a, b) == similarity(b, a)
    assert 0.0 <= similarity(a, b) <= 1.0
    assert similarity(a, a) == 1.0


@given(st.lists(st.sampled_from([*TOOLS, "book", "calculate"]), max_size=6),
       st.lists(st.sampled_from([*TOOLS, "book", "the", "call", "book_x", " ", "; "]), max_size=12))  # fmt: skip
def test_masked_text_names_no_tool(tools: list[str], words: list[str]) -> None:
    text = " ".join(words)
    masked = mask_tools(text, tools)
    assert not any(re.search(rf"(?<!\w){re.escape(t)}(?!\w)", masked) for t in tools if t != "tool")
    assert mask_tools(masked, tools) == masked
    assert "book_x" not in tools
    assert masked.count("book_x") == text.count("book_x")
