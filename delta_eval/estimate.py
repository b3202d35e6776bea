"""What a run will cost, before it spends anything: :func:`estimate` (and ``delta-eval estimate CONFIG``).

The estimate reads the source and draws the sample exactly as the run does (the same seed gives the same pairs),
then, for every pair, builds the request each side would send (the variant's system prompt, tools and rendering
applied) and adds up, without calling any model:

- **Calls per side.** The recorded turn says how many model calls a replay makes: one per recorded tool-calling
  step, plus one for the final reply (at most ``max_tool_rounds + 1``). Call k is sent the request plus the steps
  before it (tool calls and their recorded results).
- **Tokens.** Input from the request's messages and tool specs, output from the recorded answer of each step: both
  counted with ``tokenizer`` when one is given (e.g. ``tiktoken.get_encoding("o200k_base").encode`` where tiktoken's
  files are at hand: tiktoken downloads them at first use, which offline machines and CI cannot), else with a
  documented approximation, :func:`approx_tokens`: characters per token measured with OpenAI's ``o200k_base`` on
  the bundled tau-bench airline conversations (prose 4.4, the system prompt's policy prose ~4.9, JSON such as tool
  arguments, results and specs ~3), times a provider factor (Anthropic's tokenizer gives ~15% more tokens for the
  same text), plus 4 tokens a message. Reasoning models add :data:`REASONING_TOKENS` per call (no recording shows
  them).
- **Cached input.** Providers that cache prompts by themselves (OpenAI, Azure, Gemini) and Anthropic (the adapter
  marks cache breakpoints) serve a prefix they have seen from the cache, above a minimum length (1,024 tokens
  unless the catalogue says otherwise; OpenAI in steps of 128): call k of a turn reads call k-1's prompt; the first
  call of a pair reads the longest of the tools and system prompt another pair already sent, and the previous turn
  of its conversation (whose context starts this one's: the adapters route a conversation's turns to one cache).
  Anthropic bills the uncached rest as a cache write.
- **Judges.** Stage 1 is free. Stage 2 and 3 prompts are rendered as the judges render them, with the recorded
  answer standing in for both outputs; their answers are :data:`JUDGE_OUTPUT_TOKENS` long. How many pairs reach
  them follows the expected funnel: the share stage 1 decides and the share of the rest stage 2 resolves, from a
  ``pilot`` run folder when given, else :data:`DEFAULT_FUNNEL`; stage 3 also audits ``audit_fraction`` of stage 2's
  "equivalent" pairs, and judges each pair twice with ``order="both"``, once per judge of a panel.
- **Prices** from the catalogue (:mod:`delta_eval.pricing`) or the run's ``prices``; a part whose model has no
  price has cost ``None`` (unknown), and so has the total. In a run that batches (``batch``), the judges' calls
  (and the sides', with ``batch.replays``) to a provider with a batch API are at
  :data:`~delta_eval.adapters.batch.BATCH_DISCOUNT` of that price, as the run prices them.

- **Sessions** (``mode="session"``). Each sampled conversation is one session per side, rolled forward from its
  opening: the estimate takes its agent turns from the recording (at most ``session.max_turns``), each turn's calls
  as a turn-level replay's (its recorded tool rounds, plus the reply), sent the opening and the recorded transcript
  before it. The user simulator writes the user's goal once per conversation when no ``goal`` field names it, and
  answers after every agent turn but the cap's (the recorded user's message standing in for its answer), each side
  on its own (the range's low end: the sides stay alike and share every answer; with ``scripted``, none at all).
  The LLM tool simulator (``tool_model``) answers :data:`TOOL_SIMULATED_SHARE` of the sides' tool calls (the calls
  a side makes that the recording never made: the recording cannot say how many). The judges see whole
  transcripts, the recorded one standing in for both. A rolled session may be shorter or longer than its recording:
  each side's range spans :data:`SESSION_LENGTH_RANGE` of it. The notes say what was assumed.

Each part gets a low-high range: input tokens ±15% for the approximation (±3% with a tokenizer), output tokens
×0.7 to ×1.5 of the recorded length (another model writes more or less), no cache hit at all (high: a provider's
cache is best effort), and for judges the funnel's range (:data:`DEFAULT_FUNNEL`).

Measured (``python benchmarks/estimate.py``): on 20 demo conversations (121 pairs), gpt-4.1-mini against gpt-4.1 on
the fake OpenAI server, the estimate is 15-20% above the cost the run reports per side: the approximation counts
tool specs and JSON at ~3 characters a token (as o200k_base does), the fake at 4, and the candidate skips some
recorded tool calls. With ``stop_early`` the
run may stop sooner: the estimate is for the whole sample.

Example:
    >>> approx_tokens("The quick brown fox jumps over the lazy dog.")
    10
    >>> approx_tokens('{"reservation_id": "ZFA04Y", "cabin": "economy"}')
    16
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from delta_eval.adapters.batch import BATCH_DISCOUNT, BATCH_PROVIDERS, batch_cost
from delta_eval.calls import GenerateParams, ModelRequest
from delta_eval.catalog import ModelInfo, ModelOverride, model_info
from delta_eval.config import RunConfig, load_config
from delta_eval.exceptions import ConfigError, RecordError
from delta_eval.ingest.source import ConversationSource, open_source
from delta_eval.judges.base import PairView, SideView
from delta_eval.judges.config import Judges
from delta_eval.judges.llm import EquivalenceJudge, PairwiseJudge
from delta_eval.judges.prompts import (
    Rubric,
    equivalence_instructions,
    pairwise_instructions,
    render_equivalence_pair,
    render_pairwise_pair,
)
from delta_eval.judges.session import SESSION_RUBRIC
from delta_eval.memo import IdentityMemo, PrefixFold
from delta_eval.paths import MISSING, get_path
from delta_eval.pricing import Price, price_for
from delta_eval.replay.points import count_turns, epochs, recorded_calls, replay_points, select_turns
from delta_eval.replay.render import build_request
from delta_eval.replay.session import (
    TOOL_INSTRUCTIONS,
    recorded_turn_points,
    session_point,
    tool_prompt,
    transcript_messages,
)
from delta_eval.replay.session import recorded_calls as session_calls
from delta_eval.replay.user_simulator import SUMMARY_INSTRUCTIONS, USER_INSTRUCTIONS, reply_prompt, summary_prompt
from delta_eval.sampling.plan import sample_source
from delta_eval.sampling.population import iter_selected
from delta_eval.sampling.stratified import SampleResult, Stratified
from delta_eval.schema import Conversation, Message, ReplayPoint, Step, ToolSpec, TurnOutput
from delta_eval.store.folder import RunFolder

__all__ = [
    "DEFAULT_FUNNEL",
    "GOAL_OUTPUT_TOKENS",
    "JUDGE_OUTPUT_TOKENS",
    "REASONING_TOKENS",
    "SESSION_LENGTH_RANGE",
    "TOOL_SIMULATED_SHARE",
    "CostEstimate",
    "EstimateCancelled",
    "EstimatePart",
    "Funnel",
    "approx_tokens",
    "estimate",
    "estimate_sample",
]

Tokenizer = Callable[[str], int]

#: Characters per token by kind of text, measured with OpenAI's o200k_base on the bundled tau-bench conversations.
_CHARS_PER_TOKEN_PROSE = 4.4
_CHARS_PER_TOKEN_JSON = 3.0
#: How many more tokens a provider's tokenizer gives than o200k_base for the same English text and JSON.
_PROVIDER_FACTOR = {"anthropic": 1.15, "anthropic-bedrock": 1.15, "anthropic-vertex": 1.15}
_PER_MESSAGE = 4  # role and separators around each message, as chat formats add them
_PER_REQUEST = 3
#: Reasoning tokens a reasoning model spends per call: low, expected, high (no recording shows them).
REASONING_TOKENS = (0, 300, 2_000)
#: Output tokens of a stage-2 and a stage-3 judge answer: low, expected, high (the answer's JSON, its rationale).
JUDGE_OUTPUT_TOKENS = {"equivalence": (40, 80, 200), "judge": (250, 500, 1_200)}
#: The share of a session side's tool calls the recording has no equivalent of, answered by the LLM tool simulator:
#: low, expected, high (how far a side strays from the recording is known only once it is rolled).
TOOL_SIMULATED_SHARE = (0.0, 0.1, 0.5)
#: How long a rolled session is against its recording, low and high: a side that strays, or a simulated user who is
#: satisfied sooner or pushes back longer, ends elsewhere (measured with ``benchmarks/estimate.py --mode session``: a
#: candidate that skips calls rolled 0.6 of the recorded calls). The range of each side's part is scaled by it.
SESSION_LENGTH_RANGE = (0.5, 1.5)
#: Output tokens of the user simulator's summary of the user's goal (at most 150 words): low, expected, high.
GOAL_OUTPUT_TOKENS = (100, 200, 300)
#: Output tokens of the user simulator's last answer, the stop token (the recording has no message for it).
_STOP_TOKENS = 8
#: Providers that cache prompts (by themselves, or with the breakpoints the Anthropic adapter adds).
_CACHING = {"openai", "openai-responses", "azure", "gemini", "gemini-vertex", "anthropic", "anthropic-bedrock",
            "anthropic-vertex"}  # fmt: skip
_WRITES_CACHE = {"anthropic", "anthropic-bedrock", "anthropic-vertex"}
_CACHE_MIN = 1024
_INPUT_SPREAD, _INPUT_SPREAD_TOKENIZER = 0.15, 0.03
_OUTPUT_RANGE = (0.7, 1.5)


@dataclass(frozen=True)
class Funnel:
    """The share of pairs stage 1 decides (``stage1``) and the share of the rest stage 2 resolves (``stage2``),
    expected, with a low-high range of each; ``source`` says where the shares come from."""

    stage1: float
    stage2: float
    stage1_range: tuple[float, float]
    stage2_range: tuple[float, float]
    source: str = "defaults"

    @classmethod
    def of_pilot(cls, path: str | Path) -> Funnel:
        """The shares a pilot run folder observed (its verdicts by stage), with a ±10-point range around them."""
        manifest = RunFolder(Path(path)).manifest() if Path(path).is_dir() else None
        if manifest is None:
            raise ConfigError(f"the pilot {path} is not a run folder (no manifest.json)")
        by_stage = manifest.counts.by_stage
        decided = sum(n for stage, n in by_stage.items() if stage != "error")
        if decided == 0:
            raise ConfigError(f"the pilot run {path} has no decided pair to take the funnel's shares from")
        s1 = by_stage.get("deterministic", 0) / decided
        rest = decided - by_stage.get("deterministic", 0)
        s2 = by_stage.get("equivalence", 0) / rest if rest else 0.0

        def around(x: float) -> tuple[float, float]:
            return max(0.0, x - 0.1), min(1.0, x + 0.1)

        return cls(s1, s2, around(s1), around(s2), source=f"pilot {path}")


#: Without a pilot: stage 1 decides 30% of pairs (0-60%), stage 2 resolves 40% of the rest (0-70%), what prompt and
#: model changes on agent traffic typically show; run a pilot (a small sample) and pass it for the run's own shares.
DEFAULT_FUNNEL = Funnel(0.3, 0.4, (0.0, 0.6), (0.0, 0.7))


def _looks_json(text: str) -> bool:
    head = text.lstrip()[:1]
    return head in ("{", "[")


def approx_tokens(text: str, provider: str = "openai") -> int:
    """Tokens in ``text`` by the documented approximation (see the module docstring): JSON at 3 characters a
    token, other text at 4.4, times the provider's factor."""
    if not text:
        return 0
    per = _CHARS_PER_TOKEN_JSON if _looks_json(text) else _CHARS_PER_TOKEN_PROSE
    return math.ceil(len(text) / per * _PROVIDER_FACTOR.get(provider, 1.0))


