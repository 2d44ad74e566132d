"""The admission policy, run: every CEL expression it holds is evaluated with cel-python on the pods
gpuplex itself renders (all admitted) and on pods that reach for GPUs the plan did not give their
tenant, or for another tenant's priority (all denied)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import celpy
import pytest
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError
from hypothesis import HealthCheck, given, settings

from gpuplex.core.plan import Mode, Plan, make_plan
from gpuplex.core.spec import GpuplexSpec
from gpuplex.kube.admission import admission_policy, cel_string
from gpuplex.kube.naming import TENANT_LABEL, Manifest, namespace_for
from gpuplex.kube.workloads import workload_manifests
from gpuplex.specfile import load_spec_file
from tests.unit.core.plan.specs import specs
from tests.unit.kube.schema import assert_valid

EXAMPLES = Path(__file__).parents[3] / "examples"
EXAMPLE_NAMES = sorted(path.stem for path in EXAMPLES.glob("*.yaml"))
ENV = celpy.Environment()


class Admission:
    """A ValidatingAdmissionPolicy's CEL, evaluated the way the API server does: match conditions
    first (a false one: the policy does not apply), then the variables in order, then every
    validation; with failurePolicy Fail an error denies like a false."""

    def __init__(self, policy: Manifest) -> None:
        spec = policy["spec"]
        assert spec["failurePolicy"] == "Fail"
        self.conditions = [self.compile(c["expression"]) for c in spec.get("matchConditions", [])]
        self.variables = [(v["name"], self.compile(v["expression"])) for v in spec["variables"]]
        self.validations = [
            (self.compile(v["expression"]), v["message"]) for v in spec["validations"]
        ]

    @staticmethod
    def compile(expression: str) -> Any:
        return ENV.program(ENV.compile(expression))

    def denials(
        self,
        pod: Manifest,
        namespace: str,
        *,
        operation: str = "CREATE",
        old: Manifest | None = None,
        user: str = "alice",
    ) -> list[str]:
        """The messages of the validations `pod` fails; [] when it is admitted. `user`: who
        asks (the API server's `request.userInfo.username`)."""
        request = {"namespace": namespace, "operation": operation, "userInfo": {"username": user}}
        activation: dict[str, Any] = {
            "object": json_to_cel(pod),
            "oldObject": json_to_cel(old),
            "request": json_to_cel(request),
            "namespaceObject": json_to_cel(
                {"metadata": {"name": namespace, "labels": {TENANT_LABEL: "x"}}}
            ),
        }
        for condition in self.conditions:
            matched = self.run(condition, activation)
            if isinstance(matched, str):
                return [matched]
            if not matched:
                return []
        variables: dict[Any, Any] = {}
        for name, program in self.variables:
            activation["variables"] = celpy.celtypes.MapType(variables)
            variables[celpy.celtypes.StringType(name)] = program.evaluate(activation)
        activation["variables"] = celpy.celtypes.MapType(variables)
        denied = []
        for program, message in self.validations:
            result = self.run(program, activation)
            if isinstance(result, str):
                denied.append(f"{message} ({result})")
            elif not result:
                denied.append(message)
        return denied

    @staticmethod
    def run(program: Any, activation: dict[str, Any]) -> bool | str:
        """True or False, or the error's text (an error is not a pass)."""
        try:
            result = program.evaluate(activation)
        except CELEvalError as error:
            return f"error: {error}"
        if not isinstance(result, celpy.celtypes.BoolType):
            return f"error: not a bool: {result!r}"
        return bool(result)


def example(name: str) -> GpuplexSpec:
    return load_spec_file(EXAMPLES / f"{name}.yaml")


def policy_of(spec: GpuplexSpec, plan: Plan) -> Admission:
    manifests = admission_policy(spec, plan)
    policies = [m for m in manifests if m["kind"] == "ValidatingAdmissionPolicy"]
    assert len(policies) == 1
    return Admission(policies[0])


def rendered_pods(spec: GpuplexSpec, plan: Plan) -> list[tuple[str, str, Manifest]]:
    """(namespace, object name, pod) for every Deployment and Job gpuplex renders."""
    pods = []
    for manifest in workload_manifests(spec, plan):
        if manifest["kind"] not in ("Deployment", "Job"):
            continue
        namespace = manifest["metadata"]["namespace"]
        template = manifest["spec"]["template"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**copy.deepcopy(template["metadata"]), "namespace": namespace},
            "spec": copy.deepcopy(template["spec"]),
        }
        pods.append((namespace, manifest["metadata"]["name"], pod))
    return pods


def pod_named(spec: GpuplexSpec, plan: Plan, name: str) -> tuple[str, Manifest]:
    matches = [
        (ns, pod) for ns, object_name, pod in rendered_pods(spec, plan) if object_name == name
    ]
    assert len(matches) == 1, name
    return matches[0]


