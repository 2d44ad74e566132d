"""Retention of raw GPU samples: once their windows are rolled up, samples older than the retention
(ServerSettings.sample_retention_days, 7 days by default) are deleted, so `gpu_samples` stops
growing with the fleet's age. Roll-ups keep what they measured.

Never pruned: the samples of a window not yet rolled up, nor of one that catch-up rolls up again
(those that ended within LATE_S of the newest roll-up), nor the `max_gap_s` before the first window
kept, which reach into it. The store records the first window kept; a window before it that is
rolled up again (`POST /meter/rollup`) keeps its measured roll-ups rather than being recomputed
from samples that are gone. Its allocation and gateway lines are recomputed as before."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from gpuplex.core.meter import DEFAULT_MAX_GAP_S
from gpuplex.server.context import ServerContext
from gpuplex.server.metering import LATE_S

log = logging.getLogger("gpuplex.server.retention")


def prune_samples(ctx: ServerContext, now: datetime, retention_s: float) -> int:
    """Delete the samples no window still needs; how many went (0 when nothing is due)."""
    rolled_up_to = ctx.rollups.last_window_end("allocation")
    if rolled_up_to is None:
        return 0  # nothing rolled up yet: every sample is still needed
    keep_from = min(now - timedelta(seconds=retention_s), rolled_up_to - timedelta(seconds=LATE_S))
    first_kept_window = ctx.metering.window_start(keep_from)
    already = ctx.samples.pruned_before()
    if already is not None and first_kept_window <= already:
        return 0
    taken_before = first_kept_window - timedelta(seconds=DEFAULT_MAX_GAP_S)
    deleted = ctx.samples.prune(first_kept_window, taken_before)
    if deleted:
        log.info(
            "deleted %d GPU samples taken before %s (rolled up; retention %.1f days)",
            deleted,
            taken_before.isoformat(),
            retention_s / 86400,
        )
    return deleted
