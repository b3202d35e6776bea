"""What each real model refuses, per model family, written from the providers' documentation and public error
reports, so the fake servers refuse what the real ones refuse.

This table is the fakes' own, on purpose: it is written apart from the adapters and from
:mod:`delta_eval.catalog` and imports neither, so an adapter that maps a parameter wrongly fails against the fake
instead of passing by agreeing with itself. Families are matched by model-name pattern, most specific first; a
model no family matches is accepted as it is (a fake cannot know an unknown model). Each rule names its source.

The checks return a :class:`Refusal` (the message and, for OpenAI, ``param`` and ``code``) or ``None``; the servers
turn a refusal into the provider's 400.

Example:
    >>> check_openai("o3", {"temperature": 0.2}, api="chat").code
    'unsupported_value'
    >>> check_openai("gpt-4.1", {"temperature": 0.2}, api="chat") is None
    True
    >>> [f.name for f in known_families("gemini")][:2]
    ['gemini-2.0-flash', 'gemini-2.5-pro']
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "AZURE_DECLARED",
    "AnthropicRule",
    "Family",
    "GeminiRule",
    "OpenAIRule",
    "Refusal",
    "azure_undeclared",
    "check_anthropic",
    "check_gemini",
    "check_gemini_version",
    "check_openai",
    "known_families",
    "rule_for",
]

Provider = Literal["openai", "anthropic", "gemini"]


@dataclass(frozen=True)
class Refusal:
    """Why a real provider answers 400: the message, and OpenAI's ``param`` and ``code`` fields."""

    message: str
    param: str | None = None
    code: str | None = None


@dataclass(frozen=True)
class Family:
    """A model family: its name, the pattern its model names match, where the rules come from, and example
    model names (what tests enumerate)."""

    provider: Provider
    name: str
    pattern: str
    source: str
    examples: tuple[str, ...]

    def matches(self, model: str) -> bool:
        """Whether ``model`` belongs to this family."""
        return re.match(self.pattern, model, re.I) is not None


# -- OpenAI ---------------------------------------------------------------------------------------------------------

#: Sampling parameters reasoning models refuse at any value but their default.
_SAMPLING = ("temperature", "top_p")
#: What the o-series refuse outright (Chat Completions).
_O_SERIES_REFUSED = (
    "stop",
    "parallel_tool_calls",
    "presence_penalty",
    "frequency_penalty",
    "logprobs",
    "top_logprobs",
    "logit_bias",
)


@dataclass(frozen=True)
class OpenAIRule(Family):
    """What an OpenAI family accepts.

    - ``reasoning``: a reasoning model (takes ``reasoning_effort``, refuses ``max_tokens`` and non-default sampling);
    - ``efforts``: the effort values it takes (``None``: any but ``refused_efforts``);
    - ``default_effort``: the effort when none is sent;
    - ``sampling_at_effort_none``: ``temperature``/``top_p``/``logprobs`` are accepted when the effort is ``none``;
    - ``refused``: Chat Completions fields refused whatever their value.
    """

    reasoning: bool = False
    efforts: frozenset[str] | None = None
    refused_efforts: frozenset[str] = frozenset()
    default_effort: str | None = None
    sampling_at_effort_none: bool = False
    refused: tuple[str, ...] = ()


_DATED = r"(?:-\d{4}-\d{2}-\d{2})?$"
_GPT5_POINT_EFFORTS = frozenset({"none", "low", "medium", "high", "xhigh"})

