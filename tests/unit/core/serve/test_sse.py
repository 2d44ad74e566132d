"""Stream events are cut whole, however the bytes arrive, and never grow past their bound."""

from __future__ import annotations

import pytest

from gpuplex.core.serve.failed_auth import FailedAttempts
from gpuplex.core.serve.sse import EventSplitter, EventTooLong, model_renamer, rename_model


def test_events_are_whole_across_chunk_boundaries_with_lf_or_crlf() -> None:
    stream = b'data: {"a":1}\n\ndata: {"b":2}\r\n\r\ndata: [DONE]\n\n'
    splitter = EventSplitter(1024)
    events = [e for i in range(len(stream)) for e in splitter.feed(stream[i : i + 1])]
    assert events == [b'data: {"a":1}\n\n', b'data: {"b":2}\r\n\r\n', b"data: [DONE]\n\n"]
    assert splitter.rest() == b""


def test_an_event_without_end_is_refused_at_its_bound() -> None:
    splitter = EventSplitter(100)
    splitter.feed(b"data: " + b"x" * 90)
    with pytest.raises(EventTooLong):
        splitter.feed(b"x" * 20)


def test_events_name_the_model_the_tenant_called() -> None:
    renamer = model_renamer("/adapters/acme-legal", "legal")
    assert rename_model(b'{"model":"/adapters/acme-legal","x":1}', renamer) == (
        b'{"model":"legal","x":1}'
    )
    assert rename_model(b'{"model": "/adapters/acme-legal"}', renamer) == b'{"model":"legal"}'
    assert model_renamer("same", "same") is None


def test_failed_attempts_throttle_an_address_for_its_minute_only() -> None:
    attempts = FailedAttempts(per_min=3)
    for _ in range(3):
        assert not attempts.throttled("10.0.0.1", 0.0)
        attempts.record("10.0.0.1", 0.0)
    assert attempts.throttled("10.0.0.1", 59.0)
    assert not attempts.throttled("10.0.0.2", 59.0)
    assert not attempts.throttled("10.0.0.1", 60.0)


def test_failed_attempts_stay_bounded_however_many_addresses_an_attacker_uses() -> None:
    attempts = FailedAttempts(per_min=30, max_addresses=1000)
    for n in range(20_000):
        attempts.record(f"10.{n >> 16}.{(n >> 8) & 255}.{n & 255}", n / 1000)
    assert len(attempts) == 1000  # the oldest are evicted, not scanned
    attempts.record("late", 200.0)
    assert len(attempts) == 1  # everything older than a minute has gone
