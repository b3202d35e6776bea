"""delta_eval: delta evaluation of LLM agents.

Replay recent production conversations through a baseline and a candidate configuration, drop the pairs whose
outputs are equivalent (deterministic checks, then a cheap judge), have a strong judge compare the rest, and write
everything to Parquet for DuckDB.

Example:
    >>> import delta_eval as de                                                   # doctest: +SKIP
    >>> result = de.run(conversations=de.read_conversations("export.jsonl"),      # doctest: +SKIP
    ...                 baseline=de.Variant(model="openai:gpt-4o"),
    ...                 candidate=de.Variant(model="openai:gpt-4o", system_prompt="..."),
    ...                 sample=de.Stratified(n=200, seed=1), out="runs/new-prompt")
    >>> print(result.win_rate())                                                  # doctest: +SKIP

The names below are imported on first use (PEP 562): ``import delta_eval`` itself imports nothing heavy, so a
command's ``--help``, a worker process and a script that needs one function do not pay for DuckDB, Arrow, the
metrics and the analysis they never touch. ``from delta_eval import X`` and ``de.X`` import ``X``'s module then.
"""

# Private names only: whatever this module holds shows in ``dir(delta_eval)``.
import sys as _sys
import types as _types
import typing as _typing

from delta_eval.lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:  # what type checkers and IDEs see: every public name, as if imported here
    from delta_eval import demo, testing
    from delta_eval.adapters.base import ModelAdapter
    from delta_eval.adapters.client import ModelClient
    from delta_eval.adapters.limits import ModelLimits
    from delta_eval.adapters.pool import ModelPool
    from delta_eval.adapters.registry import AdapterContext, AdapterFactory, register_adapter
    from delta_eval.adapters.retry import RetryPolicy
    from delta_eval.adapters.simulated import SimulatedAdapter
    from delta_eval.analysis.analyze import Analysis
    from delta_eval.analysis.calibration import Calibration, calibrate
    from delta_eval.analysis.comparison import Comparison, analyze
    from delta_eval.analysis.leaderboard import Leaderboard, leaderboard
    from delta_eval.analysis.planning import plan
    from delta_eval.api import VerdictStream, arun, run, stream
    from delta_eval.calls import (
        FinishReason,
        GenerateParams,
        ModelRequest,
        ModelResponse,
        NamedToolChoice,
        ResponseFormat,
        ToolChoice,
    )
    from delta_eval.catalog.info import ModelInfo, ModelOverride
    from delta_eval.catalog.lookup import model_info
    from delta_eval.config import RunConfig, Screen, Session, load_config
    from delta_eval.estimate import CostEstimate, estimate
    from delta_eval.exceptions import (
        AuthenticationError,
        BadRequestError,
        ConfigError,
        DeltaEvalError,
        JudgeError,
        ProviderError,
        RateLimitError,
        RecordError,
        RunFolderChangedError,
        RunFolderError,
        RunFolderLinkError,
        ToolSimulationError,
        TransientError,
    )
    from delta_eval.executors.base import Executor
    from delta_eval.executors.local import InProcessExecutor, ProcessExecutor, ShardFailedError
    from delta_eval.executors.ray_cluster import RayExecutor
    from delta_eval.ingest.source import ConversationSource, open_source, read_conversations, read_conversations_sql
    from delta_eval.judges.base import (
        EquivalenceResult,
        PairView,
        PairwiseResult,
        SideView,
        SupportsComparison,
        SupportsEquivalence,
    )
    from delta_eval.judges.config import Judges
    from delta_eval.judges.context import JudgeContext
    from delta_eval.judges.llm import EquivalenceJudge, PairwiseJudge
    from delta_eval.mapping import FieldMapping, Pseudonymize, SourceConfig
    from delta_eval.matching import MatchOptions
    from delta_eval.metrics.decision import Decision, ExitCode, decide
    from delta_eval.metrics.estimand import Estimand
    from delta_eval.metrics.planning import SamplePlan
    from delta_eval.metrics.rule import Check, DecisionRule, Gate
    from delta_eval.metrics.score import ScoreWeights
    from delta_eval.metrics.winrate import WinRate
    from delta_eval.pricing import Price, Spend
    from delta_eval.progress import RunProgress
    from delta_eval.replay.render import RenderInput
    from delta_eval.replay.tools import RecordedToolSimulator, ToolContext, ToolSimulator
    from delta_eval.result import RunResult, open_result
    from delta_eval.sampling.stratified import Stratified
    from delta_eval.schema import (
        CallContext,
        Conversation,
        ErrorRecord,
        Judgement,
        MediaPart,
        Message,
        ReasoningState,
        Replay,
        ReplayPoint,
        Step,
        ToolCall,
        ToolResult,
        ToolSpec,
        TurnOutput,
        Usage,
        Verdict,
    )
    from delta_eval.store.manifest import RunCounts, RunManifest
    from delta_eval.store.views import open_run
    from delta_eval.testing.scripted import ScriptedAdapter
    from delta_eval.variant import Variant

    __version__: str

