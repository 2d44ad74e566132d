"""gpuplex's own server and gateway as Kubernetes objects (`gpuplex kube render --self`): valid
objects, no secret in any of them, a spec the pods can load, commands the real CLI accepts, pods
that meet the `restricted` Pod Security Standard, and scraping that finds what it should."""

# Secret *names*, a pod's all-interfaces listen address and its own /tmp emptyDir are checked here.
# ruff: noqa: S104, S106, S108

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from hypothesis import HealthCheck, assume, given, settings

from gpuplex.cli.main import app
from gpuplex.core.spec import GpuplexSpec, validate_spec
from gpuplex.core.spec.gateway import LimiterBackend
from gpuplex.errors import KubeRenderError
from gpuplex.kube.naming import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    SELF_SET,
    SET_LABEL,
    Manifest,
    kubernetes_backends,
    namespace_for,
)
from gpuplex.kube.output import to_yaml
from gpuplex.kube.self_manifests import SelfOptions, self_manifests, spec_text
from gpuplex.specfile import load_spec_file, load_spec_text
from tests.unit.core.plan.specs import specs
from tests.unit.kube.schema import assert_valid

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.yaml"))
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
OTHER_OPTIONS = SelfOptions(
    image="example.org/gpuplex:9",
    server_replicas=2,
    gateway_autoscale=False,
    gateway_replicas=3,
    gateway_service_type="LoadBalancer",
    store_secret="pg",
    store_secret_key="dsn",
    redis_secret="cache",
    redis_secret_key="address",
    metrics_secret="prom",
    metrics_secret_key="bearer",
    dcgm_namespace="monitoring",
    dcgm_port=9401,
    metrics_from=("10.42.0.0/16",),
    monitor_labels={"release": "kube-prometheus-stack"},
    node_selector={"node-role.example.org/system": "true"},
    tolerations=("gpuplex.dev/pool=long-running:NoSchedule", "example.org/dedicated"),
)


def _example(name: str = "kubernetes-cluster") -> GpuplexSpec:
    return load_spec_file(ROOT / "examples" / f"{name}.yaml")