@dataclass
class EstimatePart:
    """What one part of the run is expected to use: a side's replays or a judge stage's calls.

    ``pairs`` are the pairs it works on (expected, for judges), ``calls`` its model calls, ``input_tokens`` (of
    which ``cached_input_tokens`` read from a prompt cache) and ``output_tokens``; ``cost_usd`` the expected dollars
    and ``low_usd`` / ``high_usd`` the range (all ``None`` when the model has no known price).
    """

    part: str
    model: str
    pairs: float = 0.0
    calls: float = 0.0
    input_tokens: float = 0.0
    cached_input_tokens: float = 0.0
    output_tokens: float = 0.0
    cost_usd: float | None = 0.0
    low_usd: float | None = 0.0
    high_usd: float | None = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The part as JSON-ready numbers (what a run's manifest keeps)."""
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def _sum(values: Iterable[float | None]) -> float | None:
    total = 0.0
    for v in values:
        if v is None:
            return None
        total += v
    return total


@dataclass
class CostEstimate:
    """The estimate of a run (see the module docstring): its pairs, one :class:`EstimatePart` per side and per LLM
    judge stage, and what it assumed (``notes``). ``str()`` prints it as a table.

    Example::

        est = de.estimate("eval.toml")
        print(est)                 # the table
        est.total_usd, est.low_usd, est.high_usd
        est.part("candidate").calls
    """

    conversations: int
    pairs: int
    parts: list[EstimatePart]
    funnel: Funnel
    tokenizer: str
    notes: list[str] = field(default_factory=list)

    @property
    def total_usd(self) -> float | None:
        """Expected dollars over every part (``None`` when a part's price is unknown)."""
        return _sum(p.cost_usd for p in self.parts)

    @property
    def low_usd(self) -> float | None:
        """The low end of the range."""
        return _sum(p.low_usd for p in self.parts)

    @property
    def high_usd(self) -> float | None:
        """The high end of the range."""
        return _sum(p.high_usd for p in self.parts)

    def part(self, name: str) -> EstimatePart:
        """The part named ``name`` (``baseline``, ``candidate``, ``stage 2 equivalence``, ``stage 3 judge``, and in
        session mode ``user simulator``, ``tool simulator``)."""
        for p in self.parts:
            if p.part == name:
                return p
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """The estimate as JSON (kept in the run's manifest, printed by ``delta-eval estimate --json``)."""
        return {
            "conversations": self.conversations,
            "pairs": self.pairs,
            "parts": [p.to_dict() for p in self.parts],
            "total_usd": self.total_usd,
            "low_usd": self.low_usd,
            "high_usd": self.high_usd,
            "funnel": {"stage1": self.funnel.stage1, "stage2": self.funnel.stage2, "source": self.funnel.source},
            "tokenizer": self.tokenizer,
            "notes": list(self.notes),
        }

    def __str__(self) -> str:
        def money(v: float | None) -> str:
            return f"{v:.4f}" if v is not None else "unknown"

        lines = [
            f"cost estimate: {self.pairs} pairs from {self.conversations} conversations (no model called; "
            f"tokens by {self.tokenizer})",
            f"  {'part':22s} {'model':28s} {'pairs':>7s} {'calls':>7s} {'tokens in (cached)':>22s} "
            f"{'out':>9s} {'USD':>9s}  {'range USD':>19s}",
        ]
        for p in self.parts:
            tin = f"{p.input_tokens:,.0f} ({p.cached_input_tokens:,.0f})"
            rng = f"{money(p.low_usd)}-{money(p.high_usd)}"
            lines.append(
                f"  {p.part:22s} {p.model[:28]:28s} {p.pairs:7.0f} {p.calls:7.0f} {tin:>22s} "
                f"{p.output_tokens:9,.0f} {money(p.cost_usd):>9s}  {rng:>19s}"
            )
        rng = f"{money(self.low_usd)}-{money(self.high_usd)}"
        lines.append(f"  {'total':22s} {'':76s} {money(self.total_usd):>9s}  {rng:>19s}")
        f = self.funnel
        lines.append(
            f"  funnel ({f.source}): stage 1 decides {f.stage1:.0%} of pairs, stage 2 resolves {f.stage2:.0%} of "
            "the rest"
        )
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass
class _Counter:
    """Counts tokens of one model's provider, with the user's tokenizer or the approximation."""

    provider: str
    tokenizer: Tokenizer | None
    #: The tokens of each tool spec, kept by identity: every request of a run offers the same few specs, and counting
    #: them (their parameters' JSON) again per request was most of an estimate's time.
    _tools: IdentityMemo[int] = field(default_factory=lambda: IdentityMemo[int](maxsize=1024), init=False, repr=False)

    def text(self, text: str | None) -> int:
        if not text:
            return 0
        if self.tokenizer is not None:
            return self.tokenizer(text)
        return approx_tokens(text, self.provider)

    def message(self, m: Message) -> int:
        n = _PER_MESSAGE + self.text(m.content)
        for call in m.tool_calls:
            n += self.text(call.name) + self.text(call.arguments) + 3
        return n

    def tools(self, tools: Iterable[ToolSpec]) -> int:
        return sum(self._tools.get(t, self._tool) for t in tools)

    def _tool(self, t: ToolSpec) -> int:
        return self.text(t.name) + self.text(t.description) + self.text(json.dumps(t.parameters)) + 4

    def step(self, step: Step) -> tuple[int, int]:
        """Tokens the step's answer is (output), and what it adds to the next call's input (answer and results)."""
        out = self.text(step.text) + sum(self.text(c.name) + self.text(c.arguments) + 3 for c in step.tool_calls)
        results = sum(_PER_MESSAGE + self.text(r.content) for r in step.tool_results)
        return out, out + _PER_MESSAGE + results


@dataclass
class _Tally:
    """Sums of one part: point, and the bounds of the range, in tokens by price class."""

    calls: float = 0.0
    pairs: float = 0.0
    uncached: float = 0.0
    cached: float = 0.0
    output: float = 0.0
    output_low: float = 0.0
    output_high: float = 0.0


def _cost(price: Price | None, uncached: float, cached: float, output: float, *, writes_cache: bool) -> float | None:
    if price is None:
        return None
    read = price.cached_input if price.cached_input is not None else price.input
    write = price.cache_write if price.cache_write is not None else price.input
    # Output at the output rate: reasoning tokens are billed as output by every provider the catalogue prices.
    return (uncached * (write if writes_cache else price.input) + cached * read + output * price.output) / 1e6


def _finish(
    name: str, model: str, t: _Tally, price: Price | None, spread: float, *, writes_cache: bool
) -> EstimatePart:
    total_in = t.uncached + t.cached
    point = _cost(price, t.uncached, t.cached, t.output, writes_cache=writes_cache)
    low = _cost(
        price,
        (total_in - t.cached) * (1 - spread),
        t.cached * (1 - spread),
        t.output_low,
        writes_cache=writes_cache,
    )
    high = _cost(price, total_in * (1 + spread), 0.0, t.output_high, writes_cache=writes_cache)
    return EstimatePart(
        part=name,
        model=model,
        pairs=t.pairs,
        calls=t.calls,
        input_tokens=total_in,
        cached_input_tokens=t.cached,
        output_tokens=t.output,
        cost_usd=point,
        low_usd=low,
        high_usd=high,
    )


def _reasons(info: ModelInfo, params: GenerateParams) -> tuple[int, int, int]:
    """:data:`REASONING_TOKENS` for a model that will think on these params (it cannot stop, thinks by default, or
    is asked to), else none."""
    if not info.reasoning or params.reasoning_effort == "none":
        return (0, 0, 0)
    asked = params.reasoning_effort is not None or bool(params.reasoning_budget)
    return REASONING_TOKENS if asked or info.thinking_default or not info.thinking_off else (0, 0, 0)


def _cacheable(tokens: int, provider: str, minimum: int) -> int:
    """What a provider's cache holds of a prefix of ``tokens``: nothing below its minimum; OpenAI in steps of 128."""
    if tokens < minimum:
        return 0
    return tokens - tokens % 128 if provider in ("openai", "openai-responses", "azure") else tokens


#: Each tool spec's JSON, kept by identity (see :func:`_tools_json`).
_TOOL_JSON = IdentityMemo[str](maxsize=1024)


def _tools_json(tools: Iterable[ToolSpec]) -> str:
    """The JSON of ``tools``' specs as one list, as ``json.dumps`` writes it: each spec's dumped once a run."""
    return "[" + ", ".join(_TOOL_JSON.get(t, lambda t: json.dumps(t.model_dump(mode="json"))) for t in tools) + "]"


class _SideCount:
    """The calls and tokens of one side, counted a pair at a time (the sample's pairs are never all held at once)."""

    def __init__(
        self,
        name: str,
        model: str,
        params: GenerateParams,
        c: RunConfig,
        tokenizer: Tokenizer | None,
        prices: Mapping[str, Price],
    ) -> None:
        self.name, self.model, self.c, self.tokenizer, self.prices = name, model, c, tokenizer, prices
        self.provider = model.partition(":")[0]
        self.count = count = _Counter(self.provider, tokenizer)
        self.caching = self.provider in _CACHING
        self.info = model_info(model, c.models)
        self.minimum = self.info.prompt_cache_min_tokens or _CACHE_MIN
        self.reasoning = _reasons(self.info, params)
        self.t = _Tally()

        def add(counted: tuple[int, int, tuple[str, ...]], m: Message) -> tuple[int, int, tuple[str, ...]]:
            if m.role == "system":
                return counted[0], counted[1] + count.message(m), (*counted[2], m.content or "")
            return counted[0] + count.message(m), counted[1], counted[2]

        # The tokens of each request's history (others, system) and its system prompts: the turns of a conversation
        # share their history, so each counts only what it adds to the one before (counting each whole made this
        # quadratic).
        self.histories = PrefixFold[tuple[int, int, tuple[str, ...]]](lambda _: (0, 0, ()), add)
        self.seen_prefixes: set[tuple[str, ...]] = set()
        # The first call's prompt of each conversation's latest pair: the next turn's context starts with it.
        self.last_turn: dict[tuple[str, int], tuple[tuple[str, ...], int]] = {}

    def add(self, point: ReplayPoint, request: ModelRequest | None) -> None:
        """Count the calls of ``point``'s replay on this side (``None``: its request cannot be built)."""
        if request is None:
            return
        t, count, reasoning = self.t, self.count, self.reasoning
        t.pairs += 1
        others, system, system_texts = self.histories.fold(request.messages)
        shared = count.tools(request.tools) + system
        prompt = _PER_REQUEST + shared + others
        out: TurnOutput = point.recorded
        steps = list(out.steps)
        n_calls = recorded_calls(out, self.c.max_tool_rounds)
        prefix_key = (_tools_json(request.tools), *system_texts)
        # What an earlier call already sent: the tools and system prompt of another pair, or this conversation's
        # previous turn (whose context is the start of this one's; the adapter routes a conversation's turns to the
        # same cache).
        seen = shared if prefix_key in self.seen_prefixes else 0
        before = self.last_turn.get((point.conversation_id, point.epoch))
        if before is not None and before[0] == prefix_key:
            seen = max(seen, before[1])
        self.seen_prefixes.add(prefix_key)
        self.last_turn[(point.conversation_id, point.epoch)] = (prefix_key, prompt)
        previous = seen
        for j in range(n_calls):
            if j < len(steps):
                answer, adds = count.step(steps[j])
            else:
                answer, adds = count.text(out.final_text), 0
            # Call j reads the prompt call j-1 sent (the start of its own), the first call what was seen before.
            cached = _cacheable(previous, self.provider, self.minimum) if self.caching else 0
            t.calls += 1
            t.cached += cached
            t.uncached += prompt - cached
            t.output += answer + reasoning[1]
            t.output_low += answer * _OUTPUT_RANGE[0] + reasoning[0]
            t.output_high += answer * _OUTPUT_RANGE[1] + reasoning[2]
            previous = prompt
            prompt += adds

    def part(self) -> EstimatePart:
        """The side's part of the estimate, from what was counted."""
        spread = _INPUT_SPREAD_TOKENIZER if self.tokenizer is not None else _INPUT_SPREAD
        price = price_for(self.model, self.prices, info=self.info)
        return _finish(self.name, self.model, self.t, price, spread, writes_cache=self.provider in _WRITES_CACHE)


@dataclass
class _Calls:
    """One simulator's calls at the low, expected and high end: calls, input and output tokens."""

    calls: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    inputs: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    outputs: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    sessions: float = 0.0

    def add(self, times: tuple[float, ...], tokens_in: float, tokens_out: tuple[float, ...]) -> None:
        for k in range(3):
            self.calls[k] += times[k]
            self.inputs[k] += times[k] * tokens_in
            self.outputs[k] += times[k] * tokens_out[k]


class _SimulatorCount:
    """The calls of a session run's user simulator and LLM tool simulator, counted a session at a time from its
    recording (see the module docstring). No prompt cache is assumed for them."""

    def __init__(self, c: RunConfig, sides: int, tokenizer: Tokenizer | None) -> None:
        self.c, self.sides, self.tokenizer = c, sides, tokenizer
        s = c.session
        self.user = _Counter(s.user.partition(":")[0], tokenizer) if s.user is not None else None
        self.tool = _Counter(s.tool_model.partition(":")[0], tokenizer) if s.tool_model is not None else None
        self.user_calls, self.tool_calls = _Calls(), _Calls()
        self.goals: set[str] = set()
        self.missing_goal = 0

    def _prompt(self, count: _Counter, instructions: str, body: str) -> int:
        return _PER_REQUEST + 2 * _PER_MESSAGE + count.text(instructions) + count.text(body)

    def add(self, point: ReplayPoint, turns: list[tuple[ReplayPoint, Step | None]]) -> None:
        """Count the simulators' calls of the session of ``point`` (``turns``: its recorded agent turns)."""
        s, n = self.c.session, float(self.sides)
        if self.user is not None:
            self.user_calls.sessions += 1
            goal_tokens = float(GOAL_OUTPUT_TOKENS[1])
            if s.goal is not None:
                value = get_path(point.metadata, s.goal)
                self.missing_goal += value is MISSING or value in (None, "")
                goal_tokens = float(self.user.text(str(value))) if value is not MISSING else 0.0
            elif point.conversation_id not in self.goals:  # written once per conversation, for every side and epoch
                self.goals.add(point.conversation_id)
                body = summary_prompt([*point.context, *transcript_messages(point.recorded)])
                lo, mid, hi = GOAL_OUTPUT_TOKENS
                written = (float(lo), float(mid), float(hi))
                self.user_calls.add((1.0, 1.0, 1.0), self._prompt(self.user, SUMMARY_INSTRUCTIONS, body), written)
            # An answer after every agent turn but the cap's; the last recorded turn's is the stop token.
            low = 0.0 if s.scripted else 1.0
            for turn, answered in turns[: s.max_turns - 1]:
                said = answered.user if answered is not None else None
                after = [*turn.context, *transcript_messages(turn.recorded)]
                tokens_in = self._prompt(self.user, USER_INSTRUCTIONS, reply_prompt("", after)) + goal_tokens
                out_tokens = float(self.user.text(said)) if said is not None else float(_STOP_TOKENS)
                rng = (out_tokens * _OUTPUT_RANGE[0], out_tokens, out_tokens * _OUTPUT_RANGE[1])
                self.user_calls.add((low, n, n), tokens_in, rng)
                if said is None:
                    break
        if self.tool is not None:
            self.tool_calls.sessions += 1
            recorded = session_calls(point)
            specs = {t.name: t.model_dump() for t in point.tools}
            for turn, _ in turns:
                for step in turn.recorded.steps:
                    results = {r.call_id: r.content for r in step.tool_results}
                    for call in step.tool_calls:
                        body = tool_prompt(call, specs.get(call.name), recorded)
                        tokens_in = self._prompt(self.tool, TOOL_INSTRUCTIONS, body)
                        result = float(self.tool.text(results.get(call.id, "")))
                        rng = (result * _OUTPUT_RANGE[0], result, result * _OUTPUT_RANGE[1])
                        self.tool_calls.add(tuple(n * x for x in TOOL_SIMULATED_SHARE), tokens_in, rng)

    def parts(self, prices: Mapping[str, Price]) -> list[EstimatePart]:
        """The simulators' parts of the estimate."""
        s = self.c.session
        spread = _INPUT_SPREAD_TOKENIZER if self.tokenizer is not None else _INPUT_SPREAD
        out = []
        for name, model, calls in (("user simulator", s.user, self.user_calls),
                                   ("tool simulator", s.tool_model, self.tool_calls)):  # fmt: skip
            if model is None:
                continue
            info = model_info(model, self.c.models)
            price = price_for(model, prices, info=info)
            low, mid, high = (0, 1, 2)
            t = _Tally(calls=calls.calls[mid], pairs=calls.sessions, uncached=calls.inputs[mid],
                       output=calls.outputs[mid], output_low=calls.outputs[low],
                       output_high=calls.outputs[high])  # fmt: skip
            part = _finish(name, model, t, price, spread, writes_cache=False)
            if price is not None:
                part.low_usd = _cost(price, calls.inputs[low] * (1 - spread), 0, calls.outputs[low], writes_cache=False)
                part.high_usd = _cost(
                    price, calls.inputs[high] * (1 + spread), 0, calls.outputs[high], writes_cache=False
                )
            out.append(part)
        return out

    def notes(self) -> list[str]:
        """What the simulators' parts assumed."""
        s = self.c.session
        out = []
        if self.user is not None:
            how = (
                "the recorded user answers while a side stays on the recording: the user model is assumed to answer "
                "from the first turn (none at the range's low end)"
                if s.scripted
                else "every answer from the user model"
            )
            goal = f"the goal read from {s.goal!r}" if s.goal is not None else "the goal summarised once a conversation"
            out.append(
                f"user simulator: an answer after every recorded agent turn but the cap's, each side asking its own "
                f"({how}); {goal}; no prompt cache"
            )
            if self.missing_goal:
                out.append(f"{self.missing_goal} sessions have no {s.goal!r}: they will end in an error")
        if self.tool is not None:
            lo, mid, hi = TOOL_SIMULATED_SHARE
            out.append(
                f"tool simulator: {mid:.0%} of the sides' tool calls (range {lo:.0%}-{hi:.0%}) assumed to leave the "
                "recording and be answered by the tool model, at the recorded result's length"
            )
        return out


def _at_batch_price(part: EstimatePart, model: str) -> EstimatePart:
    """``part`` as its provider's batch API prices it (unchanged for a provider without one)."""
    batched = model.partition(":")[0] in BATCH_PROVIDERS
    part.cost_usd = batch_cost(part.cost_usd, batched)
    part.low_usd = batch_cost(part.low_usd, batched)
    part.high_usd = batch_cost(part.high_usd, batched)
    return part


@dataclass
class _JudgePrompts:
    """One LLM judge's prompts, their input tokens summed a pair at a time."""

    stage: str
    spec: EquivalenceJudge | PairwiseJudge
    count: _Counter
    fixed: int
    render: Callable[[PairView], str]
    per_pair: int
    tokens: int = 0


class _JudgeCounts:
    """Stage-2 and stage-3 calls, from their prompts rendered on the sample's pairs (one at a time) and the funnel's
    expected shares."""

    def __init__(
        self,
        judges: Judges,
        tokenizer: Tokenizer | None,
        models: Mapping[str, ModelOverride],
        default_rubric: str | None = None,
    ) -> None:
        self.judges, self.tokenizer, self.models = judges, tokenizer, models
        self.pairs = 0
        self.notes: list[str] = []
        self.prompts: list[_JudgePrompts] = []
        for stage, specs in (("equivalence", self._eq_specs()), ("judge", self._judge_specs())):
            for spec in specs:
                if spec is None or spec == "rule":
                    continue
                if not isinstance(spec, EquivalenceJudge | PairwiseJudge):
                    self.notes.append(
                        f"stage {'2' if stage == 'equivalence' else '3'} judge {spec!r}: a custom judge, cost not "
                        "estimated"
                    )
                    continue
                count = _Counter(spec.model.partition(":")[0], tokenizer)
                if isinstance(spec, PairwiseJudge):
                    # As the run builds it: a judge given no rubric of its own takes the mode's default.
                    rubric = Rubric.load(spec.rubric, default=default_rubric)
                    instructions = pairwise_instructions(rubric, reference=spec.reference).text
                    render: Callable[[PairView], str] = functools.partial(
                        render_pairwise_pair, reference=spec.reference
                    )
                    per_pair = 2 if judges.order == "both" else 1
                else:
                    instructions, render, per_pair = equivalence_instructions().text, render_equivalence_pair, 1
                fixed = _PER_REQUEST + 2 * _PER_MESSAGE + count.text(instructions)
                self.prompts.append(_JudgePrompts(stage, spec, count, fixed, render, per_pair))

    def _eq_specs(self) -> list[Any]:
        eq = self.judges.equivalence
        return list(eq) if isinstance(eq, tuple | list) else [eq]

    def _judge_specs(self) -> list[Any]:
        judge = self.judges.judge
        return list(judge) if isinstance(judge, tuple | list) else [judge]

    def add(self, view: PairView) -> None:
        """Count one pair's prompts for every LLM judge."""
        self.pairs += 1
        for p in self.prompts:
            p.tokens += p.fixed + p.count.text(p.render(view))

    def parts(self, funnel: Funnel, prices: Mapping[str, Price], notes: list[str]) -> list[EstimatePart]:
        """The judges' parts of the estimate (``notes`` gets what could not be estimated)."""
        notes += self.notes
        n = self.pairs
        has_stage2 = any(s is not None for s in self._eq_specs())
        s1, s2 = funnel.stage1, funnel.stage2 if has_stage2 else 0.0
        (s1_lo, s1_hi), (s2_lo, s2_hi) = funnel.stage1_range, funnel.stage2_range if has_stage2 else (0.0, 0.0)
        audit = self.judges.audit_fraction
        # Pairs reaching each stage: expected, fewest (the most filtered), most (the least filtered).
        reach2 = (n * (1 - s1), n * (1 - s1_hi), n * (1 - s1_lo))
        reach3 = tuple(r * (1 - x) + r * x * audit for r, x in zip(reach2, (s2, s2_hi, s2_lo), strict=True))
        return [
            self._part(p, reach2 if p.stage == "equivalence" else reach3, prices, p.tokens / n if n else 0.0)
            for p in self.prompts
        ]

    def _part(
        self, p: _JudgePrompts, reach: tuple[float, ...], prices: Mapping[str, Price], mean_in: float
    ) -> EstimatePart:
        spec, per_pair, stage = p.spec, p.per_pair, p.stage
        info = model_info(spec.model, self.models)
        low_out, mid_out, high_out = JUDGE_OUTPUT_TOKENS[stage]
        reasoning = _reasons(info, spec.params)
        expected, fewest, most = reach
        t = _Tally(
            calls=expected * per_pair,
            pairs=expected,
            uncached=expected * per_pair * mean_in,
            output=expected * per_pair * (mid_out + reasoning[1]),
            output_low=fewest * per_pair * (low_out + reasoning[0]),
            output_high=most * per_pair * (high_out + reasoning[2]),
        )
        spread = _INPUT_SPREAD_TOKENIZER if self.tokenizer is not None else _INPUT_SPREAD
        price = price_for(spec.model, prices, info=info)
        name = "stage 2 equivalence" if stage == "equivalence" else "stage 3 judge"
        part = _finish(name, spec.label, t, price, spread, writes_cache=False)
        if price is not None:
            # The range's input follows the funnel's range too, not only the token count's.
            part.low_usd = _cost(price, fewest * per_pair * mean_in * (1 - spread), 0, t.output_low, writes_cache=False)
            part.high_usd = _cost(price, most * per_pair * mean_in * (1 + spread), 0, t.output_high, writes_cache=False)
        return part


class EstimateCancelled(Exception):
    """Raised by :func:`estimate_sample` once its ``cancelled`` says so."""


def estimate_sample(
    config: RunConfig,
    source: ConversationSource,
    sample: SampleResult,
    *,
    tokenizer: Tokenizer | None = None,
    pilot: str | Path | None = None,
    conversations: Iterable[tuple[int, Conversation]] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> CostEstimate:
    """The estimate of ``config`` on a sample already drawn from ``source`` (what a run keeps in its manifest).

    The sample's conversations are read again and counted one at a time, their pairs in the order the run makes them
    (see :meth:`delta_eval.pipeline.Stages.load`): never all held at once, so the estimate's memory does not grow
    with the sample. ``conversations``: the sample's conversations already read, at their positions in source order
    (a run's sampling keeps them where the source is small, see :mod:`delta_eval.sampling.kept`), counted instead.
    ``cancelled``: asked before each conversation; once true, :class:`EstimateCancelled` is raised (a run that
    stops does not wait for its estimate).
    """
    c = config
    notes: list[str] = []
    sides = c.sides()  # baseline, then the candidate (or each candidate by name)
    prices = c.all_prices
    counts = {side: _SideCount(side, v.model, v.params, c, tokenizer, prices) for side, v in sides.items()}
    judging = _JudgeCounts(c.judges, tokenizer, c.models, SESSION_RUBRIC if c.mode == "session" else None)
    sessions = _SimulatorCount(c, len(sides), tokenizer) if c.mode == "session" else None
    n_conversations = points = skipped = turns_total = 0

    def build(point: ReplayPoint) -> dict[str, ModelRequest | None]:
        nonlocal skipped
        built: dict[str, ModelRequest | None] = {}
        for side, variant in sides.items():
            try:
                built[side] = build_request(point, variant, source.name)
            except RecordError:
                built[side] = None
                skipped += 1
            counts[side].add(point, built[side])
        return built

    read = iter_selected(source, sample.selected) if conversations is None else conversations
    for _, conv in read:
        if cancelled is not None and cancelled():
            raise EstimateCancelled
        n_conversations += 1
        if sessions is not None:
            start = session_point(conv, c.session.start)
            chosen = [start] if start is not None else []
        else:
            chosen = select_turns(list(replay_points(conv, greetings=c.replay_greetings)),
                                  c.max_turns_per_conversation, c.seed)  # fmt: skip
        for point in epochs(chosen, c.epochs):
            points += 1
            if sessions is not None:
                # A session: each side's agent turns as the recording has them; the simulators' calls around them.
                turns = recorded_turn_points(point, c.session.max_turns)
                turns_total += len(turns)
                first = [build(turn) for turn, _ in turns][:1]
                built = first[0] if first else dict.fromkeys(sides)
                sessions.add(point, turns)
            else:
                built = build(point)
            for side in list(sides)[1:]:  # each candidate's pair is judged against the baseline
                base = SideView(output=point.recorded, request=built["baseline"])
                judging.add(PairView(point=point, a=base, b=SideView(output=point.recorded, request=built[side])))
    if skipped:
        what = "agent turns" if sessions is not None else "replays"
        notes.append(f"{skipped} {what} cannot be built (their variant does not apply): they will be error rows")
    if sessions is not None:
        for count in counts.values():
            count.t.pairs = points  # a side's part works on sessions, not turns
        short, long = SESSION_LENGTH_RANGE
        mean = turns_total / points if points else 0.0
        notes.append(
            f"session mode: {points} sessions of {mean:.1f} agent turns on average, as recorded (at most "
            f"{c.session.max_turns}), each turn's calls as its recorded tool rounds plus the reply; a rolled session "
            "that strays from the recording may be longer or shorter"
        )
        notes.append(f"the sides' ranges span rolled sessions of {short:.1f} to {long:.1f} times the recorded length")
        notes += sessions.notes()
        notes.append("judges: whole transcripts, the recorded one standing in for both sides' (outcome checks free)")
    batch_replays = c.batch is not None and c.batch.replays
    parts = [count.part() for count in counts.values()]
    if sessions is not None:
        for part in parts:
            low, high = part.low_usd, part.high_usd
            part.low_usd = None if low is None else low * SESSION_LENGTH_RANGE[0]
            part.high_usd = None if high is None else high * SESSION_LENGTH_RANGE[1]
    if batch_replays:
        parts = [_at_batch_price(part, v.model) for part, v in zip(parts, sides.values(), strict=True)]
    funnel = Funnel.of_pilot(pilot) if pilot is not None else DEFAULT_FUNNEL
    judged = judging.parts(funnel, prices, notes)
    if c.batch is not None:
        judged = [_at_batch_price(part, p.spec.model) for part, p in zip(judged, judging.prompts, strict=True)]
        which = "replays' and judges'" if batch_replays else "judges'"
        notes.append(f"batch: the {which} calls to a provider with a batch API are priced at {BATCH_DISCOUNT:.0%} "
                     "of the interactive price")  # fmt: skip
    parts += judged
    if sessions is not None:
        parts += sessions.parts(prices)
    for p in parts:
        if p.cost_usd is None:
            notes.append(f"{p.model} has no known price: pass prices= (or [prices] in the config) to include it")
    if c.stop_early:
        notes.append("stop_early: the run may stop before the whole sample; this is the cost of all of it")
    name = getattr(tokenizer, "__qualname__", "the given tokenizer") if tokenizer is not None else "approximation"
    pairs = points * (len(sides) - 1)  # a pair per point and candidate
    return CostEstimate(n_conversations, pairs, parts, funnel, name, notes)


def estimate(
    config: RunConfig | str | Path,
    conversations: ConversationSource | Iterable[Conversation] | None = None,
    *,
    tokenizer: Tokenizer | None = None,
    pilot: str | Path | None = None,
) -> CostEstimate:
    """What running ``config`` will cost, without calling any model (see the module docstring).

    ``conversations`` overrides the config's source, as for :func:`delta_eval.run`; ``tokenizer`` counts a text's
    tokens (default: the approximation); ``pilot`` is a run folder whose funnel shares to assume.
    """
    c = load_config(config) if isinstance(config, str | Path) else RunConfig.model_validate(dict(config))
    if conversations is not None:
        source = ConversationSource.of(conversations)
    elif c.source is not None:
        source = open_source(c.source)
    else:
        raise ConfigError("no conversations given and the config has no [source]")

    def n_pairs(conv: Conversation) -> int:
        if c.mode == "session":
            return c.epochs * (session_point(conv, c.session.start) is not None)
        n = count_turns(conv, greetings=c.replay_greetings)
        return c.epochs * (n if c.max_turns_per_conversation is None else min(n, c.max_turns_per_conversation))

    plan = sample_source(source, c.sample or Stratified(), counters={"n_pairs": n_pairs})
    return estimate_sample(c, source, plan.sample, tokenizer=tokenizer, pilot=pilot)
