"""The base of every request body the control plane reads: a field it does not know is refused,
naming the field, the closest known one and the fields there are. Ignoring it would be worse than
an error: `{"modles": ["chat"], "requests_per_minute": 5}` would make a key for every model with
no limit, `{"expires_in": "1d"}` one that never expires. (The YAML spec refuses unknown keys too.)"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

from gpuplex.core.spec.parse import did_you_mean

#: The validation error type of an unknown field (`problems.on_validation` names the field).
UNKNOWN_FIELD = "unknown_field"


class RequestModel(BaseModel):
    # forbid: the published schema says so (additionalProperties: false), and it backs the check
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown_fields(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data  # pydantic says what is wrong with a body that is not an object
        known = {field.alias or name for name, field in cls.model_fields.items()}
        for name in data:
            if name not in known:
                raise PydanticCustomError(
                    UNKNOWN_FIELD,
                    "not a field of this request{hint}; its fields are: {known}",
                    {
                        "field": str(name),
                        "hint": did_you_mean(str(name), known),
                        "known": ", ".join(sorted(known)),
                    },
                )
        return data