def _one(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    found = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def _pod_templates(manifests: list[Manifest]) -> list[dict[str, Any]]:
    return [m["spec"]["template"] for m in manifests if m["kind"] == "Deployment"]


def _container(manifests: list[Manifest], deployment: str) -> dict[str, Any]:
    containers = _one(manifests, "Deployment", deployment)["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in container["env"]}


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


@pytest.mark.parametrize("example", EXAMPLES)
@pytest.mark.parametrize("options", [SelfOptions(), OTHER_OPTIONS], ids=["defaults", "other"])
def test_every_object_is_valid_and_in_the_self_set(example: str, options: SelfOptions) -> None:
    spec = _example(example)
    manifests = self_manifests(spec, options)
    assert_valid(manifests)
    for manifest in manifests:
        meta = manifest["metadata"]
        assert meta["labels"][MANAGED_BY_LABEL] == MANAGED_BY
        assert meta["labels"][SET_LABEL] == SELF_SET
        if meta["name"] == "gpuplex-dcgm-exporter" and manifest["kind"] == "Service":
            # the headless Service over the exporter's pods lives beside them
            assert meta["namespace"] == (
                options.dcgm_namespace or spec.kubernetes.gpu_operator_namespace
            )
        elif manifest["kind"] not in CLUSTER_SCOPED:
            assert meta["namespace"] == spec.kubernetes.system_namespace
    text = to_yaml(manifests)
    assert not re.search(r"[&*]id\d", text), "a shared object became a YAML anchor"
    assert list(yaml.safe_load_all(text)) == manifests
    assert self_manifests(spec, options) == manifests  # deterministic


def test_no_secret_is_written_into_any_object(monkeypatch: pytest.MonkeyPatch) -> None:
    store_url = "postgresql+psycopg://gpuplex:s3cret-pw@db.internal:5432/gpuplex"
    redis_url = "redis://:r3dis-pw@redis.internal:6379/0"
    monkeypatch.setenv("GPUPLEX_STORE_URL", store_url)
    monkeypatch.setenv("GPUPLEX_REDIS_URL", redis_url)
    for options in (SelfOptions(), OTHER_OPTIONS):
        manifests = self_manifests(_example(), options)
        assert "Secret" not in {m["kind"] for m in manifests}
        for text in _strings(manifests):
            assert "pw" not in text
            assert not re.search(r"://[^/@\s]*:[^/@\s]*@", text), f"credentials in {text!r}"
            assert not text.startswith(("postgresql", "redis://", "sqlite")), text
        for deployment, wanted in (
            ("gpuplex-server", {"GPUPLEX_STORE_URL"}),
            ("gpuplex-gateway", {"GPUPLEX_STORE_URL", "GPUPLEX_REDIS_URL"}),
        ):
            env = _env(_container(manifests, deployment))
            assert wanted <= set(env)
            for name in wanted:
                assert "value" not in env[name]
                ref = env[name]["valueFrom"]["secretKeyRef"]
                if name == "GPUPLEX_STORE_URL":
                    assert ref == {"name": options.store_secret, "key": options.store_secret_key}
                else:
                    assert ref == {"name": options.redis_secret, "key": options.redis_secret_key}


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_spec_configmap_loads_back_with_the_gateway_set_for_the_cluster(example: str) -> None:
    spec = _example(example)
    manifests = self_manifests(spec, OTHER_OPTIONS)
    configmap = _one(manifests, "ConfigMap", "gpuplex-spec")
    back = load_spec_text(configmap["data"]["gpuplex.yaml"], source="configmap")
    assert back.gateway.backends == kubernetes_backends(spec)
    assert back.gateway.host == "0.0.0.0"
    assert back.gateway.limiter is LimiterBackend.REDIS
    assert back.gateway.metrics_from == ["10.42.0.0/16"]
    assert back.gateway.port == spec.gateway.port
    assert back.model_copy(update={"gateway": spec.gateway}) == spec


def test_the_cluster_example_reaches_its_model_servers_through_their_services() -> None:
    spec = _example()
    text = spec_text(spec, SelfOptions())
    backends = load_spec_text(text, source="configmap").gateway.backends
    namespace = namespace_for(spec, "northwind")
    assert backends["northwind/chat-70b"] == [f"http://chat-70b.{namespace}.svc.cluster.local:8000"]
    assert "northwind/finetune" not in backends  # a training job serves nothing


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(specs())
def test_any_spec_survives_the_trip_through_the_configmap(spec: GpuplexSpec) -> None:
    # The strategy builds the models alone; keep the specs that pass the cross-field rules too.
    assume(isinstance(validate_spec(spec.model_dump(mode="json")), GpuplexSpec))
    back = load_spec_text(spec_text(spec, SelfOptions()), source="configmap")
    assert back.model_copy(update={"gateway": spec.gateway}) == spec


def test_the_autoscaler_owns_the_gateway_replica_count() -> None:
    options = SelfOptions(
        gateway_min_replicas=3, gateway_max_replicas=7, gateway_target_cpu_percent=55
    )
    manifests = self_manifests(_example(), options)
    hpa = _one(manifests, "HorizontalPodAutoscaler", "gpuplex-gateway")
    target = hpa["spec"]["scaleTargetRef"]
    deployment = _one(manifests, target["kind"], target["name"])
    assert target == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "gpuplex-gateway"}
    assert deployment["apiVersion"] == target["apiVersion"]
    assert deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == (
        "gateway"
    )
    assert "replicas" not in deployment["spec"]  # an apply would reset what the HPA chose
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 7)
    metric = hpa["spec"]["metrics"][0]["resource"]
    assert metric == {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 55}}
    assert "cpu" in _container(manifests, "gpuplex-gateway")["resources"]["requests"]

    fixed = self_manifests(_example(), OTHER_OPTIONS)
    assert "HorizontalPodAutoscaler" not in {m["kind"] for m in fixed}
    assert _one(fixed, "Deployment", "gpuplex-gateway")["spec"]["replicas"] == 3
    assert _one(fixed, "Deployment", "gpuplex-server")["spec"]["replicas"] == 2


