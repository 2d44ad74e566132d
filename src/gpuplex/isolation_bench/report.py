"""The tables of `gpuplex bench isolation`, as rows of text (for rich and for Markdown) and as JSON
records. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuplex.isolation_bench.results import ScenarioResult, interference, versus_exclusive
from gpuplex.isolation_bench.scenarios import LoopProgram

Table = tuple[str, list[str], list[list[str]]]  # title, header, rows


def tables(results: Sequence[ScenarioResult]) -> list[Table]:
    per_tenant = [
        [
            r.scenario.name,
            t.tenant,
            str(t.batch),
            "-" if t.thread_percent is None else f"{t.thread_percent}",
            f"{t.samples_per_s:,.0f}",
            f"{t.p50_ms:.3f}",
            f"{t.p99_ms:.3f}",
        ]
        for r in results
        for t in r.tenants
    ]
    aggregate = []
    for r in results:
        ratio = versus_exclusive(r, results)
        aggregate.append(
            [
                r.scenario.name,
                r.scenario.pattern.value,
                str(r.scenario.batch) if r.scenario.batch else "mixed",
                str(len(r.tenants)),
                f"{r.samples_per_s:,.0f}",
                "-" if ratio is None or not r.scenario.batch else f"{ratio:.2f}x",
                f"{r.overlap_s:.1f}",
            ]
        )
    crowded = [
        [
            i.scenario,
            f"{i.alone_p99_ms:.3f}",
            f"{i.crowded_p99_ms:.3f}",
            f"{i.ratio:.2f}x",
            f"{i.heavy_samples_per_s:,.0f}",
        ]
        for i in interference(results)
    ]
    return [
        (
            "Per tenant",
            ["scenario", "tenant", "batch", "MPS thread %", "samples/s", "p50 ms", "p99 ms"],
            per_tenant,
        ),
        (
            "Aggregate against exclusive (same batch)",
            ["scenario", "pattern", "batch", "tenants", "samples/s", "vs exclusive", "overlap s"],
            aggregate,
        ),
        (
            "Interference: the steady tenant (batch 1) beside a heavy neighbour",
            ["scenario", "p99 alone ms", "p99 beside heavy ms", "ratio", "heavy samples/s"],
            crowded,
        ),
    ]


def markdown_report(results: Sequence[ScenarioResult], program: LoopProgram) -> str:
    lines = [
        f"Loop: {program.backend}, {program.layers} dense layers of width {program.width}, "
        f"{program.seconds:g} s measured per scenario; shared tenants hold "
        f"{program.memory_gib:g} GiB of GPU memory each.",
        "",
    ]
    for title, header, body in tables(results):
        lines += [f"### {title}", "", "| " + " | ".join(header) + " |"]
        lines.append("|" + "|".join("---" for _ in header) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in body]
        lines.append("")
    return "\n".join(lines)


def json_records(results: Sequence[ScenarioResult]) -> list[dict[str, Any]]:
    records = []
    for r in results:
        ratio = versus_exclusive(r, results)
        records.append(
            {
                "scenario": r.scenario.name,
                "pattern": r.scenario.pattern.value,
                "batch": r.scenario.batch or None,
                "samples_per_s": r.samples_per_s,
                "vs_exclusive": ratio if r.scenario.batch else None,
                "overlap_s": r.overlap_s,
                "tenants": [
                    {
                        "tenant": t.tenant,
                        "batch": t.batch,
                        "thread_percent": t.thread_percent,
                        "steps": t.steps,
                        "samples_per_s": t.samples_per_s,
                        "p50_ms": t.p50_ms,
                        "p99_ms": t.p99_ms,
                    }
                    for t in r.tenants
                ],
            }
        )
    return records
