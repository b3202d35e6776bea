"""The demo: tau-bench airline conversations (bundled, MIT) replayed on two simulated models.

The data is read through the library's own importer, as a user's production export would be. The baseline is the
``simulated:`` model with a little rewording (sampling noise); the candidate gets a reworded system prompt and a
simulated model that rewords more, sometimes skips or changes a tool call, and now and then answers 429 or 500, so
that it really differs from the baseline and the retry path is exercised (or, with ``candidate="reword"``, a model
that only rewords more). The judges are the LLM judges on two simulated judge models that read the pair they are
shown and answer by stated rules (:mod:`delta_eval.adapters.simulated_judge`), or the rule-based judges. With a
``wire``, every model sits behind a fake provider server on 127.0.0.1 and the run goes through that provider's real
SDK. Nothing here calls a real provider.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

from delta_eval.adapters.retry import RetryPolicy
from delta_eval.adapters.simulated import SimulatedBehaviour
from delta_eval.catalog import ModelOverride
from delta_eval.config import RunConfig
from delta_eval.exceptions import ConfigError
from delta_eval.ingest.source import ConversationSource, read_conversations
from delta_eval.judges.config import Judges
from delta_eval.judges.llm import EquivalenceJudge, PairwiseJudge
from delta_eval.sampling.stratified import Stratified
from delta_eval.schema import Conversation
from delta_eval.testing.servers.anthropic import FakeAnthropicServer
from delta_eval.testing.servers.gemini import FakeGeminiServer
from delta_eval.testing.servers.openai import FakeOpenAIServer
from delta_eval.testing.servers.provider import FakeProviderServer
from delta_eval.uris import is_uri
from delta_eval.variant import Variant

__all__ = [
    "DATA",
    "DEMO_CONVERSATIONS",
    "DEMO_TOOLS",
    "WIRES",
    "WRITE_ACTIONS",
    "CandidateKind",
    "DemoModels",
    "JudgeKind",
    "airline_task_type",
    "behaviours",
    "demo_config",
    "demo_conversations",
    "demo_models",
    "wire_models",
]

#: The bundled tau-bench airline export (MIT): conversations and the tools they were offered.
DATA = Path(str(files("delta_eval") / "data" / "tau_bench_airline"))
#: The 200 recorded gpt-4o airline conversations (tau-bench, MIT).
DEMO_CONVERSATIONS = DATA / "gpt-4o-airline.json"
#: The airline domain's 14 tool specs, OpenAI function format.
DEMO_TOOLS = DATA / "airline_tools.json"

#: Tools that change the booking database, in the order that names a task's type.
WRITE_ACTIONS = (
    "book_reservation",
    "cancel_reservation",
    "update_reservation_flights",
    "update_reservation_baggages",
    "update_reservation_passengers",
    "send_certificate",
    "transfer_to_human_agents",
)

CANDIDATE_PROMPT = """{{recorded_system_prompt}}

