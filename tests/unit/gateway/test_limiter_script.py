"""The Redis limiter's Lua script takes the names of the limit kinds from the Python side: renaming a
kind cannot leave the script comparing against the old name (it would then charge tokens as
requests, or treat a concurrency limit as a window, without any error)."""

from __future__ import annotations

import re

from gpuplex.core.serve.limits import LimitKind
from gpuplex.gateway.limiter_redis import SCRIPT_KIND_NAMES, lua_source, lua_template


def code_lines(script: str) -> list[str]:
    """The script without its comments."""
    return [line.split("--", 1)[0] for line in script.splitlines()]


def test_the_script_names_no_kind_itself() -> None:
    code = "\n".join(code_lines(lua_template().template))
    for kind in LimitKind:
        assert kind.value not in code, f"limiter_redis.lua spells out {kind.value!r}"


def test_every_placeholder_is_filled_and_every_name_is_used() -> None:
    assert set(lua_template().get_identifiers()) == set(SCRIPT_KIND_NAMES)
    assert lua_template().is_valid()


def test_the_loaded_script_compares_with_the_kinds_names() -> None:
    assigned = dict(re.findall(r"^local (\w+) = '([^']*)'$", lua_source(), flags=re.MULTILINE))
    assert assigned == {"CONCURRENT": LimitKind.CONCURRENT.value, "TOKENS": LimitKind.TOKENS.value}
    assert "$" not in lua_source()
