"""`bench/planner.py --against REF`: this tree's planner against REF's, in the same run.

REF is checked out in a temporary `git worktree`; each round runs this tree's
`bench/planner.py --json` (one instrument, so a flag added to it measures REF too) with each tree's
src/ first on the path, back to back (which goes first alternates), each in a process of its own,
on the same seeded input. Per row (make_plan binpack, make_plan for
Kubernetes) it prints the best time of each tree over the rounds, the median of the rounds'
paired after/before ratios (the machine's drift between rounds cancels out of each pair), the
GPUs each tree's plan used, and whether after is within the tolerance of before.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.gateway_procs import (
    checkout,
    describe_ref,
    describe_working_tree,
    script_json_with_src,
)

ROOT = Path(__file__).resolve().parent.parent
#: The rows compared: the planner's own runs in bench/planner.py's JSON, by name.
COMPARED = ("make_plan, binpack", "make_plan, for Kubernetes")
TOLERANCE = 0.05  # after may be this much slower than before and still "within"


@dataclass
class Row:
    name: str
    before_s: list[float] = field(default_factory=list)
    after_s: list[float] = field(default_factory=list)
    gpus_before: set[int] = field(default_factory=set)
    gpus_after: set[int] = field(default_factory=set)

    def ratio(self) -> float:
        """Median of the paired rounds' after / before times."""
        return statistics.median(a / b for a, b in zip(self.after_s, self.before_s, strict=True))


def planner_json(tree: Path, options: Sequence[str]) -> dict[str, Any]:
    """This tree's bench/planner.py --json with `tree`'s gpuplex, in a process of its own."""
    result = script_json_with_src(tree, ROOT / "bench" / "planner.py", list(options))
    assert isinstance(result, dict)
    return result


def compare(ref: str, rounds: int, options: Sequence[str], console: Console) -> bool:
    """Runs the rounds, prints the table; True when every row is within the tolerance."""
    rows = {name: Row(name) for name in COMPARED}
    console.print(f"before: {describe_ref(ref)}")
    console.print(f"after:  {describe_working_tree(ref)}")
    with checkout(ref) as before_tree:
        for number in range(rounds):
            order = [("before", before_tree), ("after", ROOT)]
            if number % 2:
                order.reverse()
            for side, tree in order:
                console.print(f"round {number + 1}/{rounds}: {side}", highlight=False)
                for run in planner_json(tree, options)["runs"]:
                    row = rows.get(run["placer"])
                    if row is None:
                        continue
                    (row.before_s if side == "before" else row.after_s).append(run["best_s"])
                    gpus = row.gpus_before if side == "before" else row.gpus_after
                    gpus.add(run["gpus_used"])
    table = Table(title=f"planner: this tree against {ref}, {rounds} rounds")
    for column in (
        "row",
        "before best s",
        "after best s",
        "after ÷ before",
        "GPUs used",
        "verdict",
    ):
        table.add_column(column, justify="left" if column in ("row", "verdict") else "right")
    within = True
    for row in rows.values():
        if not row.before_s:  # a row this run skipped (--no-kubernetes)
            continue
        ratio = row.ratio()
        ok = ratio <= 1 + TOLERANCE
        within = within and ok
        used = f"{sorted(row.gpus_before)} → {sorted(row.gpus_after)}"
        table.add_row(
            row.name,
            f"{min(row.before_s):.3f}",
            f"{min(row.after_s):.3f}",
            f"{ratio:.3f}",
            used,
            f"within {TOLERANCE:.0%}" if ok else f"SLOWER than {TOLERANCE:.0%}",
        )
    console.print(table)
    console.print(
        "after ÷ before: the median over rounds of each round's after/before best time "
        "(before and after ran back to back in each round)"
    )
    return within
