"""The simulated model server's streamed replies: the server-sent events vLLM 0.32 writes, step by
step as tokens are generated.

    chat:        one chunk per choice with `delta.role` (and empty content), before any token
    each step:   one chunk per choice still generating, with that token's text (`delta.content`;
                 `delta.reasoning` for a reasoning model's first half; a tool call's arguments
                 piece by piece in `delta.tool_calls[0].function.arguments`, the first chunk
                 also naming the function); a choice's last chunk carries its finish reason
    the end:     with `stream_options.include_usage`, a last chunk with `choices: []` and the
                 whole request's usage; then `data: [DONE]`

Without `include_usage` no chunk carries usage at all; with `continuous_usage_stats` too, every
chunk carries its choice's running usage. Pure: ids, the time and the tokenizer come in."""

from __future__ import annotations

from functools import lru_cache

import orjson

from gpuplex.core.serve.inference import Endpoint
from gpuplex.sim.model_replies import (
    DONE_EVENT,
    SYSTEM_FINGERPRINT,
    ChoiceOutput,
    choice_outputs,
    reasoning_tokens,
    reply_id,
    tool_call_id,
)
from gpuplex.sim.model_requests import GenerationRequest, ToolCallPlan
from gpuplex.sim.model_tokenizer import SimTokenizer


class StreamEvents:
    """The events of one streamed reply: `head()`, then `step(i)` for each decoding step, then
    `end()`. Each returns the bytes to send (empty when there is nothing to say)."""

    def __init__(
        self, request: GenerationRequest, tokenizer: SimTokenizer, suffix: str, created_s: int
    ) -> None:
        self._request = request
        self._suffix = suffix
        self._chat = request.endpoint is Endpoint.CHAT
        self._outputs = choice_outputs(request, tokenizer)
        self._head: dict[str, object] = {
            "id": reply_id(request.endpoint, suffix),
            "object": "chat.completion.chunk" if self._chat else "text_completion",
            "created": created_s,
            "model": request.model,
        }
        #: every token chunk starts so: `data: {"id":...,"model":...,"choices":[`
        self._prefix = b"data: " + orjson.dumps(self._head)[:-1] + b',"choices":['

    def head(self) -> bytes:
        """Before the first token: a chat stream's role chunks, one per choice."""
        if not self._chat:
            return b""
        events = []
        for output in self._outputs:
            choice = {
                "index": output.index,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
            chunk = {
                **self._head,
                "choices": [choice],
                "prompt_token_ids": None,
                "prompt_text": None,
            }
            events.append(self._event(chunk, output, 0))
        return b"".join(events)

    def step(self, step: int) -> bytes:
        """The chunks of decoding step `step`: one per choice that makes a token in it."""
        return b"".join(
            self._token(output, step) for output in self._outputs if step < len(output.pieces)
        )

    def end(self) -> bytes:
        """The usage chunk (if asked for) and `[DONE]`."""
        request = self._request
        if not request.include_usage:
            return DONE_EVENT
        completion = request.generated_tokens
        usage: dict[str, object] = {
            "prompt_tokens": request.prompt_tokens,
            "total_tokens": request.prompt_tokens + completion,
            "completion_tokens": completion,
        }
        if request.reasoning:
            usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens(request)}
        chunk = {
            **self._head,
            "choices": [],
            "usage": usage,
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }
        return b"data: " + orjson.dumps(chunk) + b"\n\n" + DONE_EVENT

    def _token(self, output: ChoiceOutput, step: int) -> bytes:
        request = self._request
        last = step == len(output.pieces) - 1
        finish = request.prompts[output.prompt].finish_reason.value if last else None
        if request.tool_call is None:
            field = (
                "text" if not self._chat else "reasoning" if step < output.reasoning else "content"
            )
            choice = _choice_json(self._chat, output.index, field, output.pieces[step], finish)
        else:
            delta = self._tool_delta(request.tool_call, output, step)
            choice = orjson.dumps(_choice(self._chat, output.index, delta, finish))
        extra: dict[str, object] = {}
        if last and not request.include_usage:
            extra["system_fingerprint"] = SYSTEM_FINGERPRINT
        if request.continuous_usage:
            extra["usage"] = self._usage(output, step + 1)
        tail = b"," + orjson.dumps(extra)[1:] if extra else b"}"
        return self._prefix + choice + b"]" + tail + b"\n\n"

    def _tool_delta(self, call: ToolCallPlan, output: ChoiceOutput, step: int) -> dict[str, object]:
        piece = output.pieces[step]
        function: dict[str, object] = {"arguments": piece}
        tool: dict[str, object] = {"index": 0, "function": function}
        if step == 0:
            function = {"name": call.name, "arguments": piece}
            tool = {
                "id": tool_call_id(self._suffix, output.index),
                "type": "function",
                "index": 0,
                "function": function,
            }
        return {"tool_calls": [tool]}

    def _event(self, chunk: dict[str, object], output: ChoiceOutput, generated: int) -> bytes:
        if self._request.continuous_usage:
            chunk["usage"] = self._usage(output, generated)
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    def _usage(self, output: ChoiceOutput, generated: int) -> dict[str, object]:
        """A choice's running usage, for `continuous_usage_stats`."""
        request = self._request
        prompt = request.prompts[output.prompt].prompt_tokens
        usage: dict[str, object] = {
            "prompt_tokens": prompt,
            "total_tokens": prompt + generated,
            "completion_tokens": generated,
        }
        if self._chat:
            details = min(generated, output.reasoning) if request.reasoning else None
            usage["completion_tokens_details"] = (
                None if details is None else {"reasoning_tokens": details}
            )
        return usage


def _choice(chat: bool, index: int, said: object, finish: str | None) -> dict[str, object]:
    """One choice of a token chunk, with the fields vLLM writes: a completion chunk names its stop
    reason always, a chat chunk only with its finish reason."""
    choice: dict[str, object] = {"index": index, "delta" if chat else "text": said}
    choice |= {"logprobs": None, "finish_reason": finish}
    if finish is not None or not chat:
        choice["stop_reason"] = None
    if not chat:
        choice["prompt_token_ids"] = None
    choice["token_ids"] = None
    return choice


@lru_cache(maxsize=4096)
def _choice_json(chat: bool, index: int, field: str, piece: str, finish: str | None) -> bytes:
    """A text token's choice as JSON (a few words repeat across every stream: made once)."""
    said: object = {field: piece} if chat else piece
    return orjson.dumps(_choice(chat, index, said, finish))
