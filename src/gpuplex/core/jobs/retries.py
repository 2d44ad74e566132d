"""When a failed job is tried again. Pure.

A job that failed (its process exited non-zero, was killed, or could not start) is queued again
as a new attempt while it has retries left (`JobSpec.backoff_limit`, as Kubernetes Jobs'
backoffLimit), after a wait that starts at `backoff_initial_s` and doubles for each failure after
the first, up to `backoff_max_s` (Kubernetes' own: 10 s, 20 s, 40 s ... at most six minutes).
Preemption, a stop of gpuplex itself and a lost process are not the job's failures: they never
count against its retries.
"""

from __future__ import annotations

from gpuplex.core.spec.jobs import JobSpec

#: Beyond this many doublings every wait is the cap (and 2**n stays small).
_MAX_DOUBLINGS = 60


def may_retry(job: JobSpec, failures: int) -> bool:
    """May a job that has failed `failures` times before this failure run again?"""
    return failures < job.backoff_limit


def retry_delay_s(job: JobSpec, retry: int) -> float:
    """The wait before retry number `retry` (1 for the first)."""
    doublings = min(_MAX_DOUBLINGS, max(0, retry - 1))
    return float(min(job.backoff_max_s, job.backoff_initial_s * 2**doublings))


def not_before_words(not_before_s: float, now_s: float) -> str:
    """`12:00:10 UTC, in 8 s` for a moment `not_before_s` (seconds since the epoch) after
    `now_s`."""
    day_s = int(not_before_s) % 86_400  # the epoch starts a UTC day, and no UTC day has a leap
    at = f"{day_s // 3600:02d}:{day_s // 60 % 60:02d}:{day_s % 60:02d} UTC"
    return f"{at}, in {max(0.0, not_before_s - now_s):.0f} s"
