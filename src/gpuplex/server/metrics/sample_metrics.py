"""GPU samples refused on their way to the store, as a control-plane metric: a sampler that puts
memory on the wrong GPU shows here, rather than as a GPU map that reads above 100 %.

The intake (server/sample_intake.py) counts into one `SampleIntakeStats`; the server's collector
reports it at each scrape of `/metrics`."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric

#: Why a sample was refused: `above_capacity`, the samples of its GPU at its moment add up to more
#: than the GPU's memory.
REFUSE_REASONS = ("above_capacity",)


class SampleIntakeStats:
    """Counters of refused samples in this process (thread-safe; they only grow)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._refused = dict.fromkeys(REFUSE_REASONS, 0)

    def refused(self, reason: str, count: int) -> None:
        with self._lock:
            self._refused[reason] += count

    def families(self) -> Iterator[Metric]:
        with self._lock:
            refused = dict(self._refused)
        family = CounterMetricFamily(
            "gpuplex_gpu_samples_refused",
            "GPU samples not stored, by reason: above_capacity (the samples of one GPU at one "
            "moment add up to more than its memory).",
            labels=["reason"],
        )
        for reason, count in refused.items():
            family.add_metric([reason], count)
        yield family


#: The samplers of this process count here; the server's /metrics reports it.
SAMPLE_STATS = SampleIntakeStats()
