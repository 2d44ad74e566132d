"""The one error tree. Every error carries a stable code; one place maps codes to HTTP status.

    GpuplexError
    ├── SpecError            the spec file is unreadable or invalid (a list of problems)
    ├── PlanFileError        a plan JSON given with --current is unreadable or invalid
    ├── NotFoundError        a named thing (workload, tenant, node) does not exist
    ├── HostStateError       a file in the host runtime's state directory is unreadable
    ├── HostBusyError        another gpuplex process holds this host's supervisor lock
    ├── HostActionError      starting, stopping or reshaping something on the host failed
    ├── GpuDriverError       the GPU driver (NVML) is missing, or a call to it failed
    ├── CgroupUnavailable    the host cannot give a replica its own cgroup with its limits
    ├── StoreError           the store (SQLite or PostgreSQL) is unreachable, invalid or failed
    │   └── StoreValueRefused    the store refused a value given to it (a NUL character in text)
    ├── StaleRevisionError   a spec was applied on top of a revision that is no longer current
    ├── LimiterUnavailable   the shared rate-limit state (Redis) is unreachable or failed
    ├── GatewayError         the gateway cannot start as asked (as root, a setting missing)
    ├── MeterInputError      a metering or chargeback input is malformed (naive time, empty window)
    └── TraceInputError      a cluster trace (node or pod CSV) given to `simulate` is malformed

Errors say what to do next. "Does not fit" is never an error: the planner returns it as a value.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ErrorCode(StrEnum):
    SPEC_INVALID = "spec_invalid"
    PLAN_INVALID = "plan_invalid"
    NOT_FOUND = "not_found"
    HOST_STATE = "host_state_invalid"
    HOST_BUSY = "host_busy"
    HOST_ACTION = "host_action_failed"
    HOST_CGROUP = "host_cgroup_unavailable"
    HOST_GPU_DRIVER = "host_gpu_driver"
    STORE_UNAVAILABLE = "store_unavailable"
    STORE_VALUE_REFUSED = "store_value_refused"
    SPEC_STALE = "spec_stale"
    LIMITER_UNAVAILABLE = "limiter_unavailable"
    GATEWAY_INVALID = "gateway_invalid"
    METER_INPUT_INVALID = "meter_input_invalid"
    KUBE_RENDER = "kube_render_refused"
    KUBE_UNREACHABLE = "kube_unreachable"
    KUBE_FORBIDDEN = "kube_forbidden"
    KUBE_API = "kube_api_failed"
    KUBE_RETRY_LATER = "kube_retry_later"
    DCGM_INPUT_INVALID = "dcgm_input_invalid"
    TRACE_INVALID = "trace_invalid"


#: CLI exit code for input the user must fix (bad spec, bad plan file, unknown name).
EXIT_BAD_INPUT = 2


#: Where a value sits in a spec: ("tenants", 0, "workloads", 1, "gpu").
FieldPath = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class SpecProblem:
    """One thing wrong with a spec: where (field path and, once located, file position) and what."""

    path: FieldPath
    message: str
    line: int | None = None
    column: int | None = None

    @property
    def dotted_path(self) -> str:
        """`tenants[0].workloads[1].gpu` - the path as a user would write it."""
        out = ""
        for part in self.path:
            if isinstance(part, int):
                out += f"[{part}]"
            else:
                out += f".{part}" if out else part
        return out or "(document)"


class GpuplexError(Exception):
    code: ErrorCode = ErrorCode.SPEC_INVALID
    exit_code: int = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SpecError(GpuplexError):
    code = ErrorCode.SPEC_INVALID
    exit_code = EXIT_BAD_INPUT

    def __init__(self, source: str, problems: list[SpecProblem]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(self.render())

    def render(self) -> str:
        lines = []
        for problem in self.problems:
            where = self.source
            if problem.line is not None:
                where += f":{problem.line}:{problem.column or 1}"
            lines.append(f"{where}: {problem.dotted_path}: {problem.message}")
        return "\n".join(lines)


class PlanFileError(GpuplexError):
    code = ErrorCode.PLAN_INVALID
    exit_code = EXIT_BAD_INPUT


class NotFoundError(GpuplexError):
    code = ErrorCode.NOT_FOUND
    exit_code = EXIT_BAD_INPUT


class HostStateError(GpuplexError):
    """A file under the host runtime's state directory is unreadable."""

    code = ErrorCode.HOST_STATE


