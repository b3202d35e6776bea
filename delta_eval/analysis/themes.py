"""Themes in the judges' reasons: what the candidate got wrong (or right), in a handful of named clusters, each tied
to the part of the system prompt to revise.

The reasons (stage-3 reasoning and summary) are turned into TF-IDF vectors (nothing to download), reduced with a
truncated SVD, and clustered with k-means for each number of clusters in a range; the number kept is the one with
the best silhouette (chosen, not guessed), and every step is seeded. The tools a run knows are masked to one word in
the space clustered, so that a behaviour ("asked the user to confirm instead of making the required X call") is one
theme whatever tool it concerned; the theme's terms and examples still name the tools. A theme is named by its most
distinctive terms, or by a ``namer`` you give (e.g. one LLM call through the run's judge client).

Its prompt section (:func:`attribute`) is the section of the system prompt (split by headings and numbered or
bulleted rules, :func:`~delta_eval.analysis.sections.prompt_sections`) whose words are closest to the theme's
reasons, where the sections the candidate's prompt changed (added, removed, reworded:
:func:`~delta_eval.analysis.sections.diff_sections`) count :data:`CHANGED_WEIGHT` times their similarity: a loss
is most often caused by what changed. The theme says how the section changed and how confident the attribution is.

Example:
    >>> reasons = ["skipped the required get_reservation_details call"] * 6 + ["called book with a different cabin"] * 6
    >>> themes = find_themes(reasons, [f"p{i}" for i in range(12)], seed=0)
    >>> sorted(t.size for t in themes)
    [6, 6]
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from delta_eval.analysis.sections import Section, SectionChange, SectionDiff, prompt_sections

__all__ = ["CHANGED_WEIGHT", "Confidence", "Section", "Theme", "attribute", "find_themes", "mask_tools",
           "prompt_sections", "section_label"]  # fmt: skip

#: Words every judge's reason uses, which say nothing about what differed.
_GENERIC = [
    "reply", "replies", "reference", "follows", "follow", "calls", "call", "better", "simulated", "judge",
    "candidate", "baseline", "output", "outputs", "equally", "good", "overlap", "text", "required", "called",
    "different", "argument", "arguments", "instead", "making", "make", "makes",
]  # fmt: skip


#: How sure an attribution is (:func:`attribute`): ``high`` when the section's weighted score is at least twice the
#: runner-up's, ``medium`` when at least 1.25 times, else ``low`` (and ``low`` whenever the theme shares almost no
#: word with the section). A rule of thumb on the margin, not a calibrated probability.
Confidence = Literal["high", "medium", "low"]

#: A section the candidate's prompt changed counts this many times its similarity to a theme: it wins over an
#: unchanged section up to three times as similar. In a delta evaluation the change is the first suspect; a prior,
#: set by judgement (on the demo, 2 left its confirm-instead-of-acting theme on an old line sharing "user" and
#: "confirmation"), not fitted to labelled attributions.
CHANGED_WEIGHT = 3.0

#: Below this cosine a theme and a section share hardly a word: an attribution that close is ``low`` confidence.
_WEAK_SCORE = 0.05
_TOOL = "tool"  # what a tool name becomes in the space clustered


@dataclass
class Theme:
    """A cluster of reasons: its number, name, size and share of the reasons clustered, its most distinctive terms,
    example pair ids (those closest to its centre first), and the prompt section it is attributed to
    (:func:`attribute`): the section's title and similarity, how the candidate changed it (``None`` when the
    baseline's prompt was not compared), how confident the attribution is, its margin over the runner-up section,
    and that section's title."""

    id: int
    name: str
    size: int
    share: float
    terms: list[str]
    pair_ids: list[str]
    examples: list[str]
    section: str | None = None
    section_score: float | None = None
    section_change: SectionChange | None = None
    confidence: Confidence | None = None
    section_margin: float | None = None
    runner_up: str | None = None
    members: list[str] = field(default_factory=list, repr=False)

    def to_dict(self, members: bool = False) -> dict[str, Any]:
        """JSON-ready (``members``: every pair id of the theme, not only the examples)."""
        data = asdict(self)
        if not members:
            data.pop("members")
        return data