OPENAI_RULES: tuple[OpenAIRule, ...] = (
    # https://platform.openai.com/docs/models/gpt-5-chat-latest : the chat variant is not a reasoning model
    OpenAIRule(
        "openai",
        "gpt-5-chat",
        r"^gpt-5-chat",
        "https://platform.openai.com/docs/models/gpt-5-chat-latest",
        ("gpt-5-chat-latest",),
    ),
    # https://learn.microsoft.com/en-us/javascript/api/@azure/ai-projects/reasoningeffort : gpt-5-pro only takes high
    OpenAIRule(
        "openai",
        "gpt-5-pro",
        r"^gpt-5-pro" + _DATED,
        "https://learn.microsoft.com/en-us/javascript/api/@azure/ai-projects/reasoningeffort",
        ("gpt-5-pro",),
        reasoning=True,
        efforts=frozenset({"high"}),
        default_effort="high",
    ),
    # https://platform.openai.com/docs/guides/reasoning : gpt-5 takes minimal..high (no none), sampling at default only
    OpenAIRule(
        "openai",
        "gpt-5",
        r"^gpt-5(?:-mini|-nano)?" + _DATED,
        "https://platform.openai.com/docs/guides/reasoning",
        ("gpt-5", "gpt-5-mini", "gpt-5-nano"),
        reasoning=True,
        efforts=frozenset({"minimal", "low", "medium", "high"}),
        default_effort="medium",
    ),
    # https://github.com/openai/openai-agents-python/issues/2089 : gpt-5.1 takes none/low/medium/high, not minimal;
    # https://developers.openai.com/api/docs/guides/latest-model : temperature/top_p/logprobs only at effort none
    OpenAIRule(
        "openai",
        "gpt-5.1",
        r"^gpt-5\.1(?:-mini|-nano)?" + _DATED,
        "https://developers.openai.com/api/docs/guides/latest-model",
        ("gpt-5.1",),
        reasoning=True,
        efforts=frozenset({"none", "low", "medium", "high"}),
        default_effort="none",
        sampling_at_effort_none=True,
    ),
    # https://developers.openai.com/api/docs/guides/latest-model#gpt-54-parameter-compatibility : as 5.1, plus xhigh
    OpenAIRule(
        "openai",
        "gpt-5.2-5.5",
        r"^gpt-5\.[2-5](?:-mini|-nano)?" + _DATED,
        "https://developers.openai.com/api/docs/guides/latest-model#gpt-54-parameter-compatibility",
        ("gpt-5.2", "gpt-5.4", "gpt-5.4-mini", "gpt-5.5"),
        reasoning=True,
        efforts=_GPT5_POINT_EFFORTS,
        default_effort="none",
        sampling_at_effort_none=True,
    ),
    # https://github.com/itzcrazykns/vane/issues/1173 : gpt-5.6 requires the default temperature (1) at any effort
    OpenAIRule(
        "openai",
        "gpt-5.6",
        r"^gpt-5\.6(?:-[a-z]+)?" + _DATED,
        "https://github.com/itzcrazykns/vane/issues/1173",
        ("gpt-5.6", "gpt-5.6-mini"),
        reasoning=True,
        refused_efforts=frozenset({"minimal"}),
        default_effort="none",
    ),
    # wire_formats.md "Corrections" (gpt-6 refuses temperature/top_p, as the reasoning guide says of reasoning models)
    OpenAIRule(
        "openai",
        "gpt-6",
        r"^gpt-6",
        "https://platform.openai.com/docs/guides/reasoning",
        ("gpt-6", "gpt-6-mini"),
        reasoning=True,
        refused_efforts=frozenset({"minimal"}),
        default_effort="none",
    ),
    # https://platform.openai.com/docs/guides/reasoning#limitations ; parallel_tool_calls:
    # https://github.com/UKGovernmentBEIS/inspect_ai/issues/1023 ; effort low/medium/high only:
    # https://docs.rs/openai-tools/3.0.0/openai_tools/responses/request/enum.ReasoningEffort.html
    OpenAIRule(
        "openai",
        "o-series",
        r"^o(?:1|3|3-mini|3-pro|4-mini)" + _DATED,
        "https://platform.openai.com/docs/guides/reasoning#limitations",
        ("o1", "o3", "o3-mini", "o4-mini"),
        reasoning=True,
        efforts=frozenset({"low", "medium", "high"}),
        default_effort="medium",
        refused=_O_SERIES_REFUSED,
    ),
    # https://community.openai.com/t/developer-role-not-accepted-for-o1-o1-mini-o3-mini/1110750/7 : no reasoning_effort
    OpenAIRule(
        "openai",
        "gpt-4.1",
        r"^gpt-4\.1",
        "https://community.openai.com/t/developer-role-not-accepted-for-o1-o1-mini-o3-mini/1110750/7",
        ("gpt-4.1", "gpt-4.1-mini", "gpt-4.1-nano"),
    ),
    OpenAIRule(
        "openai",
        "gpt-4o",
        r"^gpt-4o",
        "https://community.openai.com/t/developer-role-not-accepted-for-o1-o1-mini-o3-mini/1110750/7",
        ("gpt-4o", "gpt-4o-mini"),
    ),
)