@pytest.mark.parametrize("options", [SelfOptions(), OTHER_OPTIONS], ids=["defaults", "other"])
def test_every_container_runs_unprivileged_on_a_read_only_root(options: SelfOptions) -> None:
    templates = _pod_templates(self_manifests(_example(), options))
    assert len(templates) == 2
    for template in templates:
        pod = template["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not pod.get("hostNetwork")
        assert not pod.get("hostPID")
        assert not pod.get("hostIPC")
        empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
        for container in [*pod["containers"], *pod.get("initContainers", [])]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert not context.get("privileged")
            assert context.get("runAsUser", pod["securityContext"]["runAsUser"]) != 0
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert mounts["/tmp"] in empty_dirs
            assert container["resources"]["requests"]["memory"]
            assert container["resources"]["limits"]["memory"]


def test_the_gateway_writes_its_spool_and_worker_metrics_to_an_empty_dir() -> None:
    spec = _example()
    manifests = self_manifests(spec, SelfOptions(spool_size="5Gi"))
    container = _container(manifests, "gpuplex-gateway")
    command = container["command"]
    spool = Path(command[command.index("--spool-dir") + 1])
    pod = _one(manifests, "Deployment", "gpuplex-gateway")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    # The gateway writes the spool and, beside it, its workers' metrics (spool_dir.parent).
    state = [
        m for m in container["volumeMounts"] if spool.parent.is_relative_to(Path(m["mountPath"]))
    ]
    assert len(state) == 1
    assert state[0]["mountPath"] != "/"
    assert volumes[state[0]["name"]]["emptyDir"] == {"sizeLimit": "5Gi"}
    # A stopping pod has time to answer its longest request and move the spool into the store.
    assert pod["terminationGracePeriodSeconds"] > spec.gateway.upstream_timeout_s


def _parse(command: list[str]) -> dict[str, Any]:
    """The container's arguments, parsed by the real `gpuplex` CLI without running it."""
    assert command[0] == "gpuplex"
    group = typer.main.get_command(app)
    subcommand = group.commands[command[1]]  # type: ignore[attr-defined]
    context = subcommand.make_context(command[1], list(command[2:]))
    params: dict[str, Any] = context.params
    return params


def test_the_containers_start_gpuplex_with_arguments_the_cli_accepts() -> None:
    spec = _example()
    manifests = self_manifests(spec, OTHER_OPTIONS)
    server = _parse(_container(manifests, "gpuplex-server")["command"])
    assert server["spec"] == Path("/etc/gpuplex/gpuplex.yaml")
    assert (server["host"], server["port"]) == ("0.0.0.0", 8090)
    assert server["metrics_from"] == ["10.42.0.0/16"]
    assert server["store"] is None  # from GPUPLEX_STORE_URL, a Secret
    gateway = _parse(_container(manifests, "gpuplex-gateway")["command"])
    assert gateway["config"] == Path("/etc/gpuplex/gpuplex.yaml")
    assert gateway["store"] is None
    assert gateway["redis_url"] is None
    for name in ("gpuplex-server", "gpuplex-gateway"):
        container = _container(manifests, name)
        assert container["image"] == "example.org/gpuplex:9"
        mount = next(m for m in container["volumeMounts"] if m["name"] == "spec")
        assert mount["mountPath"] == "/etc/gpuplex/gpuplex.yaml"
        assert mount["readOnly"] is True


def test_probes_and_services_reach_the_port_each_process_listens_on() -> None:
    spec = _example()
    manifests = self_manifests(spec, OTHER_OPTIONS)
    # the gateway is ready only while it can record usage (/healthz), alive while it answers
    for name, port, health, ready in (
        ("gpuplex-server", 8090, "/healthz", "/healthz"),
        ("gpuplex-gateway", spec.gateway.port, "/health", "/healthz"),
    ):
        container = _container(manifests, name)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"http": port}
        for probe in ("startupProbe", "livenessProbe"):
            assert container[probe]["httpGet"] == {"path": health, "port": "http"}
        assert container["readinessProbe"]["httpGet"] == {"path": ready, "port": "http"}
        service = _one(manifests, "Service", name)
        pod_labels = _one(manifests, "Deployment", name)["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items()
        assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(port, "http")]
    gateway = _one(manifests, "Service", "gpuplex-gateway")["spec"]
    assert gateway["type"] == "LoadBalancer"
    assert gateway["externalTrafficPolicy"] == "Local"
    server = _one(manifests, "Service", "gpuplex-server")["spec"]
    assert server["type"] == "ClusterIP"
    assert "externalTrafficPolicy" not in server


def test_a_changed_spec_rolls_both_deployments() -> None:
    spec = _example()

    def hashes(s: GpuplexSpec) -> set[str]:
        templates = _pod_templates(self_manifests(s, SelfOptions()))
        return {t["metadata"]["annotations"]["gpuplex.dev/spec-sha256"] for t in templates}

    before = hashes(spec)
    changed = spec.model_copy(update={"gateway": spec.gateway.model_copy(update={"port": 9000})})
    after = hashes(changed)
    assert len(before) == 1
    assert len(after) == 1
    assert before != after


def _check_service_monitor(monitor: Manifest) -> None:
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["kind"] == "ServiceMonitor"
    body = monitor["spec"]
    assert set(body) == {"selector", "namespaceSelector", "endpoints"}
    assert body["selector"]["matchLabels"]
    assert set(body["selector"]) == {"matchLabels"}
    assert body["namespaceSelector"]["matchNames"]
    assert body["endpoints"]
    for endpoint in body["endpoints"]:
        assert set(endpoint) <= {"port", "path", "interval", "honorLabels", "authorization"}
        assert isinstance(endpoint["port"], str)
        assert endpoint["path"] == "/metrics"
        assert re.fullmatch(r"[0-9]+(ms|s|m|h)", endpoint["interval"])


