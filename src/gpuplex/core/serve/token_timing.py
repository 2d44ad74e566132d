"""When a streamed reply's tokens reached the gateway: time to first token (TTFT) and the gaps
between tokens (inter-token latency, ITL), the numbers a tenant sharing a GPU asks about first.

The gateway reads a stream from the model server piece by piece. A read that carries generated
text (or reasoning text, or a tool call) is one *token arrival*: events that come in one read reach
the client together, so they count once, and an event that carries several tokens counts once (with
vLLM's default streaming an event is one token, so the two agree there). Reads that carry no tokens
(the opening role-only event, the `usage` event, `[DONE]`) are not arrivals.

- TTFT: from the request's arrival at the gateway (the start of
  `gpuplex_gateway_request_duration_seconds`, so it includes the wait in the fair queue) to the
  first token arrival.
- ITL: the time between one token arrival and the next; a stream of n arrivals has n - 1 gaps.

The gaps are counted into the histogram's buckets here, as they come (a list of counts per stream,
no list of gaps), and the gateway adds them to its histogram once, as the stream ends: observing
each gap on its own took a lock twice per token. The times are passed in: the caller reads the
clock once per read from the model server.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(slots=True)
class TokenTiming:
    """One stream's token arrivals, kept as a few numbers."""

    arrived_s: float  # the request's arrival at the gateway
    gap_bounds_s: Sequence[float] = ()  # the gap histogram's upper bounds, ascending (no +Inf)
    first_s: float | None = None
    last_s: float = 0.0
    gaps: int = 0
    gaps_total_s: float = 0.0
    #: gaps per bucket: [i] those <= gap_bounds_s[i] and above the bound before; the last, +Inf
    gap_counts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.gap_counts = [0] * (len(self.gap_bounds_s) + 1)

    def tokens_at(self, at_s: float) -> float:
        """Note a token arrival at `at_s`: the TTFT for the first, else the gap since the last
        one (never negative, should the clock step back)."""
        if self.first_s is None:
            self.first_s = self.last_s = at_s
            return max(0.0, at_s - self.arrived_s)
        gap = max(0.0, at_s - self.last_s)
        self.last_s = at_s
        self.gaps += 1
        self.gaps_total_s += gap
        self.gap_counts[bisect_left(self.gap_bounds_s, gap)] += 1
        return gap

    @property
    def ttft_s(self) -> float | None:
        """Time to first token; None while no token has arrived."""
        return None if self.first_s is None else max(0.0, self.first_s - self.arrived_s)

    @property
    def mean_itl_s(self) -> float | None:
        """The mean gap between token arrivals; None with fewer than two arrivals."""
        return self.gaps_total_s / self.gaps if self.gaps else None
