"""Workloads on Kubernetes: one Deployment or Job per workload (per kind of GPU its replicas got),
exactly the placed replicas, the planned GPU as an extended resource, locked-down pods, and a
Service per served model."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from gpuplex.core.plan import MigSlicePlan, Mode, Plan, make_plan
from gpuplex.core.spec import GpuplexSpec
from gpuplex.errors import KubeRenderError
from gpuplex.kube.naming import Manifest, namespace_for, priority_class_name
from gpuplex.kube.pods import cpu_quantity, memory_quantity
from gpuplex.kube.workloads import workload_manifests
from gpuplex.specfile import load_spec_file
from tests.unit.core.plan.specs import specs
from tests.unit.kube.schema import assert_valid

EXAMPLES = Path(__file__).parents[3] / "examples"
EXAMPLE_NAMES = sorted(path.stem for path in EXAMPLES.glob("*.yaml"))
POD_KINDS = ("Deployment", "Job")
TMP = "/tmp"  # noqa: S108  the pods' emptyDir, not a file this test writes


def example(name: str) -> GpuplexSpec:
    return load_spec_file(EXAMPLES / f"{name}.yaml")


def render(spec: GpuplexSpec, plan: Plan | None = None) -> list[Manifest]:
    return workload_manifests(spec, plan if plan is not None else make_plan(spec))


def find(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    matches = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found"
    return matches[0]


def pod_spec(manifest: Manifest) -> dict[str, Any]:
    spec: dict[str, Any] = manifest["spec"]["template"]["spec"]
    return spec


def main_container(manifest: Manifest) -> dict[str, Any]:
    containers = pod_spec(manifest)["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def replicas_of(manifest: Manifest) -> int:
    spec = manifest["spec"]
    if manifest["kind"] == "Job":
        assert spec["parallelism"] == spec["completions"]
        return int(spec["parallelism"])
    return int(spec["replicas"])


def env_of(manifest: Manifest) -> dict[str, str]:
    return {e["name"]: e["value"] for e in main_container(manifest).get("env", [])}


def one_tenant(workload: dict[str, Any], *, isolation: str = "mps") -> GpuplexSpec:
    """One tenant on one L40S node in pool `shared`, with `workload` on top of a small MPS share."""
    return GpuplexSpec.model_validate(
        {
            "fleet": {
                "nodes": [{"name": "n1", "pool": "shared", "gpus": [{"model": "L40S", "count": 2}]}]
            },
            "tenants": [
                {
                    "name": "acme",
                    "isolation": isolation,
                    "priority": 5,
                    "workloads": [
                        {
                            "name": "lab",
                            "pool": "shared",
                            "gpu": {"memory_gib": 8, "compute_percent": 25},
                            **workload,
                        }
                    ],
                }
            ],
            "kubernetes": {"namespace_prefix": "t-"},
        }
    )


# --- every example ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_every_examples_workloads_pass_the_official_schemas(name: str) -> None:
    manifests = render(example(name))
    assert manifests
    assert_valid(manifests)


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_each_object_selects_its_own_pods_and_services_select_the_workloads(name: str) -> None:
    manifests = render(example(name))
    pod_labels = [
        m["spec"]["template"]["metadata"]["labels"] for m in manifests if m["kind"] in POD_KINDS
    ]
    for manifest in manifests:
        if manifest["kind"] == "Deployment":
            wanted = manifest["spec"]["selector"]["matchLabels"]
            matching = [labels for labels in pod_labels if wanted.items() <= labels.items()]
            assert matching == [manifest["spec"]["template"]["metadata"]["labels"]]
        if manifest["kind"] == "Service":
            wanted = manifest["spec"]["selector"]
            assert any(wanted.items() <= labels.items() for labels in pod_labels)
            assert all(
                labels["gpuplex.dev/serves"] == "true"
                for labels in pod_labels
                if wanted.items() <= labels.items()
            )


def test_the_cluster_example_renders_each_workload_as_planned() -> None:
    manifests = render(example("kubernetes-cluster"))
    shapes = [(m["kind"], m["metadata"]["namespace"], m["metadata"]["name"]) for m in manifests]
    assert shapes == [
        ("Deployment", "tenant-northwind", "chat-70b"),
        ("Service", "tenant-northwind", "chat-70b"),
        ("Job", "tenant-northwind", "finetune"),
        ("Deployment", "tenant-contoso", "support-bot"),
        ("Service", "tenant-contoso", "support-bot"),
        ("Deployment", "tenant-contoso", "embed"),
        ("Service", "tenant-contoso", "embed"),
        ("Deployment", "tenant-hobbyists", "playground"),
        ("Service", "tenant-hobbyists", "playground"),
        ("Job", "tenant-analytics", "nightly-etl"),
    ]
    wanted = {
        "chat-70b": (1, {"nvidia.com/gpu": "2"}),
        "finetune": (1, {"nvidia.com/gpu": "2"}),
        "support-bot": (2, {"nvidia.com/mig-3g.40gb": "1"}),
        "embed": (3, {"nvidia.com/mig-1g.10gb": "1"}),
        "playground": (4, {"nvidia.com/gpu.shared": "1"}),
        "nightly-etl": (4, {"nvidia.com/gpu.shared": "1"}),
    }
    for manifest in manifests:
        if manifest["kind"] in POD_KINDS:
            resources = main_container(manifest)["resources"]
            replicas, gpu = wanted[manifest["metadata"]["name"]]
            assert replicas_of(manifest) == replicas
            assert resources["requests"] == gpu
            assert resources["limits"] == gpu


def test_rendering_twice_gives_the_same_objects() -> None:
    spec = example("enterprise-cluster")
    plan = make_plan(spec)
    assert workload_manifests(spec, plan) == workload_manifests(spec, plan)


# --- the plan, exactly ----------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs())
def test_pods_ask_for_exactly_the_gpus_the_plan_placed(spec: GpuplexSpec) -> None:
    """Summed over a tenant's objects, replicas x GPU request equals its placements, worked out
    here from the plan itself; workloads with nothing placed render nothing."""
    plan = make_plan(spec)
    manifests = workload_manifests(spec, plan)
    rendered: Counter[tuple[str, str, str]] = Counter()
    for manifest in manifests:
        assert manifest["kind"] in (*POD_KINDS, "Service")
        if manifest["kind"] not in POD_KINDS:
            continue
        labels = manifest["metadata"]["labels"]
        tenant, workload = labels["gpuplex.dev/tenant"], labels["gpuplex.dev/workload"]
        assert manifest["metadata"]["namespace"] == namespace_for(spec, tenant)
        requests = main_container(manifest)["resources"]["requests"]
        for resource, count in requests.items():
            rendered[(tenant, workload, resource)] += replicas_of(manifest) * int(count)
    planned: Counter[tuple[str, str, str]] = Counter()
    for p in plan.placements:
        if p.mode is Mode.DEDICATED:
            planned[(p.tenant, p.workload, "nvidia.com/gpu")] += len(p.gpu_indices)
        elif p.mode is Mode.MIG:
            assert p.mig is not None
            resource = "nvidia.com/mig-" + p.mig.profile.replace("+", ".")
            planned[(p.tenant, p.workload, resource)] += 1
        else:
            planned[(p.tenant, p.workload, "nvidia.com/gpu.shared")] += 1
    assert rendered == planned


def test_a_workload_with_nothing_placed_renders_nothing() -> None:
    spec = example("kubernetes-cluster")
    plan = make_plan(spec)
    without = plan.model_copy(
        update={"placements": [p for p in plan.placements if p.workload != "support-bot"]}
    )
    names = {m["metadata"]["name"] for m in workload_manifests(spec, without)}
    assert "support-bot" not in names
    assert "embed" in names


def test_only_the_placed_replicas_run() -> None:
    spec = example("kubernetes-cluster")
    plan = make_plan(spec)
    fewer = plan.model_copy(
        update={
            "placements": [
                p for p in plan.placements if not (p.workload == "embed" and p.replica == 2)
            ]
        }
    )
    assert replicas_of(find(workload_manifests(spec, fewer), "Deployment", "embed")) == 2


@pytest.mark.parametrize("name", ["saas-single-server", "enterprise-cluster"])
def test_lora_adapters_render_nothing(name: str) -> None:
    spec = example(name)
    adapters = {
        w.name for t in spec.tenants for w in t.workloads if w.serve is not None and w.serve.lora_of
    }
    assert adapters
    rendered = {m["metadata"]["name"] for m in render(spec)}
    assert not adapters & rendered


def test_replicas_given_different_mig_profiles_split_into_suffixed_deployments() -> None:
    spec = example("kubernetes-cluster")
    plan = make_plan(spec)
    small = MigSlicePlan(profile="1g.10gb", profile_id=19, start_slot=0, size_slots=1)
    placements = [
        p.model_copy(update={"mig": small}) if p.workload == "support-bot" and p.replica == 1 else p
        for p in plan.placements
    ]
    manifests = workload_manifests(spec, plan.model_copy(update={"placements": placements}))
    assert_valid(manifests)
    big = find(manifests, "Deployment", "support-bot-mig-3g-40gb")
    little = find(manifests, "Deployment", "support-bot-mig-1g-10gb")
    assert replicas_of(big) == replicas_of(little) == 1
    assert main_container(little)["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
    assert big["spec"]["selector"] != little["spec"]["selector"]
    service = find(manifests, "Service", "support-bot")
    for deployment in (big, little):
        assert (
            service["spec"]["selector"].items()
            <= deployment["spec"]["template"]["metadata"]["labels"].items()
        )


def test_mps_replicas_with_other_planned_memory_split_by_memory() -> None:
    spec = one_tenant({"replicas": 2})
    plan = make_plan(spec)
    placements = [
        p.model_copy(update={"memory_mib": 4096}) if p.replica == 1 else p for p in plan.placements
    ]
    manifests = workload_manifests(spec, plan.model_copy(update={"placements": placements}))
    names = sorted(m["metadata"]["name"] for m in manifests)
    assert names == ["lab-mps-4096mib", "lab-mps-8192mib"]
    assert (
        env_of(find(manifests, "Deployment", "lab-mps-4096mib"))["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]
        == "0=4096M"
    )


def test_whole_gpus_of_other_sizes_stay_one_object_unless_the_command_uses_the_memory() -> None:
    spec = one_tenant({"gpu": {"count": 1}, "replicas": 2}, isolation="dedicated")
    plan = make_plan(spec)
    placements = [
        p.model_copy(update={"memory_mib": 1000}) if p.replica == 1 else p for p in plan.placements
    ]
    uneven = plan.model_copy(update={"placements": placements})
    assert [m["metadata"]["name"] for m in workload_manifests(spec, uneven)] == ["lab"]
    uses = one_tenant(
        {"gpu": {"count": 1}, "replicas": 2, "command": ["x", "{memory_mib}"]},
        isolation="dedicated",
    )
    names = [m["metadata"]["name"] for m in workload_manifests(uses, uneven)]
    memory = next(p.memory_mib for p in plan.placements if p.replica == 0)
    assert names == [f"lab-gpu-1-{memory}mib", "lab-gpu-1-1000mib"]


def test_a_split_name_over_63_characters_is_refused() -> None:
    name = "w" * 60
    spec = one_tenant({"name": name, "replicas": 2})
    plan = make_plan(spec)
    placements = [
        p.model_copy(update={"memory_mib": 4096}) if p.replica == 1 else p for p in plan.placements
    ]
    with pytest.raises(KubeRenderError, match="shorten the workload name"):
        workload_manifests(spec, plan.model_copy(update={"placements": placements}))


# --- pods -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_every_pod_runs_locked_down_at_its_tenants_priority(name: str) -> None:
    spec = example(name)
    priorities = {t.name: priority_class_name(t.priority) for t in spec.tenants}
    for manifest in render(spec):
        if manifest["kind"] not in POD_KINDS:
            continue
        pod = pod_spec(manifest)
        tenant = manifest["metadata"]["labels"]["gpuplex.dev/tenant"]
        assert pod["priorityClassName"] == priorities[tenant]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 1000
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False
        container = main_container(manifest)
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False
        assert security["readOnlyRootFilesystem"] is True
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert container["volumeMounts"] == [{"name": "tmp", "mountPath": TMP}]
        assert pod["volumes"] == [{"name": "tmp", "emptyDir": {}}]


def test_shared_gpus_go_to_nodes_sharing_the_planned_way_in_the_workloads_pool() -> None:
    manifests = render(example("kubernetes-cluster"))
    playground = pod_spec(find(manifests, "Deployment", "playground"))
    assert playground["nodeSelector"] == {
        "pool.gpuplex.dev/shared": "true",
        "nvidia.com/gpu.sharing-strategy": "mps",
    }
    etl = pod_spec(find(manifests, "Job", "nightly-etl"))
    assert etl["nodeSelector"] == {
        "pool.gpuplex.dev/bursty": "true",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
    }
    bot = pod_spec(find(manifests, "Deployment", "support-bot"))
    assert bot["nodeSelector"] == {"pool.gpuplex.dev/long-running": "true"}
    for pod in (playground, etl, bot):
        assert pod["tolerations"] == [
            {"key": "gpuplex.dev/pool", "operator": "Exists", "effect": "NoSchedule"}
        ]


def test_a_workload_outside_any_pool_has_no_pool_selector_or_toleration() -> None:
    manifests = render(example("host-demo"))
    chat = pod_spec(find(manifests, "Deployment", "chat"))
    assert "nodeSelector" not in chat
    assert "tolerations" not in chat


def test_mps_clients_carry_their_planned_memory_and_thread_limits() -> None:
    spec = example("kubernetes-cluster")
    plan = make_plan(spec)
    planned = next(p for p in plan.placements if p.workload == "playground")
    env = env_of(find(workload_manifests(spec, plan), "Deployment", "playground"))
    assert env == {
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={planned.memory_mib}M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(planned.thread_percent),
    }
    assert planned.thread_percent == 25


def test_command_and_environment_placeholders_are_filled() -> None:
    spec = one_tenant(
        {
            "serve": {"model": "m", "port": 9000},
            "command": ["srv", "--port={port}", "--mem", "{memory_mib}", "--r={replica}"],
            "env": {"PORT": "{port}", "SHARE": "{thread_percent}%", "PLAIN": "x"},
        }
    )
    plan = make_plan(spec)
    memory = plan.placements[0].memory_mib
    deployment = find(workload_manifests(spec, plan), "Deployment", "lab")
    container = main_container(deployment)
    assert container["command"] == ["srv", "--port=9000", "--mem", str(memory), "--r=0"]
    assert env_of(deployment) == {
        "PORT": "9000",
        "SHARE": "25%",
        "PLAIN": "x",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={memory}M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
    }
    assert container["ports"] == [{"name": "http", "containerPort": 9000, "protocol": "TCP"}]


def test_the_planned_mps_limits_win_over_the_workloads_own_environment() -> None:
    spec = one_tenant({"env": {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"}})
    deployment = find(render(spec), "Deployment", "lab")
    assert env_of(deployment)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    names = [e["name"] for e in main_container(deployment)["env"]]
    assert len(names) == len(set(names))


def test_an_image_defaults_to_the_kubernetes_default_image() -> None:
    spec = one_tenant({})
    assert main_container(find(render(spec), "Deployment", "lab"))["image"] == (
        spec.kubernetes.default_image
    )
    assert "command" not in main_container(find(render(spec), "Deployment", "lab"))
    named = one_tenant({"image": "registry.local/lab:1"})
    assert main_container(find(render(named), "Deployment", "lab"))["image"] == (
        "registry.local/lab:1"
    )


def test_cpu_and_memory_limits_are_requested_in_full() -> None:
    manifests = render(example("host-demo"))
    assert main_container(find(manifests, "Deployment", "chat"))["resources"] == {
        "requests": {"nvidia.com/mig-3g.40gb": "1", "cpu": "1", "memory": "1Gi"},
        "limits": {"nvidia.com/mig-3g.40gb": "1", "cpu": "1", "memory": "1Gi"},
    }
    playground = main_container(find(manifests, "Deployment", "playground"))["resources"]
    assert playground["limits"] == {"nvidia.com/gpu.shared": "1", "cpu": "500m", "memory": "512Mi"}


@pytest.mark.parametrize(
    ("cores", "quantity"), [(1, "1"), (2.0, "2"), (0.5, "500m"), (1.25, "1250m"), (0.0001, "1m")]
)
def test_cpu_quantities(cores: float, quantity: str) -> None:
    assert cpu_quantity(cores) == quantity


@pytest.mark.parametrize(
    ("gib", "quantity"),
    [(1, "1Gi"), (64.0, "64Gi"), (0.5, "512Mi"), (1.5, "1536Mi"), (1e-6, "1Mi")],
)
def test_memory_quantities(gib: float, quantity: str) -> None:
    assert memory_quantity(gib) == quantity


def test_health_checks_become_startup_readiness_and_liveness_probes() -> None:
    spec = one_tenant(
        {
            "serve": {"model": "m", "port": 9000},
            "health": {
                "http_path": "/ready",
                "port": 9100,
                "interval_s": 0.5,
                "timeout_s": 2.5,
                "failure_threshold": 4,
                "start_timeout_s": 45,
            },
        }
    )
    container = main_container(find(render(spec), "Deployment", "lab"))
    assert container["readinessProbe"] == {
        "httpGet": {"path": "/ready", "port": 9100},
        "periodSeconds": 1,
        "timeoutSeconds": 3,
        "failureThreshold": 4,
    }
    assert container["livenessProbe"] == container["readinessProbe"]
    # it may take 45 s to answer once (45 periods of 1 s) before it is restarted
    assert container["startupProbe"] == {**container["readinessProbe"], "failureThreshold": 45}
    assert [p["containerPort"] for p in container["ports"]] == [9000, 9100]


def test_a_health_check_without_a_port_probes_the_serving_port() -> None:
    manifests = render(example("kubernetes-cluster"))
    container = main_container(find(manifests, "Deployment", "support-bot"))
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8020}
    assert "readinessProbe" not in main_container(find(manifests, "Deployment", "embed"))


def test_servers_roll_without_surging_past_the_quota() -> None:
    deployment = find(render(example("kubernetes-cluster")), "Deployment", "support-bot")
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }
    assert pod_spec(deployment)["restartPolicy"] == "Always"


@pytest.mark.parametrize(
    ("restart", "policy", "backoff"),
    [
        ({}, "OnFailure", 5),
        ({"policy": "on-failure", "max_restarts": 2}, "OnFailure", 2),
        ({"policy": "never"}, "Never", 0),
    ],
)
def test_jobs_take_their_retries_from_the_restart_spec(
    restart: dict[str, Any], policy: str, backoff: int
) -> None:
    spec = one_tenant({"kind": "batch", "replicas": 2, "restart": {**restart, "stop_grace_s": 2.5}})
    job = find(render(spec), "Job", "lab")
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 2
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["backoffLimit"] == backoff
    assert pod_spec(job)["restartPolicy"] == policy
    assert pod_spec(job)["terminationGracePeriodSeconds"] == 3
    assert_valid([job])


def test_services_front_served_workloads_on_their_serve_port() -> None:
    manifests = render(example("kubernetes-cluster"))
    services = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "Service"}
    assert set(services) == {"chat-70b", "support-bot", "embed", "playground"}
    assert services["embed"]["spec"]["ports"] == [
        {"name": "http", "port": 8030, "targetPort": "http", "protocol": "TCP"}
    ]
    assert services["embed"]["spec"]["selector"] == {
        "gpuplex.dev/tenant": "contoso",
        "gpuplex.dev/workload": "embed",
    }
