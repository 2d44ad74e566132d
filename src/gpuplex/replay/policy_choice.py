"""Which placement policy a fleet should run where pods come and go, chosen from a replay of the
fleet's own pods. Pure.

No one policy leads on every workload (docs/benchmarks.md, "Where each policy leads"): on openb's
default pod list at 50x `best-fit` and `fgd` lead the tail of the queueing delay and `fgd-balanced`
trails; at 100x, and on gpushare40, `fgd-balanced` leads. What decides is the fleet's mix of pod
shapes and how busy it is, and the openb replays give no simple rule on either. So gpuplex chooses
per fleet: `gpuplex simulate --arrivals` replays the fleet's recorded pods under each policy, and
`choose_policy` reads the runs by these rules, in order:

1. the fewest pods that never started (a pod starved for good is worse than any delay);
2. no pod kept waiting over LONGEST_LEVEL times as long as the policy with the shortest longest
   wait keeps one: a few large pods starved for days hide under the p99 (on openb default at 50x
   FGD's longest wait was 3.4 times best-fit's on one seed, with a lower p99);
3. the lowest p99 queueing delay; a policy within P99_LEVEL of the lowest counts as level with it
   (in the openb replays one seed moves a policy's p99 against best-fit's by more than that);
4. among those level, the most GPUs allocated on average, within GPUS_LEVEL counting as level;
5. then the first in the order given (`gpuplex simulate` puts best-fit first: it needs no typical
   pods to learn, and through kube-scheduler it places pod for pod as the simulator does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuplex.replay.jobs import JobsReplay

#: A longest wait over this many times the shortest one rules a policy out (rule 2).
LONGEST_LEVEL = 2.0
#: p99 delays within this fraction of the lowest are level (rule 3).
P99_LEVEL = 0.05
#: Mean GPUs allocated within this fraction of the most are level (rule 4).
GPUS_LEVEL = 0.01


@dataclass(frozen=True, slots=True)
class PolicyOutcome:
    """What one policy did with the fleet's pods in a replay."""

    policy: str
    never_started: int
    p99_delay_s: float
    longest_delay_s: float
    mean_gpus: float


@dataclass(frozen=True, slots=True)
class PolicyChoice:
    policy: str
    #: the rule that decided, in words ("lowest p99 delay", ...)
    reason: str
    outcomes: tuple[PolicyOutcome, ...]


def outcome_of(result: JobsReplay) -> PolicyOutcome:
    """The figures `choose_policy` reads, from one replay."""
    delays = [d for r in result.records if (d := r.delay_s) is not None]
    totals = [sum(s.allocated.values()) for s in result.samples]
    return PolicyOutcome(
        policy=result.policy,
        never_started=sum(1 for r in result.records if r.start_s is None),
        p99_delay_s=float(np.percentile(delays, 99)) if delays else 0.0,
        longest_delay_s=max(delays, default=0.0),
        mean_gpus=float(np.mean(totals)) if totals else 0.0,
    )


def choose_policy(outcomes: Sequence[PolicyOutcome]) -> PolicyChoice:
    """The policy the rules of the module docstring pick; ValueError for none or a policy twice."""
    if not outcomes:
        raise ValueError("no replays to choose a policy from")
    names = [o.policy for o in outcomes]
    if len(set(names)) != len(names):
        raise ValueError(f"each policy once, got {names}")
    fewest = min(o.never_started for o in outcomes)
    left = [o for o in outcomes if o.never_started == fewest]
    reasons = ["fewest pods never started"] if len(left) < len(outcomes) else []
    shortest = min(o.longest_delay_s for o in left)
    unstarved = [o for o in left if o.longest_delay_s <= shortest * LONGEST_LEVEL]
    if len(unstarved) < len(left):
        reasons.append(f"no pod waiting over {LONGEST_LEVEL:g}x the shortest longest wait")
    lowest = min(o.p99_delay_s for o in unstarved)
    level = [o for o in unstarved if o.p99_delay_s <= lowest * (1 + P99_LEVEL)]
    if len(level) < len(unstarved):
        reasons.append("lowest p99 delay")
    most = max(o.mean_gpus for o in level)
    busiest = [o for o in level if o.mean_gpus >= most * (1 - GPUS_LEVEL)]
    if len(busiest) < len(level):
        reasons.append(f"most GPUs allocated among those within {P99_LEVEL:.0%} of the lowest p99")
    if len(busiest) > 1:
        reasons.append("first of those level on both")
    if len(outcomes) == 1:
        reasons = ["the only policy replayed"]
    return PolicyChoice(busiest[0].policy, ", then ".join(reasons), tuple(outcomes))
