"""Which Unix user a replica runs as under a root gpuplex (core/apply/users.py)."""

from __future__ import annotations

from gpuplex.core.apply.users import (
    MAX_NAME_CHARS,
    is_default_user,
    replica_user,
    root_warnings,
    runs_as_root,
)
from gpuplex.core.plan.model import Mode
from gpuplex.core.spec import GpuplexSpec
from tests.unit.core.apply.factories import binding, wanted

INSTANCE = "3fa9c2d1e0ab"


def test_each_tenant_gets_a_user_of_its_own_named_after_the_instance() -> None:
    acme = replica_user(wanted("w", binding(Mode.DEDICATED, 0), tenant="acme"), INSTANCE)
    globex = replica_user(wanted("w", binding(Mode.DEDICATED, 1), tenant="globex"), INSTANCE)
    assert (acme, globex) == ("gpx-3fa9c2-acme", "gpx-3fa9c2-globex")
    assert is_default_user(acme, INSTANCE)
    assert not is_default_user(acme, "000000000000")  # another instance's users are not ours


def test_mps_clients_of_one_gpu_share_one_user_because_mps_serves_one_user_at_a_time() -> None:
    share = binding(Mode.MPS, 2, thread_percent=20)
    one = replica_user(wanted("w", share, tenant="acme"), INSTANCE)
    two = replica_user(wanted("w", share, tenant="globex"), INSTANCE)
    other_gpu = replica_user(wanted("w", binding(Mode.MPS, 3), tenant="acme"), INSTANCE)
    assert one == two == "gpx-3fa9c2-mps2"
    assert other_gpu == "gpx-3fa9c2-mps3"


def test_a_long_tenant_name_is_shortened_and_stays_unique() -> None:
    names = {
        replica_user(wanted("w", binding(Mode.DEDICATED, 0), tenant=tenant), INSTANCE)
        for tenant in ("a" * 40 + "x", "a" * 40 + "y")
    }
    assert len(names) == 2
    assert all(len(name) <= MAX_NAME_CHARS for name in names)


def test_the_spec_user_wins_and_root_is_only_an_explicit_opt_in() -> None:
    own = wanted("w", binding(Mode.DEDICATED, 0), unix_user="svc-acme")
    rooted = wanted("w", binding(Mode.DEDICATED, 0), unix_user="root")
    assert replica_user(own, INSTANCE) == "svc-acme"
    assert not is_default_user("svc-acme", INSTANCE)
    assert runs_as_root(rooted)
    assert not runs_as_root(wanted("w", binding(Mode.DEDICATED, 0)))


def test_root_tenants_are_warned_about() -> None:
    document = {
        "version": 1,
        "fleet": {"nodes": [{"name": "n", "gpus": [{"model": "H100-80GB", "count": 1}]}]},
        "tenants": [{"name": "rooted", "unix_user": "root"}, {"name": "fine"}],
    }
    warnings = root_warnings(GpuplexSpec.model_validate(document))
    assert len(warnings) == 1
    assert warnings[0].startswith("tenant rooted runs as root")
