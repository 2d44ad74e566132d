"""The applied revision is the one artifact: for random specs applied one after another (each
planned against the one before, so a fresh plan of the same spec can differ), what the host
runtime runs, what billing charges and what Kubernetes gets all come from the stored plan.

Each reader goes through the seam its process uses: the host runtime's RevisionFollower
(`host run --follow-store`), the meter's plan intervals, and `kube render --store`."""

from __future__ import annotations

import copy
import tempfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings, strategies as st
from sqlalchemy import Engine

from gpuplex.cli.kube import applied_revision
from gpuplex.core.plan import Plan, Target
from gpuplex.core.plan.node_sharing import target_of
from gpuplex.core.spec import GpuplexSpec
from gpuplex.errors import SpecError
from gpuplex.host.follow import RevisionFollower
from gpuplex.kube.naming import TENANT_LABEL, WORKLOAD_LABEL, gpu_request
from gpuplex.kube.render import render_plan
from gpuplex.revision import AppliedRevision, AppliedRevisions
from gpuplex.server.context import ServerContext
from gpuplex.server.spec_apply import apply
from gpuplex.settings import HostSettings
from gpuplex.store.db import open_store
from gpuplex.store.spec_revisions import SpecRevisions
from tests.clocks import ManualClock
from tests.unit.core.plan.specs import specs as host_specs
from tests.unit.kube.kube_specs import kube_specs

GPU_RESOURCE_PREFIX = "nvidia.com/"


def runnable(data: dict[str, Any], on_kubernetes: bool) -> str:
    """The spec as YAML, each workload with a command the host runtime can start, and a
    `kubernetes:` section (planned for Kubernetes) when `on_kubernetes`."""
    for tenant in data["tenants"]:
        for workload in tenant["workloads"]:
            workload["command"] = ["sleep", "600"]
    if on_kubernetes:
        data["kubernetes"] = {}
    return yaml.safe_dump(data, sort_keys=False)


@st.composite
def revisions(draw: st.DrawFn) -> list[str]:
    """A spec, then changes to it: tenants leave and come back, replica counts change. Planned
    against the revision before, what stays keeps its GPUs, which a fresh plan would not."""
    on_kubernetes = draw(st.booleans())
    spec = draw(kube_specs() if on_kubernetes else host_specs(max_nodes=2))
    base: dict[str, Any] = spec.model_dump(mode="json", exclude_unset=True)
    texts = []
    for _ in range(draw(st.integers(1, 4))):
        data = copy.deepcopy(base)
        kept = draw(
            st.lists(st.booleans(), min_size=len(data["tenants"]), max_size=len(data["tenants"]))
        )
        data["tenants"] = [t for t, keep in zip(data["tenants"], kept, strict=True) if keep]
        for tenant in data["tenants"]:
            for workload in tenant["workloads"]:
                workload["replicas"] = draw(st.integers(0, 3))
        texts.append(runnable(data, on_kubernetes))
    return texts


def bindings_run(
    applied: AppliedRevision, engine: Engine, state_dir: Path
) -> dict[tuple[str, str, int], Any]:
    """What the host runtime would run for this revision, node by node: replica -> binding."""
    run: dict[tuple[str, str, int], Any] = {}
    for node in applied.spec.fleet.nodes:
        host = HostSettings(state_dir=state_dir / node.name, node=node.name, driver="sim")
        host.state_dir.mkdir(parents=True)  # as `host run` makes it before it follows
        follower = RevisionFollower(AppliedRevisions(SpecRevisions(engine)), host)
        desired = follower.take_newest()
        assert desired is not None, (state_dir / node.name / "events.jsonl").read_text()
        assert desired.revision == applied.revision
        for wanted in desired.host.workloads:
            bound = wanted.binding
            where = (node.name, bound.mode, bound.gpu_indices, bound.mig, bound.memory_mib)
            run[(wanted.tenant, wanted.workload, wanted.replica)] = where
    return run


def bindings_planned(plan: Plan) -> dict[tuple[str, str, int], Any]:
    return {
        (p.tenant, p.workload, p.replica): (p.node, p.mode, p.gpu_indices, p.mig, p.memory_mib)
        for p in plan.placements
    }


def gpus_asked(manifests: list[dict[str, Any]]) -> Counter[tuple[str, str, str]]:
    """(tenant, workload, GPU resource) -> how many the workload objects ask Kubernetes for."""
    asked: Counter[tuple[str, str, str]] = Counter()
    for manifest in manifests:
        if manifest["kind"] not in ("Deployment", "Job"):
            continue
        labels = manifest["metadata"]["labels"]
        spec = manifest["spec"]
        copies = spec.get("replicas", spec.get("parallelism", 1))
        for container in spec["template"]["spec"]["containers"]:
            for resource, count in container["resources"]["limits"].items():
                if resource.startswith(GPU_RESOURCE_PREFIX):
                    key = (labels[TENANT_LABEL], labels[WORKLOAD_LABEL], resource)
                    asked[key] += int(count) * copies
    return asked


def gpus_planned(plan: Plan) -> Counter[tuple[str, str, str]]:
    planned: Counter[tuple[str, str, str]] = Counter()
    for placement in plan.placements:
        resource, count = gpu_request(placement)
        planned[(placement.tenant, placement.workload, resource)] += count
    return planned


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(revisions())
def test_host_billing_and_kubernetes_all_read_the_stored_plan(spec_texts: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gpuplex-revision-") as scratch:
        root = Path(scratch)
        root.chmod(0o755)  # tenants run as their own users: they must be able to enter it
        store_url = f"sqlite:///{root / 'gpuplex.db'}"
        engine = open_store(store_url)
        clock = ManualClock(datetime(2026, 11, 1, tzinfo=UTC))
        ctx = ServerContext.open(engine, clock)
        try:
            base = 0
            for number, text in enumerate(spec_texts, start=1):
                clock.advance(timedelta(minutes=5))
                try:
                    stored, plan = apply(ctx.spec_history, text, base, actor="test")
                except SpecError:  # a drawn spec the validation refuses is never applied
                    continue
                base = stored.revision
                applied = ctx.current.get()
                assert applied is not None
                assert applied.revision == stored.revision
                assert applied.plan == plan  # what was planned at the apply is what is read
                # billing: the plan in force from this revision on
                after = clock.at + timedelta(seconds=1)
                intervals = ctx.metering.plan_intervals(after, after + timedelta(seconds=1))
                assert [i.plan for i in intervals] == [applied.plan]
                if target_of(applied.spec) is Target.HOST:
                    run = bindings_run(applied, engine, root / f"host-{number}")
                    assert run == bindings_planned(applied.plan)
                else:
                    rendered = render_plan(*_seam(store_url))
                    assert gpus_asked(rendered.manifests) == gpus_planned(applied.plan)
        finally:
            engine.dispose()


def _seam(store_url: str) -> tuple[GpuplexSpec, Plan]:
    """What `gpuplex kube render --store` renders."""
    applied = applied_revision(store_url)
    return applied.spec, applied.plan
