"""The simulated model server's latency model: how long a request waits for its first token, and
for each token after it, given how many requests the server is running when the token is made.

    slowdown       = 1 + contention * (in_flight - 1)
    first token    = prefill_s_per_token * prompt_tokens * slowdown
    each next token = decode_s_per_token * slowdown

`in_flight` counts the request itself, so a request running alone is never slowed down. Pure: the
server samples `in_flight` and the clock, and asks this module how long to wait."""

from __future__ import annotations

from dataclasses import dataclass


def slowdown(in_flight: int, contention: float) -> float:
    """How much slower every token is with `in_flight` requests running (1.0 when alone)."""
    return 1.0 + contention * max(in_flight - 1, 0)


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """Per-token costs of a simulated model, and how much sharing the server slows each token."""

    prefill_s_per_token: float = 0.0
    decode_s_per_token: float = 0.0
    contention: float = 0.0

    @property
    def instant(self) -> bool:
        """True when no token ever takes time: the server then never waits at all."""
        return self.prefill_s_per_token <= 0 and self.decode_s_per_token <= 0

    def first_token_s(self, prompt_tokens: int, in_flight: int) -> float:
        """Time to the first token (the prompt's prefill); also an embedding request's whole time."""
        if self.prefill_s_per_token <= 0 or prompt_tokens <= 0:
            return 0.0
        return self.prefill_s_per_token * prompt_tokens * slowdown(in_flight, self.contention)

    def next_token_s(self, in_flight: int) -> float:
        """Time from one generated token to the next."""
        if self.decode_s_per_token <= 0:
            return 0.0
        return self.decode_s_per_token * slowdown(in_flight, self.contention)

    def token_s(self, index: int, prompt_tokens: int, in_flight: int) -> float:
        """Time before generated token number `index` (0 is the first token)."""
        if index == 0:
            return self.first_token_s(prompt_tokens, in_flight)
        return self.next_token_s(in_flight)

    def request_s(self, prompt_tokens: int, completion_tokens: int, in_flight: int) -> float:
        """A whole request's time while `in_flight` stays the same: what a client should measure."""
        if completion_tokens <= 0:
            return self.first_token_s(prompt_tokens, in_flight)
        decode_s = (completion_tokens - 1) * self.next_token_s(in_flight)
        return self.first_token_s(prompt_tokens, in_flight) + decode_s
