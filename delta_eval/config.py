"""Run configuration: the two variants, the source, sampling, judging and limits, from Python, TOML or YAML.

Example (TOML)::

    out = "runs/prompt-v2"

    [source]
    path = "exports/conversations.jsonl"
    metadata = ["customer_tier", "language"]

    [sample]
    by = ["customer_tier", "language"]
    n = 300
    seed = 7

    [baseline]
    model = "openai:gpt-4o"

    [candidate]
    model = "openai:gpt-4o"
    system_prompt = "You are a helpful airline agent. Today is {{date}}."

Relative paths in a config file are relative to the file.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from delta_eval.adapters.batch import BatchSettings
from delta_eval.adapters.retry import RetryPolicy
from delta_eval.catalog import ModelOverride
from delta_eval.exceptions import ConfigError
from delta_eval.fingerprint import comparable
from delta_eval.judges.config import Judges
from delta_eval.mapping import SourceConfig
from delta_eval.metrics.rule import DecisionRule, Gate
from delta_eval.metrics.score import ScoreWeights
from delta_eval.pricing import Price
from delta_eval.redact import describe_invalid, redact_secrets
from delta_eval.sampling.stratified import Stratified
from delta_eval.uris import is_uri, shown, working_copy
from delta_eval.variant import Variant

__all__ = ["RunConfig", "Screen", "Session", "load_config"]

#: A candidate's name in a run of several: it ends each of its pair ids (``conversation#turn~name``).
_CANDIDATE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class Screen(BaseModel):
    """A cheap first pass: the first ``conversations`` of the sample are replayed and judged for every candidate,
    ``gates`` are checked on those pairs, and only the candidates that pass them go on to the rest of the sample.
    Gates on what replays alone measure (``latency_p95_s``, ``cost_ratio``, ``error_rate``,
    ``invalid_tool_call_rate``, ``no_decision_rate``, ...) make a candidate that fails them cost little.

    Example:
        >>> Screen(conversations=10, gates=[{"metric": "latency_p95_s", "max": 8, "test": "point"}]).conversations
        10
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    conversations: int = Field(default=20, ge=1)
    gates: tuple[Gate, ...] = Field(min_length=1)


