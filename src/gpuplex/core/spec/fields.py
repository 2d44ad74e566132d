"""Field types shared by the spec models: DNS-1123 names, the strict base model."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _check_dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 label (it becomes a Kubernetes namespace or object name): "
            "use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
        )
    return value


#: A name that can become a Kubernetes namespace or object name.
DnsLabel = Annotated[str, AfterValidator(_check_dns_label)]


def _refuse_bool(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("expected an amount, got true/false")
    return value


#: Money as Decimal, never a float's rounding, and never `true`. Numbers in the spec are strict
#: (StrictInt, StrictFloat): YAML's true/false would otherwise pass as 1 and 0.
Money = Annotated[Decimal, BeforeValidator(_refuse_bool)]


class SpecModel(BaseModel):
    """Base of every gpuplex.yaml model: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False, allow_inf_nan=False)
