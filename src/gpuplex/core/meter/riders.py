"""Shared model servers: a server that hosts other workloads' LoRA adapters (`serve.lora_of`) is paid
for by the tenants that used it, not by its owner alone.

In each roll-up window a shared server's metered quantities (allocation gpu_seconds and
instance_seconds, measured busy_gpu_seconds and memory_mib_seconds) are split among the tenants whose
requests it served, in proportion to their tokens: prompt + completion tokens of the requests that
started in the window and were routed to it (the owner's own model included). A window in which no
one sent it a token is the owner's: it reserved the server. The split is exact (the parts add up to
the whole, to the last digit) and does not depend on the order of its inputs, so every cent of the
server's cost lands on a tenant that used it. See docs/chargeback.md.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal, localcontext

from gpuplex.core.meter.measured import DEFAULT_MAX_GAP_S, measured_lines
from gpuplex.core.meter.model import (
    COMPLETION_TOKENS,
    PROMPT_TOKENS,
    MeterLine,
    MeterWindow,
    Source,
    require_utc,
)
from gpuplex.core.meter.samples import GpuSample
from gpuplex.core.serve.routes import route_table
from gpuplex.core.serve.usage import UsageRecord
from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.errors import MeterInputError

#: (owner tenant, workload) of a model server.
ServerKey = tuple[str, str]

#: Finer than any metered quantity (microseconds x a percent, or a float's digits, go further).
_FINEST_EXPONENT = -12
#: Enough digits that quantity x weight never rounds before the split.
_SPLIT_PRECISION = 80


@dataclass(frozen=True, slots=True)
class SharedServer:
    """A model server that serves another tenant's LoRA adapter, and what is routed to it."""

    owner: str
    workload: str
    base_model: str
    routes: frozenset[tuple[str, str]]  # (tenant, model it sends) of every request it serves

    @property
    def key(self) -> ServerKey:
        return (self.owner, self.workload)

    @property
    def id(self) -> str:
        return f"{self.owner}/{self.workload}"

    @property
    def riders(self) -> list[str]:
        """The tenants other than the owner whose adapters it serves, sorted."""
        return sorted({tenant for tenant, _ in self.routes if tenant != self.owner})


def shared_servers(spec: GpuplexSpec) -> tuple[SharedServer, ...]:
    """Every model server of the spec that another tenant's adapter rides on, sorted by id."""
    table = route_table(spec)
    routed: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for (caller, model), route in table.routes.items():
        routed[route.backend_id].add((caller, model))
    servers = []
    for tenant in spec.tenants:
        for workload in tenant.workloads:
            backend_id = f"{tenant.name}/{workload.name}"
            routes = routed.get(backend_id, set())
            if workload.serve is None or not any(t != tenant.name for t, _ in routes):
                continue
            base = workload.serve.base_model or workload.serve.model
            servers.append(SharedServer(tenant.name, workload.name, base, frozenset(routes)))
    return tuple(sorted(servers, key=lambda s: s.id))


def server_usage(
    records: Sequence[UsageRecord], window: MeterWindow, servers: Sequence[SharedServer]
) -> dict[ServerKey, dict[str, Decimal]]:
    """Per shared server: each tenant's prompt + completion tokens of the requests that started
    inside the window and were routed to it. Servers nobody sent a token are left out."""
    by_route = {route: server.key for server in servers for route in server.routes}
    usage: dict[ServerKey, dict[str, Decimal]] = {}
    for record in records:
        key = by_route.get((record.tenant, record.model))
        if key is None or not window.contains(require_utc(record.started_at, "started_at")):
            continue
        tokens = record.prompt_tokens + record.completion_tokens
        if tokens > 0:
            tenants = usage.setdefault(key, {})
            tenants[record.tenant] = tenants.get(record.tenant, Decimal(0)) + tokens
    return usage


