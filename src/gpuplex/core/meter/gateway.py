"""Gateway metering: requests and tokens per tenant and served model, from the gateway's usage
records. A record belongs to the window its request started in ([start, end)), so adjacent windows
never count a request twice. Every request counts in `requests`, whatever its status; those answered
with status 400 or above also count in `failed_requests`. Tokens count as the record reports them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from decimal import Decimal

from gpuplex.core.meter.model import (
    COMPLETION_TOKENS,
    FAILED_REQUESTS,
    PROMPT_TOKENS,
    REQUESTS,
    MeterLine,
    MeterWindow,
    lines_from_totals,
    require_utc,
)
from gpuplex.core.serve.usage import UsageRecord

_FAILED_STATUS = 400


def gateway_lines(records: Sequence[UsageRecord], window: MeterWindow) -> list[MeterLine]:
    """Per tenant and model (the name the tenant asked for): requests, failed_requests,
    prompt_tokens, completion_tokens of the requests that started inside the window."""
    totals: dict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
    for record in records:
        if not window.contains(require_utc(record.started_at, "usage record started_at")):
            continue
        tenant, model = record.tenant, record.model
        totals[tenant, REQUESTS, model] += 1
        if record.status >= _FAILED_STATUS:
            totals[tenant, FAILED_REQUESTS, model] += 1
        totals[tenant, PROMPT_TOKENS, model] += record.prompt_tokens
        totals[tenant, COMPLETION_TOKENS, model] += record.completion_tokens
    return lines_from_totals(totals, "gateway")