#: Where each public name lives, by module: imported from there on first use.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "delta_eval.adapters.base": ("ModelAdapter",),
    "delta_eval.adapters.client": ("ModelClient",),
    "delta_eval.adapters.limits": ("ModelLimits",),
    "delta_eval.adapters.pool": ("ModelPool",),
    "delta_eval.adapters.registry": ("AdapterContext", "AdapterFactory", "register_adapter"),
    "delta_eval.adapters.retry": ("RetryPolicy",),
    "delta_eval.adapters.simulated": ("SimulatedAdapter",),
    "delta_eval.analysis.analyze": ("Analysis",),
    "delta_eval.analysis.calibration": ("Calibration", "calibrate"),
    "delta_eval.analysis.comparison": ("Comparison", "analyze"),
    "delta_eval.analysis.leaderboard": ("Leaderboard", "leaderboard"),
    "delta_eval.analysis.planning": ("plan",),
    "delta_eval.api": ("VerdictStream", "arun", "run", "stream"),
    "delta_eval.calls": (
        "FinishReason",
        "GenerateParams",
        "ModelRequest",
        "ModelResponse",
        "NamedToolChoice",
        "ResponseFormat",
        "ToolChoice",
    ),
    "delta_eval.catalog.info": ("ModelInfo", "ModelOverride"),
    "delta_eval.catalog.lookup": ("model_info",),
    "delta_eval.config": ("RunConfig", "Screen", "Session", "load_config"),
    "delta_eval.estimate": ("CostEstimate", "estimate"),
    "delta_eval.exceptions": (
        "AuthenticationError",
        "BadRequestError",
        "ConfigError",
        "DeltaEvalError",
        "JudgeError",
        "ProviderError",
        "RateLimitError",
        "RecordError",
        "RunFolderChangedError",
        "RunFolderError",
        "RunFolderLinkError",
        "ToolSimulationError",
        "TransientError",
    ),
    "delta_eval.executors.base": ("Executor",),
    "delta_eval.executors.local": ("InProcessExecutor", "ProcessExecutor", "ShardFailedError"),
    "delta_eval.executors.ray_cluster": ("RayExecutor",),
    "delta_eval.ingest.source": ("ConversationSource", "open_source", "read_conversations", "read_conversations_sql"),
    "delta_eval.judges.base": (
        "EquivalenceResult",
        "PairView",
        "PairwiseResult",
        "SideView",
        "SupportsComparison",
        "SupportsEquivalence",
    ),
    "delta_eval.judges.config": ("Judges",),
    "delta_eval.judges.context": ("JudgeContext",),
    "delta_eval.judges.llm": ("EquivalenceJudge", "PairwiseJudge"),
    "delta_eval.mapping": ("FieldMapping", "Pseudonymize", "SourceConfig"),
    "delta_eval.matching": ("MatchOptions",),
    "delta_eval.metrics.decision": ("Decision", "ExitCode", "decide"),
    "delta_eval.metrics.estimand": ("Estimand",),
    "delta_eval.metrics.planning": ("SamplePlan",),
    "delta_eval.metrics.rule": ("Check", "DecisionRule", "Gate"),
    "delta_eval.metrics.score": ("ScoreWeights",),
    "delta_eval.metrics.winrate": ("WinRate",),
    "delta_eval.pricing": ("Price", "Spend"),
    "delta_eval.progress": ("RunProgress",),
    "delta_eval.replay.render": ("RenderInput",),
    "delta_eval.replay.tools": ("RecordedToolSimulator", "ToolContext", "ToolSimulator"),
    "delta_eval.result": ("RunResult", "open_result"),
    "delta_eval.sampling.stratified": ("Stratified",),
    "delta_eval.schema": (
        "CallContext",
        "Conversation",
        "ErrorRecord",
        "Judgement",
        "MediaPart",
        "Message",
        "ReasoningState",
        "Replay",
        "ReplayPoint",
        "Step",
        "ToolCall",
        "ToolResult",
        "ToolSpec",
        "TurnOutput",
        "Usage",
        "Verdict",
    ),
    "delta_eval.store.manifest": ("RunCounts", "RunManifest"),
    "delta_eval.store.views": ("open_run",),
    "delta_eval.testing.scripted": ("ScriptedAdapter",),
    "delta_eval.variant": ("Variant",),
}
#: Public submodules: ``de.demo``, ``de.testing``.
_SUBMODULES = ("demo", "testing")
_lazy_getattr, _lazy_dir = _lazy_names(__name__, _EXPORTS, _SUBMODULES)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("delta-eval")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without installing
        return "0.0.0"