# Style
- Keep every reply under 80 words and use short bullet lists for options.
- Before any write action, repeat the exact details back in one line and ask for a yes.
"""


def airline_task_type(conversation: Conversation) -> str:
    """The kind of task a tau-bench conversation is: its first write action, or ``read_only``.

    Reads the ``actions`` metadata field (the task's expected actions, ``info.task.actions`` in the export).
    """
    actions: Any = conversation.metadata.get("actions") or []
    names = [a.get("name") for a in actions if isinstance(a, dict)]
    for name in WRITE_ACTIONS:
        if name in names:
            return name
    return "read_only"


def demo_conversations() -> ConversationSource:
    """The bundled conversations, read with the same call a user would write for their own export."""
    return read_conversations(
        DEMO_CONVERSATIONS,
        messages="traj",
        id="{task_id}/{trial}",
        metadata={"task_id": "task_id", "trial": "trial", "reward": "reward", "actions": "info.task.actions"},
        tools=DEMO_TOOLS,
    )


#: What the demo's candidate changes: ``changed`` (a reworded system prompt, and a model that rewords more,
#: sometimes skips or changes a tool call, and fails now and then) or ``reword`` (the same model, rewording more and
#: nothing else: the case stages 1 and 2 are for).
CandidateKind = Literal["changed", "reword"]
#: The demo's judges: ``llm`` (the LLM judges, on simulated judge models) or ``rule`` (the rule-based judges).
JudgeKind = Literal["llm", "rule"]


def behaviours(
    seed: int = 7, latency_ms: float = 20.0, candidate: CandidateKind = "changed"
) -> dict[str, SimulatedBehaviour]:
    """How the demo's stand-in models behave, by model name: a ``baseline`` that rewords a little; a ``candidate``
    (see :data:`CandidateKind`); and two judges: ``judge-small`` for stage 2, and ``judge`` for stage 3, slower
    (like a reasoning model) and with a slight position bias, so that judging in both orders has something to
    catch."""
    changed = SimulatedBehaviour(
        reword_rate=0.35,
        skip_tool_rate=0.06,
        change_args_rate=0.06,
        rate_limit_rate=0.03,
        server_error_rate=0.01,
        retry_after_s=0.05,
        latency_ms=latency_ms,
        seed=seed,
    )
    reword = SimulatedBehaviour(reword_rate=0.5, skip_tool_rate=0.02, latency_ms=latency_ms, seed=seed)
    return {
        "baseline": SimulatedBehaviour(reword_rate=0.1, skip_tool_rate=0.02, latency_ms=latency_ms, seed=seed),
        "candidate": changed if candidate == "changed" else reword,
        "judge-small": SimulatedBehaviour(latency_ms=latency_ms, seed=seed),
        "judge": SimulatedBehaviour(latency_ms=3 * latency_ms, judge_position_bias=0.1, seed=seed),
    }


@dataclass(frozen=True)
class DemoModels:
    """The demo's two variants and its judges."""

    baseline: Variant
    candidate: Variant
    judges: Judges
    #: What the catalogue cannot know of the fake server's models: they take sampling parameters and stop sequences.
    models: dict[str, ModelOverride] = field(default_factory=dict)


def demo_models(
    prefix: str = "simulated",
    options: dict[str, Any] | None = None,
    *,
    seed: int = 7,
    latency_ms: float = 20.0,
    candidate: CandidateKind = "changed",
    judges: JudgeKind = "llm",
) -> DemoModels:
    """The demo's models as ``prefix:name`` ids: ``simulated`` ones (their behaviour in their options), or a
    provider's, with ``options`` (where the fake server is) given to each."""
    per_model = behaviours(seed, latency_ms, candidate)

    def opts(name: str) -> dict[str, Any]:
        if prefix == "simulated":
            return per_model[name].model_dump(exclude_defaults=True)
        return dict(options or {})

    prompt = CANDIDATE_PROMPT if candidate == "changed" else None
    chosen = Judges()
    if judges == "llm":
        chosen = Judges(
            equivalence=EquivalenceJudge(model=f"{prefix}:judge-small", provider_options=opts("judge-small")),
            judge=PairwiseJudge(model=f"{prefix}:judge", provider_options=opts("judge")),
            order="both",
        )
    return DemoModels(
        baseline=Variant(model=f"{prefix}:baseline", provider_options=opts("baseline")),
        candidate=Variant(model=f"{prefix}:candidate", system_prompt=prompt, provider_options=opts("candidate")),
        judges=chosen,
        models={} if prefix == "simulated" else {f"{prefix}:*": ModelOverride(sampling=True, stop=True)},
    )


#: The wire formats the demo can run through: a model prefix and the fake server that speaks it.
WIRES: dict[str, tuple[str, type[FakeProviderServer]]] = {
    "openai": ("openai", FakeOpenAIServer),
    "openai-responses": ("openai-responses", FakeOpenAIServer),
    "anthropic": ("anthropic", FakeAnthropicServer),
    "gemini": ("gemini", FakeGeminiServer),
}


@contextmanager
def wire_models(
    wire: str,
    *,
    seed: int = 7,
    latency_ms: float = 20.0,
    candidate: CandidateKind = "changed",
    judges: JudgeKind = "llm",
) -> Iterator[DemoModels]:
    """The demo's models on a real provider SDK, talking to a fake server of that provider on 127.0.0.1 that
    answers from the bundled recordings (and, for the judges, reads the pair it is shown); the server stops when
    the block ends.

    Example::

        with wire_models("openai") as models:
            de.run(demo_config(models=models), conversations=demo_conversations())
    """
    if wire not in WIRES:
        raise ConfigError(f"unknown wire {wire!r}; one of {', '.join(WIRES)}")
    prefix, server_class = WIRES[wire]
    conversations, _ = demo_conversations().load()
    with server_class(recordings=conversations, behaviour=behaviours(seed, latency_ms, candidate)) as server:
        base_url = server.base_url if isinstance(server, FakeOpenAIServer) else server.url
        # The fake server takes any key; the SDK only needs one to send.
        options = {"base_url": base_url, "api_key": "demo-key-for-the-fake-server"}
        yield demo_models(prefix, options, seed=seed, latency_ms=latency_ms, candidate=candidate, judges=judges)


def demo_config(
    out: str | Path = "runs/demo",
    n: int = 100,
    seed: int = 7,
    latency_ms: float = 20.0,
    *,
    candidate: CandidateKind = "changed",
    judges: JudgeKind = "llm",
    models: DemoModels | None = None,
    description: str | None = None,
    flush_every: int | None = None,
) -> RunConfig:
    """The demo's run configuration: ``n`` conversations stratified by task type, the two variants and the judges:
    by default the simulated models (see :func:`demo_models`), or those given (e.g. from :func:`wire_models`).

    ``flush_every``: the run's (default: a run's own, whose first batches of 50 pairs put the demo's few hundred
    pairs in several batches, so that a demo killed and resumed shows what resuming keeps)."""
    m = models or demo_models(seed=seed, latency_ms=latency_ms, candidate=candidate, judges=judges)
    return RunConfig(
        out=out if is_uri(out) else Path(out),  # an object-store URI is the config's to resolve
        sample=Stratified(by=["task_type"], n=n, seed=seed, derived={"task_type": airline_task_type}),
        baseline=m.baseline,
        candidate=m.candidate,
        judges=m.judges,
        models=m.models,
        seed=seed,
        retry=RetryPolicy(initial_wait=0.05, max_wait=1.0),
        description=description,
        **({"flush_every": flush_every} if flush_every is not None else {}),
    )