def find_themes(
    texts: Sequence[str],
    pair_ids: Sequence[str],
    *,
    seed: int = 0,
    k: int | None = None,
    k_range: tuple[int, int] = (2, 8),
    namer: Callable[[list[str], list[str]], str] | None = None,
    max_features: int = 20_000,
    embed: Callable[[list[str]], Any] | None = None,
    tools: Sequence[str] = (),
) -> list[Theme]:
    """Cluster ``texts`` (one per pair) into themes, largest first. ``k`` fixes the number of clusters; else the
    best silhouette over ``k_range`` decides. ``namer(terms, examples)`` names a theme (default: its top terms).
    ``embed(texts)`` (an array, one row per text: e.g. a provider's embeddings) replaces TF-IDF + SVD as the space
    clustered in; the terms still come from TF-IDF. ``tools``: the tool names the run knows, masked to one word
    (:func:`mask_tools`) in the TF-IDF space clustered, so that reasons differing only by the tool named are one
    theme; the terms and examples keep the names.

    Fewer than 4 texts make one theme (or none); the result is the same for the same texts and seed.
    """
    if not texts:
        return []
    from sklearn.cluster import KMeans
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, TfidfVectorizer
    from sklearn.metrics import silhouette_score

    stop = sorted(ENGLISH_STOP_WORDS.union(_GENERIC))
    vectorizer = TfidfVectorizer(stop_words=stop, ngram_range=(1, 2), min_df=1, max_features=max_features,
                                 sublinear_tf=True, token_pattern=r"(?u)\b[A-Za-z_][A-Za-z0-9_]+\b")  # fmt: skip
    try:
        tfidf = vectorizer.fit_transform(texts)
    except ValueError:  # nothing but stop words
        return []
    terms = np.array(vectorizer.get_feature_names_out())
    clustered = tfidf
    if tools:
        masked = [mask_tools(t, tools) for t in texts]
        try:
            clustered = TfidfVectorizer(**vectorizer.get_params()).fit_transform(masked)
        except ValueError:  # the reasons were tool names and stop words: only the names told them apart
            clustered = tfidf
    n = tfidf.shape[0]
    if n < 4 or clustered.shape[1] < 2 or _all_alike(clustered):
        labels = np.zeros(n, dtype=int)
        space = clustered.toarray()
    else:
        if embed is not None:
            space = np.asarray(embed(list(texts)), dtype=float)
            if space.shape[0] != n:
                raise ValueError(f"embed returned {space.shape[0]} vectors for {n} texts")
        else:
            dims = max(2, min(100, clustered.shape[1] - 1, n - 1))
            space = TruncatedSVD(n_components=dims, random_state=seed).fit_transform(clustered)
        norms = np.linalg.norm(space, axis=1, keepdims=True)
        space = space / np.where(norms == 0, 1, norms)
        distinct = len(np.unique(space.round(6), axis=0))  # k-means cannot make more clusters than distinct points
        candidates = [min(k, distinct)] if k is not None else range(k_range[0], min(k_range[1], n - 1, distinct) + 1)
        best: tuple[float, Any] | None = None
        for kk in candidates:
            if kk < 2:
                continue
            model = KMeans(n_clusters=kk, n_init=4, random_state=seed).fit(space)
            if len(set(model.labels_)) < 2:
                continue
            sample = min(n, 4000)  # silhouette is quadratic: a seeded sample keeps 20,000 reasons fast
            score = silhouette_score(space, model.labels_, sample_size=sample, random_state=seed)
            if best is None or score > best[0]:
                best = (score, model)
        labels = best[1].labels_ if best is not None else np.zeros(n, dtype=int)
    themes: list[Theme] = []
    for label in sorted(set(labels.tolist()), key=lambda lab: -int((labels == lab).sum())):
        idx = np.flatnonzero(labels == label)
        weights = np.asarray(tfidf[idx].mean(axis=0)).ravel()
        top: list[str] = []
        for j in np.argsort(-weights):
            term = str(terms[j])
            if weights[j] <= 0 or len(top) == 6:
                break
            # "asked user" after "asked", "b a" after "a b": a term is kept only if none of its words is there yet
            if not set(term.split()) & {word for t in top for word in t.split()}:
                top.append(term)
        centre = space[idx].mean(axis=0)
        order = idx[np.argsort(-(space[idx] @ centre))]
        examples = [texts[i] for i in order[:3]]
        name = namer(top, examples) if namer is not None else ", ".join(top[:3])
        themes.append(Theme(id=len(themes), name=name, size=len(idx), share=round(len(idx) / n, 4), terms=top,
                            pair_ids=[pair_ids[i] for i in order[:5]], examples=examples,
                            members=[pair_ids[i] for i in order]))  # fmt: skip
    return themes


