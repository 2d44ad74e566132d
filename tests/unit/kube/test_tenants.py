"""Tenant namespaces: quota equal to the plan, RBAC for the tenant's groups only, network fences."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gpuplex.core.plan import Mode, Plan, make_plan
from gpuplex.core.spec import GpuplexSpec
from gpuplex.errors import KubeRenderError
from gpuplex.kube.naming import Manifest
from gpuplex.kube.tenants import tenant_manifests
from gpuplex.specfile import load_spec_file
from tests.unit.core.plan.specs import specs
from tests.unit.kube.schema import assert_valid

EXAMPLES = Path(__file__).parents[3] / "examples"
EXAMPLE_NAMES = ["saas-single-server", "enterprise-cluster", "host-demo", "laptop"]
KINDS_PER_TENANT = ["Namespace", "ResourceQuota", "LimitRange", "Role", "Role"]


def example(name: str) -> GpuplexSpec:
    return load_spec_file(EXAMPLES / f"{name}.yaml")


def render(spec: GpuplexSpec, plan: Plan | None = None) -> list[Manifest]:
    return tenant_manifests(spec, plan if plan is not None else make_plan(spec))


def with_changes(spec: GpuplexSpec, **changes: Any) -> GpuplexSpec:
    """The spec with top-level sections replaced, validated again like a file would be."""
    data = spec.model_dump(mode="json")
    data.update(changes)
    return GpuplexSpec.model_validate(data)


def find(manifests: list[Manifest], kind: str, name: str, namespace: str) -> Manifest:
    matches = [
        m
        for m in manifests
        if m["kind"] == kind
        and m["metadata"]["name"] == name
        and m["metadata"].get("namespace") == namespace
    ]
    assert len(matches) == 1, f"{kind}/{namespace}/{name}: {len(matches)} found"
    return matches[0]


def gpu_hard(quota: Manifest) -> dict[str, int]:
    return {
        key.removeprefix("requests."): int(value)
        for key, value in quota["spec"]["hard"].items()
        if key.startswith("requests.nvidia.com/")
    }


def expected_gpus(plan: Plan, tenant: str) -> Counter[str]:
    """The plan's allocation to `tenant` as device-plugin resources, worked out here from the
    placements themselves (not through naming.tenant_gpu_requests)."""
    totals: Counter[str] = Counter()
    for p in plan.placements:
        if p.tenant != tenant:
            continue
        if p.mode is Mode.DEDICATED:
            totals["nvidia.com/gpu"] += len(p.gpu_indices)
        elif p.mode is Mode.MIG:
            assert p.mig is not None
            totals["nvidia.com/mig-" + p.mig.profile.replace("+", ".")] += 1
        else:
            totals["nvidia.com/gpu.shared"] += 1
    return totals


def rules_allow(role: Manifest, group: str, resource: str, verb: str) -> bool:
    return any(
        group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
        for rule in role["rules"]
    )


# --- the examples --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_examples_render_schema_valid_objects_per_tenant(name: str) -> None:
    spec = example(name)
    manifests = render(spec)
    assert_valid(manifests)
    for tenant in spec.tenants:
        mine = [m for m in manifests if m["metadata"].get("labels", {}).get("gpuplex.dev/tenant")]
        kinds = [
            m["kind"] for m in mine if m["metadata"]["labels"]["gpuplex.dev/tenant"] == tenant.name
        ]
        assert kinds[:5] == KINDS_PER_TENANT
        assert {"RoleBinding", "NetworkPolicy"} <= set(kinds)
    assert render(spec) == manifests  # deterministic


def test_saas_quotas_hold_each_tenant_to_its_planned_gpus() -> None:
    manifests = render(example("saas-single-server"))
    quotas = {
        ns: gpu_hard(find(manifests, "ResourceQuota", "gpuplex-quota", ns))
        for ns in ["northwind", "contoso", "fabrikam", "adatum", "hobbyists"]
    }
    names = {
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-2g.20gb",
        "nvidia.com/mig-3g.40gb",
    }
    assert all(set(q) == names for q in quotas.values())
    nonzero = {ns: {k: v for k, v in q.items() if v} for ns, q in quotas.items()}
    assert nonzero == {
        "northwind": {"nvidia.com/gpu": 3},  # chat-70b: 2 whole GPUs, rerank: 1
        "contoso": {"nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-1g.10gb": 2},
        "fabrikam": {"nvidia.com/mig-2g.20gb": 2},
        "adatum": {},  # a LoRA adapter on contoso's server: no GPU of its own
        "hobbyists": {"nvidia.com/gpu.shared": 4},
    }


def test_quota_and_limit_range_carry_namespace_quota_and_tenant_override() -> None:
    spec = example("saas-single-server")
    data = spec.model_dump(mode="json")
    data["kubernetes"]["namespace_quota"] = {
        "cpu_cores": 32,
        "memory_gib": 64,
        "pvcs": 3,
        "storage_gib": 50,
    }
    data["tenants"][0]["namespace_quota"] = {"cpu_cores": 4, "memory_gib": 512, "pvcs": 0}
    data["tenants"][3]["namespace_quota"] = {"cpu_cores": 1, "memory_gib": 4}  # adatum: no pods
    manifests = render(GpuplexSpec.model_validate(data))
    assert_valid(manifests)
    northwind = find(manifests, "ResourceQuota", "gpuplex-quota", "northwind")["spec"]["hard"]
    assert northwind["requests.cpu"] == northwind["limits.cpu"] == "4"
    assert northwind["requests.memory"] == northwind["limits.memory"] == "512Gi"
    assert northwind["persistentvolumeclaims"] == "0"
    assert northwind["requests.storage"] == "1000Gi"  # the override's own default
    contoso = find(manifests, "ResourceQuota", "gpuplex-quota", "contoso")["spec"]["hard"]
    assert (contoso["limits.cpu"], contoso["limits.memory"]) == ("32", "64Gi")
    assert (contoso["persistentvolumeclaims"], contoso["requests.storage"]) == ("3", "50Gi")
    limits = find(manifests, "LimitRange", "gpuplex-defaults", "contoso")["spec"]["limits"][0]
    assert limits["type"] == "Container"
    assert limits["default"] == {"cpu": "2", "memory": "8Gi"}
    assert limits["defaultRequest"] == {"cpu": "500m", "memory": "1024Mi"}
    # Defaults never exceed what the namespace may hold.
    small = find(manifests, "LimitRange", "gpuplex-defaults", "adatum")["spec"]["limits"][0]
    assert small["default"] == {"cpu": "1", "memory": "4Gi"}


def test_namespace_is_labelled_for_tenant_and_pod_security() -> None:
    spec = with_changes(example("laptop"), kubernetes={"namespace_prefix": "tenant-"})
    manifests = render(spec)
    namespaces = [m for m in manifests if m["kind"] == "Namespace"]
    assert [m["metadata"]["name"] for m in namespaces] == ["tenant-" + t.name for t in spec.tenants]
    for namespace, tenant in zip(namespaces, spec.tenants, strict=True):
        labels = namespace["metadata"]["labels"]
        assert labels["gpuplex.dev/tenant"] == tenant.name
        assert labels["app.kubernetes.io/managed-by"] == "gpuplex"
        assert labels["gpuplex.dev/set"] == "plan"
        assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
        assert labels["pod-security.kubernetes.io/warn"] == "restricted"
    namespaced = [m for m in manifests if m["kind"] != "Namespace"]
    assert all(m["metadata"]["namespace"].startswith("tenant-") for m in namespaced)


def test_tenant_without_placements_still_gets_a_zero_gpu_namespace() -> None:
    spec = example("saas-single-server")
    manifests = render(spec, make_plan(spec).model_copy(update={"placements": []}))
    quota = find(manifests, "ResourceQuota", "gpuplex-quota", "northwind")
    assert gpu_hard(quota) == {"nvidia.com/gpu": 0, "nvidia.com/gpu.shared": 0}
    assert len([m for m in manifests if m["kind"] == "Namespace"]) == len(spec.tenants)


@pytest.mark.parametrize(
    ("tenant", "kubernetes", "clash"),
    [
        ("kube-system", {}, "Kubernetes system namespace"),
        ("default", {}, "Kubernetes system namespace"),
        ("gpuplex-system", {}, "kubernetes.system_namespace"),
        ("ops", {"system_namespace": "ops"}, "kubernetes.system_namespace"),
        ("gpu-operator", {}, "kubernetes.gpu_operator_namespace"),
    ],
)
def test_tenant_namespace_that_is_a_system_namespace_is_refused(
    tenant: str, kubernetes: dict[str, Any], clash: str
) -> None:
    spec = GpuplexSpec.model_validate({"tenants": [{"name": tenant}], "kubernetes": kubernetes})
    with pytest.raises(KubeRenderError, match=clash) as error:
        render(spec)
    assert f"tenant {tenant}" in str(error.value)
    assert "namespace_prefix" in str(error.value)
    fixed = with_changes(spec, kubernetes={**kubernetes, "namespace_prefix": "t-"})
    assert render(fixed)[0]["metadata"]["name"] == f"t-{tenant}"


def test_planned_pods_over_the_namespace_cpu_quota_are_refused() -> None:
    spec = GpuplexSpec.model_validate(
        {
            "fleet": {"nodes": [{"name": "n", "gpus": [{"model": "H100-80GB", "count": 4}]}]},
            "tenants": [
                {
                    "name": "lab",
                    "namespace_quota": {"cpu_cores": 8, "memory_gib": 64},
                    "workloads": [
                        {"name": "a", "gpu": {"count": 1}, "replicas": 2},
                        {
                            "name": "b",
                            "gpu": {"count": 1},
                            "replicas": 2,
                            "limits": {"cpu_cores": 2.5, "memory_gib": 40},
                        },
                    ],
                }
            ],
        }
    )
    with pytest.raises(KubeRenderError) as error:
        render(spec)
    message = str(error.value)
    # a: 2 pods at the 2-core / 8 GiB default; b: 2 pods at 2.5 cores / 40 GiB.
    assert "tenant lab: its 4 planned pods" in message
    assert "9 CPU cores (namespace quota 8)" in message
    assert "96 GiB of memory (namespace quota 64)" in message
    assert "tenants.lab.namespace_quota" in message
    data = spec.model_dump(mode="json")
    data["tenants"][0]["namespace_quota"] = {"cpu_cores": 9, "memory_gib": 96}
    assert_valid(render(GpuplexSpec.model_validate(data)))


# --- RBAC ----------------------------------------------------------------------------------------


def test_admin_role_runs_workloads_but_cannot_move_the_fences() -> None:
    manifests = render(example("saas-single-server"))
    admin = find(manifests, "Role", "gpuplex-tenant-admin", "contoso")
    for group, resource in [
        ("", "pods"),
        ("", "services"),
        ("", "configmaps"),
        ("", "secrets"),
        ("", "persistentvolumeclaims"),
        ("apps", "deployments"),
        ("batch", "jobs"),
    ]:
        assert rules_allow(admin, group, resource, "create"), resource
        assert rules_allow(admin, group, resource, "delete"), resource
    assert rules_allow(admin, "", "resourcequotas", "get")
    assert rules_allow(admin, "networking.k8s.io", "networkpolicies", "list")
    writes = ["create", "update", "patch", "delete", "deletecollection", "*"]
    for group, resource in [
        ("", "resourcequotas"),
        ("", "limitranges"),
        ("networking.k8s.io", "networkpolicies"),
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("", "namespaces"),
    ]:
        assert not any(rules_allow(admin, group, resource, verb) for verb in writes), resource
    assert not any(
        rule["apiGroups"] == ["*"] or "*" in rule["resources"] for rule in admin["rules"]
    )


def test_viewer_role_reads_but_never_writes_and_never_sees_secrets() -> None:
    manifests = render(example("saas-single-server"))
    viewer = find(manifests, "Role", "gpuplex-tenant-viewer", "northwind")
    assert rules_allow(viewer, "", "pods", "list")
    assert rules_allow(viewer, "", "pods/log", "get")
    assert rules_allow(viewer, "apps", "deployments", "watch")
    for rule in viewer["rules"]:
        assert set(rule["verbs"]) <= {"get", "list", "watch"}
        assert "secrets" not in rule["resources"]
        assert "*" not in rule["resources"]


def test_bindings_name_only_the_tenants_own_groups() -> None:
    spec = with_changes(
        example("saas-single-server"),
        kubernetes={
            "admin_groups": ["oidc:{tenant}-owners", "oidc:{tenant}-owners", "platform-ops"],
            "viewer_groups": [],
        },
    )
    manifests = render(spec)
    assert_valid(manifests)
    binding = find(manifests, "RoleBinding", "gpuplex-tenant-admins", "fabrikam")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "gpuplex-tenant-admin",
    }
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name}
        for name in ["oidc:fabrikam-owners", "platform-ops"]
    ]
    # No viewer groups: no viewer binding, but the Role is there to bind by hand.
    assert not [m for m in manifests if m["metadata"]["name"] == "gpuplex-tenant-viewers"]
    find(manifests, "Role", "gpuplex-tenant-viewer", "fabrikam")


def test_default_groups_are_per_tenant() -> None:
    manifests = render(example("host-demo"))
    for binding in (m for m in manifests if m["kind"] == "RoleBinding"):
        tenant = binding["metadata"]["labels"]["gpuplex.dev/tenant"]
        role = "admins" if binding["roleRef"]["name"].endswith("admin") else "viewers"
        assert [s["name"] for s in binding["subjects"]] == [f"gpuplex:{tenant}:{role}"]


# --- network policies ----------------------------------------------------------------------------


def test_default_deny_keeps_traffic_inside_the_namespace() -> None:
    manifests = render(example("saas-single-server"))
    deny = find(manifests, "NetworkPolicy", "gpuplex-default-deny", "hobbyists")["spec"]
    assert deny == {
        "podSelector": {},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [{"podSelector": {}}]}],
        "egress": [{"to": [{"podSelector": {}}]}],
    }
    dns = find(manifests, "NetworkPolicy", "gpuplex-allow-dns", "hobbyists")["spec"]
    assert dns["policyTypes"] == ["Egress"]
    (rule,) = dns["egress"]
    assert rule["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]
    assert sorted((p["protocol"], p["port"]) for p in rule["ports"]) == [("TCP", 53), ("UDP", 53)]


def test_gateway_reaches_serving_pods_on_their_serve_ports_only() -> None:
    spec = with_changes(example("saas-single-server"), kubernetes={"system_namespace": "llm-gw"})
    manifests = render(spec)
    policy = find(manifests, "NetworkPolicy", "gpuplex-allow-gateway", "contoso")["spec"]
    assert policy["podSelector"] == {"matchLabels": {"gpuplex.dev/serves": "true"}}
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    # One peer with both selectors: gateway pods AND in gpuplex's namespace.
    assert rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "llm-gw"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "gpuplex-gateway"}},
        }
    ]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8020}, {"protocol": "TCP", "port": 8030}]
    northwind = find(manifests, "NetworkPolicy", "gpuplex-allow-gateway", "northwind")["spec"]
    assert [p["port"] for p in northwind["ingress"][0]["ports"]] == [8000, 8010]


def test_tenants_serving_nothing_get_no_gateway_opening() -> None:
    """A policy without ports would open every port; fabrikam runs batch only and adatum's LoRA
    adapter is served from contoso's pods."""
    manifests = render(example("saas-single-server"))
    openings = {
        m["metadata"]["namespace"]
        for m in manifests
        if m["metadata"]["name"] == "gpuplex-allow-gateway"
    }
    assert openings == {"northwind", "contoso", "hobbyists"}


