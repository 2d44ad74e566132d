"""dcgm-exporter's text -> readings of the GPUs held by pods, for metering on Kubernetes.

On Kubernetes the NVIDIA GPU operator runs dcgm-exporter on every GPU node. It prints one series
per GPU, or per MIG GPU instance, and labels it with the pod the kubelet gave that device to (`pod`,
`namespace`, `container`; gpu-sharing-facts.md section 4). gpuplex reads three of its metrics:

- `DCGM_FI_DEV_FB_USED`: memory used on the GPU or instance, MiB;
- `DCGM_FI_DEV_GPU_UTIL`: percent of time the GPU was busy. On a shared GPU with
  `--kubernetes-virtual-gpus`, the exporter fills it per pod from the pod's own processes;
- `DCGM_FI_PROF_GR_ENGINE_ACTIVE`: share of time (0..1) the graphics engine was active. Used for MIG
  instances, where GPU_UTIL is not reported; it is relative to the instance, so it is scaled by the
  instance's part of the GPU (compute slices of its profile / the GPU's, from the catalog).

`parse_exposition` reads one exporter's text into readings (one per GPU or instance and pod), a
function of its input; `gpuplex.server.dcgm_attribution` turns the readings of all exporters, read
at one moment, into the store's samples of tenant replicas.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass, replace

from prometheus_client.parser import text_fd_to_metric_families
from prometheus_client.samples import Sample

from gpuplex.core.catalog import GPU_MODELS, GpuModel, gpu_model_for_nvml_name
from gpuplex.errors import DcgmInputError

FB_USED = "DCGM_FI_DEV_FB_USED"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
_READ = (FB_USED, GPU_UTIL, GR_ENGINE_ACTIVE)
#: DCGM writes "no value" as a sentinel at or above this (DCGM_INT32_BLANK, 0x7ffffff0); the
#: int64 and float sentinels are larger still.
DCGM_BLANK = 2147483632.0

#: What the store keeps of a sample's node and GPU UUID (gpu_samples columns).
_LONGEST_LABELS = {"Hostname": 253, "UUID": 64, "uuid": 64}
_PROFILE_SLICES = re.compile(r"^(\d+)g\.")


@dataclass(frozen=True, slots=True)
class DcgmReading:
    """What one exporter said about one GPU (or one MIG instance of it) held by one pod."""

    node: str  # the `Hostname` label: the Kubernetes node's name; '' where the exporter omits it
    gpu_index: int
    namespace: str  # '' for a device the exporter attributes to no pod
    pod: str
    gpu_uuid: str | None = None
    model_name: str = ""  # as NVML names it, e.g. "NVIDIA H100 80GB HBM3"
    mig_profile: str | None = None  # `GPU_I_PROFILE`, e.g. "3g.40gb"; None: a whole GPU
    gpu_instance_id: int | None = None
    memory_used_mib: float | None = None
    gpu_util_percent: float | None = None
    gr_engine_active: float | None = None  # 0..1

    @property
    def key(self) -> tuple[str, int, int | None, str, str]:
        return (self.node, self.gpu_index, self.gpu_instance_id, self.namespace, self.pod)


class _NumberedLines(io.StringIO):
    """The text, handed to the parser line by line, remembering the last line it took: the
    parser raises while it reads a line, so that line is the one at fault."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.number = 0
        self.line = ""

    def __next__(self) -> str:  # type: ignore[override]  # typeshed gives IOBase bytes lines
        line = super().__next__()
        self.number += 1
        self.line = line.rstrip("\n")
        return line


def parse_exposition(text: str, source: str = "dcgm-exporter") -> list[DcgmReading]:
    """One exporter's `/metrics` text -> a reading per GPU or MIG instance and pod. Copies of a
    series (one per container, or per `vgpu` replica, of the same pod) are merged: the largest."""
    lines = _NumberedLines(text)
    readings: dict[tuple[str, int, int | None, str, str], DcgmReading] = {}
    try:
        for family in text_fd_to_metric_families(lines):
            for sample in family.samples:
                if sample.name in _READ:
                    _merge(readings, _reading(sample, source))
    except ValueError as error:
        reason = f": {error}" if str(error) else ""
        raise DcgmInputError(
            f"{source}: line {lines.number} is not Prometheus text format{reason}: "
            f"{lines.line[:200]!r}"
        ) from None
    return list(readings.values())