def _all_alike(tfidf: Any) -> bool:
    """Whether every reason has the same vector (no column varies): one theme, with nothing to reduce or cluster
    (the SVD would divide by their zero variance)."""
    from sklearn.utils.sparsefuncs import mean_variance_axis

    _, variance = mean_variance_axis(tfidf.tocsr(), axis=0)
    return bool(np.all(variance <= 1e-12))


def section_label(theme: dict[str, Any]) -> str:
    """A theme's prompt section in words, as the report, the HTML page and the viewer show it: the title, how the
    candidate changed the section and how confident the attribution is (empty when it has no section).

    Example:
        >>> section_label({"section": "Style: Ask for a yes", "section_change": "added", "confidence": "low",
        ...                "runner_up": "Policy: Confirm first"})
        'Style: Ask for a yes (added, low confidence; runner-up: Policy: Confirm first)'
        >>> section_label({"section": "Booking"})
        'Booking'
    """
    if not theme.get("section"):
        return ""
    said = [str(theme["section_change"])] if theme.get("section_change") else []
    if theme.get("confidence"):
        said.append(f"{theme['confidence']} confidence")
    if said and theme.get("confidence") != "high" and theme.get("runner_up"):
        said[-1] += f"; runner-up: {theme['runner_up']}"
    return str(theme["section"]) + (f" ({', '.join(said)})" if said else "")


def _tool_pattern(tools: Sequence[str]) -> re.Pattern[str] | None:
    names = sorted({t for t in tools if t}, key=len, reverse=True)  # the longest first: "book_x" before "book"
    if not names:
        return None
    return re.compile(r"(?<![\w])(?:" + "|".join(map(re.escape, names)) + r")(?![\w])", re.IGNORECASE)


def mask_tools(text: str, tools: Sequence[str], to: str = _TOOL) -> str:
    """``text`` with every tool name in ``tools`` (as a whole word, any case) replaced by ``to``.

    Example:
        >>> mask_tools("skipped the get_user_details call, then get_user_details_v2", ["get_user_details"])
        'skipped the tool call, then get_user_details_v2'
    """
    pattern = _tool_pattern(tools)
    return pattern.sub(to, text) if pattern is not None else text


def _stem(word: str) -> str:
    """A light stem: enough for "asked" to meet "ask" and "confirmation" to meet "confirm" (no dictionary)."""
    for suffix in ("ations", "ation", "ings", "ing", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) >= 4 else word  # "change", "changed", "changes" meet


def _attribution_words(text: str, stop: frozenset[str]) -> list[str]:
    # get_user_details / user_id meet the prompt's "user id"; a judge's own words ("reply") would match any section
    words = re.findall(r"[a-z][a-z0-9]+", text.lower().replace("_", " "))
    return [_stem(w) for w in words if w not in stop]


