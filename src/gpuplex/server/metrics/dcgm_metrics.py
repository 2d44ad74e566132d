"""What the DCGM scraper did, as control-plane metrics: scrapes that worked or failed, samples
written, and series left out because they belong to no tenant replica, by reason. Without these a
tenant whose pods are named unlike its workloads would silently pay nothing for measured time.

The scraper counts into one `DcgmScrapeStats`; the server's collector reports it at each scrape of
`/metrics` (zeros while no DCGM exporter is configured).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from datetime import datetime

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpuplex.server.dcgm_attribution import SKIP_REASONS, SkipReason


class DcgmScrapeStats:
    """Counters of the DCGM scraper in this process (thread-safe; they only grow)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scrapes = {"ok": 0, "failed": 0}
        self._samples = 0
        self._skipped: dict[SkipReason, int] = dict.fromkeys(SKIP_REASONS, 0)
        self._last_success: datetime | None = None

    def scraped(self, ok: bool) -> None:
        """One exporter address read (ok) or not (failed: unreachable, timed out, bad text)."""
        with self._lock:
            self._scrapes["ok" if ok else "failed"] += 1

    def stored(self, samples: int, skipped: Mapping[SkipReason, int], at: datetime) -> None:
        """One pass's samples written and readings left out."""
        with self._lock:
            self._samples += samples
            for reason, count in skipped.items():
                self._skipped[reason] += count
            self._last_success = at

    def families(self) -> Iterator[Metric]:
        with self._lock:
            scrapes = dict(self._scrapes)
            samples = self._samples
            skipped = dict(self._skipped)
            last_success = self._last_success
        scraped = CounterMetricFamily(
            "gpuplex_dcgm_scrapes",
            "Reads of a dcgm-exporter address, by outcome (failed: unreachable, timed out, "
            "not Prometheus text).",
            labels=["outcome"],
        )
        for outcome, count in scrapes.items():
            scraped.add_metric([outcome], count)
        yield scraped
        yield CounterMetricFamily(
            "gpuplex_dcgm_samples",
            "GPU samples of tenant replicas written from DCGM.",
            value=samples,
        )
        left_out = CounterMetricFamily(
            "gpuplex_dcgm_series_skipped",
            "DCGM readings (a GPU or MIG instance and pod) metered to no tenant, by reason: "
            "no_node (no Hostname label), no_pod (the device is held by no pod), "
            "not_tenant_namespace, unknown_workload (no workload name begins the pod's name).",
            labels=["reason"],
        )
        for reason, count in skipped.items():
            left_out.add_metric([reason], count)
        yield left_out
        yield GaugeMetricFamily(
            "gpuplex_dcgm_last_stored_timestamp_seconds",
            "When samples read from DCGM were last stored (Unix seconds; 0: never).",
            value=last_success.timestamp() if last_success is not None else 0.0,
        )


#: The server's scraper counts here; the server's /metrics reports it.
DCGM_STATS = DcgmScrapeStats()
