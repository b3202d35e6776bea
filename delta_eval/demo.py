"""The demo: tau-bench airline conversations (bundled, MIT) replayed on two simulated models.

The data is read through the library's own importer, as a user's production export would be. The baseline is the
``simulated:`` model with a little rewording (sampling noise); the candidate gets a reworded system prompt and a
simulated model that rewords more, sometimes skips or changes a tool call, and now and then answers 429 or 500, so
that it really differs from the baseline and the retry path is exercised. The stage 2 and stage 3 judges are the
rule-based ones (``rule:``). Nothing here calls a real provider.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Any

from delta_eval.adapters.retry import RetryPolicy
from delta_eval.config import RunConfig
from delta_eval.ingest.source import ConversationSource, read_conversations
from delta_eval.sampling.stratified import Stratified
from delta_eval.schema import Conversation
from delta_eval.variant import Variant

__all__ = [
    "DEMO_CONVERSATIONS",
    "DEMO_TOOLS",
    "WRITE_ACTIONS",
    "airline_task_type",
    "demo_config",
    "demo_conversations",
]

_DATA = Path(str(files("delta_eval") / "data" / "tau_bench_airline"))
#: The 200 recorded gpt-4o airline conversations (tau-bench, MIT).
DEMO_CONVERSATIONS = _DATA / "gpt-4o-airline.json"
#: The airline domain's 14 tool specs, OpenAI function format.
DEMO_TOOLS = _DATA / "airline_tools.json"

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


def demo_config(out: str | Path = "runs/demo", n: int = 100, seed: int = 7, latency_ms: float = 20.0) -> RunConfig:
    """The demo's run configuration: ``n`` conversations stratified by task type, two simulated variants."""
    return RunConfig(
        out=Path(out),
        sample=Stratified(by=["task_type"], n=n, seed=seed, derived={"task_type": airline_task_type}),
        baseline=Variant(
            model="simulated:baseline",
            provider_options={"reword_rate": 0.1, "skip_tool_rate": 0.02, "latency_ms": latency_ms, "seed": seed},
        ),
        candidate=Variant(
            model="simulated:candidate",
            system_prompt=CANDIDATE_PROMPT,
            provider_options={
                "reword_rate": 0.35,
                "skip_tool_rate": 0.06,
                "change_args_rate": 0.06,
                "rate_limit_rate": 0.03,
                "server_error_rate": 0.01,
                "retry_after_s": 0.05,
                "latency_ms": latency_ms,
                "seed": seed,
            },
        ),
        seed=seed,
        retry=RetryPolicy(initial_wait=0.05, max_wait=1.0),
    )
