"""Read a plan file from disk: the JSON `gpuplex plan FILE -o json` writes, read back as a `Plan`
for `--current` (`gpuplex plan`, `gpuplex explain`, `gpuplex kube`). A file that cannot be read or
is not a plan is a PlanFileError saying where the first problem is and how to write a good one."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from gpuplex.core.plan import Plan
from gpuplex.errors import PlanFileError


def load_plan_file(path: Path) -> Plan:
    try:
        return Plan.model_validate_json(path.read_bytes())
    except OSError as error:
        raise PlanFileError(f"{path}: cannot read the plan: {error.strerror}") from None
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "(document)"
        raise PlanFileError(
            f"{path}: not a gpuplex plan ({error.error_count()} problem(s); first at {where}: "
            f"{first['msg']}); write one with `gpuplex plan FILE -o json`"
        ) from None