def _theme_words(texts: list[str], terms: list[str], tools: Sequence[str]) -> str:
    """A theme's reasons and terms as one text for attribution, the tool names left out."""
    pattern = _tool_pattern(tools)
    text = " ".join(texts) + " " + " ".join(terms)
    if pattern is None:
        return text
    return pattern.sub("", text)


def attribute(
    themes: list[Theme],
    texts_of: dict[int, list[str]],
    sections: Sequence[Section | SectionDiff],
    *,
    changed_weight: float = CHANGED_WEIGHT,
    tools: Sequence[str] = (),
) -> None:
    """Attribute each theme to the prompt section whose words are closest (TF-IDF cosine of lightly stemmed words)
    to the theme's reasons and terms, setting ``section``, ``section_score`` (the cosine; 0, no shared word, leaves
    the theme unattributed), ``section_change``, ``confidence``, ``section_margin`` and ``runner_up``.

    ``sections`` are a prompt's sections (how they changed unknown: ``section_change`` stays ``None``) or the
    :func:`~delta_eval.analysis.sections.diff_sections` of the baseline's and the candidate's prompts. A section
    added, removed or reworded counts ``changed_weight`` times its cosine, so it is chosen over an unchanged one
    whenever it is competitive. The margin is ``1 - runner_up / best`` on these weighted scores, and the
    confidence its label (see :data:`Confidence`).

    ``tools``: the tool names the run knows, left out of the theme's words: a theme is attributed on its behaviour.
    Else "details" in ``get_user_details`` would pull a theme towards any rule that says "details", and
    "reservation" in ``cancel_reservation`` towards any rule about reservations. The arguments named
    (``user_id``) and the reasons' own words stay.

    Example:
        >>> from delta_eval.analysis.sections import diff_sections
        >>> policy = "- Transfer the user to a human agent when the request is out of scope."
        >>> before, after = prompt_sections(policy), prompt_sections(policy + "\\n- Ask for a yes before acting.")
        >>> theme = Theme(0, "asked", 3, 1.0, ["asked"], [], [])
        >>> attribute([theme], {0: ["asked the user to confirm instead of booking"]}, diff_sections(before, after))
        >>> theme.section, theme.section_change, theme.confidence
        ('(top): Ask for a yes before acting.', 'added', 'high')
    """
    if not themes or not sections:
        return
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, TfidfVectorizer

    diffs = [s if isinstance(s, SectionDiff) else SectionDiff(s, "unchanged") for s in sections]
    known = [isinstance(s, SectionDiff) for s in sections]
    stop = frozenset(ENGLISH_STOP_WORDS.union(_GENERIC))
    docs = [d.text for d in diffs] + [_theme_words(texts_of.get(t.id, []), t.terms, tools) for t in themes]
    vectors = TfidfVectorizer(analyzer=lambda doc: _attribution_words(doc, stop), sublinear_tf=True).fit_transform(docs)
    sec, th = vectors[: len(diffs)], vectors[len(diffs) :]
    similarity = (th @ sec.T).toarray()
    weight = np.array(
        [changed_weight if k and d.change != "unchanged" else 1.0 for d, k in zip(diffs, known, strict=True)]
    )
    for theme, row in zip(themes, similarity, strict=True):
        weighted = row * weight
        order = np.argsort(-weighted, kind="stable")
        best = int(order[0])
        if row[best] <= 0:
            continue
        second = float(weighted[order[1]]) if len(order) > 1 else 0.0
        margin = 1 - second / float(weighted[best])
        confidence: Confidence = "high" if margin >= 0.5 else "medium" if margin >= 0.2 else "low"
        d = diffs[best]
        theme.section, theme.section_score = d.section.title, round(float(row[best]), 4)
        theme.section_change = d.change if known[best] else None
        theme.confidence = "low" if row[best] < _WEAK_SCORE else confidence
        theme.section_margin = round(margin, 4)
        theme.runner_up = diffs[int(order[1])].section.title if len(order) > 1 and second > 0 else None
