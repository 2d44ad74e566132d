"""gpuplex.specfile: YAML text to a spec, with positions. The bad-input corpus in tests/badspecs covers
the error messages end to end; these pin the reading rules that make good input read as meant."""

from __future__ import annotations

import pytest

from gpuplex.core.spec import MigModeSpec
from gpuplex.errors import SpecError
from gpuplex.specfile import load_spec_text

FLEET = """\
fleet:
  nodes:
    - name: gpu-a
      gpus:
        - model: H100-80GB
          mig: {mig}
"""


@pytest.mark.parametrize(
    ("written", "mode"),
    [("on", MigModeSpec.ON), ("off", MigModeSpec.OFF), ("auto", MigModeSpec.AUTO)],
)
def test_mig_on_and_off_are_modes_not_booleans(written: str, mode: MigModeSpec) -> None:
    # YAML 1.1 reads on/off as booleans; the spec reads booleans the YAML 1.2 way.
    spec = load_spec_text(FLEET.format(mig=written), source="gpuplex.yaml")
    assert spec.fleet.nodes[0].gpus[0].mig is mode


@pytest.mark.parametrize(("written", "value"), [("no", False), ("yes", True), ("false", False)])
def test_boolean_fields_still_take_yes_and_no(written: str, value: bool) -> None:
    text = FLEET.format(mig="auto") + f"policy:\n  preemption: {written}\n"
    assert load_spec_text(text, source="gpuplex.yaml").policy.preemption is value


def test_merge_keys_work_and_overriding_a_merged_key_is_not_a_duplicate() -> None:
    text = FLEET.format(mig="auto") + (
        "tenants:\n"
        "  - name: first\n"
        "    tier: free\n"
        "    quota: &small {gpu_memory_gib: 16}\n"
        "    workloads: []\n"
        "  - name: second\n"
        "    quota:\n"
        "      <<: *small\n"
        "      gpu_memory_gib: 32\n"
        "    workloads: []\n"
    )
    spec = load_spec_text(text, source="gpuplex.yaml")
    assert [t.quota.gpu_memory_gib for t in spec.tenants] == [16, 32]


def test_duplicate_key_names_its_field_and_both_lines() -> None:
    text = FLEET.format(mig="auto") + "policy:\n  placement: spread\n  placement: binpack\n"
    with pytest.raises(SpecError) as raised:
        load_spec_text(text, source="gpuplex.yaml")
    assert raised.value.message == (
        "gpuplex.yaml:9:3: policy.placement: duplicate key 'placement' (first on line 8): keep one"
    )


def test_a_quoted_number_is_a_key_but_a_bare_one_is_not() -> None:
    quoted = FLEET.format(mig="auto") + 'pricing:\n  gpu_hour: {"H100-80GB": 3, "1": 2}\n'
    with pytest.raises(SpecError, match=r"pricing\.gpu_hour\.1: unknown GPU model '1'"):
        load_spec_text(quoted, source="s")
    bare = FLEET.format(mig="auto") + "pricing:\n  gpu_hour: {H100-80GB: 3, 1: 2}\n"
    with pytest.raises(SpecError, match=r"s:8:28: pricing\.gpu_hour: key 1 is not text"):
        load_spec_text(bare, source="s")


def test_a_workload_no_gpu_can_take_says_to_set_a_pool() -> None:
    text = FLEET.format(mig="auto").replace(
        "    - name: gpu-a\n", "    - name: gpu-a\n      pool: gold\n"
    )
    text += "tenants:\n  - name: t\n    workloads:\n      - name: w\n        gpu: {count: 1}\n"
    with pytest.raises(SpecError) as raised:
        load_spec_text(text, source="s")
    assert raised.value.message == (
        "s:12:9: tenants[0].workloads[0].gpu: no GPU can take this workload: "
        "every GPU is in a pool (gold); set pool"
    )


def test_a_workload_named_like_a_job_is_refused_at_its_name() -> None:
    text = FLEET.format(mig="off") + (
        "tenants:\n"
        "  - name: t\n"
        "    workloads:\n"
        "      - name: job-j00000001\n"
        "        gpu: {count: 1}\n"
    )
    with pytest.raises(SpecError) as raised:
        load_spec_text(text, source="gpuplex.yaml")
    assert raised.value.message == (
        "gpuplex.yaml:10:9: tenants[0].workloads[0].name: workload name 'job-j00000001' starts "
        "with 'job-', which is reserved for the workloads jobs run as (job-<id>): its logs, status "
        "and placement would be taken for a job's; choose a name not starting with 'job-'"
    )
