"""Read the Alibaba openb cluster trace (Weng et al., ATC '23): node and pod CSVs into trace values.

    nodes: sn,cpu_milli,memory_mib,gpu,model
    pods:  name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,...  (other columns are ignored)

`gpu_spec` is empty (any GPU model) or models joined by `|`. `load_timed_pods` also reads
`creation_time` (when the pod arrives, seconds) and `deletion_time` (when it left; empty: it runs
to the end of the replay), for replays in time (`gpuplex.replay.jobs`). Anything malformed raises
`TraceInputError` naming the file, the line and the column.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpuplex.core.trace import MILLI, TraceNode, TracePod
from gpuplex.errors import TraceInputError

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
TIME_COLUMNS = ("creation_time", "deletion_time")


@dataclass(frozen=True, slots=True)
class TimedPod:
    """A pod with when it arrived and how long it ran once started (None: to the end)."""

    pod: TracePod
    arrival_s: float
    runtime_s: float | None


class _Row:
    """One CSV row, with the means to name where a bad value sits."""

    def __init__(self, path: Path, line: int, header: list[str], values: dict[str, str]) -> None:
        self.path, self.line, self.header, self.values = path, line, header, values

    def fail(self, column: str, why: str) -> TraceInputError:
        position = self.header.index(column) + 1
        return TraceInputError(f"{self.path}:{self.line}: column {column} ({position}): {why}")

    def text(self, column: str) -> str:
        value = self.values.get(column)
        if value is None:
            raise self.fail(column, "missing (the row has fewer fields than the header)")
        return value.strip()

    def name(self, column: str) -> str:
        value = self.text(column)
        if not value:
            raise self.fail(column, "empty; every row needs a name")
        return value

    def count(self, column: str, *, most: int | None = None) -> int:
        raw = self.text(column)
        try:
            value = int(raw)
        except ValueError:
            raise self.fail(column, f"{raw!r} is not a whole number") from None
        if value < 0:
            raise self.fail(column, f"{value} is negative")
        if most is not None and value > most:
            raise self.fail(column, f"{value} is more than {most}")
        return value


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[_Row]:
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            header = list(reader.fieldnames or [])
            missing = [c for c in required if c not in header]
            if missing:
                wanted = ", ".join(required)
                raise TraceInputError(
                    f"{path}:1: the header lacks column(s) {', '.join(missing)}; "
                    f"an openb CSV has {wanted}"
                )
            for values in reader:
                yield _Row(path, reader.line_num, header, values)
    except OSError as exc:
        raise TraceInputError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    except (csv.Error, UnicodeDecodeError) as exc:
        raise TraceInputError(f"{path}: not a readable CSV file: {exc}") from exc


def _unique(row: _Row, column: str, name: str, seen: dict[str, int]) -> None:
    if name in seen:
        raise row.fail(column, f"{name!r} is already the name on line {seen[name]}")
    seen[name] = row.line


def load_nodes(path: Path | str) -> list[TraceNode]:
    """The trace's nodes, in file order; at least one."""
    path = Path(path)
    nodes: list[TraceNode] = []
    seen: dict[str, int] = {}
    for row in _rows(path, NODE_COLUMNS):
        name = row.name("sn")
        _unique(row, "sn", name, seen)
        cpu, memory, gpus = row.count("cpu_milli"), row.count("memory_mib"), row.count("gpu")
        model = row.text("model")
        if gpus > 0 and not model:
            raise row.fail("model", f"empty, but the node has {gpus} GPUs")
        nodes.append(TraceNode(name, cpu, memory, gpus, model))
    if not nodes:
        raise TraceInputError(f"{path}: no nodes (only a header, or nothing)")
    return nodes


def load_pods(path: Path | str) -> list[TracePod]:
    """The trace's pods, in file order; at least one."""
    return [pod for pod, _ in _pods(Path(path), POD_COLUMNS)]


def load_timed_pods(path: Path | str) -> list[TimedPod]:
    """The trace's pods with their times, in file order; at least one. A deletion time before
    the creation time is an error; an empty one means the pod never left."""
    timed: list[TimedPod] = []
    for pod, row in _pods(Path(path), POD_COLUMNS + TIME_COLUMNS):
        created = row.count("creation_time")
        if not row.text("deletion_time"):
            timed.append(TimedPod(pod, float(created), None))
            continue
        deleted = row.count("deletion_time")
        if deleted < created:
            raise row.fail("deletion_time", f"{deleted} is before the creation time {created}")
        timed.append(TimedPod(pod, float(created), float(deleted - created)))
    return timed


def _pods(path: Path, required: tuple[str, ...]) -> Iterator[tuple[TracePod, _Row]]:
    seen: dict[str, int] = {}
    any_pod = False
    for row in _rows(path, required):
        name = row.name("name")
        _unique(row, "name", name, seen)
        cpu, memory = row.count("cpu_milli"), row.count("memory_mib")
        num_gpu = row.count("num_gpu")
        gpu_milli = row.count("gpu_milli", most=MILLI)
        if num_gpu == 0 and gpu_milli > 0:
            raise row.fail("gpu_milli", f"{gpu_milli} of a GPU, but num_gpu is 0")
        if num_gpu > 0 and gpu_milli == 0:
            raise row.fail("gpu_milli", f"0, but num_gpu is {num_gpu}")
        if num_gpu > 1 and gpu_milli != MILLI:
            raise row.fail(
                "gpu_milli", f"{gpu_milli}: a pod of {num_gpu} GPUs takes whole GPUs ({MILLI})"
            )
        spec = row.values.get("gpu_spec") or ""
        models = tuple(m.strip() for m in spec.split("|") if m.strip())
        any_pod = True
        yield TracePod(name, cpu, memory, num_gpu, gpu_milli, models), row
    if not any_pod:
        raise TraceInputError(f"{path}: no pods (only a header, or nothing)")
