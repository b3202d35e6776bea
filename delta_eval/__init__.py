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
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from delta_eval import demo, testing
from delta_eval.adapters.base import ModelAdapter
from delta_eval.adapters.client import ModelClient
from delta_eval.adapters.limits import ModelLimits
from delta_eval.adapters.pool import ModelPool
from delta_eval.adapters.registry import AdapterContext, AdapterFactory, register_adapter
from delta_eval.adapters.retry import RetryPolicy
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
from delta_eval.catalog import ModelInfo, ModelOverride, model_info
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
from delta_eval.executors import Executor, InProcessExecutor, ProcessExecutor, RayExecutor, ShardFailedError
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
from delta_eval.metrics import Check, Decision, DecisionRule, Estimand, ExitCode, Gate, WinRate, decide
from delta_eval.metrics.planning import SamplePlan
from delta_eval.metrics.score import ScoreWeights
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
from delta_eval.testing import ScriptedAdapter, SimulatedAdapter
from delta_eval.variant import Variant

try:
    __version__ = _version("delta-eval")
except _PackageNotFoundError:  # pragma: no cover - running from a source tree without installing
    __version__ = "0.0.0"

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
