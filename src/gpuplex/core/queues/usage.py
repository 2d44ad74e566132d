"""Usage that decays with a half-life: what fair sharing remembers of each tenant's past. Pure.

A tenant's decayed usage is the time integral of what it held, each moment weighted by
2^-(age / half-life): an amount x held over [a, b) counts, at time `now`,

    x * H / ln 2 * (2^-(now - b) / H - 2^-(now - a) / H)            (H: the half-life)

in kind-seconds (GPU-seconds for the `gpus` kind). Usage a half-life old counts half, two
half-lives old a quarter: so it halves per half-life, adds up over split intervals and only grows
with what is held. Divided by H / ln 2 it is an amount held on average (`usage_level`): the usage
of a tenant that held x for ever is x, and that is how the admission rules weigh it against what
the tenants hold now (Slurm's PriorityDecayHalfLife, Kueue's admission fair sharing and KAI's
time-based fair share decay usage the same way).

A half-life of 0 remembers nothing: every decayed usage is 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuplex.core.queues.drf import Resources

#: usage older than this many half-lives is left out (it counts less than 0.4 % of its amount)
HORIZON_HALF_LIVES = 8

#: decayed usage per tenant: kind -> kind-seconds
TenantUsage = Mapping[str, Resources]


@dataclass(frozen=True, slots=True)
class UsageInterval:
    """A tenant held `resources` from `start_s` until `end_s` (None: it still holds them)."""

    tenant: str
    resources: Resources
    start_s: float
    end_s: float | None = None


def decayed_seconds(start_s: float, end_s: float | None, now_s: float, half_life_s: float) -> float:
    """The decayed length of [start_s, end_s) at `now_s` (seconds; an amount of 1 held over it).
    What lies after `now_s` does not count yet; an open interval runs until `now_s`."""
    end = now_s if end_s is None else min(end_s, now_s)
    if half_life_s <= 0 or end <= start_s:
        return 0.0
    rate = math.log(2) / half_life_s
    # 2^-(now-end)/H * (1 - 2^-(end-start)/H) * H/ln2, with expm1 so that an interval short
    # against the half-life keeps its digits
    return math.exp(-(now_s - end) * rate) * -math.expm1(-(end - start_s) * rate) / rate


def decayed_usage(
    intervals: Iterable[UsageInterval], now_s: float, half_life_s: float
) -> dict[str, dict[str, float]]:
    """Per tenant, per kind: the decayed usage of `intervals` at `now_s` (kind-seconds)."""
    out: dict[str, dict[str, float]] = {}
    for interval in intervals:
        seconds = decayed_seconds(interval.start_s, interval.end_s, now_s, half_life_s)
        if seconds <= 0:
            continue
        mine = out.setdefault(interval.tenant, {})
        for kind, amount in interval.resources.items():
            mine[kind] = mine.get(kind, 0.0) + amount * seconds
    return out


def decayed_since(
    usage: TenantUsage, held: TenantUsage, elapsed_s: float, half_life_s: float
) -> dict[str, dict[str, float]]:
    """The decayed usage `elapsed_s` later, when each tenant held `held` all that time: the
    closed form applied step by step (what an event loop keeps instead of every interval)."""
    if half_life_s <= 0:
        return {}
    keep = 2.0 ** (-elapsed_s / half_life_s)
    added = decayed_seconds(0.0, elapsed_s, elapsed_s, half_life_s)
    out: dict[str, dict[str, float]] = {}
    for tenant in {*usage, *held}:
        before, now = usage.get(tenant, {}), held.get(tenant, {})
        mine = {
            kind: before.get(kind, 0.0) * keep + now.get(kind, 0.0) * added
            for kind in {*before, *now}
        }
        out[tenant] = {kind: value for kind, value in mine.items() if value > 0}
    return out


def usage_level(amount_s: float, half_life_s: float) -> float:
    """Decayed kind-seconds as an amount held on average (see the module docstring)."""
    if half_life_s <= 0:
        return 0.0
    return amount_s * math.log(2) / half_life_s


def usage_horizon_s(half_life_s: float) -> float:
    """How far back usage still counts: `HORIZON_HALF_LIVES` half-lives."""
    return HORIZON_HALF_LIVES * max(half_life_s, 0.0)