class Session(BaseModel):
    """How ``mode="session"`` rolls conversations forward (see :mod:`delta_eval.replay.session`).

    - ``start``: the opening is the recorded conversation up to and including this user message (1: the first).
    - ``max_turns``: agent turns per session at most.
    - ``user``: the model playing the user (``None``: only the recorded user messages, and a session ends when a
      side leaves the recording); ``user_options``: its provider options. ``scripted``: the recorded user messages
      while a side stays on the recording, the model after (``False``: the model from the first answer).
    - ``goal``: the metadata path of the user's goal (a task instruction); ``None``: the user's model summarises the
      recorded conversation once (cached).
    - ``stop_tools``: tools (glob patterns) whose call ends the session (a transfer to a human).
    - ``tool_model``: an LLM that plays the tools for calls the recording never made (``None``: the failure result);
      ``tool_options``: its provider options (a ``base_url``, a key's environment variable).
    - ``expected``: the metadata path of the actions that reach the goal (``[{name, kwargs}]``), checked per side;
      ``ignore``: tools (glob patterns) whose expected actions are not required (reads).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    start: int = Field(default=1, ge=1)
    max_turns: int = Field(default=20, ge=1)
    user: str | None = None
    user_options: dict[str, Any] = Field(default_factory=dict)
    scripted: bool = True
    goal: str | None = None
    stop_tools: tuple[str, ...] = ()
    tool_model: str | None = None
    tool_options: dict[str, Any] = Field(default_factory=dict)
    expected: str | None = None
    ignore: tuple[str, ...] = ()


class RunConfig(BaseModel):
    """Everything a run needs. Only ``baseline``, ``candidate`` and ``out`` (and a source) are required.

    - ``source``: where conversations come from when :func:`~delta_eval.run` is not given them directly.
    - ``sample``: how to sample them (``None``: every conversation).
    - ``max_tool_rounds``: tool-call rounds allowed per replayed turn; a turn still calling tools after that is
      marked ``hit_tool_cap`` and not retried.
    - ``replay_greetings``: replay greetings too (plain-text assistant turns before the first user message of a
      conversation where a user speaks later, left out by default: the model would be sent nothing to answer; the
      report counts them). A pre-user turn that calls tools, or any turn of a conversation with no user message
      (an autonomous run), is not a greeting and is always replayed.
    - ``max_turns_per_conversation``: replay at most this many turns of each sampled conversation (drawn with
      ``seed``; ``None``: all turns). Pair weights account for it.
    - ``epochs``: replay (and judge) each point this many times per side, to see how consistent each side is and
      whether the decision holds in every repeat; a variant's ``seed`` is advanced by one per epoch.
    - ``stop_early``: replay conversations in a seeded random order and stop once an anytime-valid test of the
      decision's own estimate settles whether the candidate is worse than ``decision.margin`` (see
      :mod:`delta_eval.stopping`); the manifest says when and why.
    - ``concurrency``: pairs being replayed at once, each side on its own (so up to twice as many model calls in
      flight); ``judge_concurrency``: pairs being judged at once. Each model is further held to its own ``limits``.
    - ``batch``: ``True`` (or :class:`~delta_eval.adapters.batch.BatchSettings`) sends the judges' calls (stages 2
      and 3) through their provider's batch API, at about half the price, when nobody needs each answer at once:
      they are queued into batches, polled every ``poll_s``, and a run killed meanwhile polls the same batches when
      resumed (see :mod:`delta_eval.adapters.batch`). Pairs judged at once rise to the batch ``size``. Providers
      wired in: OpenAI (``openai:``), Anthropic (``anthropic:``) and Gemini (``gemini:``); a judge of another
      provider is called at once, with a note. ``batch.replays`` sends the sides' calls through batches too (pairs
      replayed at once then rise to the batch ``size`` as well).
    - ``prices``: per-model prices overriding the model catalogue's list prices.
    - ``models``: per-model corrections of the model catalogue (what a model takes: reasoning efforts, a thinking
      budget's range, sampling parameters, ...; its price), keyed by model id; see
      :class:`~delta_eval.catalog.ModelOverride`. ``delta-eval models`` lists what the catalogue says.
    - ``out``: the run folder: a local path, or an object-store URI (``s3://bucket/prefix``, ``gs://...``, any URI
      :func:`pyarrow.fs.FileSystem.from_uri` reads, with its options in the query, e.g.
      ``?endpoint_override=host:9000&scheme=http``); a URI run is written through a local working copy, which
      ``out`` then names, and ``remote`` holds the URI (see :mod:`delta_eval.store.remote`).
    - ``cache``: the response cache file (default ``out/cache.sqlite``); share one between runs to reuse answers.
    - ``flush_every``: the writer commits a batch every this many pairs, and at least every 5 seconds (and at the
      end); a session's first batches are smaller (50 pairs, growing to ``flush_every`` once the session has
      written 4 x ``flush_every``), so a run killed early loses little. Each batch is a file per table, and every
      query over the run opens every file: a 13,000-pair run committed every 50 pairs took 4.5 s to decide, every
      1,000 (the default) 0.4 s; a completed session merges its small batches (see :meth:`~delta_eval.store.
      folder.RunFolder.compact`). A process killed loses the pairs of its uncommitted batch, not what they cost:
      their answers are in the response cache.
    - ``description``: what the run compares, in a sentence, for the report (no bearing on results).
    - ``overwrite``: start afresh in an ``out`` that holds a run of another configuration (only the library's files
      are removed; the response cache stays). Without it such a folder is refused, naming what differs.
    - ``retry_errors``: on resuming, try again every pair that ended in an error (by default only those whose
      provider error was retryable: rate limits, server errors, lost connections).
    - ``noise_floor``: the folder of an A/A run, a path or a URI like ``out`` (the same variant as baseline and
      candidate, judged the same way):
      its win rate is the judges' noise floor, printed beside this run's (no bearing on results). In an A/A run
      the candidate side is named ``candidate``; both sides are replayed independently.
    - ``decision``: how the report and :meth:`~delta_eval.result.RunResult.decision` turn the numbers into
      APPROVED / PARTIAL / REJECTED (the estimate that decides, its margin, gates, your own checks, ...; see
      :class:`~delta_eval.metrics.rule.DecisionRule`); ``de.plan`` and ``stop_early`` read the same rule.
    - ``candidates``: several candidates instead of one ``candidate`` (each with its own ``name``: ``candidate-1``,
      ... where none is given). Each turn is replayed once on the baseline and once per candidate, and each
      candidate is judged against the baseline: a pair is (turn, candidate), its id ``conversation#turn~name``.
      :class:`~delta_eval.result.RunResult` reads one candidate at a time; the report and
      :func:`~delta_eval.analysis.leaderboard.leaderboard` rank them.
    - ``score``: the weights of a composite score shown on the leaderboard beside each candidate's decision
      (:class:`~delta_eval.metrics.score.ScoreWeights`; never instead of the decision).
    - ``mode``: ``"turn"`` replays recorded turns; ``"session"`` rolls each sampled conversation forward from its
      opening with a user simulator, one pair per conversation, judged on the whole transcripts (``session``: how;
      see :class:`Session`).
    - ``screen``: check cheap gates on the first conversations of the sample before replaying the rest (see
      :class:`Screen`); a candidate that fails them is not replayed further, and the manifest says why.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    baseline: Variant
    candidate: Variant | None = None
    candidates: tuple[Variant, ...] = ()
    out: Path
    #: The object-store URI of the run folder (set from an ``out`` URI); ``out`` is then its working copy.
    remote: str | None = None
    source: SourceConfig | None = None
    sample: Stratified | None = None
    judges: Judges = Judges()
    max_tool_rounds: int = Field(default=5, ge=0)
    max_turns_per_conversation: int | None = Field(default=None, ge=1)
    replay_greetings: bool = False
    epochs: int = Field(default=1, ge=1)
    stop_early: bool = False
    overwrite: bool = False
    retry_errors: bool = False
    concurrency: int = Field(default=16, ge=1)
    judge_concurrency: int = Field(default=8, ge=1)
    batch: BatchSettings | None = None
    seed: int = 0
    retry: RetryPolicy = RetryPolicy()
    prices: dict[str, Price] = Field(default_factory=dict)
    models: dict[str, ModelOverride] = Field(default_factory=dict)
    cache: Path | None = None
    flush_every: int = Field(default=1000, ge=1)
    description: str | None = None
    noise_floor: Path | str | None = None
    decision: DecisionRule = DecisionRule()
    score: ScoreWeights | None = None
    screen: Screen | None = None
    mode: Literal["turn", "session"] = "turn"
    session: Session = Session()

    @model_validator(mode="before")
    @classmethod
    def _out_uri(cls, data: Any) -> Any:
        # ``out="s3://..."``: the folder written is the URI's working copy, the URI is kept in ``remote``.
        if isinstance(data, Mapping) and is_uri(data.get("out")):
            uri = str(data["out"])
            data = {**data, "out": working_copy(uri), "remote": None if uri.startswith("file://") else uri}
        elif (
            isinstance(data, Mapping)
            and data.get("remote")
            and data.get("out") is not None
            and Path(data["out"]).name != working_copy(str(data["remote"])).name
        ):
            # ``remote`` belongs to the working copy it was set with: another ``out`` given since leaves it. A
            # folder named as this URI's copies are is its copy, wherever it is (the work dir may have changed
            # since: the run would otherwise be written there and never uploaded).
            data = {**data, "remote": None}
        return data

    @field_validator("noise_floor", mode="before")
    @classmethod
    def _noise_floor_uri(cls, value: Any) -> Any:
        # A URI stays a string (a Path would fold its ``//``); anything else is a path.
        return value if value is None or is_uri(value) else Path(value)

    @field_validator("batch", mode="before")
    @classmethod
    def _batch_switch(cls, value: Any) -> Any:
        # ``batch = true`` in a file, ``batch=True`` in Python: the default settings.
        if value is True:
            return BatchSettings()
        return None if value is False else value

    @property
    def replays_in_flight(self) -> int:
        """Pairs being replayed at once: ``concurrency``, or enough to fill a batch when replays are batched."""
        if self.batch is not None and self.batch.replays:
            return max(self.concurrency, self.batch.size)
        return self.concurrency

    @property
    def judges_in_flight(self) -> int:
        """Pairs being judged at once: ``judge_concurrency``, or enough to fill a batch when the run batches."""
        return max(self.judge_concurrency, self.batch.size) if self.batch is not None else self.judge_concurrency

    @property
    def all_prices(self) -> dict[str, Price]:
        """The run's price overrides: ``prices``, and the prices given in ``models`` (``prices`` wins)."""
        return {**{m: o.price for m, o in self.models.items() if o.price is not None}, **self.prices}

    def model_post_init(self, __context: Any) -> None:
        # Name the sides so that rows say which is which even when both run the same model.
        if not self.baseline.name:
            object.__setattr__(self, "baseline", self.baseline.model_copy(update={"name": "baseline"}))
        if self.candidate is not None and self.candidates and self.candidate != self.candidates[0]:
            # (a config validated again keeps ``candidate`` as the first of its ``candidates``)
            raise ConfigError("give one candidate (candidate=) or several (candidates=), not both")
        if self.candidate is None and not self.candidates:
            raise ConfigError("a run needs a candidate: candidate= (or candidates=[...] to compare several)")
        if len(self.candidates) == 1:  # one candidate however it is given: the same run, pairs and fingerprint
            object.__setattr__(self, "candidate", self.candidates[0])
            object.__setattr__(self, "candidates", ())
        if self.candidates:
            self._name_candidates()
            if self.stop_early:  # its sequential test watches one estimate: one candidate's against the baseline
                raise ConfigError("stop_early works with one candidate; with several, run without it")
            return
        candidate = self.candidate
        assert candidate is not None
        if not candidate.name or candidate == self.baseline:
            # An A/A run (the same variant on both sides, to measure the judges' noise floor): still two sides.
            object.__setattr__(self, "candidate", candidate.model_copy(update={"name": "candidate"}))
        if self.baseline.name == self.the_candidate.name:
            raise ConfigError(f"baseline and candidate must have different names, both are {self.baseline.name!r}")

    def _name_candidates(self) -> None:
        """Several candidates: each named (``candidate-1``, ... where not), names unique and fit for a pair id."""
        named = tuple(
            v if v.name else v.model_copy(update={"name": f"candidate-{i}"}) for i, v in enumerate(self.candidates, 1)
        )
        names = [v.name for v in named]
        for name in names:
            if not _CANDIDATE_NAME.fullmatch(name):
                raise ConfigError(
                    f"candidates: name {name!r} must be letters, digits, '.', '_' or '-' (it names pairs)"
                )
            if name in ("baseline", "candidate", "recorded", self.baseline.name):
                raise ConfigError(f"candidates: name {name!r} is taken (baseline, candidate and recorded are sides)")
        if len(set(names)) < len(names):
            raise ConfigError(f"candidates: names must differ, got {names}")
        object.__setattr__(self, "candidates", named)
        object.__setattr__(self, "candidate", named[0])

    @property
    def the_candidate(self) -> Variant:
        """The candidate of a one-candidate run, or the first of several."""
        assert self.candidate is not None  # set by model_post_init
        return self.candidate

    @property
    def fleet(self) -> bool:
        """Whether the run compares several candidates with the baseline (pairs are then per candidate)."""
        return len(self.candidates) > 1

    def sides(self) -> dict[str, Variant]:
        """What is replayed, by key: ``baseline``, then ``candidate`` in a one-candidate run, or each candidate's
        name when there are several."""
        if self.fleet:
            return {"baseline": self.baseline, **{v.name: v for v in self.candidates}}
        return {"baseline": self.baseline, "candidate": self.the_candidate}

    def model_ids(self) -> list[str]:
        """Every model the run's replays and judges call, once each in order: the sides', the LLM judges', and in
        session mode the user and tool simulators'.

        Example:
            >>> c = RunConfig(out="run", baseline=Variant(model="openai:gpt-4o"),
            ...               candidate=Variant(model="simulated:a"), judges={"judge": {"model": "openai:gpt-4o"}})
            >>> c.model_ids()
            ['openai:gpt-4o', 'simulated:a']
        """
        found = [v.model for v in self.sides().values()]
        found += [m for stage in self.judges.models().values() for m in stage]
        if self.mode == "session":
            found += [m for m in (self.session.user, self.session.tool_model) if m is not None]
        return list(dict.fromkeys(found))

    @property
    def cache_path(self) -> Path:
        """Where the response cache lives."""
        return self.cache if self.cache is not None else self.out / "cache.sqlite"

    def fingerprint(self) -> dict[str, Any]:
        """The parts of the configuration that decide which pairs exist and what they contain.

        A run folder can only be resumed by a configuration with the same fingerprint. Fields at their defaults are
        left out, so that a later version adding an optional field can still resume this version's folders; so are
        the settings of a model's connection (see :mod:`delta_eval.fingerprint`).
        """
        operational = {"out", "remote", "concurrency", "judge_concurrency", "flush_every", "cache", "retry",
                       "description", "noise_floor", "decision", "stop_early", "overwrite", "retry_errors", "score",
                       "batch"}  # fmt: skip
        data = self.model_dump(mode="json", exclude_defaults=True, exclude=operational)
        for side in ("baseline", "candidate"):
            data[side].pop("limits", None)
        for variant in data.get("candidates", ()):
            variant.pop("limits", None)
        # How a model is reached (its URL's port, timeouts, headers, key variables) is not what it is asked.
        redacted: dict[str, Any] = redact_secrets(comparable(data))
        return redacted

    def public_dump(self) -> dict[str, Any]:
        """The whole configuration as JSON data with every secret redacted (see
        :func:`~delta_eval.redact.redact_secrets`): what a run folder keeps of it."""
        data: dict[str, Any] = redact_secrets(self.model_dump(mode="json"))
        if self.remote is not None:
            data["remote"] = shown(self.remote)  # its query and userinfo hold connection options, maybe keys
        return data


