"""What the hosts report of their output, in the store on SQLite and PostgreSQL: a job's log tail
replaces its previous one and comes back line for line (an empty line, a line of any characters,
truncation and refusals per stream); the host events come back newest first, per tenant if
asked, the newest KEPT_PER_NODE of each node kept and another node's untouched."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from gpuplex.store.host_events import KIND_CHARS, HostEvent, HostEvents
from gpuplex.store.job_logs import JobLogs, JobLogTail, StreamTail

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)


def test_a_job_log_tail_replaces_the_previous_one_line_for_line(engine: Engine) -> None:
    logs = JobLogs(engine)
    assert logs.of("j00000001") is None
    first = JobLogTail("j00000001", "n1", StreamTail(("step 1",)), StreamTail())
    logs.write([first], now=T0)
    odd = ("", "tab\there", "é \u2028 \x1b[31m", " trailing ")
    second = JobLogTail(
        "j00000001",
        "n2",
        StreamTail(odd, truncated=True),
        StreamTail(refused="x.stderr.log is a link: not read"),
    )
    logs.write([second, JobLogTail("j00000002", "n1")], now=T0 + timedelta(seconds=2))
    got = logs.of("j00000001")
    assert got is not None
    assert (got.node, got.stdout, got.stderr) == ("n2", second.stdout, second.stderr)
    assert got.reported_at == T0 + timedelta(seconds=2)
    other = logs.of("j00000002")
    assert other is not None
    assert (other.stdout, other.stderr) == (StreamTail(), StreamTail())


def event(node: str, minute: int, tenant: str | None = None, kind: str = "started") -> HostEvent:
    target = f"{tenant}/chat#0" if tenant else "GPU 0"
    return HostEvent(node, T0 + timedelta(minutes=minute), kind, target, tenant, f"{node} {minute}")


def test_host_events_come_back_newest_first_and_per_tenant(engine: Engine) -> None:
    events = HostEvents(engine)
    assert events.newest_at("n1") is None
    assert events.recent(10) == []
    events.append("n1", [event("n1", 1, "acme"), event("n1", 3), event("n1", 5, "bravo")])
    events.append("n2", [event("n2", 4, "acme", kind="k" * 200)])
    assert [e.message for e in events.recent(10)] == ["n1 5", "n2 4", "n1 3", "n1 1"]
    assert [e.message for e in events.recent(2)] == ["n1 5", "n2 4"]
    assert [e.message for e in events.recent(10, tenant="acme")] == ["n2 4", "n1 1"]
    assert events.recent(10, tenant="nobody") == []
    assert events.recent(1, tenant="acme")[0].kind == "k" * KIND_CHARS
    assert events.newest_at("n1") == T0 + timedelta(minutes=5)
    assert events.newest_at("n2") == T0 + timedelta(minutes=4)


def test_only_the_newest_events_of_each_node_are_kept(engine: Engine) -> None:
    events = HostEvents(engine, kept_per_node=3)
    events.append("n2", [event("n2", 0)])
    events.append("n1", [event("n1", m) for m in range(1, 3)])
    events.append("n1", [event("n1", m) for m in range(3, 6)])
    assert [e.message for e in events.recent(10)] == ["n1 5", "n1 4", "n1 3", "n2 0"]
    events.append("n1", [event("n1", 6)])
    assert [e.message for e in events.recent(10)] == ["n1 6", "n1 5", "n1 4", "n2 0"]
