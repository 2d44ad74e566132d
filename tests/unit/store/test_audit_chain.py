"""The audit chain's pure parts, and the Money column type: table-driven cases and properties."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, strategies as st
from sqlalchemy import Dialect
from sqlalchemy.dialects import sqlite

from gpuplex.store.audit_chain import (
    GENESIS_HASH,
    ChainedFields,
    as_stored,
    canonical_json,
    check_chain,
    entry_hash,
)
from gpuplex.store.columns import Money

T0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
SQLITE: Dialect = sqlite.dialect()


def chain(n: int) -> list[tuple[ChainedFields, str]]:
    links: list[tuple[ChainedFields, str]] = []
    prev = GENESIS_HASH
    for index in range(n):
        fields = ChainedFields(
            id=index * 2 + 1,  # gaps in ids are not damage
            at=T0 + timedelta(seconds=index),
            actor="alice",
            action="key.create",
            target=f"key:{index:08x}",
            tenant="acme" if index % 2 else None,
            detail={"n": index, "models": ["chat"]},
            before=None,
            after={"n": index},
            prev_hash=prev,
        )
        prev = entry_hash(fields)
        links.append((fields, prev))
    return links


def test_the_hash_is_sha256_of_the_canonical_document() -> None:
    fields = chain(1)[0][0]
    document = (
        '{"action":"key.create","actor":"alice","after":{"n":0},"at":"2025-03-01T12:00:00.123456+00:00",'
        '"before":null,"detail":{"models":["chat"],"n":0},"id":1,"prev_hash":"'
        + GENESIS_HASH
        + '",'
        '"target":"key:00000000","tenant":null}'
    )
    assert entry_hash(fields) == hashlib.sha256(document.encode()).hexdigest()


def test_the_hash_does_not_depend_on_the_time_zone_the_time_is_given_in() -> None:
    fields = chain(1)[0][0]
    elsewhere = dataclasses.replace(fields, at=fields.at.astimezone(timezone(timedelta(hours=-7))))
    assert entry_hash(elsewhere) == entry_hash(fields)


def test_an_intact_chain_verifies() -> None:
    verdict = check_chain(chain(5))
    assert (verdict.ok, verdict.entries_checked, verdict.first_bad_id) == (True, 5, None)
    assert check_chain([]).ok


@pytest.mark.parametrize(
    ("damage", "bad_index", "says"),
    [
        ("edit", 2, "was changed"),
        ("delete", 2, "entry 7 does not link to entry 3"),
        ("delete_first", 0, "does not link to the start"),
        ("swap", 1, "does not link"),
    ],
)
def test_damage_is_found_at_the_first_bad_entry(damage: str, bad_index: int, says: str) -> None:
    links = chain(5)
    if damage == "edit":
        fields, stored = links[2]
        links[2] = (dataclasses.replace(fields, detail={"n": 99}), stored)
    elif damage == "delete":
        del links[2]
    elif damage == "delete_first":
        del links[0]
    else:
        links[1], links[2] = links[2], links[1]
    verdict = check_chain(links)
    assert not verdict.ok
    assert verdict.first_bad_id == links[bad_index][0].id
    assert says in verdict.reason
    assert verdict.entries_checked == bad_index + 1


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@given(json_values)
def test_as_stored_is_what_a_json_column_gives_back(value: Any) -> None:
    stored = as_stored(value)
    assert stored == json.loads(json.dumps(value))
    assert canonical_json(as_stored(stored)) == canonical_json(stored)


#: Amounts that fit the column's MONEY_CHARS (longer ones are refused: a test below).
FITTING = Decimal("1e30")


@given(st.decimals(min_value=-FITTING, max_value=FITTING, places=6))
def test_money_round_trips_exactly(amount: Decimal) -> None:
    column = Money()
    text = column.process_bind_param(amount, SQLITE)
    back = column.process_result_value(text, SQLITE)
    assert back == amount
    assert str(back) == str(amount)


@pytest.mark.parametrize(
    ("value", "error", "says"),
    [
        (1.5, TypeError, "must be a Decimal"),
        (Decimal("NaN"), ValueError, "finite"),
        (Decimal("Infinity"), ValueError, "finite"),
        (Decimal("1" * 41), ValueError, "longer than 40"),
    ],
)
def test_money_refuses_what_is_not_an_exact_amount(
    value: Any, error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        Money().process_bind_param(value, SQLITE)
    assert Money().process_bind_param(None, SQLITE) is None
