"""Token usage of an OpenAI server-sent-events stream, counted as the bytes go by: the `usage`
object when the server sends one (the client asked `stream_options.include_usage`), else the
generated text counted with the gateway's token estimate (at least one token per content chunk).
It also counts the events that carry generated tokens (text, reasoning text, tool calls), which
the gateway's latency measurement reads (token_timing.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from gpuplex.core.serve.sse import EventSplitter
from gpuplex.core.serve.tokens import text_tokens

DONE = b"[DONE]"


@dataclass(slots=True)
class StreamUsage:
    completion_tokens: int = 0
    token_events: int = 0  # events with generated text, reasoning text or a tool call
    reported_prompt: int | None = None
    reported_completion: int | None = None
    _splitter: EventSplitter = field(default_factory=lambda: EventSplitter(1 << 20), repr=False)

    def feed(self, chunk: bytes) -> bool:
        """Read a piece of the stream; True if it holds the final `data: [DONE]` event. Raises
        `sse.EventTooLong` past an event of a MiB."""
        saw_done = False
        for event in self._splitter.feed(chunk):
            saw_done |= self.read_event(event)
        return saw_done

    def read_event(self, event: bytes) -> bool:
        """Count one whole event; True if it is `data: [DONE]`."""
        if (
            event.startswith(b"data: ")
            and event.find(b"\n") == len(event) - 2
            and b"\r" not in event
        ):
            # the common case, one `data: ` line and its blank line: as `read_lines`, unsplit
            data = event[6:-2].strip()
            if data == DONE:
                return True
            self._chunk(data)
            return False
        return self.read_lines(event)

    def read_lines(self, event: bytes) -> bool:
        """`read_event` for any event: line by line (LF, CRLF or CR ends)."""
        for line in event.splitlines():
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == DONE:
                return True
            self._chunk(data)
        return False

    def _chunk(self, data: bytes) -> None:
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(chunk, dict):
            return
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if isinstance(prompt, int) and isinstance(completion, int):
                self.reported_prompt, self.reported_completion = prompt, completion
        generated = False
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
            if isinstance(text, str) and text:
                self.completion_tokens += max(1, text_tokens(text))
                generated = True
            elif isinstance(delta, dict) and (
                delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls")
            ):
                generated = True
        self.token_events += generated

    def tokens(self, prompt_estimate: int) -> tuple[int, int]:
        """(prompt, completion) tokens: reported if the stream carried usage, else counted."""
        if self.reported_prompt is not None and self.reported_completion is not None:
            return self.reported_prompt, self.reported_completion
        return prompt_estimate, self.completion_tokens


def reply_usage(body: bytes, prompt_estimate: int) -> tuple[int, int]:
    """(prompt, completion) tokens from a JSON reply's `usage`, else (estimate, 0)."""
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        return prompt_estimate, 0
    return _usage_of(reply.get("usage") if isinstance(reply, dict) else None, prompt_estimate)


def _usage_of(usage: object, prompt_estimate: int) -> tuple[int, int]:
    if not isinstance(usage, dict):
        return prompt_estimate, 0
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens", 0)
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return prompt_estimate, 0
    return prompt, completion


def read_reply(body: bytes, prompt_estimate: int, model: str) -> tuple[int, int, bytes]:
    """A whole JSON reply's (prompt, completion) tokens, as `reply_usage`, and the body naming
    `model` (the name the tenant called) where the server named its own; parsed once."""
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        return prompt_estimate, 0, body
    if not isinstance(reply, dict):
        return prompt_estimate, 0, body
    prompt, completion = _usage_of(reply.get("usage"), prompt_estimate)
    if isinstance(reply.get("model"), str) and reply["model"] != model:
        reply["model"] = model
        body = orjson.dumps(reply)
    return prompt, completion, body