def test_service_monitors_select_the_services_that_serve_metrics() -> None:
    spec = _example()
    manifests = self_manifests(spec, OTHER_OPTIONS)
    monitors = [m for m in manifests if m["kind"] == "ServiceMonitor"]
    assert {m["metadata"]["name"] for m in monitors} == {
        "gpuplex-server",
        "gpuplex-gateway",
        "gpuplex-dcgm-exporter",
    }
    for monitor in monitors:
        _check_service_monitor(monitor)
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    for name in ("gpuplex-server", "gpuplex-gateway"):
        body = _one(manifests, "ServiceMonitor", name)["spec"]
        assert body["namespaceSelector"]["matchNames"] == [spec.kubernetes.system_namespace]
        matched = [
            m
            for m in manifests
            if m["kind"] == "Service"
            and body["selector"]["matchLabels"].items() <= m["metadata"]["labels"].items()
        ]
        assert [m["metadata"]["name"] for m in matched] == [name]
        ports = {p["name"] for p in matched[0]["spec"]["ports"]}
        assert {e["port"] for e in body["endpoints"]} <= ports


@pytest.mark.parametrize("options", [SelfOptions(), OTHER_OPTIONS])
def test_prometheus_reads_gpuplex_metrics_with_the_token_both_pods_get(
    options: SelfOptions,
) -> None:
    """/metrics needs the metrics token: both pods read it from the operator's Secret, and both
    ServiceMonitors send it from that Secret; no network reads it without one unless listed."""
    manifests = self_manifests(_example(), options)
    secret = {"name": options.metrics_secret, "key": options.metrics_secret_key}
    for name in ("gpuplex-server", "gpuplex-gateway"):
        env = _env(_container(manifests, name))
        assert env["GPUPLEX_METRICS_TOKEN"] == {
            "name": "GPUPLEX_METRICS_TOKEN",
            "valueFrom": {"secretKeyRef": secret},
        }
        endpoints = _one(manifests, "ServiceMonitor", name)["spec"]["endpoints"]
        assert [e["authorization"] for e in endpoints] == [
            {"type": "Bearer", "credentials": secret}
        ]
    dcgm = _one(manifests, "ServiceMonitor", "gpuplex-dcgm-exporter")["spec"]["endpoints"]
    assert "authorization" not in dcgm[0]  # NVIDIA's exporter asks for none
    configmap = _one(manifests, "ConfigMap", "gpuplex-spec")
    back = load_spec_text(configmap["data"]["gpuplex.yaml"], source="configmap")
    assert back.gateway.metrics_from == list(options.metrics_from)
    if options == SelfOptions():
        assert options.metrics_from == ()  # the pod network holds tenant pods too


def test_the_server_and_prometheus_scrape_the_gpu_operators_dcgm_exporter() -> None:
    spec = _example()
    manifests = self_manifests(spec, SelfOptions())
    env = _env(_container(manifests, "gpuplex-server"))
    namespace = spec.kubernetes.gpu_operator_namespace
    assert env["GPUPLEX_DCGM_URLS"]["value"] == (
        f"http://gpuplex-dcgm-exporter.{namespace}.svc:9400/metrics"
    )
    headless = _one(manifests, "Service", "gpuplex-dcgm-exporter")
    assert headless["metadata"]["namespace"] == namespace
    assert headless["spec"]["clusterIP"] == "None"  # one DNS address per exporter pod (GPU node)
    assert headless["spec"]["selector"] == {"app": "nvidia-dcgm-exporter"}
    body = _one(manifests, "ServiceMonitor", "gpuplex-dcgm-exporter")["spec"]
    assert body["selector"]["matchLabels"] == {"app": "nvidia-dcgm-exporter"}
    assert body["namespaceSelector"]["matchNames"] == [namespace]
    assert body["endpoints"][0]["port"] == "gpu-metrics"
    assert body["endpoints"][0]["honorLabels"] is True  # keep the GPU user's namespace and pod

    other = self_manifests(spec, OTHER_OPTIONS)
    env = _env(_container(other, "gpuplex-server"))
    assert env["GPUPLEX_DCGM_URLS"]["value"] == (
        "http://gpuplex-dcgm-exporter.monitoring.svc:9401/metrics"
    )