class HostBusyError(GpuplexError):
    """Another gpuplex process holds this host's supervisor lock."""

    code = ErrorCode.HOST_BUSY


class HostActionError(GpuplexError):
    """Starting, stopping or reshaping something on the host failed; the message says what and why."""

    code = ErrorCode.HOST_ACTION


class GpuDriverError(GpuplexError):
    """The GPU driver (NVML) is missing or a call to it failed; the message names the GPU and call."""

    code = ErrorCode.HOST_GPU_DRIVER


class CgroupUnavailable(GpuplexError):
    """The host cannot give a replica its own cgroup (no usable hierarchy, not writable, or a
    controller missing); the message says which, and what to change."""

    code = ErrorCode.HOST_CGROUP


class StoreError(GpuplexError):
    """The store cannot be opened or used: a bad URL, an unreachable server, a file that cannot be
    created, or a query that failed. The message names the URL (never its password) and what to
    check."""

    code = ErrorCode.STORE_UNAVAILABLE


class StoreValueRefused(StoreError):
    """The store refused a value it was given (PostgreSQL takes no NUL character in text, for
    one): the input is at fault, not the store, so retrying the same value will not help."""

    code = ErrorCode.STORE_VALUE_REFUSED
    exit_code = EXIT_BAD_INPUT


class StaleRevisionError(GpuplexError):
    """A spec was applied on top of `base_revision`, but the current revision is another: someone
    applied a spec in between. Fetch the current spec, merge, and apply on top of it."""

    code = ErrorCode.SPEC_STALE

    def __init__(self, message: str, *, base_revision: int | None, current_revision: int | None):
        super().__init__(message)
        self.base_revision = base_revision
        self.current_revision = current_revision


class LimiterUnavailable(GpuplexError):
    """The rate limiter's shared state (Redis) cannot be reached or a decision failed. The gateway
    fails closed (503). The message names the URL (never its password) and what to check."""

    code = ErrorCode.LIMITER_UNAVAILABLE


class GatewayError(GpuplexError):
    """The gateway cannot start as asked (run as root, settings missing); the message says how."""

    code = ErrorCode.GATEWAY_INVALID
    exit_code = EXIT_BAD_INPUT


class MeterInputError(GpuplexError):
    """A metering or chargeback input is malformed: a naive datetime, a window that ends before it
    starts, plan revisions that overlap. The message names the value and the rule it breaks."""

    code = ErrorCode.METER_INPUT_INVALID
    exit_code = EXIT_BAD_INPUT


class KubeRenderError(GpuplexError):
    """The plan cannot be expressed as Kubernetes objects as it stands: e.g. one node's GPUs need two
    sharing methods the NVIDIA device plugin cannot run side by side. The message names the node or
    tenant, what clashes, and what to change in the spec."""

    code = ErrorCode.KUBE_RENDER
    exit_code = EXIT_BAD_INPUT


class KubeApiError(GpuplexError):
    """The Kubernetes API refused or failed a request. The message names the object and the verb."""

    code = ErrorCode.KUBE_API
    exit_code = 1


class KubeUnreachable(KubeApiError):
    """No Kubernetes API answered: no kubeconfig, a wrong address, a cluster that is down."""

    code = ErrorCode.KUBE_UNREACHABLE
    exit_code = 3


class KubeForbidden(KubeApiError):
    """RBAC forbids what gpuplex tried: the message names the verb, the resource and the namespace."""

    code = ErrorCode.KUBE_FORBIDDEN
    exit_code = 4


class KubeRetryLater(KubeApiError):
    """The cluster refused for now, not for good: e.g. a namespace that is still being deleted. The
    same command succeeds once the cluster has finished; the message says what it is waiting for."""

    code = ErrorCode.KUBE_RETRY_LATER
    exit_code = 5


class DcgmInputError(GpuplexError):
    """dcgm-exporter text that cannot be read: the message names the line and what is wrong."""

    code = ErrorCode.DCGM_INPUT_INVALID
    exit_code = EXIT_BAD_INPUT


class TraceInputError(GpuplexError):
    """A cluster trace (openb node or pod CSV) that cannot be read: the message names the file, the
    line and the column, and what is wrong with the value there."""

    code = ErrorCode.TRACE_INVALID
    exit_code = EXIT_BAD_INPUT
