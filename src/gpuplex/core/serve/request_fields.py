"""The request fields the gateway forwards to a model server, per endpoint: the ones it knows how to
count and that cannot touch another tenant. A model server shared by tenants takes fields that
reach past the caller's own request (vLLM accepts a `chat_template` of the caller's own, a
`lora_path`, a scheduling `priority`, a `request_id`, `min_tokens`, `ignore_eos`, ...), and the
servers ignore fields they do not know, so forwarding "whatever the client sent" hands each tenant
every extension of every server. Here a field is either forwarded (FORWARDED), dropped because the
OpenAI API defines it as having no effect on the generation (DROPPED: end-user ids and OpenAI's
own storage options), or refused with a 400 naming it. docs/gateway.md lists them."""

from __future__ import annotations

from collections.abc import Mapping

from gpuplex.core.serve.endpoints import Endpoint

#: Sampling and output fields every generating endpoint forwards: each shapes only the caller's
#: own tokens, within the completion budget the gateway writes into the request.
_SAMPLING = frozenset(
    {
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "max_tokens",
        "model",
        "n",
        "presence_penalty",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
    }
)

FORWARDED: Mapping[Endpoint, frozenset[str]] = {
    Endpoint.CHAT: _SAMPLING
    | {
        "function_call",
        "functions",
        "max_completion_tokens",
        "messages",
        "parallel_tool_calls",
        "reasoning_effort",
        "response_format",
        "tool_choice",
        "tools",
        "top_logprobs",
    },
    Endpoint.COMPLETIONS: _SAMPLING
    | {"best_of", "echo", "max_completion_tokens", "prompt", "suffix"},
    Endpoint.EMBEDDINGS: frozenset({"dimensions", "encoding_format", "input", "model"}),
}

#: Fields the OpenAI API defines that change nothing a server generates: an end-user id for abuse
#: monitoring and OpenAI's own storage of completions. Dropped, not refused, so that clients
#: written for OpenAI keep working.
DROPPED = frozenset({"metadata", "prompt_cache_key", "safety_identifier", "store", "user"})

#: Fields of one chat message the templates render: each counted by its text.
MESSAGE_FIELDS = frozenset(
    {
        "annotations",
        "audio",
        "content",
        "function_call",
        "name",
        "reasoning",
        "reasoning_content",
        "refusal",
        "role",
        "tool_call_id",
        "tool_calls",
    }
)
#: The roles of the OpenAI chat API; a template renders the role's text, so any other is refused.
ROLES = frozenset({"assistant", "developer", "function", "system", "tool", "user"})
#: `stream_options` keys: `include_usage` is read (the gateway always asks the server for usage
#: and hides it from clients that did not ask); OpenAI's `include_obfuscation` is dropped.
STREAM_OPTIONS = frozenset({"include_usage"})
STREAM_OPTIONS_DROPPED = frozenset({"include_obfuscation"})


def refused_field(endpoint: Endpoint, body: Mapping[str, object]) -> str | None:
    """The first field of `body` the gateway does not forward on `endpoint` (a dotted path for a
    message's or stream_options' field), or None."""
    allowed = FORWARDED[endpoint]
    for name in body:
        if name not in allowed and name not in DROPPED:
            return name
    options = body.get("stream_options")
    if isinstance(options, Mapping):
        for name in options:
            if name not in STREAM_OPTIONS and name not in STREAM_OPTIONS_DROPPED:
                return f"stream_options.{name}"
    messages = body.get("messages")
    if endpoint is Endpoint.CHAT and isinstance(messages, list):
        for at, message in enumerate(messages):
            if isinstance(message, Mapping):
                for name in message:
                    if name not in MESSAGE_FIELDS:
                        return f"messages[{at}].{name}"
    return None


def bad_role(body: Mapping[str, object]) -> str | None:
    """The path of the first chat message whose role is not one of ROLES, or None."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    for at, message in enumerate(messages):
        if isinstance(message, Mapping) and message.get("role") not in ROLES:
            return f"messages[{at}].role"
    return None


def kept_fields(endpoint: Endpoint, body: Mapping[str, object]) -> dict[str, object]:
    """`body` without the DROPPED fields (the caller checked `refused_field` first)."""
    allowed = FORWARDED[endpoint]
    return {name: value for name, value in body.items() if name in allowed}
