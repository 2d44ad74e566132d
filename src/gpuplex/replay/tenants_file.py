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
capacity is the cluster's GPU count; `queues.fair_sharing.half_life_s` is in replay time. Pure:
validation (the spec's own models and tree rules, then the file's) returns every problem with
its field path (`gpuplex.specfile.load_yaml_file` reads the file and places them at
file:line:column).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import Field, StrictFloat, StrictInt, ValidationError

from gpuplex.core.queues.drf import Resources
from gpuplex.core.queues.tree import QueueTree, tree_of
from gpuplex.core.spec.fields import DnsLabel, SpecModel
from gpuplex.core.spec.parse import did_you_mean, validation_problems
from gpuplex.core.spec.queue_rules import check_queue_tree, tenant_queues
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
        return validation_problems(error, TenantsFileSpec)
    problems = [*check_queue_tree(spec.queues), *_check(spec)]
    return problems if problems else Tenants(spec)


def _check(spec: TenantsFileSpec) -> list[SpecProblem]:
    """A tenant's queue at least; rules that name tenants of `queues:` and carry exactly one of
    a pattern and a share; a share rule for the pods no pattern matches."""
    problems: list[SpecProblem] = []
    tenants = [leaf.name for _, leaf in tenant_queues(spec.queues)]
    if not tenants:
        problems.append(SpecProblem(("queues", "organisations"), "no tenant queue: add one"))
    for i, rule in enumerate(spec.assign):
        if rule.tenant not in tenants:
            problems.append(
                SpecProblem(
                    ("assign", i, "tenant"),
                    f"{rule.tenant!r} is no tenant in queues:{did_you_mean(rule.tenant, tenants)}",
                )
            )
        if (rule.pattern is None) == (rule.share is None):
            problems.append(SpecProblem(("assign", i), "give exactly one of pattern and share"))
    if not any(rule.share is not None for rule in spec.assign):
        problems.append(
            SpecProblem(("assign",), "needs a share rule for the pods no pattern matches")
        )
    return problems
