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
from gpuplex.sim.model_requests import GenerationRequest
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
        piece = output.pieces[step]
        last = step == len(output.pieces) - 1
        choice: dict[str, object] = {"index": output.index}
        if self._chat:
            choice["delta"] = self._delta(output, step, piece)
        else:
            choice["text"] = piece
        choice |= {"logprobs": None, "finish_reason": None}
        if last:
            finish = request.prompts[output.prompt].finish_reason.value
            choice |= {"finish_reason": finish, "stop_reason": None}
        if not self._chat:
            choice["prompt_token_ids"] = None
        choice["token_ids"] = None
        chunk: dict[str, object] = {**self._head, "choices": [choice]}
        if last and not request.include_usage:
            chunk["system_fingerprint"] = SYSTEM_FINGERPRINT
        return self._event(chunk, output, step + 1)

    def _delta(self, output: ChoiceOutput, step: int, piece: str) -> dict[str, object]:
        call = self._request.tool_call
        if call is None:
            return {"reasoning" if step < output.reasoning else "content": piece}
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
        request = self._request
        if request.continuous_usage:
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
            chunk["usage"] = usage
        return b"data: " + orjson.dumps(chunk) + b"\n\n"