def gpu_of(pod: Manifest) -> dict[str, str]:
    requests = pod["spec"]["containers"][0]["resources"]["requests"]
    return {k: v for k, v in requests.items() if k.startswith("nvidia.com/")}


def asking_for(pod: Manifest, resource: str, *, where: str = "both") -> Manifest:
    """The pod with its GPU request replaced by one `resource`, in requests, limits or both."""
    changed = copy.deepcopy(pod)
    resources = changed["spec"]["containers"][0]["resources"]
    for field in ("requests", "limits"):
        resources[field] = {k: v for k, v in resources[field].items() if k not in gpu_of(pod)}
        if where in (field, "both"):
            resources[field][resource] = "1"
    return changed


# --- the policy object ------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_the_policy_and_binding_pass_the_official_schemas(name: str) -> None:
    spec = example(name)
    assert_valid(admission_policy(spec, make_plan(spec)))


def test_the_binding_denies_in_every_tenant_namespace_and_names_the_policy() -> None:
    spec = example("kubernetes-cluster")
    policy, binding = admission_policy(spec, make_plan(spec))
    assert policy["kind"] == "ValidatingAdmissionPolicy"
    assert binding["kind"] == "ValidatingAdmissionPolicyBinding"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    selector = binding["spec"]["matchResources"]["namespaceSelector"]
    assert selector == {"matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]}
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["pods"],
        }
    ]
    assert all(v["message"] for v in policy["spec"]["validations"])
    for manifest in (policy, binding):
        assert manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuplex"


def test_the_grants_are_what_the_plan_gives_each_tenant() -> None:
    spec = example("kubernetes-cluster")
    policy, _ = admission_policy(spec, make_plan(spec))
    grants = next(v for v in policy["spec"]["variables"] if v["name"] == "grants")
    values = Admission.compile(grants["expression"]).evaluate({})
    assert {str(k): sorted(str(r) for r in v) for k, v in values.items()} == {
        "tenant-northwind": ["nvidia.com/gpu"],
        "tenant-contoso": ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"],
        "tenant-hobbyists": ["nvidia.com/gpu.shared"],
        "tenant-analytics": ["nvidia.com/gpu.shared"],
    }


def test_rendering_is_deterministic() -> None:
    spec = example("enterprise-cluster")
    plan = make_plan(spec)
    assert admission_policy(spec, plan) == admission_policy(spec, plan)


def test_a_cel_string_cannot_be_ended_early_by_a_quote() -> None:
    text = "it's a \\ test"
    assert str(Admission.compile(cel_string(text)).evaluate({})) == text


# --- what it admits ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_every_pod_gpuplex_renders_is_admitted(name: str) -> None:
    spec = example(name)
    plan = make_plan(spec)
    admission = policy_of(spec, plan)
    pods = rendered_pods(spec, plan)
    assert pods
    for namespace, object_name, pod in pods:
        assert admission.denials(pod, namespace) == [], object_name


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs())
def test_a_pod_is_admitted_in_another_tenants_namespace_only_with_its_grant_and_priority(
    spec: GpuplexSpec,
) -> None:
    """Every rendered pod passes in its own namespace; moved to another tenant's, it passes exactly
    when that tenant was planned the same kind of GPU (worked out here from the placements) and
    runs at the same priority."""
    plan = make_plan(spec)
    admission = policy_of(spec, plan)
    priorities = {namespace_for(spec, t.name): t.priority for t in spec.tenants}
    granted: dict[str, set[str]] = {namespace_for(spec, t.name): set() for t in spec.tenants}
    for p in plan.placements:
        if p.mode is Mode.DEDICATED:
            kind = "nvidia.com/gpu"
        elif p.mode is Mode.MIG:
            assert p.mig is not None
            kind = "nvidia.com/mig-" + p.mig.profile.replace("+", ".")
        else:
            kind = "nvidia.com/gpu.shared"
        granted[namespace_for(spec, p.tenant)].add(kind)
    for home, _, pod in rendered_pods(spec, plan):
        assert admission.denials(pod, home) == []
        for other in granted:
            fits = set(gpu_of(pod)) <= granted[other] and priorities[other] == priorities[home]
            assert (admission.denials(pod, other) == []) == fits


