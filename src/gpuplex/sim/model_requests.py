"""What the simulated model server accepts: an OpenAI request body checked as vLLM 0.32 checks it
and reduced to the facts a reply needs (prompts and their token counts, what each choice
generates, streaming options), or vLLM's error saying what is wrong. Fields it does not know are
ignored, as vLLM ignores them.

Prompt tokens are counted with the simulated model's own tokenizer: a chat request rendered with
its chat template (model_chat.py, special tokens included), a completion prompt with a BOS token
first, a token-id prompt by its length. Each prompt of a list runs on its own, as vLLM runs it.

Completion length follows vLLM: `max_tokens` (chat: `max_completion_tokens or max_tokens`) over
`max_model_len` is refused; a prompt over it is refused; otherwise a choice generates
min(limit, `max_model_len` - prompt). A chat request without a limit fills the context; a
completion request without one generates the server's default (vLLM's 16). The simulated model
stops at its limit (`length`), or where no limit was set, "chooses" to stop there (`stop`). Pure:
the server parses the JSON and passes the body and the tokenizer in."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeGuard

import orjson

from gpuplex.core.serve.inference import Endpoint
from gpuplex.sim.model_chat import ChatRefused, render_request, tool_arguments
from gpuplex.sim.model_errors import (
    ModelErrorReply,
    invalid,
    no_route,
    refused,
    unknown_model,
)
from gpuplex.sim.model_tokenizer import SimTokenizer

#: Limits that keep one request from costing the server gigabytes.
MAX_DIMENSIONS = 65_536
MAX_CHOICES = 128


class FinishReason(StrEnum):
    LENGTH = "length"  # stopped at the request's limit (or the context's end)
    STOP = "stop"  # the request set no limit: the model "chose" to stop; a named tool call
    TOOL_CALLS = "tool_calls"  # a tool call the request required


@dataclass(frozen=True, slots=True)
class ServedModels:
    """What the server serves: base models (the first carries the adapters), LoRA adapters,
    embedding-only models (when any is named, only they embed and they do nothing else), models
    that reason before they answer, and the context length and defaults of them all."""

    bases: tuple[str, ...]
    adapters: tuple[str, ...] = ()
    embedding: tuple[str, ...] = ()
    reasoning: tuple[str, ...] = ()
    max_model_len: int = 4096
    default_max_tokens: int = 16
    embedding_dim: int = 8

    def check(self, model: object, endpoint: Endpoint | None) -> str | ModelErrorReply:
        """The served name a body's `model` asks for (none: the first base), or the error."""
        if model is None:
            return self.bases[0]
        if not isinstance(model, str):
            return invalid("model", "Input should be a valid string")
        if model not in self.bases and model not in self.adapters and model not in self.embedding:
            return unknown_model(model, self.bases)
        task_served = endpoint is None or (endpoint is Endpoint.EMBEDDINGS) == (
            model in self.embedding
        )
        if self.embedding and not task_served:
            return no_route()
        return model


@dataclass(frozen=True, slots=True)
class PromptRun:
    """One prompt of a request: its tokens, and what each of its choices generates."""

    prompt_tokens: int
    completion_tokens: int  # per choice; 0 for embeddings
    finish_reason: FinishReason
    text: str = ""  # embeddings: the input (a token array as JSON), which its vector depends on


@dataclass(frozen=True, slots=True)
class ToolCallPlan:
    """The function call a chat reply makes: its name, and its JSON arguments as token ids."""

    name: str
    arguments: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """A valid request, reduced to what the reply depends on."""

    endpoint: Endpoint
    model: str
    prompts: tuple[PromptRun, ...]
    choices: int = 1  # `n`: choices per prompt
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False  # a running usage on every chunk
    reasoning: bool = False  # the first half of each choice's tokens are reasoning
    tool_call: ToolCallPlan | None = None
    dimensions: int = 0  # embeddings: length of each vector
    base64: bool = False  # embeddings: vectors as base64 float32, as the openai client asks

    @property
    def prompt_tokens(self) -> int:
        return sum(p.prompt_tokens for p in self.prompts)

    @property
    def generated_tokens(self) -> int:
        """What the whole request generates: every choice of every prompt."""
        return sum(p.completion_tokens for p in self.prompts) * self.choices

    @property
    def steps(self) -> int:
        """Decoding steps: the longest choice's tokens."""
        return max(p.completion_tokens for p in self.prompts)

    def running(self, step: int) -> int:
        """Sequences still generating at `step` (each makes one token then)."""
        return sum(self.choices for p in self.prompts if step < p.completion_tokens)