#: https://github.com/continuedev/continue/issues/12031 (observed body), unverified organisations only
_SUMMARY_UNVERIFIED = (
    "Your organization must be verified to generate reasoning summaries. Please go to: "
    "https://platform.openai.com/settings/organization/general and click on Verify Organization. If you just "
    "verified, it can take up to 15 minutes for access to propagate."
)


def _quote_list(values: list[str]) -> str:
    quoted = [f"'{v}'" for v in values]
    return ", ".join(quoted[:-1]) + f", and {quoted[-1]}" if len(quoted) > 1 else "".join(quoted)


def _unsupported_parameter(name: str) -> Refusal:
    return Refusal(f"Unsupported parameter: '{name}' is not supported with this model.", name, "unsupported_parameter")


def check_openai(
    model: str, body: Mapping[str, Any], *, api: str, verified_organization: bool = False
) -> Refusal | None:
    """What OpenAI refuses in ``body`` (Chat Completions when ``api`` is ``chat``, else Responses) for ``model``."""
    given = body.get("reasoning")
    reasoning_field: Mapping[str, Any] = given if isinstance(given, dict) else {}
    if api != "chat" and reasoning_field.get("summary") and not verified_organization:
        return Refusal(_SUMMARY_UNVERIFIED, "reasoning.summary", "unsupported_value")
    rule = rule_for("openai", model)
    if not isinstance(rule, OpenAIRule):
        return None
    effort_param = "reasoning_effort" if api == "chat" else "reasoning.effort"
    effort = body.get("reasoning_effort") if api == "chat" else reasoning_field.get("effort")
    if not rule.reasoning:
        if effort is not None or (api != "chat" and reasoning_field):
            return _unsupported_parameter(effort_param)
        return None
    if effort is not None:
        allowed = rule.efforts is None or effort in rule.efforts
        if effort in rule.refused_efforts or not allowed:
            supported = sorted(rule.efforts, key=_EFFORT_ORDER.index) if rule.efforts else None
            tail = f" Supported values are: {_quote_list(supported)}." if supported else ""
            return Refusal(
                f"Unsupported value: '{effort}' is not supported with the '{model}' model.{tail}",
                effort_param,
                "unsupported_value",
            )
    at_none = rule.sampling_at_effort_none and (effort if effort is not None else rule.default_effort) == "none"
    if api == "chat" and "max_tokens" in body:
        return Refusal(
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' "
            "instead.",
            "max_tokens",
            "unsupported_parameter",
        )
    for name in _SAMPLING:
        value = body.get(name)
        if value is not None and value != 1 and not at_none:
            return Refusal(
                f"Unsupported value: '{name}' does not support {value} with this model. Only the default "
                "(1) value is supported.",
                name,
                "unsupported_value",
            )
    if api == "chat":
        for name in rule.refused:
            if name in body and body[name] is not None:
                return _unsupported_parameter(name)
        if body.get("logprobs") and not at_none:
            return _unsupported_parameter("logprobs")
    return None


_EFFORT_ORDER = ["none", "minimal", "low", "medium", "high", "xhigh", "max"]


# -- Anthropic ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnthropicRule(Family):
    """What an Anthropic family accepts: ``thinking`` types, ``output_config.effort``, and sampling parameters."""

    thinking: frozenset[str] = frozenset({"enabled", "disabled"})
    effort: bool = False
    sampling: bool = True


_DATE8 = r"(?:-\d{8})?$"
_ADAPTIVE_DOC = "https://docs.aws.amazon.com/bedrock/latest/userguide/claude-messages-adaptive-thinking.html"