def split_exactly(
    quantity: Decimal, weights: Mapping[str, Decimal], owner: str
) -> dict[str, Decimal]:
    """`quantity` shared among the tenants of `weights` in proportion to their weights, so that the
    parts add up to `quantity` exactly: each part is rounded down at a fine quantum and the quanta
    still missing go one each to the largest remainders (ties to the tenant name that sorts first).
    No positive weight: the owner gets it all. Tenants with a zero part are left out."""
    if any(weight < 0 for weight in weights.values()):
        raise MeterInputError(f"usage weights must not be negative: {dict(weights)}")
    total = sum(weights.values(), Decimal(0))
    if total == 0 or quantity == 0:
        return {owner: quantity} if quantity != 0 else {}
    exponent = quantity.as_tuple().exponent
    finest = exponent if isinstance(exponent, int) else _FINEST_EXPONENT
    quantum = Decimal(1).scaleb(min(finest, _FINEST_EXPONENT))
    tenants = sorted(tenant for tenant, weight in weights.items() if weight > 0)
    with localcontext() as context:
        context.prec = _SPLIT_PRECISION
        exact = {tenant: quantity * weights[tenant] / total for tenant in tenants}
        parts = {
            tenant: exact[tenant].quantize(quantum, rounding=ROUND_FLOOR) for tenant in tenants
        }
        missing = int((quantity - sum(parts.values(), Decimal(0))) / quantum)
        by_remainder = sorted(tenants, key=lambda t: (-(exact[t] - parts[t]), t))
        for tenant in by_remainder[:missing]:
            parts[tenant] += quantum
    return {tenant: part for tenant, part in parts.items() if part != 0}


def split_lines(
    lines: Sequence[MeterLine], usage: Mapping[str, Decimal], owner: str
) -> list[MeterLine]:
    """One shared server's lines (all of its owner) split among the tenants of `usage`."""
    split: list[MeterLine] = []
    for line in lines:
        for tenant, part in split_exactly(line.quantity, usage, owner).items():
            split.append(MeterLine(tenant, line.source, line.metric, line.dimension, part))
    return split


def shared_measured_lines(
    samples: Sequence[GpuSample],
    window: MeterWindow,
    usage: Mapping[ServerKey, Mapping[str, Decimal]],
    *,
    max_gap_s: float = DEFAULT_MAX_GAP_S,
) -> list[MeterLine]:
    """measured_lines with each used shared server's samples split among the tenants that used it
    in the window (a sample series is one replica, so the server's samples integrate alone)."""
    own = [s for s in samples if (s.tenant, s.workload) not in usage]
    lines = measured_lines(own, window, max_gap_s=max_gap_s)
    for key, weights in sorted(usage.items()):
        served = [s for s in samples if (s.tenant, s.workload) == key]
        if served:
            server_lines = measured_lines(served, window, max_gap_s=max_gap_s)
            lines += split_lines(server_lines, weights, key[0])
    return merged(lines)


def merged(lines: Sequence[MeterLine]) -> list[MeterLine]:
    """Lines with the same tenant, source, metric and dimension summed into one; sorted, zeros out."""
    totals: dict[tuple[str, Source, str, str], Decimal] = defaultdict(Decimal)
    for line in lines:
        totals[line.tenant, line.source, line.metric, line.dimension] += line.quantity
    return sorted(
        MeterLine(tenant, source, metric, dimension, quantity)
        for (tenant, source, metric, dimension), quantity in totals.items()
        if quantity != 0
    )


def token_shares(server: SharedServer, lines: Sequence[MeterLine]) -> dict[str, Decimal]:
    """Each tenant's part (0 to 1) of the prompt + completion tokens that gateway `lines` route to
    the server (the owner's included); empty when it served none."""
    tokens: dict[str, Decimal] = defaultdict(Decimal)
    for line in lines:
        metric_counts = line.metric in (PROMPT_TOKENS, COMPLETION_TOKENS)
        if (
            line.source == "gateway"
            and metric_counts
            and (line.tenant, line.dimension) in server.routes
        ):
            tokens[line.tenant] += line.quantity
    total = sum(tokens.values(), Decimal(0))
    if total <= 0:
        return {}
    return {tenant: count / total for tenant, count in sorted(tokens.items()) if count > 0}
