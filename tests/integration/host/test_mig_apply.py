"""Acceptance: applying plan A then plan B reshapes MIG only on GPUs whose layout differs, and
replicas on untouched GPUs keep running."""

from __future__ import annotations

from typing import Any

from tests.integration.host.hostrun import WORKLOAD, Host, alive, spec


def _job(tenant: str, profile: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": tenant,
        "isolation": "mig",
        **fields,
        "workloads": [
            {"name": "job", "kind": "batch", "gpu": {"mig_profile": profile}, "command": WORKLOAD}
        ],
    }


def _instances(host: Host) -> dict[int, list[tuple[int, str, int]]]:
    return {
        gpu["index"]: sorted((i["gi_id"], i["profile"], i["start_slot"]) for i in gpu["instances"])
        for gpu in host.status()["gpus"]
    }


def test_plan_b_touches_only_the_gpu_whose_geometry_changes(host: Host) -> None:
    gpus = [{"model": "H100-80GB", "count": 2, "mig": "on"}]
    plan_a = host.write_spec(
        spec([_job("ann", "3g.40gb", never_share_with=["bob"]), _job("bob", "3g.40gb")], gpus),
        "a.yaml",
    )
    dry = host.apply(plan_a, "--dry-run")
    assert "nvidia-smi mig -i 0 -cgi 9:" in dry
    assert "nvidia-smi mig -i 1 -cgi 9:" in dry
    assert host.state()["records"] == []  # a dry run changes nothing

    host.apply(plan_a)
    before = _instances(host)
    ann_gpu = host.record("ann/job#0")["desired"]["binding"]["gpu_indices"][0]  # type: ignore[index]
    bob_gpu = 1 - ann_gpu
    ann_pid, bob_pid = host.pid_of("ann/job#0"), host.pid_of("bob/job#0")
    assert ann_pid
    assert bob_pid
    assert alive(ann_pid)
    assert alive(bob_pid)
    assert [p for _, p, _ in before[ann_gpu]] == ["3g.40gb"]

    plan_b = host.write_spec(
        spec([_job("ann", "3g.40gb", never_share_with=["bob"]), _job("bob", "2g.20gb")], gpus),
        "b.yaml",
    )
    dry = host.apply(plan_b, "--dry-run")
    assert f"nvidia-smi mig -i {bob_gpu} -cgi 14:" in dry
    assert f"-i {ann_gpu} " not in dry

    seen_before_b = len(host.events())
    host.apply(plan_b)
    after = _instances(host)
    assert after[ann_gpu] == before[ann_gpu]  # same GPU instance (same id), never recreated
    assert [p for _, p, _ in after[bob_gpu]] == ["2g.20gb"]
    assert host.pid_of("ann/job#0") == ann_pid
    assert alive(ann_pid)
    assert not alive(bob_pid)
    assert host.pid_of("bob/job#0") not in (None, bob_pid)
    during_b = host.events()[seen_before_b:]
    touched = {e["target"] for e in during_b if e["kind"].startswith("mig_")}
    assert touched == {f"GPU {bob_gpu}"}
    assert {e["kind"] for e in during_b if e["kind"].startswith("mig_")} == {
        "mig_destroyed",
        "mig_created",
    }
    assert [e["target"] for e in during_b if e["kind"] == "stopped"] == ["bob/job#0"]

    host.apply(plan_b)  # idempotent: nothing more happens
    assert _instances(host) == after
    assert len(host.events("started")) == 3


def test_mig_mode_is_never_switched_implicitly(host: Host) -> None:
    gpus = [{"model": "H100-80GB", "count": 1, "mig": "off"}]
    host.apply(
        host.write_spec(spec([_job("ann", "1g.10gb")], [{"model": "H100-80GB", "count": 1}]))
    )
    # the simulated GPU came up in MIG mode for the first plan; a whole-GPU plan is then blocked
    whole = {
        "name": "zed",
        "isolation": "dedicated",
        "workloads": [{"name": "job", "gpu": {"count": 1}, "command": WORKLOAD}],
    }
    out = host.apply(host.write_spec(spec([whole], gpus), "whole.yaml"))
    assert "gpuplex host mig-mode 0 off" in out
    assert host.pid_of("zed/job#0") is None
    refused = host.gpuplex("host", "mig-mode", "0", "off", "--driver", "sim", check=False)
    assert refused.returncode == 1
    assert "nothing done" in refused.stdout
    assert "nvidia-smi -i 0 -mig 0" in refused.stdout
    host.gpuplex("host", "mig-mode", "0", "off", "--driver", "sim", "--yes")
    host.apply(host.write_spec(spec([whole], gpus), "whole.yaml"))
    assert host.pid_of("zed/job#0") is not None


def test_check_catalog_reads_each_gpu_and_leaves_mig_mode_alone(host: Host) -> None:
    gpus = [{"model": "H100-80GB", "count": 1, "mig": "on"}, {"model": "A100-80GB", "count": 1}]
    host.apply(host.write_spec(spec([], gpus)))
    before = [g["mig_enabled"] for g in host.status()["gpus"]]
    assert before == [True, False]
    done = host.gpuplex("host", "check-catalog", "--driver", "sim")
    assert "GPU 0 (H100-80GB): the catalog agrees: 7 MIG profiles" in done.stdout
    assert "GPU 1 (A100-80GB): the catalog agrees" in done.stdout
    only = host.gpuplex("host", "check-catalog", "--driver", "sim", "--gpu", "1")
    assert "GPU 0" not in only.stdout
    missing = host.gpuplex("host", "check-catalog", "--driver", "sim", "--gpu", "5", check=False)
    assert missing.returncode == 2
    assert "no GPU 5 on this host" in missing.stderr
    assert [g["mig_enabled"] for g in host.status()["gpus"]] == before