# --- properties over random specs ----------------------------------------------------------------


@st.composite
def kube_specs(draw: st.DrawFn) -> GpuplexSpec:
    """Random fleets and tenants (the planner's strategy) with random `kubernetes:` naming."""
    spec = draw(specs())
    kubernetes = {
        "namespace_prefix": draw(st.sampled_from(["", "tenant-", "gpu-"])),
        "admin_groups": draw(
            st.lists(st.sampled_from(["{tenant}-admins", "org:{tenant}:ops", "sre"]), max_size=2)
        ),
        "viewer_groups": draw(
            st.lists(st.sampled_from(["{tenant}-viewers", "audit:{tenant}"]), max_size=2)
        ),
    }
    return with_changes(spec, kubernetes=kubernetes)


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(kube_specs())
def test_quota_gpu_limits_equal_the_plans_allocation(spec: GpuplexSpec) -> None:
    plan = make_plan(spec)
    manifests = tenant_manifests(spec, plan)
    quotas = [m for m in manifests if m["kind"] == "ResourceQuota"]
    assert len(quotas) == len(spec.tenants)
    used = {name for tenant in spec.tenants for name in expected_gpus(plan, tenant.name)}
    for quota, tenant in zip(quotas, spec.tenants, strict=True):
        hard = gpu_hard(quota)
        expected = expected_gpus(plan, tenant.name)
        assert {k: v for k, v in hard.items() if v} == dict(expected), tenant.name
        # Every GPU resource anyone uses is capped in every namespace (at 0 if not granted).
        assert used | {"nvidia.com/gpu", "nvidia.com/gpu.shared"} <= set(hard)


