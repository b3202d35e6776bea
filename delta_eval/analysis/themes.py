"""Themes in the judges' reasons: what the candidate got wrong (or right), in a handful of named clusters, each tied
to the part of the system prompt to revise.

The reasons (stage-3 reasoning and summary) are turned into TF-IDF vectors (nothing to download), reduced with a
truncated SVD, and clustered with k-means for each number of clusters in a range; the number kept is the one with
the best silhouette (chosen, not guessed), and every step is seeded. A theme is named by its most distinctive terms,
or by a ``namer`` you give (e.g. one LLM call through the run's judge client). Its prompt section is the section of
the system prompt (split by headings and numbered or bulleted rules, :func:`prompt_sections`) whose text is closest
to the theme's reasons.

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
from typing import Any

import numpy as np

__all__ = ["Section", "Theme", "attribute", "find_themes", "prompt_sections"]

#: Words every judge's reason uses, which say nothing about what differed.
_GENERIC = [
    "reply", "replies", "reference", "follows", "follow", "calls", "call", "better", "simulated", "judge",
    "candidate", "baseline", "output", "outputs", "equally", "good", "overlap", "text", "required", "called",
    "different", "argument", "arguments", "instead", "making", "make", "makes",
]  # fmt: skip
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")
_RULE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(.+)$")


@dataclass
class Theme:
    """A cluster of reasons: its number, name, size and share of the reasons clustered, its most distinctive terms,
    example pair ids (those closest to its centre first), and the prompt section it is closest to."""

    id: int
    name: str
    size: int
    share: float
    terms: list[str]
    pair_ids: list[str]
    examples: list[str]
    section: str | None = None
    section_score: float | None = None
    members: list[str] = field(default_factory=list, repr=False)

    def to_dict(self, members: bool = False) -> dict[str, Any]:
        """JSON-ready (``members``: every pair id of the theme, not only the examples)."""
        data = asdict(self)
        if not members:
            data.pop("members")
        return data


@dataclass(frozen=True)
class Section:
    """A section of a system prompt: its title (the heading, or the heading and the rule's first words) and text."""

    title: str
    text: str


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
) -> list[Theme]:
    """Cluster ``texts`` (one per pair) into themes, largest first. ``k`` fixes the number of clusters; else the
    best silhouette over ``k_range`` decides. ``namer(terms, examples)`` names a theme (default: its top terms).
    ``embed(texts)`` (an array, one row per text: e.g. a provider's embeddings) replaces TF-IDF + SVD as the space
    clustered in; the terms still come from TF-IDF.

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
    n = tfidf.shape[0]
    if n < 4 or tfidf.shape[1] < 2 or _all_alike(tfidf):
        labels = np.zeros(n, dtype=int)
        space = tfidf.toarray()
    else:
        if embed is not None:
            space = np.asarray(embed(list(texts)), dtype=float)
            if space.shape[0] != n:
                raise ValueError(f"embed returned {space.shape[0]} vectors for {n} texts")
        else:
            dims = max(2, min(100, tfidf.shape[1] - 1, n - 1))
            space = TruncatedSVD(n_components=dims, random_state=seed).fit_transform(tfidf)
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


def attribute(themes: list[Theme], texts_of: dict[int, list[str]], sections: list[Section]) -> None:
    """Set each theme's ``section`` to the prompt section whose words are closest (TF-IDF cosine) to the theme's
    reasons; ``section_score`` says how close (0: no shared word; the section is then left unset)."""
    if not themes or not sections:
        return
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, TfidfVectorizer

    docs = [s.text for s in sections] + [" ".join(texts_of.get(t.id, [])) + " " + " ".join(t.terms) for t in themes]
    docs = [d.replace("_", " ") for d in docs]  # get_user_details / user_id meet the prompt's "user id"
    stop = sorted(ENGLISH_STOP_WORDS.union(_GENERIC))  # a judge's own words ("reply") would match any section
    vectors = TfidfVectorizer(stop_words=stop, token_pattern=r"(?u)\b[A-Za-z_][A-Za-z0-9_]+\b",
                              sublinear_tf=True).fit_transform(docs)  # fmt: skip
    sec, th = vectors[: len(sections)], vectors[len(sections) :]
    similarity = (th @ sec.T).toarray()
    for theme, row in zip(themes, similarity, strict=True):
        best = int(np.argmax(row))
        if row[best] > 0:
            theme.section, theme.section_score = sections[best].title, round(float(row[best]), 4)