ANTHROPIC_RULES: tuple[AnthropicRule, ...] = (
    # https://docs.claude.com/en/docs/build-with-claude/extended-thinking#supported-models : 3.5 Haiku has none
    AnthropicRule(
        "anthropic",
        "claude-3-5-haiku",
        r"^claude-3-5-haiku" + _DATE8,
        "https://docs.claude.com/en/docs/build-with-claude/extended-thinking#supported-models",
        ("claude-3-5-haiku-20241022",),
        thinking=frozenset({"disabled"}),
    ),
    # https://docs.claude.com/en/docs/build-with-claude/extended-thinking : budget_tokens >= 1024, below max_tokens
    AnthropicRule(
        "anthropic",
        "claude-3-7-sonnet",
        r"^claude-3-7-sonnet" + _DATE8,
        "https://docs.claude.com/en/docs/build-with-claude/extended-thinking",
        ("claude-3-7-sonnet-20250219",),
    ),
    # https://docs.aws.amazon.com/bedrock/latest/userguide/claude-messages-adaptive-thinking.html : older models do
    # not support adaptive thinking and need thinking.type enabled with budget_tokens
    AnthropicRule(
        "anthropic",
        "claude-4",
        r"^claude-(?:sonnet-4|opus-4|opus-4-1)" + _DATE8,
        _ADAPTIVE_DOC,
        ("claude-sonnet-4-20250514", "claude-opus-4", "claude-opus-4-1"),
    ),
    # https://github.com/simstudioai/sim/pull/4771 : Opus 4.5 takes effort but not adaptive thinking
    AnthropicRule(
        "anthropic",
        "claude-opus-4-5",
        r"^claude-opus-4-5" + _DATE8,
        "https://github.com/simstudioai/sim/pull/4771",
        ("claude-opus-4-5",),
        effort=True,
    ),
    AnthropicRule(
        "anthropic",
        "claude-4-5",
        r"^claude-(?:sonnet|haiku)-4-5" + _DATE8,
        _ADAPTIVE_DOC,
        ("claude-sonnet-4-5", "claude-haiku-4-5-20251001"),
    ),
    # same page: Opus 4.6 and Sonnet 4.6 take adaptive, and (deprecated) enabled with budget_tokens
    AnthropicRule(
        "anthropic",
        "claude-4-6",
        r"^claude-(?:sonnet|opus)-4-6" + _DATE8,
        _ADAPTIVE_DOC,
        ("claude-sonnet-4-6", "claude-opus-4-6"),
        thinking=frozenset({"enabled", "disabled", "adaptive"}),
        effort=True,
    ),
    # same page and https://github.com/NousResearch/hermes-agent/issues/11137 : Opus 4.7 and later, Claude 5: adaptive
    # only ("enabled" and "disabled" are 400), sampling parameters removed
    AnthropicRule(
        "anthropic",
        "claude-adaptive-only",
        r"^claude-(?:opus-4-(?:[7-9]|\d{2,})|[a-z]+-(?:[5-9]|\d{2,})(?:-\d+)?)" + _DATE8,
        _ADAPTIVE_DOC,
        ("claude-opus-4-7", "claude-opus-4-8", "claude-sonnet-5", "claude-opus-5", "claude-haiku-5-5"),
        thinking=frozenset({"adaptive"}),
        effort=True,
        sampling=False,
    ),
)


