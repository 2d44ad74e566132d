"""Which nodes the job runner has not heard from since it took the lead: those whose host has not
reported since (or ever), for at most FIRST_REPORT_WAIT_S; none when it does not lead."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuplex.server.job_runner import FIRST_REPORT_WAIT_S, unheard_nodes
from gpuplex.store.job_reports import HostReport

LEAD = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def heard(node: str, seconds_after_lead: float) -> HostReport:
    at = LEAD + timedelta(seconds=seconds_after_lead)
    return HostReport(node, started_at=LEAD - timedelta(hours=1), reported_at=at)


def test_a_node_counts_once_its_host_reported_after_the_runner_took_the_lead() -> None:
    hosts = {"a": heard("a", 1.0), "b": heard("b", -1.0)}
    now = LEAD + timedelta(seconds=5)
    assert unheard_nodes(["a", "b", "c"], hosts, LEAD, now) == {"b", "c"}


def test_the_wait_ends_and_a_runner_that_does_not_lead_waits_for_nothing() -> None:
    hosts = {"b": heard("b", -1.0)}
    late = LEAD + timedelta(seconds=FIRST_REPORT_WAIT_S + 1)
    assert unheard_nodes(["b"], hosts, LEAD, late) == set()
    assert unheard_nodes(["b"], hosts, None, LEAD) == set()
