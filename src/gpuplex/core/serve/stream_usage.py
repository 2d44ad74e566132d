"""Token usage of an OpenAI server-sent-events stream, counted as the bytes go by: the `usage`
object the server sends (the gateway always forwards `stream_options.include_usage`), else, from a
server that ignores it or a stream cut short, the generated text (content, reasoning, tool calls)
guessed at four ASCII characters or one other character a token, at least one per chunk (what a
server streams per event). That guess only bills a stream whose server never said; the rate
limits keep such a request's whole reservation (relay.py). It also counts the events that
carry generated tokens, which the gateway's latency measurement reads (token_timing.py), and marks
the usage-only chunk (`choices: []`), which a client that did not ask for usage is not sent."""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from gpuplex.core.serve.sse import EventSplitter

DONE = b"[DONE]"
CHARS_PER_TOKEN = 4


@dataclass(slots=True)
class StreamUsage:
    completion_tokens: int = 0
    token_events: int = 0  # events with generated text, reasoning text or a tool call
    reported_prompt: int | None = None
    reported_completion: int | None = None
    usage_only: bool = False  # the last event read was the usage chunk, with no choices
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
        self.usage_only = False
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
        choices = chunk.get("choices")
        if isinstance(usage, dict):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if isinstance(prompt, int) and isinstance(completion, int):
                self.reported_prompt, self.reported_completion = prompt, completion
                self.usage_only = not choices
        generated = False
        for choice in choices or ():
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                text = choice.get("text")
                if isinstance(text, str) and text:
                    self.completion_tokens += guessed_tokens(text)
                    generated = True
                continue
            counted = _delta_tokens(delta)
            if counted:
                self.completion_tokens += counted
                generated = True
        self.token_events += generated

    @property
    def reported(self) -> bool:
        """The server sent its own count."""
        return self.reported_prompt is not None and self.reported_completion is not None

    def tokens(self, prompt_estimate: int) -> tuple[int, int]:
        """(prompt, completion) tokens: reported if the stream carried usage, else counted."""
        if self.reported_prompt is not None and self.reported_completion is not None:
            return self.reported_prompt, self.reported_completion
        return prompt_estimate, self.completion_tokens


def guessed_tokens(text: str) -> int:
    """A guess at the tokens of generated text: ceil(ASCII characters / 4) plus one per other
    character, at least one."""
    if text.isascii():
        return max(1, (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN)
    ascii_chars = len(text.encode("ascii", "ignore"))
    return (ascii_chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN + len(text) - ascii_chars


def _delta_tokens(delta: dict[str, object]) -> int:
    """Guessed tokens of a chat delta's generated parts (content, reasoning, tool calls' names
    and arguments), at least one for a delta that carries any."""
    parts = [delta.get(name) for name in ("content", "reasoning_content", "reasoning")]
    calls = delta.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                parts += [function.get("name"), function.get("arguments")]
    texts = [part for part in parts if isinstance(part, str) and part]
    if not texts and not calls:
        return 0
    return max(1, sum(guessed_tokens(text) for text in texts))


def reply_usage(body: bytes) -> tuple[int, int] | None:
    """(prompt, completion) tokens from a JSON reply's `usage`; None where it has none."""
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return _usage_of(reply.get("usage") if isinstance(reply, dict) else None)


def _usage_of(usage: object) -> tuple[int, int] | None:
    if not isinstance(usage, dict):
        return None
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens", 0)
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    return prompt, completion


def read_reply(body: bytes, model: str) -> tuple[tuple[int, int] | None, bytes]:
    """A whole JSON reply's (prompt, completion) tokens, as `reply_usage`, and the body naming
    `model` (the name the tenant called) where the server named its own; parsed once."""
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, body
    if not isinstance(reply, dict):
        return None, body
    usage = _usage_of(reply.get("usage"))
    if isinstance(reply.get("model"), str) and reply["model"] != model:
        reply["model"] = model
        body = orjson.dumps(reply)
    return usage, body