if not _typing.TYPE_CHECKING:  # hidden from type checkers, so that a misspelt name stays an error for them

    def __getattr__(name: str) -> _typing.Any:
        """A public name, imported on first use and kept (see :mod:`delta_eval.lazy`); ``__version__`` read from
        the installed package's metadata on first use."""
        if name == "__version__":
            globals()[name] = _version()
            return globals()[name]
        return _lazy_getattr(name)


def __dir__() -> list[str]:
    """Every public name, imported or not yet, and what the module holds."""
    return sorted({*_lazy_dir(), "__version__"})


class _Namespace(_types.ModuleType):
    """This package's module type: importing a submodule whose name is also a public function of the package
    (``delta_eval.estimate`` and :func:`estimate`) must not bind the submodule over the function, as the import
    system does for a package's submodules; the function is looked up on first use as any other name."""

    def __setattr__(self, name: str, value: _typing.Any) -> None:
        if isinstance(value, _types.ModuleType) and any(name in names for names in _EXPORTS.values()):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Namespace

__all__ = [
    "AdapterContext",
    "AdapterFactory",
    "Analysis",
    "AuthenticationError",
    "BadRequestError",
    "Calibration",
    "CallContext",
    "Check",
    "Comparison",
    "ConfigError",
    "Conversation",
    "ConversationSource",
    "CostEstimate",
    "Decision",
    "DecisionRule",
    "DeltaEvalError",
    "EquivalenceJudge",
    "EquivalenceResult",
    "ErrorRecord",
    "Estimand",
    "Executor",
    "ExitCode",
    "FieldMapping",
    "FinishReason",
    "Gate",
    "GenerateParams",
    "InProcessExecutor",
    "JudgeContext",
    "JudgeError",
    "Judgement",
    "Judges",
    "Leaderboard",
    "MatchOptions",
    "MediaPart",
    "Message",
    "ModelAdapter",
    "ModelClient",
    "ModelInfo",
    "ModelLimits",
    "ModelOverride",
    "ModelPool",
    "ModelRequest",
    "ModelResponse",
    "NamedToolChoice",
    "PairView",
    "PairwiseJudge",
    "PairwiseResult",
    "Price",
    "ProcessExecutor",
    "ProviderError",
    "Pseudonymize",
    "RateLimitError",
    "RayExecutor",
    "ReasoningState",
    "RecordError",
    "RecordedToolSimulator",
    "RenderInput",
    "Replay",
    "ReplayPoint",
    "ResponseFormat",
    "RetryPolicy",
    "RunConfig",
    "RunCounts",
    "RunFolderChangedError",
    "RunFolderError",
    "RunFolderLinkError",
    "RunManifest",
    "RunProgress",
    "RunResult",
    "SamplePlan",
    "ScoreWeights",
    "Screen",
    "ScriptedAdapter",
    "Session",
    "ShardFailedError",
    "SideView",
    "SimulatedAdapter",
    "SourceConfig",
    "Spend",
    "Step",
    "Stratified",
    "SupportsComparison",
    "SupportsEquivalence",
    "ToolCall",
    "ToolChoice",
    "ToolContext",
    "ToolResult",
    "ToolSimulationError",
    "ToolSimulator",
    "ToolSpec",
    "TransientError",
    "TurnOutput",
    "Usage",
    "Variant",
    "Verdict",
    "VerdictStream",
    "WinRate",
    "__version__",
    "analyze",
    "arun",
    "calibrate",
    "decide",
    "demo",
    "estimate",
    "leaderboard",
    "load_config",
    "model_info",
    "open_result",
    "open_run",
    "open_source",
    "plan",
    "read_conversations",
    "read_conversations_sql",
    "register_adapter",
    "run",
    "stream",
    "testing",
]
