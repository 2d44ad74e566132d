"""Retrying, in one place: whether a retry can help an error (its code says so), and how a
background job of a server (roll-ups, DCGM scrapes, the usage spool's mover, the gateway's key
refresh, GPU sampling) survives a failed pass: the failure is logged, the next pass tries again,
and the server keeps serving meanwhile.

The log says which kind of failure it was: an error a retry can help (the store or Redis
unreachable, the cluster busy) is one warning line, since it is expected to pass; another gpuplex
error is logged as an error with its message, which says what to change; anything else is a bug
and is logged with its traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from gpuplex.errors import GpuplexError

T = TypeVar("T")


def is_retryable(error: BaseException) -> bool:
    """Whether the same call, unchanged, can succeed later: true only for a gpuplex error whose
    code says so. Anything else is a bug or a refusal that a retry would only repeat."""
    return isinstance(error, GpuplexError) and error.code.retryable


def run_pass(
    step: Callable[[], T], *, job: str, retry_in_s: float, log: logging.Logger
) -> T | None:
    """Run one pass of the background `job` and return what it returned, or None if it failed.
    A failure never propagates (the thread that runs the job must not die); it is logged as above,
    naming the job and when the next pass comes."""
    try:
        return step()
    except GpuplexError as error:
        if error.code.retryable:
            log.warning("%s failed; retrying in %g s: %s", job, retry_in_s, error.message)
        else:
            log.error(
                "%s failed (%s); trying again in %g s: %s",
                job,
                error.code,
                retry_in_s,
                error.message,
            )
    except Exception:
        log.exception("%s failed unexpectedly; trying again in %g s", job, retry_in_s)
    return None
