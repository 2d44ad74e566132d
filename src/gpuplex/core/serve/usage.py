"""One usage record per gateway request: who, which model, how many tokens, how long, what status.

Records travel gateway -> durable local spool -> store; `request_id` is unique, so moving a record
twice (after a crash between the store commit and the spool cleanup) never counts it twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class UsageRecord:
    request_id: str
    tenant: str
    key_prefix: str
    model: str  # the name the tenant asked for
    endpoint: str  # chat.completions | completions | embeddings
    status: int  # the HTTP status the client got
    prompt_tokens: int
    completion_tokens: int
    latency_s: float  # from the request's arrival to the last byte of the response
    started_at: datetime  # timezone-aware UTC
    stream: bool = False
    # a request's latency as the tenant saw it (token_timing.py); None where it does not apply:
    queue_wait_s: float | None = None  # the wait for a turn in the fair queue; None if none came
    ttft_s: float | None = None  # streamed replies: arrival to the first token
    itl_s: float | None = None  # streamed replies: the mean gap between token arrivals

    def fields(self) -> dict[str, Any]:
        """Field name -> value (written out: dataclasses.asdict deep-copies, on the hot path)."""
        return {
            "request_id": self.request_id,
            "tenant": self.tenant,
            "key_prefix": self.key_prefix,
            "model": self.model,
            "endpoint": self.endpoint,
            "status": self.status,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "latency_s": self.latency_s,
            "started_at": self.started_at,
            "stream": self.stream,
            "queue_wait_s": self.queue_wait_s,
            "ttft_s": self.ttft_s,
            "itl_s": self.itl_s,
        }

    def to_json_dict(self) -> dict[str, Any]:
        data = self.fields()
        data["started_at"] = self.started_at.isoformat()
        return data

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> UsageRecord:
        """Raises KeyError, TypeError or ValueError for a record that is not well formed."""
        started_at = datetime.fromisoformat(str(data["started_at"]))
        if started_at.tzinfo is None:
            raise ValueError("started_at has no timezone")
        return cls(
            request_id=_text(data, "request_id"),
            tenant=_text(data, "tenant"),
            key_prefix=_text(data, "key_prefix"),
            model=_text(data, "model"),
            endpoint=_text(data, "endpoint"),
            status=_count(data, "status"),
            prompt_tokens=_count(data, "prompt_tokens"),
            completion_tokens=_count(data, "completion_tokens"),
            latency_s=float(data["latency_s"]),
            started_at=started_at,
            stream=bool(data.get("stream", False)),
            queue_wait_s=_seconds(data, "queue_wait_s"),
            ttft_s=_seconds(data, "ttft_s"),
            itl_s=_seconds(data, "itl_s"),
        )


def _text(data: dict[str, Any], name: str) -> str:
    value = data[name]
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string")
    return value


def _count(data: dict[str, Any], name: str) -> int:
    value = data[name]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError(f"{name} must be a non-negative integer")
    return value


def _seconds(data: dict[str, Any], name: str) -> float | None:
    """An optional duration (records spooled before it existed have none)."""
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise TypeError(f"{name} must be a non-negative number of seconds or null")
    return float(value)