def _resolve_variant(side: str, given: Mapping[str, Any], rel: Any) -> dict[str, Any]:
    """A variant's table with its file paths made relative to the config file, ``system_prompt_file`` read."""
    variant = dict(given)
    if isinstance(variant.get("tools"), str):
        variant["tools"] = rel(variant["tools"])
    if "system_prompt_file" in variant:
        path = Path(rel(variant.pop("system_prompt_file")))
        if not path.exists():
            raise ConfigError(f"{side}.system_prompt_file not found: {path}")
        variant["system_prompt"] = path.read_text(encoding="utf-8")
    return variant


def _resolve_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    def rel(value: Any) -> Any:
        if isinstance(value, str) and value and not Path(value).is_absolute() and not is_uri(value):
            return str(base / value)
        return value

    data = dict(data)
    if "out" in data:
        data["out"] = rel(data["out"])
    for key in ("cache", "noise_floor"):
        if key in data:
            data[key] = rel(data[key])
    if isinstance(data.get("source"), Mapping):
        src = dict(data["source"])
        for key in ("path", "database"):
            if key in src:
                src[key] = rel(src[key])
        if isinstance(src.get("tools"), str):
            src["tools"] = rel(src["tools"])
        data["source"] = src
    if isinstance(data.get("judges"), Mapping) and "judge" in data["judges"]:
        # A stage-3 judge's rubric file, given in a table (or a panel's tables), is relative to the config too.
        judge = data["judges"]["judge"]
        members = [
            {**m, "rubric": rel(m["rubric"])} if isinstance(m, Mapping) and isinstance(m.get("rubric"), str) else m
            for m in (judge if isinstance(judge, list) else [judge])
        ]
        data["judges"] = {**data["judges"], "judge": members if isinstance(judge, list) else members[0]}
    sides = [(side, data[side]) for side in ("baseline", "candidate") if isinstance(data.get(side), Mapping)]
    listed = data.get("candidates")
    if isinstance(listed, list):
        sides += [(f"candidates[{i}]", v) for i, v in enumerate(listed) if isinstance(v, Mapping)]
    resolved = {side: _resolve_variant(side, variant, rel) for side, variant in sides}
    for side in ("baseline", "candidate"):
        if side in resolved:
            data[side] = resolved[side]
    if isinstance(listed, list):
        data["candidates"] = [resolved.get(f"candidates[{i}]", v) for i, v in enumerate(listed)]
    return data


def load_config(path: str | Path, **overrides: Any) -> RunConfig:
    """A :class:`RunConfig` from a TOML or YAML file; keyword arguments override top-level keys.

    A variant may give ``system_prompt_file`` instead of ``system_prompt``. Errors name the file and the key.
    """
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file not found: {p}")
    text = p.read_text(encoding="utf-8")
    try:
        if p.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        raise ConfigError(f"{p}: cannot parse: {exc}") from None
    except Exception as exc:  # yaml.YAMLError does not derive from ValueError
        raise ConfigError(f"{p}: cannot parse: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a table of settings at the top level")
    data = {**_resolve_paths(data, p.parent.resolve()), **overrides}
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe_invalid(exc, where=str(p))) from None
