"""Every cluster placement policy by name: the baselines, FGD and gpuplex's own (`fgd-balanced`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpuplex.core.fragmentation.model import TracePod
from gpuplex.core.trace.balanced import balanced_fgd_policy
from gpuplex.core.trace.fgd import fgd_policy
from gpuplex.core.trace.policies import POLICIES, Policy

#: policies built from the run's workload (the trace's pods)
WORKLOAD_POLICIES: dict[str, Callable[[Sequence[TracePod]], Policy]] = {
    "fgd": fgd_policy,
    "fgd-balanced": balanced_fgd_policy,
}

#: every policy name, in the order reports show them
POLICY_NAMES: tuple[str, ...] = (*POLICIES, *WORKLOAD_POLICIES)


def policy_named(name: str, workload: Sequence[TracePod] = ()) -> Policy:
    """The policy called `name`; `workload` is what `fgd` and `fgd-balanced` learn from."""
    if name in WORKLOAD_POLICIES:
        return WORKLOAD_POLICIES[name](workload)
    try:
        return POLICIES[name]
    except KeyError:
        known = ", ".join(POLICY_NAMES)
        raise ValueError(f"unknown policy {name!r}: known policies are {known}") from None
