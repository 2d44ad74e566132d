"""`host run --follow-store`: the host takes each newer revision from the store as it was planned,
refuses one it cannot run (the one before stays desired), and rides out a store that is away."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuplex.clock import SYSTEM_CLOCK
from gpuplex.errors import StoreError
from gpuplex.host.follow import RevisionFollower
from gpuplex.host.state import StateDir
from gpuplex.revision import AppliedRevisions
from gpuplex.server.context import ServerContext
from gpuplex.server.spec_apply import apply
from gpuplex.settings import HostSettings
from gpuplex.store.db import open_store
from gpuplex.store.spec_revisions import SpecRevisions

SPEC = """
fleet:
  nodes: [{{name: {node}, gpus: [{{model: H100-80GB, count: 2}}]}}]
tenants:
  - name: acme
    isolation: dedicated
    workloads:
      - name: job
        gpu: {{count: 1}}
        replicas: {replicas}
        command: ["sleep", "600"]
"""


@pytest.fixture
def setup() -> Iterator[tuple[ServerContext, RevisionFollower, StateDir]]:
    # under /tmp, open to all: tenants run as their own users and must be able to enter it
    with tempfile.TemporaryDirectory(prefix="gpuplex-follow-") as scratch:
        root = Path(scratch)
        root.chmod(0o755)
        engine = open_store(f"sqlite:///{root / 'gpuplex.db'}")
        ctx = ServerContext.open(engine, SYSTEM_CLOCK)
        settings = HostSettings(state_dir=root / "host", node="box", driver="sim")
        dirs = StateDir(settings.state_dir)
        dirs.create()
        yield ctx, RevisionFollower(AppliedRevisions(SpecRevisions(engine)), settings), dirs
        engine.dispose()


def events(dirs: StateDir) -> list[dict[str, str]]:
    path = dirs.root / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_each_newer_revision_is_taken_once_with_its_stored_plan(
    setup: tuple[ServerContext, RevisionFollower, StateDir],
) -> None:
    ctx, follower, dirs = setup
    assert follower.take_newest() is None  # nothing applied yet
    first, plan = apply(ctx.spec_history, SPEC.format(node="box", replicas=1), 0, actor="test")
    desired = follower.take_newest()
    assert desired is not None
    assert desired.revision == first.revision
    assert desired.plan == plan
    assert dirs.read_desired() == desired  # what `host status` and a restart read
    assert follower.take_newest() is None  # the same revision is not taken twice
    second, _ = apply(
        ctx.spec_history, SPEC.format(node="box", replicas=2), first.revision, actor="test"
    )
    taken = follower.take_newest()
    assert taken is not None
    assert taken.revision == second.revision
    assert len(taken.host.workloads) == 2


def test_a_revision_this_host_cannot_run_is_refused_and_the_last_one_stays(
    setup: tuple[ServerContext, RevisionFollower, StateDir],
) -> None:
    ctx, follower, dirs = setup
    first, _ = apply(ctx.spec_history, SPEC.format(node="box", replicas=1), 0, actor="test")
    assert follower.take_newest() is not None
    apply(ctx.spec_history, SPEC.format(node="elsewhere", replicas=1), first.revision, actor="test")
    assert follower.take_newest() is None
    kept = dirs.read_desired()
    assert kept is not None
    assert kept.revision == first.revision
    refused = [e for e in events(dirs) if e["kind"] == "revision_refused"]
    assert len(refused) == 1
    assert "no node 'box'" in refused[0]["message"]


def test_a_store_that_is_away_is_asked_again_on_the_next_pass(
    setup: tuple[ServerContext, RevisionFollower, StateDir], monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx, follower, _ = setup
    apply(ctx.spec_history, SPEC.format(node="box", replicas=1), 0, actor="test")

    def away(self: AppliedRevisions) -> None:
        raise StoreError("store sqlite:///gpuplex.db: unreachable")

    with monkeypatch.context() as patched:
        patched.setattr(AppliedRevisions, "get", away)
        assert follower.take_newest() is None
    assert follower.take_newest() is not None  # the revision was not lost while it was away
