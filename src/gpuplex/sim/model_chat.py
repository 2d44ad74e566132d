"""The simulated model's chat template: a chat request's messages (and tools) rendered to the text
the model reads, as vLLM renders a request with the model's Jinja template before tokenizing it
(without adding special tokens: the template writes them).

    <s>[<|system|>\\n# Tools\\n{tools as JSON}<|end|>\\n]
    <|{role}|>\\n{content}[{tool_calls as JSON}]<|end|>\\n      one per message
    <|assistant|>\\n                                           the generation prompt

A role without a turn token of its own (`developer`, `function`) is written as plain text. Fields
of a message other than role, content and tool calls are ignored, as templates ignore them. Content
is a string, null, or a list of text parts; other parts (images, audio) are refused, as a text-only
model refuses them. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson

from gpuplex.sim.model_tokenizer import BOS, END_OF_TURN, ROLE_TOKENS

TEXT_PARTS = frozenset({"text", "input_text", "refusal"})


class ChatRefused(ValueError):
    """A message the template cannot render; the message says which field and why."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def render_chat(
    messages: Sequence[object],
    tools: object = None,
    *,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
) -> str:
    """The prompt text of a chat. Raises ChatRefused for a message it cannot render."""
    parts = [BOS]
    if tools:
        parts.append(f"{ROLE_TOKENS['system']}\n# Tools\n{_json(tools)}{END_OF_TURN}\n")
    last = len(messages) - 1
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ChatRefused(f"messages[{index}] must be an object", "messages")
        role = message.get("role")
        if not isinstance(role, str):
            raise ChatRefused(f"messages[{index}].role must be a string", "messages")
        text = content_text(message.get("content"), index)
        tool_calls = message.get("tool_calls")
        if tool_calls:
            text += _json(tool_calls)
        marker = ROLE_TOKENS.get(role, f"<|{role}|>")
        end = "" if continue_final_message and index == last else f"{END_OF_TURN}\n"
        parts.append(f"{marker}\n{text}{end}")
    if add_generation_prompt and not continue_final_message:
        parts.append(f"{ROLE_TOKENS['assistant']}\n")
    return "".join(parts)


def render_request(body: Mapping[str, object], messages: Sequence[object]) -> str:
    """`render_chat` with a chat request's own options (its tools, `add_generation_prompt`,
    `continue_final_message`), as chat completions and `/tokenize` both render it."""
    return render_chat(
        messages,
        body.get("tools"),
        add_generation_prompt=body.get("add_generation_prompt", True) is not False,
        continue_final_message=body.get("continue_final_message") is True,
    )


def content_text(content: object, index: int = 0) -> str:
    """A message's content as text: a string, null, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ChatRefused(
            f"messages[{index}].content must be a string or a list of parts", "messages"
        )
    texts: list[str] = []
    for part in content:
        kind = part.get("type", "text") if isinstance(part, Mapping) else None
        if kind not in TEXT_PARTS or not isinstance(part, Mapping):
            raise ChatRefused(
                f"messages[{index}].content: only text parts are supported by this model "
                f"(got {kind!r})",
                "messages",
            )
        value = part.get("refusal" if kind == "refusal" else "text")
        if not isinstance(value, str):
            raise ChatRefused(f"messages[{index}].content: a text part needs its text", "messages")
        texts.append(value)
    return "\n".join(texts)


def tool_arguments(tool: Mapping[str, object], words: Sequence[str]) -> str:
    """The JSON arguments the simulated model "calls" a function with: each property the function's
    schema names (at most four), a string of two of `words` each."""
    function = tool.get("function")
    parameters = function.get("parameters") if isinstance(function, Mapping) else None
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    names = list(properties)[:4] if isinstance(properties, Mapping) else []
    arguments = {
        str(name): "".join(words[(2 * i + j) % len(words)] for j in range(2)).strip()
        for i, name in enumerate(names)
    }
    return _json(arguments)


def _json(value: object) -> str:
    return orjson.dumps(value).decode()