def parse_request(
    endpoint: Endpoint, body: object, served: ServedModels, tokenizer: SimTokenizer
) -> GenerationRequest | ModelErrorReply:
    """Check an OpenAI request body for `endpoint` against what this server serves."""
    if not isinstance(body, dict):
        return invalid(None, "Input should be a valid dictionary")
    model = served.check(body.get("model"), endpoint)
    if isinstance(model, ModelErrorReply):
        return model
    if endpoint is Endpoint.EMBEDDINGS:
        return _embedding(body, model, served, tokenizer)
    options = _options(body)
    if isinstance(options, ModelErrorReply):
        return options
    choices = _choices(body)
    if isinstance(choices, ModelErrorReply):
        return choices
    if endpoint is Endpoint.CHAT:
        return _chat(body, model, served, tokenizer, options, choices)
    counted = _prompt(body.get("prompt"), tokenizer, body.get("add_special_tokens", True) is True)
    if isinstance(counted, ModelErrorReply):
        return counted
    limit = _limit(body, "max_tokens", default=served.default_max_tokens)
    if isinstance(limit, ModelErrorReply):
        return limit
    runs: list[PromptRun] = []
    for n_prompt, _ in counted:
        run = _run(n_prompt, limit, served.max_model_len)
        if isinstance(run, ModelErrorReply):
            return run
        runs.append(run)
    stream, include_usage, continuous = options
    return GenerationRequest(
        endpoint, model, tuple(runs), choices, stream, include_usage, continuous
    )


_Limit = tuple[int | None, str, bool]  # (tokens or None: the context, param, set by the request)


def _chat(
    body: dict[str, object],
    model: str,
    served: ServedModels,
    tokenizer: SimTokenizer,
    options: tuple[bool, bool, bool],
    choices: int,
) -> GenerationRequest | ModelErrorReply:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return invalid(
            "messages", "Field required" if messages is None else "Input should be a valid list"
        )
    if not messages:
        return refused(
            "Cannot apply chat template to an empty conversation. Provide at least one message."
        )
    tool = _tool_choice(body)
    if isinstance(tool, ModelErrorReply):
        return tool
    template_kwargs = body.get("chat_template_kwargs")
    thinking = not (
        isinstance(template_kwargs, dict) and template_kwargs.get("enable_thinking") is False
    )
    try:
        text = render_request(body, messages)
    except ChatRefused as error:
        return refused(str(error), error.param)
    n_prompt = tokenizer.count(text, add_bos=body.get("add_special_tokens") is True)
    limit = _limit(body, "max_completion_tokens", "max_tokens")
    if isinstance(limit, ModelErrorReply):
        return limit
    run = _run(n_prompt, limit, served.max_model_len)
    if isinstance(run, ModelErrorReply):
        return run
    plan: ToolCallPlan | None = None
    if tool is not None:
        words = [tokenizer.piece(w) for w in tokenizer.words]
        name, named = tool
        arguments = tuple(tokenizer.encode(tool_arguments(_find_tool(body, name), words)))
        plan = ToolCallPlan(name, arguments)
        natural = FinishReason.STOP if named else FinishReason.TOOL_CALLS
        if run.completion_tokens >= len(arguments):
            run = PromptRun(n_prompt, len(arguments), natural)
        else:
            run = PromptRun(n_prompt, run.completion_tokens, FinishReason.LENGTH)
    stream, include_usage, continuous = options
    return GenerationRequest(
        Endpoint.CHAT,
        model,
        (run,),
        choices,
        stream,
        include_usage,
        continuous,
        reasoning=model in served.reasoning and thinking and plan is None,
        tool_call=plan,
    )


def _limit(
    body: Mapping[str, object], *fields: str, default: int | None = None
) -> _Limit | ModelErrorReply:
    """The request's completion limit, the field it came from, and whether it set one."""
    for field in fields:
        value = body.get(field)
        if value is None:
            continue
        if not _is_int(value):
            return invalid(field, "Input should be a valid integer")
        return value, field, True
    if default is not None and any(field in body for field in fields):
        default = None  # an explicit null: vLLM then fills the context
    return default, fields[-1], False


def _run(prompt_tokens: int, limit: _Limit, max_model_len: int) -> PromptRun | ModelErrorReply:
    """What one prompt generates, checked against the context as vLLM checks it."""
    asked, field, set_by_request = limit
    if asked is not None and asked > max_model_len:
        return refused(
            f"{field}={asked} cannot be greater than max_model_len={max_model_len}. "
            "Please request fewer output tokens.",
            field,
        )
    if prompt_tokens > max_model_len:
        return refused(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt contains {prompt_tokens} input tokens, which exceeds this limit even "
            "without any output tokens. Please reduce the length of the input prompt.",
            "input_tokens",
        )
    left = max_model_len - prompt_tokens
    tokens = left if asked is None else min(asked, left)
    if tokens < 1:
        return refused(f"max_tokens must be at least 1, got {tokens}.", "max_tokens")
    clipped = asked is not None and asked > left
    finish = FinishReason.LENGTH if set_by_request or clipped else FinishReason.STOP
    return PromptRun(prompt_tokens, tokens, finish)