def check_anthropic(model: str, body: Mapping[str, Any]) -> Refusal | None:
    """What Anthropic refuses in a Messages ``body`` for ``model``."""
    rule = rule_for("anthropic", model)
    if not isinstance(rule, AnthropicRule):
        return None
    if not rule.sampling:
        for name in ("temperature", "top_p", "top_k"):
            if name in body:
                return Refusal(f"`{name}` is deprecated for this model.")
    thinking = body.get("thinking")
    if isinstance(thinking, dict):
        kind = thinking.get("type")
        if kind not in rule.thinking:
            if "adaptive" in rule.thinking:
                return Refusal(
                    f'"thinking.type.{kind}" is not supported for this model. Use "thinking.type.adaptive" '
                    'and "output_config.effort" to control thinking behavior.'
                )
            if kind == "adaptive" and "enabled" in rule.thinking:
                return Refusal("adaptive thinking is not supported on this model")
            return Refusal(f"thinking.type: '{kind}' is not supported for this model.")
        if kind == "enabled":
            budget = thinking.get("budget_tokens")
            if not isinstance(budget, int) or budget < 1024:
                return Refusal("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
    effort = (body.get("output_config") or {}).get("effort")
    if effort is not None and not rule.effort:
        return Refusal("This model does not support the effort parameter.")
    return None


# -- Gemini ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GeminiRule(Family):
    """What a Gemini family accepts in ``generationConfig.thinkingConfig``.

    ``budgets``: the accepted ``thinkingBudget`` range (``None``: no budget), ``budget_values`` extra accepted
    values (-1 dynamic, 0 off); ``levels``: the accepted ``thinkingLevel`` values (empty: none);
    ``thinking``: whether a ``thinkingConfig`` is accepted at all.
    """

    thinking: bool = True
    budgets: tuple[int, int] | None = None
    budget_values: frozenset[int] = frozenset()
    levels: frozenset[str] = frozenset()


_THINKING_DOC = "https://ai.google.dev/gemini-api/docs/thinking"

GEMINI_RULES: tuple[GeminiRule, ...] = (
    # wire_formats.md "Corrections": gemini-2.0-flash refuses any thinkingConfig ("thinking_config is not supported")
    GeminiRule(
        "gemini",
        "gemini-2.0-flash",
        r"^gemini-2\.0-flash",
        _THINKING_DOC,
        ("gemini-2.0-flash", "gemini-2.0-flash-lite"),
        thinking=False,
    ),
    # https://ai.google.dev/gemini-api/docs/thinking : 2.5 Pro 128..32768, cannot be turned off, -1 dynamic
    GeminiRule(
        "gemini",
        "gemini-2.5-pro",
        r"^gemini-2\.5-pro",
        _THINKING_DOC,
        ("gemini-2.5-pro",),
        budgets=(128, 32768),
        budget_values=frozenset({-1}),
    ),
    # same page: Flash-Lite 512..24576, 0 turns it off, -1 dynamic
    GeminiRule(
        "gemini",
        "gemini-2.5-flash-lite",
        r"^gemini-2\.5-flash-lite",
        _THINKING_DOC,
        ("gemini-2.5-flash-lite",),
        budgets=(512, 24576),
        budget_values=frozenset({-1, 0}),
    ),
    # same page: 2.5 Flash 0..24576, -1 dynamic
    GeminiRule(
        "gemini",
        "gemini-2.5-flash",
        r"^gemini-2\.5-flash",
        _THINKING_DOC,
        ("gemini-2.5-flash",),
        budgets=(0, 24576),
        budget_values=frozenset({-1}),
    ),
    # https://hexdocs.pm/gemini_ex/Gemini.Types.Enums.ThinkingLevel.html : 3 Pro takes low/high; budget still accepted
    # for backwards compatibility (https://github.com/aduermael/herm/issues/38)
    GeminiRule(
        "gemini",
        "gemini-3-pro",
        r"^gemini-3-pro",
        _THINKING_DOC,
        ("gemini-3-pro-preview",),
        budgets=(128, 32768),
        budget_values=frozenset({-1}),
        levels=frozenset({"LOW", "HIGH"}),
    ),
    # https://docs.litellm.ai/blog/gemini_3_1_pro : "Gemini 3.1 Pro introduces support for medium thinking level"
    GeminiRule(
        "gemini",
        "gemini-3.1-pro",
        r"^gemini-3\.\d+-pro",
        _THINKING_DOC,
        ("gemini-3.1-pro-preview",),
        budgets=(128, 32768),
        budget_values=frozenset({-1}),
        levels=frozenset({"LOW", "MEDIUM", "HIGH"}),
    ),
    # same: 3 Flash (and Flash-Lite) take minimal/low/medium/high
    GeminiRule(
        "gemini",
        "gemini-3-flash",
        r"^gemini-3(?:\.\d+)?-flash",
        _THINKING_DOC,
        ("gemini-3-flash-preview", "gemini-3.1-flash-lite", "gemini-3.5-flash"),
        budgets=(0, 24576),
        budget_values=frozenset({-1}),
        levels=frozenset({"MINIMAL", "LOW", "MEDIUM", "HIGH"}),
    ),
)


def check_gemini(model: str, body: Mapping[str, Any]) -> Refusal | None:
    """What Gemini refuses in a (camel-cased) ``generateContent`` body for ``model``."""
    rule = rule_for("gemini", model)
    config = (body.get("generationConfig") or {}).get("thinkingConfig")
    if not isinstance(rule, GeminiRule) or not isinstance(config, dict):
        return None
    if not rule.thinking:
        return Refusal("Unable to submit request because thinking_config is not supported by this model.")
    budget, level = config.get("thinkingBudget"), config.get("thinkingLevel")
    if budget is not None and level is not None:
        return Refusal("You can only set one of thinking budget and thinking level.")
    if level is not None:
        if not rule.levels:
            return Refusal("Thinking level is not supported for this model.")
        if str(level).upper() not in rule.levels:
            return Refusal(
                f"Thinking level {str(level).upper()} is not supported for this model. Supported levels: "
                f"{', '.join(sorted(rule.levels))}."
            )
    if budget is not None and rule.budgets is not None and budget not in rule.budget_values:
        low, high = rule.budgets
        if budget == 0 and low > 0:
            return Refusal("Budget 0 is invalid. This model only works in thinking mode.")
        if not low <= budget <= high:
            return Refusal(f"The thinking budget {budget} is invalid. Please choose a value between {low} and {high}.")
    return None


#: The top-level and ``generationConfig`` fields the published v1 definition lacks (they exist on v1beta): a public
#: report (https://github.com/vercel/ai/pull/2256, https://github.com/googleapis/python-genai/issues/425) shows v1
#: answering 400 "Unknown name" for them.
_V1_UNKNOWN_TOP = ("systemInstruction", "tools", "toolConfig")
_V1_UNKNOWN_CONFIG = ("thinkingConfig", "responseMimeType", "responseSchema", "responseJsonSchema")


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def check_gemini_version(version: str, raw: Mapping[str, Any]) -> Refusal | None:
    """What the ``version`` path (``v1``, ``v1beta``) refuses in the ``raw`` body (names as the client sent them)."""
    if version != "v1":
        return None
    for key in raw:
        if _camel(key) in _V1_UNKNOWN_TOP:
            return Refusal(f'Invalid JSON payload received. Unknown name "{key}": Cannot find field.')
    for config_key, config in raw.items():
        if _camel(config_key) == "generationConfig" and isinstance(config, dict):
            for key in config:
                if _camel(key) in _V1_UNKNOWN_CONFIG:
                    return Refusal(
                        f"Invalid JSON payload received. Unknown name \"{key}\" at 'generation_config': "
                        "Cannot find field."
                    )
    return None


# -- Azure classic api-versions ---------------------------------------------------------------------------------

_AZURE_2024_10_21 = frozenset(
    {
        "messages",
        "data_sources",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "presence_penalty",
        "parallel_tool_calls",
        "response_format",
        "seed",
        "stop",
        "stream",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "function_call",
        "functions",
        "user",
    }
)
_AZURE_2025_PREVIEW = _AZURE_2024_10_21 | frozenset(
    {
        "stream_options",
        "reasoning_effort",
        "store",
        "metadata",
        "modalities",
        "prediction",
        "audio",
        "user_security_context",
    }
)

#: The Chat Completions request fields each Azure classic ``api-version`` declares
#: (``createChatCompletionRequest`` and ``chatCompletionsRequestCommon`` in
#: https://github.com/Azure/azure-rest-api-specs/blob/main/specification/cognitiveservices/data-plane/AzureOpenAI/inference/stable/2024-10-21/inference.json
#: and the ``preview/2025-04-01-preview`` file beside it). ``model`` is always accepted: the SDK sends it and the
#: deployment in the path decides. Versions not listed here accept every field (the fake cannot know them).
AZURE_DECLARED: Mapping[str, frozenset[str]] = {
    "2024-10-21": _AZURE_2024_10_21,
    "2025-04-01-preview": _AZURE_2025_PREVIEW,
}


def azure_undeclared(api_version: str, body: Mapping[str, Any]) -> Refusal | None:
    """The fields of a Chat Completions ``body`` that Azure's ``api_version`` does not declare, refused as Azure
    does ("Unrecognized request argument supplied", https://github.com/openai/openai-python/issues/1469)."""
    declared = AZURE_DECLARED.get(api_version)
    if declared is None:
        return None
    extra = [key for key in body if key not in declared and key != "model"]
    if not extra:
        return None
    noun = "argument" if len(extra) == 1 else "arguments"
    return Refusal(f"Unrecognized request {noun} supplied: {', '.join(extra)}")


# -- lookup ---------------------------------------------------------------------------------------------------------

_RULES: dict[Provider, tuple[Family, ...]] = {
    "openai": OPENAI_RULES,
    "anthropic": ANTHROPIC_RULES,
    "gemini": GEMINI_RULES,
}


def known_families(provider: Provider | None = None) -> list[Family]:
    """Every family the table knows (of one ``provider``, or all), most specific first within a provider."""
    providers: list[Provider] = [provider] if provider else list(_RULES)
    return [family for p in providers for family in _RULES[p]]


def rule_for(provider: Provider, model: str) -> Family | None:
    """The family ``model`` belongs to (the first that matches), or ``None`` for an unknown model."""
    return next((family for family in _RULES[provider] if family.matches(model)), None)
