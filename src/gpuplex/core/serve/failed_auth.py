"""Failed API-key checks per client address: past `per_min` in a minute, the address's further
*failed* checks are answered 429 instead of 401. A valid key is never refused by this: behind a
proxy or NAT every tenant shares one address, and one attacker must not lock them all out.

Each address has a fixed one-minute window; addresses are kept in the order their window opened,
so expired ones are dropped from the front and the oldest evicted past `max_addresses`: every
operation is O(1) amortised, however many addresses an attacker cycles through.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

WINDOW_S = 60.0


@dataclass(slots=True)
class FailedAttempts:
    per_min: int
    max_addresses: int = 100_000
    #: address -> [window start, failures in it], oldest window first
    _windows: OrderedDict[str, list[float]] = field(default_factory=OrderedDict, repr=False)

    def __len__(self) -> int:
        return len(self._windows)

    def throttled(self, address: str, now_s: float) -> bool:
        """Whether `address` has used up its failures for this minute."""
        return self.throttled_for_s(address, now_s) > 0

    def throttled_for_s(self, address: str, now_s: float) -> float:
        """How long `address` stays throttled from `now_s` (until its minute ends); 0.0 when it
        is not throttled."""
        self._expire(now_s)
        window = self._windows.get(address)
        if window is None or window[1] < self.per_min:
            return 0.0
        return window[0] + WINDOW_S - now_s

    def record(self, address: str, now_s: float) -> None:
        """One more failed check from `address`."""
        self._expire(now_s)
        window = self._windows.get(address)
        if window is None:
            self._windows[address] = [now_s, 1.0]
            if len(self._windows) > self.max_addresses:
                self._windows.popitem(last=False)
        else:
            window[1] += 1

    def _expire(self, now_s: float) -> None:
        windows = self._windows
        while windows:
            address, (opened_s, _) = next(iter(windows.items()))
            if opened_s > now_s - WINDOW_S:
                return
            del windows[address]
