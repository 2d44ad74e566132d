"""A pytest plugin for test_xdist_groups.py: after collection, prints each test's node id and the
xdist groups its markers put it in, one `GROUP <nodeid> <groups>` line each."""

from __future__ import annotations

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        names = sorted({str(mark.args[0]) for mark in item.iter_markers("xdist_group")})
        print(f"GROUP {item.nodeid} {','.join(names) or '-'}")  # noqa: T201 - read by the test
