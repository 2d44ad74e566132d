"""Server-sent events from a model server, cut into whole events with a bound on their size.

The gateway relays a stream event by event: it counts each event's tokens, renames the model in
it, and never holds more than one unfinished event. An event longer than `max_event_bytes` (a
server that sends no separators) raises EventTooLong instead of growing a buffer without end.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

#: Event separators: a blank line, with LF or CRLF line ends (the SSE standard allows both).
SEPARATORS = (b"\n\n", b"\r\n\r\n")


class EventTooLong(ValueError):
    """An event grew past the limit without ending."""


@dataclass(slots=True)
class EventSplitter:
    max_event_bytes: int
    _pending: bytearray = field(default_factory=bytearray, repr=False)

    def feed(self, chunk: bytes) -> list[bytes]:
        """The events `chunk` completes, each with its separator; keeps the unfinished rest."""
        if not self._pending and chunk.endswith(b"\n\n") and b"\r" not in chunk:
            # the common case, a server writing whole events: split without copying to a buffer
            if chunk.find(b"\n\n") == len(chunk) - 2:
                return [chunk]
            return [event + b"\n\n" for event in chunk[:-2].split(b"\n\n")]
        pending = self._pending
        pending += chunk
        events: list[bytes] = []
        start = 0
        while True:
            end, width = _next_separator(pending, start)
            if end < 0:
                break
            events.append(bytes(pending[start : end + width]))
            start = end + width
        if start:
            del pending[:start]
        if len(pending) > self.max_event_bytes:
            pending.clear()
            raise EventTooLong(f"an event is longer than {self.max_event_bytes} bytes")
        return events

    def rest(self) -> bytes:
        """What is left when the stream ends: a last event without its separator, if any."""
        rest = bytes(self._pending)
        self._pending.clear()
        return rest


def _next_separator(data: bytearray, start: int) -> tuple[int, int]:
    best, width = -1, 0
    for separator in SEPARATORS:
        at = data.find(separator, start)
        if at >= 0 and (best < 0 or at < best):
            best, width = at, len(separator)
    return best, width


def model_renamer(upstream: str, requested: str) -> tuple[bytes, bytes] | None:
    """(what to find, what to put) to make events name `requested` instead of the server's
    `upstream` model, or None when they are the same."""
    if upstream == requested:
        return None
    return b'"model":' + orjson.dumps(upstream), b'"model":' + orjson.dumps(requested)


def rename_model(event: bytes, renamer: tuple[bytes, bytes] | None) -> bytes:
    if renamer is None:
        return event
    find, put = renamer
    event = event.replace(find, put)
    spaced = find.replace(b":", b": ", 1)
    return event.replace(spaced, put) if spaced in event else event