def _options(body: Mapping[str, object]) -> tuple[bool, bool, bool] | ModelErrorReply:
    """(stream, include_usage, continuous_usage_stats)."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        return invalid("stream", "Input should be a valid boolean")
    options = body.get("stream_options")
    if options is None:
        return bool(stream), False, False
    if not isinstance(options, dict):
        return invalid("stream_options", "Input should be a valid dictionary")
    if options and not stream:
        return _schema("Stream options can only be defined when `stream=True`.", "stream_options")
    include_usage = options.get("include_usage") is True
    return True, include_usage, include_usage and options.get("continuous_usage_stats") is True


def _choices(body: Mapping[str, object]) -> int | ModelErrorReply:
    n = body.get("n")
    if n is None:
        return 1
    if not _is_int(n):
        return invalid("n", "Input should be a valid integer")
    if n < 1:
        return refused(f"n must be at least 1, got {n}.")  # vLLM names no parameter here
    if n > MAX_CHOICES:
        return refused(f"n must be at most {MAX_CHOICES}, got {n}.", "n")
    return n


def _tool_choice(body: Mapping[str, object]) -> tuple[str, bool] | ModelErrorReply | None:
    """The function the reply calls and whether the request named it (else `required`), or None
    for a plain reply; the checks are vLLM's."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if tools == []:
        return _schema("`tools` must not be an empty array.", "tools")
    if tools is not None and not (
        isinstance(tools, list) and all(_function_name(t) is not None for t in tools)
    ):
        return invalid("tools", "each tool needs `function.name`")
    if choice is None or choice == "none":
        return None
    if not isinstance(tools, list):
        return _schema("When using `tool_choice`, `tools` must be set.", "tool_choice")
    if choice == "auto":
        return None  # the simulated model chooses to answer in text
    if choice == "required":
        return str(_function_name(tools[0])), False
    if not isinstance(choice, dict):
        return _schema(
            f'Invalid value for `tool_choice`: {choice}! Only named tools, "none", "auto" or '
            '"required" are supported.',
            "tool_choice",
        )
    function = choice.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        return _schema(
            "Invalid `name` in `function` in `tool_choice`!", "tool_choice.function.name"
        )
    if all(_function_name(t) != name for t in tools):
        return _schema(
            "The tool specified in `tool_choice` does not match any of the specified `tools`",
            "tool_choice",
        )
    return name, True


def _function_name(tool: object) -> str | None:
    function = tool.get("function") if isinstance(tool, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None


def _find_tool(body: Mapping[str, object], name: str) -> Mapping[str, object]:
    tools = body.get("tools")
    found = [t for t in tools if _function_name(t) == name] if isinstance(tools, list) else []
    return found[0] if found and isinstance(found[0], dict) else {}


def _schema(message: str, param: str) -> ModelErrorReply:
    """A check vLLM makes while it reads the body (a pydantic model validator raising its own
    validation error): a BadRequestError whose message names the parameter."""
    return refused(f"{message} (parameter={param})", param)


def _embedding(
    body: dict[str, object], model: str, served: ServedModels, tokenizer: SimTokenizer
) -> GenerationRequest | ModelErrorReply:
    counted = _inputs(body.get("input"), tokenizer, add_bos=True)
    if counted is None:
        return invalid("input", "a string, a list of strings or of token ids is required")
    asked = body.get("dimensions")
    dimensions = served.embedding_dim if asked is None else asked
    if not _is_int(dimensions) or not 0 < dimensions <= MAX_DIMENSIONS:
        return refused(
            f"`dimensions` must be a positive integer, at most {MAX_DIMENSIONS}.", "dimensions"
        )
    encoding = body.get("encoding_format")
    if encoding not in (None, "float", "base64"):
        return invalid("encoding_format", "Input should be 'float' or 'base64'")
    runs = tuple(PromptRun(n, 0, FinishReason.STOP, text) for n, text in counted)
    return GenerationRequest(
        Endpoint.EMBEDDINGS,
        model,
        runs,
        dimensions=dimensions,
        base64=encoding == "base64",
    )


def _prompt(
    value: object, tokenizer: SimTokenizer, add_bos: bool
) -> list[tuple[int, str]] | ModelErrorReply:
    if value is None or value == "":
        return _schema("Either prompt or prompt_embeds must be provided and non-empty.", "prompt")
    counted = _inputs(value, tokenizer, add_bos)
    if counted is None:
        return invalid("prompt", "Input should be a string, a list of strings or of token ids")
    return counted


def _inputs(value: object, tokenizer: SimTokenizer, add_bos: bool) -> list[tuple[int, str]] | None:
    """(tokens, text) of each item of a `prompt` or `input`: a string, a list of strings, a token
    array, or a list of token arrays. None when it is none of those, or empty."""
    if isinstance(value, str):
        return [(tokenizer.count(value, add_bos=add_bos), value)] if value else None
    if not isinstance(value, list) or not value:
        return None
    if all(isinstance(v, str) for v in value):
        return [(tokenizer.count(v, add_bos=add_bos), v) for v in value]
    if _is_token_array(value):
        return [(len(value), orjson.dumps(value).decode())]
    if all(isinstance(v, list) and v and _is_token_array(v) for v in value):
        return [(len(v), orjson.dumps(v).decode()) for v in value]
    return None


def _is_token_array(value: list[object]) -> bool:
    return all(_is_int(v) and v >= 0 for v in value)


def _is_int(value: object) -> TypeGuard[int]:
    """An integer (JSON true is not one)."""
    return isinstance(value, int) and not isinstance(value, bool)
