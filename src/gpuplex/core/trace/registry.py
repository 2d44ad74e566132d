"""Every cluster placement policy by name: the baselines, FGD and gpuplex's own (`fgd-balanced`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpuplex.core.fragmentation.model import TracePod
from gpuplex.core.trace.balanced import balanced_fgd_policy
from gpuplex.core.trace.fgd import fgd_policy
from gpuplex.core.trace.policies import POLICIES, Policy


def _fgd(workload: Sequence[TracePod], *, pods_leave: bool) -> Policy:
    return fgd_policy(workload)  # FGD as published: the same whether pods stay or leave


def _fgd_balanced(workload: Sequence[TracePod], *, pods_leave: bool) -> Policy:
    return balanced_fgd_policy(workload, pods_leave=pods_leave)


#: policies built from the run's workload (the trace's pods), and whether its pods leave
WORKLOAD_POLICIES: dict[str, Callable[..., Policy]] = {"fgd": _fgd, "fgd-balanced": _fgd_balanced}

#: every policy name, in the order reports show them
POLICY_NAMES: tuple[str, ...] = (*POLICIES, *WORKLOAD_POLICIES)


def policy_named(
    name: str, workload: Sequence[TracePod] = (), *, pods_leave: bool = False
) -> Policy:
    """The policy called `name`; `workload` is what `fgd` and `fgd-balanced` learn from, and
    `pods_leave` says whether its pods come and go (a moving cluster) or stay once placed."""
    if name in WORKLOAD_POLICIES:
        return WORKLOAD_POLICIES[name](workload, pods_leave=pods_leave)
    try:
        return POLICIES[name]
    except KeyError:
        known = ", ".join(POLICY_NAMES)
        raise ValueError(f"unknown policy {name!r}: known policies are {known}") from None
