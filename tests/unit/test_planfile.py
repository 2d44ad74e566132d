"""The plan file reader: a plan written by `gpuplex plan -o json` reads back equal; a file that is not
a plan, or cannot be read, is a PlanFileError that says where and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplex.core.plan import make_plan
from gpuplex.errors import PlanFileError
from gpuplex.planfile import load_plan_file
from gpuplex.specfile import load_spec_file

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "saas-single-server.yaml"


def test_a_written_plan_reads_back_equal(tmp_path: Path) -> None:
    plan = make_plan(load_spec_file(EXAMPLE))
    written = tmp_path / "plan.json"
    written.write_text(plan.model_dump_json())
    assert load_plan_file(written) == plan


def test_a_file_that_is_not_a_plan_names_the_first_problem(tmp_path: Path) -> None:
    written = tmp_path / "plan.json"
    written.write_text("{}")
    with pytest.raises(PlanFileError, match=r"plan\.json: not a gpuplex plan .* first at policy"):
        load_plan_file(written)


def test_a_missing_file_says_it_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(PlanFileError, match="cannot read the plan"):
        load_plan_file(tmp_path / "gone.json")