def test_the_tenants_network_policies_can_find_the_gateway_pods() -> None:
    manifests = self_manifests(_example(), SelfOptions())
    labels = _one(manifests, "Deployment", "gpuplex-gateway")["spec"]["template"]["metadata"]
    assert labels["labels"]["app.kubernetes.io/name"] == "gpuplex-gateway"
    namespace = _one(manifests, "Namespace", "gpuplex-system")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_only_the_server_account_gets_api_rights_and_never_over_cluster_roles() -> None:
    spec = _example()
    manifests = self_manifests(spec, SelfOptions())
    accounts = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "ServiceAccount"}
    assert accounts["gpuplex-gateway"]["automountServiceAccountToken"] is False
    gateway_pod = _one(manifests, "Deployment", "gpuplex-gateway")["spec"]["template"]["spec"]
    assert gateway_pod["serviceAccountName"] == "gpuplex-gateway"
    assert gateway_pod["automountServiceAccountToken"] is False
    binding = next(m for m in manifests if m["kind"] == "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpuplex-server", "namespace": "gpuplex-system"}
    ]
    role = _one(manifests, "ClusterRole", binding["roleRef"]["name"])
    granted = _granted(role)
    assert all("*" not in key and "*" not in verbs for key, verbs in granted.items())
    assert ("rbac.authorization.k8s.io", "clusterroles") not in granted
    assert ("rbac.authorization.k8s.io", "clusterrolebindings") not in granted
    assert ("", "secrets") not in granted
    assert granted[("", "nodes")] == {"get", "patch"}  # labelled, never created or pruned
    assert {"create", "patch", "bind", "escalate"} <= granted[
        ("rbac.authorization.k8s.io", "roles")
    ]
    for key in [("", "namespaces"), ("apps", "deployments"), ("batch", "jobs")]:
        assert {"create", "patch", "delete", "list"} <= granted[key]


def _granted(role: Manifest) -> dict[tuple[str, str], set[str]]:
    """(API group, resource) -> every verb the ClusterRole's rules allow on it."""
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


def _plural(kind: str) -> str:
    lower = kind.lower()
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + ("es" if lower.endswith("s") else "s")


def test_the_server_may_apply_every_kind_the_plan_renders() -> None:
    try:
        from gpuplex.core.plan import make_plan
        from gpuplex.kube.render import render_plan
    except ImportError as error:  # the plan's renderers are not all there yet
        pytest.skip(f"plan rendering unavailable: {error}")
    spec = _example()
    role = _one(self_manifests(spec, SelfOptions()), "ClusterRole", "gpuplex-server-reconciler")
    granted = _granted(role)
    for manifest in render_plan(spec, make_plan(spec)).manifests:
        group = manifest["apiVersion"].rpartition("/")[0]
        kind = manifest["kind"]
        needed = (
            {"get", "patch"} if kind == "Node" else {"get", "list", "create", "patch", "delete"}
        )
        assert needed <= granted.get((group, _plural(kind)), set()), f"{kind} in {group!r}"


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (SelfOptions(gateway_min_replicas=4, gateway_max_replicas=2), "below the minimum"),
        (SelfOptions(server_replicas=0), "server replicas is 0"),
        (SelfOptions(store_secret="Not_A_Name"), "store Secret 'Not_A_Name'"),
        (SelfOptions(redis_secret_key="a/b"), "Redis key 'a/b'"),
        (SelfOptions(metrics_secret="Prom_Token"), "metrics Secret 'Prom_Token'"),
        (SelfOptions(metrics_secret_key="a b"), "metrics Secret key 'a b'"),
        (SelfOptions(gateway_memory="lots"), "gateway memory 'lots'"),
        (SelfOptions(metrics_from=("pod network",)), "'pod network'"),
        (SelfOptions(gateway_service_type="Ingress"), "gateway Service type 'Ingress'"),
        (SelfOptions(scrape_interval="often"), "scrape interval 'often'"),
        (SelfOptions(dcgm_port=0), "port 0"),
    ],
)
def test_bad_options_are_refused_with_what_is_wrong(options: SelfOptions, words: str) -> None:
    with pytest.raises(KubeRenderError, match=re.escape(words)):
        self_manifests(_example(), options)


def test_every_bad_option_is_named_at_once() -> None:
    options = SelfOptions(server_replicas=0, gateway_cpu="fast", image=" ")
    with pytest.raises(KubeRenderError) as caught:
        self_manifests(_example(), options)
    message = str(caught.value)
    assert "server replicas" in message
    assert "gateway CPU" in message
    assert "image" in message
