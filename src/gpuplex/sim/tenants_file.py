"""The tenants file of `gpuplex simulate --arrivals trace`: the queues and which pods are whose.

    queues:                      # the spec's own `queues:` section (organisations -> teams ->
      preemption: {min_runtime_s: 0}   # tenants with guarantees, limits, weights, preemption)
      organisations:
        - name: lab
          guarantee: {gpus: 100}
          teams:
            - name: research
              tenants:
                - {name: alice, guarantee: {gpus: 60}}
                - {name: bob, weight: 2}
    assign:                      # which tenant each pod belongs to
      - {tenant: alice, pattern: "openb-pod-00*"}  # by pod name (shell-style pattern)
      - {tenant: alice, share: 0.5}                # the rest: drawn at random by share
      - {tenant: bob, share: 0.5}

A pod goes to the tenant of the first `pattern` rule its name matches; a pod that matches none is
drawn among the `share` rules, each with probability share / (sum of shares), with the replay's
seeded random generator. Only `gpus` amounts (guarantees, limits) constrain the replay: the
capacity is the cluster's GPU count. Pure: validation returns every problem with its field path
(`gpuplex.specfile.load_yaml_file` reads the file and places them at file:line:column).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import Field, StrictFloat, StrictInt, ValidationError
from pydantic_core import ErrorDetails

from gpuplex.core.queues.drf import Resources
from gpuplex.core.queues.tree import QueueTree, tree_of
from gpuplex.core.spec.fields import DnsLabel, SpecModel
from gpuplex.core.spec.queues import QueuesSpec
from gpuplex.errors import SpecProblem


class AssignRule(SpecModel):
    """One rule: a tenant, and either a pod-name pattern or a share of the other pods."""

    tenant: DnsLabel
    pattern: str | None = Field(default=None, min_length=1, description="fnmatch on pod names.")
    share: StrictFloat | StrictInt | None = Field(
        default=None, gt=0, description="Weight of the draw for pods no pattern matched."
    )


class TenantsFileSpec(SpecModel):
    queues: QueuesSpec
    assign: list[AssignRule] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class Tenants:
    """A validated tenants file."""

    spec: TenantsFileSpec

    def tree(self, capacity: Resources) -> QueueTree:
        return tree_of(self.spec.queues, capacity)

    def assign(self, pod_names: Sequence[str], rng: np.random.Generator) -> list[str]:
        """Each pod's tenant, in order (one draw from `rng` per pod that no pattern matches)."""
        patterns = [(r.pattern, r.tenant) for r in self.spec.assign if r.pattern is not None]
        drawn = [r for r in self.spec.assign if r.share is not None]
        weights = np.array([float(r.share or 0.0) for r in drawn])
        weights /= weights.sum()
        out: list[str] = []
        for name in pod_names:
            tenant = next((t for p, t in patterns if fnmatch.fnmatchcase(name, p)), None)
            if tenant is None:
                tenant = drawn[int(rng.choice(len(drawn), p=weights))].tenant
            out.append(tenant)
        return out


def parse_tenants_file(data: object) -> Tenants | list[SpecProblem]:
    """The file's value, or every problem found (each with its field path)."""
    if not isinstance(data, dict):
        return [SpecProblem((), "expected a mapping with queues: and assign: at the top")]
    try:
        spec = TenantsFileSpec.model_validate(data)
    except ValidationError as error:
        return [_problem(detail) for detail in error.errors(include_url=False)]
    problems = _check(spec)
    return problems if problems else Tenants(spec)


def _problem(detail: ErrorDetails) -> SpecProblem:
    kind = detail["type"]
    message = detail["msg"].removeprefix("Value error, ")
    if kind == "extra_forbidden":
        message = "unknown key"
    elif kind == "missing":
        message = "required field is missing"
    return SpecProblem(tuple(detail["loc"]), message)


def _check(spec: TenantsFileSpec) -> list[SpecProblem]:
    problems: list[SpecProblem] = []
    seen: set[str] = set()
    tenants: set[str] = set()
    for o, org in enumerate(spec.queues.organisations):
        path: tuple[str | int, ...] = ("queues", "organisations", o)
        for name, where in [(org.name, path)] + [
            (q.name, (*path, "teams", t)) for t, q in enumerate(org.teams)
        ]:
            if name in seen:
                problems.append(SpecProblem((*where, "name"), f"{name!r} is used twice"))
            seen.add(name)
        for t, team in enumerate(org.teams):
            for n, tenant in enumerate(team.tenants):
                where = (*path, "teams", t, "tenants", n, "name")
                if tenant.name in seen:
                    problems.append(SpecProblem(where, f"{tenant.name!r} is used twice"))
                seen.add(tenant.name)
                tenants.add(tenant.name)
    if not tenants:
        problems.append(SpecProblem(("queues", "organisations"), "no tenant queue: add one"))
    for i, rule in enumerate(spec.assign):
        if rule.tenant not in tenants:
            problems.append(
                SpecProblem(("assign", i, "tenant"), f"{rule.tenant!r} is no tenant in queues:")
            )
        if (rule.pattern is None) == (rule.share is None):
            problems.append(SpecProblem(("assign", i), "give exactly one of pattern and share"))
    if not any(rule.share is not None for rule in spec.assign):
        problems.append(
            SpecProblem(("assign",), "needs a share rule for the pods no pattern matches")
        )
    return problems