def test_a_pod_without_gpus_at_its_tenants_priority_is_admitted() -> None:
    spec = example("kubernetes-cluster")
    plan = make_plan(spec)
    namespace, pod = pod_named(spec, plan, "support-bot")
    plain = copy.deepcopy(pod)
    plain["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    assert policy_of(spec, plan).denials(plain, namespace) == []
    del plain["spec"]["containers"][0]["resources"]
    assert policy_of(spec, plan).denials(plain, namespace) == []


# --- what it denies ---------------------------------------------------------------------------

FORBIDDEN_GPUS = [
    # (object whose pod is changed, resource asked for, why it is refused)
    ("support-bot", "nvidia.com/mig-7g.80gb", "a MIG profile not granted"),
    ("support-bot", "nvidia.com/gpu", "a whole GPU for a MIG-only tenant"),
    ("support-bot", "nvidia.com/gpu.shared", "a share for a MIG-only tenant"),
    ("chat-70b", "nvidia.com/gpu.shared", "a share for a strong-isolation tenant"),
    ("chat-70b", "nvidia.com/mig-1g.10gb", "another tenant's MIG profile"),
    ("playground", "nvidia.com/gpu", "a whole GPU for an MPS tenant"),
    ("nightly-etl", "nvidia.com/mig-3g.40gb", "MIG for a time-slicing tenant"),
]


@pytest.mark.parametrize(("name", "resource", "why"), FORBIDDEN_GPUS)
@pytest.mark.parametrize("where", ["both", "requests", "limits"])
def test_a_gpu_resource_the_plan_did_not_grant_is_denied(
    name: str, resource: str, why: str, where: str
) -> None:
    spec = example("kubernetes-cluster")
    plan = make_plan(spec)
    namespace, pod = pod_named(spec, plan, name)
    denied = policy_of(spec, plan).denials(asking_for(pod, resource, where=where), namespace)
    assert len(denied) == 1, why
    assert "GPU resources the plan gives its tenant" in denied[0]


def test_a_gpu_in_an_init_container_is_checked_too() -> None:
    spec = example("kubernetes-cluster")
    plan = make_plan(spec)
    namespace, pod = pod_named(spec, plan, "support-bot")
    sneaky = copy.deepcopy(pod)
    sneaky["spec"]["initContainers"] = [
        {"name": "warmup", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    ]
    assert len(policy_of(spec, plan).denials(sneaky, namespace)) == 1
    granted = copy.deepcopy(pod)
    granted["spec"]["initContainers"] = [
        {"name": "warmup", "image": "x", "resources": {"limits": {"nvidia.com/mig-3g.40gb": "1"}}}
    ]
    assert policy_of(spec, plan).denials(granted, namespace) == []


def test_a_second_container_is_checked_too() -> None:
    spec = example("kubernetes-cluster")
    plan = make_plan(spec)
    namespace, pod = pod_named(spec, plan, "playground")
    sidecar = copy.deepcopy(pod)
    sidecar["spec"]["containers"].append(
        {"name": "side", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
    )
    assert len(policy_of(spec, plan).denials(sidecar, namespace)) == 1


@pytest.mark.parametrize(
    "priority_class", [None, "gpuplex-priority-50", "gpuplex-priority-100", "system-node-critical"]
)
def test_a_missing_or_other_priority_class_is_denied(priority_class: str | None) -> None:
    spec = example("kubernetes-cluster")
    plan = make_plan(spec)
    namespace, pod = pod_named(spec, plan, "playground")  # hobbyists: gpuplex-priority-0
    changed = copy.deepcopy(pod)
    del changed["spec"]["priorityClassName"]
    if priority_class is not None:
        changed["spec"]["priorityClassName"] = priority_class
    denied = policy_of(spec, plan).denials(changed, namespace)
    assert len(denied) == 1
    assert "priorityClassName" in denied[0]


def test_a_tenant_with_nothing_placed_may_ask_for_no_gpu() -> None:
    spec = example("kubernetes-cluster")
    plan = make_plan(spec)
    empty = plan.model_copy(
        update={"placements": [p for p in plan.placements if p.tenant != "contoso"]}
    )
    namespace, pod = pod_named(spec, plan, "support-bot")
    assert len(policy_of(spec, empty).denials(pod, namespace)) == 1


def test_a_labelled_namespace_that_is_no_tenants_grants_nothing() -> None:
    spec = example("kubernetes-cluster")
    plan = make_plan(spec)
    _, pod = pod_named(spec, plan, "chat-70b")
    assert len(policy_of(spec, plan).denials(pod, "tenant-gone")) == 2


def test_an_update_that_keeps_the_spec_is_not_checked_again() -> None:
    """A pod admitted under an older plan must still get its finalizers and labels changed (the
    Job controller removes its tracking finalizer with an update); a spec change is checked."""
    spec = example("kubernetes-cluster")
    plan = make_plan(spec)
    namespace, pod = pod_named(spec, plan, "chat-70b")
    old = asking_for(pod, "nvidia.com/gpu.shared")
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"]["extra"] = "yes"
    admission = policy_of(spec, plan)
    assert admission.denials(relabelled, namespace, operation="UPDATE", old=old) == []
    reimaged = copy.deepcopy(old)
    reimaged["spec"]["containers"][0]["image"] = "other:1"
    assert len(admission.denials(reimaged, namespace, operation="UPDATE", old=old)) == 1
