"""The bad-input corpus (tests/badspecs): every broken spec makes `gpuplex validate` exit 2 with one
line naming file:line, the field path and what is wrong, and never a traceback.

Each file holds one defect. EXPECTED says, per file, the line the defect is on, the field path as the
CLI prints it, and words of the message. A file without an entry (or an entry without a file) fails
`test_every_corpus_file_has_an_expectation`, so the corpus and this table cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpuplex import specfile
from tests.e2e.cli_runs import CliResult, run_in_process, run_subprocess

BADSPECS = Path(__file__).resolve().parents[1] / "badspecs"
EXIT_BAD_INPUT = 2


@dataclass(frozen=True, slots=True)
class Expected:
    line: int
    path: str  # the field path as printed, "(document)" for problems of the file as a whole
    words: str  # part of the message
    problems: int = 1  # one defect, one message: no follow-on noise


EXPECTED: dict[str, Expected] = {
    # host runtime settings
    "runtime-health-without-port.yaml": Expected(
        13, "tenants[0].workloads[0].health.port", "needs a port"
    ),
    "runtime-network-none-served.yaml": Expected(
        13, "tenants[0].workloads[0].network", "network none"
    ),
    "runtime-reads-relative.yaml": Expected(
        14, "tenants[0].workloads[0].reads[1]", "'models/adapters' is not an absolute path"
    ),
    "runtime-reads-on-a-lora-rider.yaml": Expected(
        18, "tenants[0].workloads[1].reads", "grant them on the server it rides on (acme/chat)"
    ),
    "runtime-backoff-order.yaml": Expected(
        12, "tenants[0].workloads[0].restart", "backoff_max_s must be >= backoff_initial_s"
    ),
    # gateway settings
    "gateway-workers-memory-limiter.yaml": Expected(13, "gateway.workers", "limiter: redis"),
    "gateway-duplicate-model-name.yaml": Expected(
        14, "tenants[0].workloads[1].serve.model", "already served by 'assistant'"
    ),
    "gateway-unknown-backend.yaml": Expected(
        14, "gateway.backends.chat/asistant", 'did you mean "chat/assistant"'
    ),
    # wrong types
    "wrong-type-string-for-int.yaml": Expected(7, "fleet.nodes[0].gpus[0].count", "valid integer"),
    "wrong-type-list-for-mapping.yaml": Expected(10, "tenants[0].quota", "valid dictionary"),
    "wrong-type-mapping-for-list.yaml": Expected(8, "tenants:", "valid list"),
    "wrong-type-bool.yaml": Expected(9, "tenants[0].exclusive_gpus", "valid boolean"),
    "non-string-key.yaml": Expected(13, "tenants[0].workloads[0].env", "key 8000 is not text"),
    # unknown keys and values, with "did you mean"
    "unknown-key-typo.yaml": Expected(8, "tenant:", 'did you mean "tenants"'),
    "unknown-key-typo-nested.yaml": Expected(9, "tenants[0].isolaton", 'did you mean "isolation"'),
    "unknown-key-typo-workload.yaml": Expected(
        12, "tenants[0].workloads[0].replica", 'did you mean "replicas"'
    ),
    "unknown-enum-value.yaml": Expected(8, "tenants[0].isolation", 'did you mean "mig"'),
    "version-unsupported.yaml": Expected(1, "version", "less than or equal to 1"),
    # the GPU catalog
    "unknown-gpu-model.yaml": Expected(
        7, "fleet.nodes[0].gpus[0].model", "unknown GPU model 'H100'"
    ),
    "unknown-mig-profile.yaml": Expected(
        12, "tenants[0].workloads[0].gpu.mig_profile", 'did you mean "3g.40gb"'
    ),
    "mig-profile-not-on-model.yaml": Expected(
        13, "tenants[0].workloads[0].gpu.mig_profile", "profiles there: 1g.10gb, 1g.5gb"
    ),
    "mig-profile-with-mig-off.yaml": Expected(
        13, "tenants[0].workloads[0].gpu.mig_profile", "no MIG-capable GPU with mig on or auto"
    ),
    "mig-on-without-mig-support.yaml": Expected(
        8, "fleet.nodes[0].gpus[0].mig", "L40S has no MIG; use mig: off"
    ),
    "gpu-models-redefines-built-in.yaml": Expected(
        4, "fleet.gpu_models[0].name", "L40S is a built-in model"
    ),
    "gpu-models-declares-mig.yaml": Expected(
        7, "fleet.gpu_models[0].mig", "an added GPU model has no MIG"
    ),
    "gpu-models-mig-on.yaml": Expected(11, "fleet.nodes[0].gpus[0].mig", "A40 has no MIG"),
    # quotas
    # quota errors name each workload that counts and what it asks
    "quota-gpus-exceeded.yaml": Expected(
        10,
        "tenants[0].quota.gpus",
        "6 whole GPUs, over the quota of 4: trainer 3 replicas x 2 GPUs = 6 GPUs",
    ),
    "quota-memory-exceeded.yaml": Expected(
        12,
        "tenants[0].quota.gpu_memory_gib",
        "60 GiB of GPU memory, over the quota of 48: playground 5 replicas x 12 GiB = 60 GiB",
    ),
    "quota-memory-two-workloads.yaml": Expected(
        11,
        "tenants[0].quota.gpu_memory_gib",
        "64 GiB of GPU memory, over the quota of 60: chat 2 replicas x 20 GiB = 40 GiB, "
        "embed 3 replicas x 8 GiB = 24 GiB",
    ),
    "quota-mig-profile-exceeded.yaml": Expected(
        12,
        "tenants[0].quota.mig.3g.40gb",
        "3 x 3g.40gb, over the quota of 2: support-bot 3 replicas",
    ),
    "quota-compute-exceeded.yaml": Expected(
        9,
        "tenants[0].quota.compute_percent",
        "60% compute, over the quota of 50%: lab 3 replicas x 20% = 60%",
    ),
    # requests this fleet can never satisfy
    "memory-larger-than-any-gpu.yaml": Expected(
        13, "tenants[0].workloads[0].gpu.memory_gib", "more than the largest candidate GPU"
    ),
    "more-gpus-than-node.yaml": Expected(
        18, "tenants[0].workloads[0].gpu.count", "no node has more than 4"
    ),
    "unknown-pool.yaml": Expected(18, "tenants[0].workloads[0].pool", 'did you mean "bursty"'),
    # malformed YAML
    "yaml-unclosed-bracket.yaml": Expected(10, "(document)", "flow sequence that starts on line 9"),
    "yaml-bad-indentation.yaml": Expected(12, "(document)", "invalid YAML"),
    "yaml-tab-indentation.yaml": Expected(10, "(document)", "replace the tab"),
    "yaml-two-documents.yaml": Expected(6, "(document)", "another document"),
    "yaml-deep-nesting.yaml": Expected(2, "(document)", "nested too deeply"),
    "yaml-recursive-alias.yaml": Expected(6, "tenants[0]", "valid dictionary"),
    "yaml-alias-bomb.yaml": Expected(
        11,
        "tenants[0]",
        "valid dictionary",
        problems=18,  # 9 tenants, 9 unknown keys a0..a8
    ),
    "duplicate-yaml-key.yaml": Expected(11, "tenants[0].priority", "duplicate key 'priority'"),
    # not a YAML mapping at all
    "empty.yaml": Expected(1, "(document)", "the file is empty"),
    "only-comments.yaml": Expected(1, "(document)", "the file is empty"),
    "binary-garbage.yaml": Expected(1, "(document)", "unacceptable character"),
    "non-utf8-latin1.yaml": Expected(8, "(document)", "not UTF-8 text (byte 0xe9)"),
    "top-level-list.yaml": Expected(1, "(document)", "expected a mapping"),
    # names
    "dns-name-uppercase.yaml": Expected(7, "tenants[0].name", "'Research' is not a DNS-1123"),
    "dns-name-underscore.yaml": Expected(
        9, "tenants[0].workloads[0].name", "'nightly_eval' is not a DNS-1123"
    ),
    "dns-name-node-too-long.yaml": Expected(3, "fleet.nodes[0].name", "at most 63"),
    "duplicate-tenant-name.yaml": Expected(16, "tenants[2].name", "duplicate tenant name"),
    "duplicate-workload-name.yaml": Expected(
        13, "tenants[0].workloads[1].name", "duplicate workload name"
    ),
    "workload-named-like-a-job.yaml": Expected(
        13,
        "tenants[0].workloads[1].name",
        "workload name 'job-j00000001' starts with 'job-', which is reserved for the workloads "
        "jobs run as",
    ),
    "duplicate-node-name.yaml": Expected(6, "fleet.nodes[1].name", "duplicate node name"),
    # references
    "never-share-with-unknown-tenant.yaml": Expected(
        10, "tenants[0].never_share_with[0]", 'did you mean "hobbyists"'
    ),
    "never-share-with-self.yaml": Expected(
        9, "tenants[0].never_share_with[0]", "cannot exclude itself"
    ),
    "lora-of-unresolved.yaml": Expected(
        18, "tenants[1].workloads[0].serve.lora_of", "does not name a workload"
    ),
    "lora-base-rejects-adapters.yaml": Expected(
        18, "tenants[1].workloads[0].serve.lora_of", "does not accept adapters"
    ),
    # the GPU request
    "gpu-request-two-forms.yaml": Expected(
        11, "tenants[0].workloads[0].gpu", "got count, memory_gib"
    ),
    "gpu-request-missing.yaml": Expected(9, "tenants[0].workloads[0].gpu", "required field"),
    "compute-percent-over-100.yaml": Expected(
        12, "tenants[0].workloads[0].gpu.compute_percent", "less than or equal to 100"
    ),
    "compute-percent-without-memory.yaml": Expected(
        12, "tenants[0].workloads[0].gpu", "compute_percent goes with memory_gib"
    ),
    "boolean-as-count.yaml": Expected(12, "tenants[0].workloads[0].gpu.count", "valid integer"),
    "negative-price.yaml": Expected(9, "pricing.gpu_hour.H100-80GB", "greater than or equal to 0"),
    "negative-replicas.yaml": Expected(
        11, "tenants[0].workloads[0].replicas", "greater than or equal to 0"
    ),
    "serve-on-training.yaml": Expected(12, "tenants[0].workloads[0].serve", "not training"),
    "health-path-without-slash.yaml": Expected(
        13, "tenants[0].workloads[0].health.http_path", "pattern '^/'"
    ),
    # isolation
    "requirement-hard-with-mps.yaml": Expected(
        8, "tenants[0].isolation", "needs hardware isolation"
    ),
    "regulated-with-moderate.yaml": Expected(
        9, "tenants[0].requirement", "implies requirement: hard"
    ),
    "isolation-mig-with-count.yaml": Expected(
        12, "tenants[0].workloads[0].gpu.count", "tenant isolation is mig"
    ),
    # the fleet
    "fleet-no-nodes.yaml": Expected(2, "fleet", "no nodes"),
    "node-without-gpus.yaml": Expected(4, "fleet.nodes[0].gpus", "at least 1 item"),
    "uuids-count-mismatch.yaml": Expected(7, "fleet.nodes[0].gpus[0].uuids", "2 UUIDs for count 3"),
    "uuid-listed-twice.yaml": Expected(12, "fleet.nodes[1].gpus[0].uuids", "listed twice"),
    # pricing
    "pricing-unknown-model.yaml": Expected(
        16, "pricing.gpu_hour.H100-SXM", "unknown GPU model 'H100-SXM'"
    ),
    "pricing-bad-currency.yaml": Expected(12, "pricing.currency", "pattern"),
    "pricing-not-a-number.yaml": Expected(13, "pricing.gpu_hour.H100-80GB", "valid decimal"),
}

#: Run as real subprocesses (the rest run in-process through the same entry point, for speed):
#: the inputs that stress the reader, the parser and the interpreter's stack hardest.
SUBPROCESS = [
    "binary-garbage.yaml",
    "non-utf8-latin1.yaml",
    "yaml-deep-nesting.yaml",
    "yaml-alias-bomb.yaml",
    "yaml-recursive-alias.yaml",
    "yaml-tab-indentation.yaml",
    "duplicate-yaml-key.yaml",
    "empty.yaml",
    "unknown-key-typo.yaml",
    "mig-on-without-mig-support.yaml",
    "workload-named-like-a-job.yaml",
]

#: `plan` reads the spec the same way: same exit code and the same located message.
PLAN_TOO = ["unknown-gpu-model.yaml", "yaml-unclosed-bracket.yaml", "quota-gpus-exceeded.yaml"]


def corpus() -> list[str]:
    return sorted(path.name for path in BADSPECS.iterdir() if path.suffix == ".yaml")


def assert_reported(result: CliResult, name: str) -> None:
    expected = EXPECTED[name]
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert result.stdout == "", "errors go to stderr only"
    where = f"{name}:{expected.line}:"
    assert where in result.stderr, f"expected {where!r} in:\n{result.stderr}"
    assert expected.path in result.stderr, result.stderr
    # One line says it all: the position, the field path and what is wrong, together.
    lines = [
        line
        for line in result.stderr.splitlines()
        if where in line and expected.path in line and expected.words in line
    ]
    assert lines, (
        f"no line has {where!r}, {expected.path!r} and {expected.words!r}:\n{result.stderr}"
    )
    assert len(result.stderr.splitlines()) == expected.problems, result.stderr


def test_every_corpus_file_has_an_expectation() -> None:
    files = corpus()
    assert len(files) >= 30
    assert set(files) == set(EXPECTED), {
        "files without an expectation": sorted(set(files) - set(EXPECTED)),
        "expectations without a file": sorted(set(EXPECTED) - set(files)),
    }
    assert set(SUBPROCESS) <= set(files)
    assert set(PLAN_TOO) <= set(files)


def test_binary_corpus_files_are_what_they_claim() -> None:
    garbage = (BADSPECS / "binary-garbage.yaml").read_bytes()
    assert b"\x00" in garbage
    latin = (BADSPECS / "non-utf8-latin1.yaml").read_bytes()
    with pytest.raises(UnicodeDecodeError):
        latin.decode("utf-8")
    assert (BADSPECS / "yaml-tab-indentation.yaml").read_bytes().count(b"\n\t") >= 1
    assert (BADSPECS / "empty.yaml").read_bytes() == b""


@pytest.mark.parametrize("name", sorted(EXPECTED), ids=lambda name: name.removesuffix(".yaml"))
def test_validate_names_line_and_field(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_in_process(["validate", str(BADSPECS / name)], monkeypatch, capsys)
    assert_reported(result, name)


@pytest.mark.parametrize("name", sorted(EXPECTED), ids=lambda name: name.removesuffix(".yaml"))
def test_the_pure_python_yaml_parser_reports_the_same(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where PyYAML has no libyaml, the pure-Python parser runs: same messages, same lines."""
    monkeypatch.setattr(specfile, "SPEC_LOADER", specfile.make_spec_loader(yaml.SafeLoader))
    result = run_in_process(["validate", str(BADSPECS / name)], monkeypatch, capsys)
    assert_reported(result, name)


@pytest.mark.parametrize("name", SUBPROCESS, ids=lambda name: name.removesuffix(".yaml"))
def test_validate_as_a_real_process(name: str) -> None:
    assert_reported(run_subprocess("validate", BADSPECS / name), name)


@pytest.mark.parametrize("name", PLAN_TOO, ids=lambda name: name.removesuffix(".yaml"))
def test_plan_reports_the_same_way(name: str) -> None:
    validated = run_subprocess("validate", BADSPECS / name)
    planned = run_subprocess("plan", BADSPECS / name, "-o", "json")
    assert_reported(planned, name)
    assert planned.exit_code == validated.exit_code
    assert planned.stderr == validated.stderr


def test_missing_file_exits_2(tmp_path: Path) -> None:
    result = run_subprocess("validate", tmp_path / "nope.yaml")
    assert result.exit_code == EXIT_BAD_INPUT
    assert "nope.yaml" in result.stderr
    assert "No such file or directory" in result.stderr
    assert "Traceback" not in result.output


def test_directory_instead_of_file_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_in_process(["validate", str(tmp_path)], monkeypatch, capsys)
    assert result.exit_code == EXIT_BAD_INPUT
    assert "cannot read the file" in result.stderr
