"""gpuplex's choice of a placement policy from replays of a fleet's own pods: starved pods first,
then the p99 delay (5 % level), then GPUs allocated (1 % level), then the order given."""

from __future__ import annotations

import pytest

from gpuplex.replay.jobs import JobsReplay, PodRecord, Sample
from gpuplex.replay.policy_choice import (
    LONGEST_LEVEL,
    P99_LEVEL,
    PolicyOutcome,
    choose_policy,
    outcome_of,
)


def run(
    policy: str, never: int = 0, p99: float = 100.0, gpus: float = 50.0, longest: float = 0.0
) -> PolicyOutcome:
    return PolicyOutcome(policy, never, p99, longest_delay_s=longest or 10 * p99, mean_gpus=gpus)


def test_the_lowest_p99_wins_when_it_is_clearly_lower() -> None:
    choice = choose_policy([run("best-fit", p99=1000), run("fgd-balanced", p99=900, gpus=40)])
    assert choice.policy == "fgd-balanced"
    assert choice.reason == "lowest p99 delay"


def test_a_policy_that_starves_pods_loses_whatever_its_p99() -> None:
    choice = choose_policy([run("best-fit", never=2, p99=10), run("fgd", p99=5000)])
    assert choice.policy == "fgd"
    assert choice.reason.startswith("fewest pods never started")


def test_a_policy_that_keeps_one_pod_waiting_over_twice_as_long_loses_whatever_its_p99() -> None:
    outcomes = [
        run("best-fit", p99=1000, longest=100_000),
        run("fgd", p99=900, longest=LONGEST_LEVEL * 100_000 + 1),
    ]
    choice = choose_policy(outcomes)
    assert choice.policy == "best-fit"
    assert choice.reason.startswith("no pod waiting over 2x")
    outcomes[1] = run("fgd", p99=900, longest=LONGEST_LEVEL * 100_000)  # at the bound: level
    assert choose_policy(outcomes).policy == "fgd"


def test_within_the_p99_level_the_most_gpus_allocated_wins() -> None:
    nearly = 1000 * (1 + P99_LEVEL) - 1
    choice = choose_policy([run("best-fit", p99=1000, gpus=80), run("fgd", p99=nearly, gpus=85)])
    assert choice.policy == "fgd"
    assert "most GPUs allocated" in choice.reason


def test_just_outside_the_p99_level_the_gpus_do_not_count() -> None:
    beyond = 1000 * (1 + P99_LEVEL) + 1
    choice = choose_policy([run("best-fit", p99=1000, gpus=80), run("fgd", p99=beyond, gpus=99)])
    assert choice.policy == "best-fit"


def test_level_on_both_the_first_given_is_chosen() -> None:
    outcomes = [run("best-fit", p99=1000, gpus=80.0), run("fgd", p99=990, gpus=80.4)]
    assert choose_policy(outcomes).policy == "best-fit"
    assert choose_policy(outcomes[::-1]).policy == "fgd"
    assert choose_policy(outcomes).reason == "first of those level on both"


def test_one_policy_is_its_own_choice_and_none_or_twice_is_refused() -> None:
    assert choose_policy([run("fgd")]).reason == "the only policy replayed"
    with pytest.raises(ValueError, match="no replays"):
        choose_policy([])
    with pytest.raises(ValueError, match="each policy once"):
        choose_policy([run("fgd"), run("fgd")])


def test_outcome_reads_the_replay_s_records_and_samples() -> None:
    records = [PodRecord(f"p{i}", "t", 1.0, arrival_s=0.0, start_s=float(i)) for i in range(101)]
    records.append(PodRecord("starved", "t", 8.0, arrival_s=0.0))
    samples = [Sample(0.0, {"a": 2.0, "b": 1.0}, {}), Sample(10.0, {"a": 5.0}, {})]
    replay = JobsReplay("queues", "fgd", 16.0, records, samples)
    assert outcome_of(replay) == PolicyOutcome("fgd", 1, 99.0, 100.0, 4.0)