@PROPERTY
@given(kube_specs())
def test_tenants_never_share_a_namespace_and_bind_only_their_groups(spec: GpuplexSpec) -> None:
    manifests = tenant_manifests(spec, make_plan(spec))
    namespaces = [m["metadata"]["name"] for m in manifests if m["kind"] == "Namespace"]
    assert len(set(namespaces)) == len(namespaces) == len(spec.tenants)
    owner = dict(zip(namespaces, (t.name for t in spec.tenants), strict=True))
    kube = spec.kubernetes
    for manifest in manifests:
        meta = manifest["metadata"]
        tenant = meta["labels"]["gpuplex.dev/tenant"]
        namespace = meta["name"] if manifest["kind"] == "Namespace" else meta["namespace"]
        assert owner[namespace] == tenant
        if manifest["kind"] == "RoleBinding":
            admin = manifest["roleRef"]["name"] == "gpuplex-tenant-admin"
            templates = kube.admin_groups if admin else kube.viewer_groups
            allowed = {g.replace("{tenant}", tenant) for g in templates}
            subjects = [s["name"] for s in manifest["subjects"]]
            assert set(subjects) == allowed
            assert len(subjects) == len(set(subjects))
            others = {t.name for t in spec.tenants} - {tenant}
            assert not any(other in subject for subject in subjects for other in others)
