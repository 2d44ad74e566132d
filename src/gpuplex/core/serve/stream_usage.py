"""Token usage of an OpenAI server-sent-events stream, counted as the bytes go by: the `usage`
object when the server sends one (the client asked `stream_options.include_usage`), else the
generated text counted with the gateway's token estimate (at least one token per content chunk)."""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from gpuplex.core.serve.tokens import text_tokens

DONE = b"[DONE]"


@dataclass(slots=True)
class StreamUsage:
    completion_tokens: int = 0
    reported_prompt: int | None = None
    reported_completion: int | None = None
    _pending: bytes = field(default=b"", repr=False)

    def feed(self, chunk: bytes) -> bool:
        """Read a piece of the stream; True if it holds the final `data: [DONE]` event."""
        self._pending += chunk
        saw_done = False
        while True:
            end = self._pending.find(b"\n\n")
            if end < 0:
                break
            event, self._pending = self._pending[:end], self._pending[end + 2 :]
            saw_done |= self._event(event)
        return saw_done

    def _event(self, event: bytes) -> bool:
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
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
            if isinstance(text, str) and text:
                self.completion_tokens += max(1, text_tokens(text))

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
    usage = reply.get("usage") if isinstance(reply, dict) else None
    if not isinstance(usage, dict):
        return prompt_estimate, 0
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens", 0)
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return prompt_estimate, 0
    return prompt, completion