def _reading(sample: Sample, source: str) -> DcgmReading:
    labels = sample.labels

    def bad(what: str) -> DcgmInputError:
        shown = ",".join(f'{k}="{v}"' for k, v in labels.items())
        return DcgmInputError(f"{source}: {sample.name}{{{shown}}} {sample.value}: {what}")

    gpu = labels.get("gpu", "")
    if not _is_index(gpu):
        raise bad(f"the gpu label {gpu!r} is not a GPU index")
    instance = labels.get("GPU_I_ID", "")
    if instance and not _is_index(instance):
        raise bad(f"the GPU_I_ID label {instance!r} is not a GPU instance id")
    for name, longest in _LONGEST_LABELS.items():
        if len(labels.get(name, "")) > longest:
            raise bad(f"the {name} label is over {longest} characters")
    value = float(sample.value)
    if value < 0:
        raise bad("a negative value")
    reading = DcgmReading(
        node=labels.get("Hostname", ""),
        gpu_index=int(gpu),
        namespace=labels.get("namespace") or labels.get("pod_namespace", ""),
        pod=labels.get("pod") or labels.get("pod_name", ""),
        gpu_uuid=labels.get("UUID") or labels.get("uuid") or None,
        model_name=labels.get("modelName", ""),
        mig_profile=labels.get("GPU_I_PROFILE") or None,
        gpu_instance_id=int(instance) if instance else None,
    )
    if math.isnan(value) or value >= DCGM_BLANK:  # DCGM had no value
        return reading
    if sample.name == FB_USED:
        return replace(reading, memory_used_mib=value)
    if sample.name == GPU_UTIL:
        return replace(reading, gpu_util_percent=min(value, 100.0))
    return replace(reading, gr_engine_active=min(value, 1.0))


def _is_index(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) < 10


def _merge(
    readings: dict[tuple[str, int, int | None, str, str], DcgmReading], new: DcgmReading
) -> None:
    old = readings.get(new.key)
    if old is None:
        readings[new.key] = new
        return
    readings[new.key] = replace(
        old,
        memory_used_mib=_larger(old.memory_used_mib, new.memory_used_mib),
        gpu_util_percent=_larger(old.gpu_util_percent, new.gpu_util_percent),
        gr_engine_active=_larger(old.gr_engine_active, new.gr_engine_active),
    )


def _larger(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def utilization_percent(reading: DcgmReading) -> float | None:
    """Percent of one whole GPU the reading's pod kept busy; None where DCGM cannot tell."""
    if reading.mig_profile is None and reading.gpu_instance_id is None:
        return reading.gpu_util_percent
    share = mig_share(gpu_model_of(reading.model_name), reading.mig_profile or "")
    if share is None or reading.gr_engine_active is None:
        return None
    return reading.gr_engine_active * share * 100.0


def gpu_model_of(model_name: str) -> GpuModel | None:
    """The catalog's model for `modelName`, also as `--replace-blanks-in-model-name` writes it
    ("NVIDIA-H100-80GB-HBM3")."""
    found = gpu_model_for_nvml_name(model_name)
    if found is not None or " " in model_name:
        return found
    for model in GPU_MODELS:
        if any(name.replace(" ", "-") == model_name for name in model.nvml_names):
            return model
    return None


def mig_share(model: GpuModel | None, profile: str) -> float | None:
    """The part of the GPU's compute a MIG profile has: compute slices / the GPU's (3/7 for a
    3g on an H100). None for a GPU model or profile the catalog cannot size."""
    if model is None or model.mig is None:
        return None
    known = model.mig.profile(profile)
    if known is not None:
        return known.compute_slices / model.mig.compute_slices
    slices = _PROFILE_SLICES.match(profile)
    if slices is None:
        return None
    return min(int(slices.group(1)), model.mig.compute_slices) / model.mig.compute_slices
