"""The one error tree. Every error carries a stable code from the one list of codes
(gpuplex/error_codes.py), and the code says its HTTP status, CLI exit code and whether a retry can
help; nothing else maps errors to statuses.

    GpuplexError
    ├── SpecError            the spec file is unreadable or invalid (a list of problems)
    │   └── JobFileError         a job file or submitted job is invalid or does not suit the spec
    ├── JobStateError        a job cannot move to the state asked (cancelling a finished job)
    ├── TooManyJobsError     the tenant has as many jobs under way, or submitted, as it may
    ├── OidcTokenError       an identity provider's token that gpuplex does not take
    ├── CredentialSuspended  a token whose maker no longer holds a role that could make it
    ├── IdentityProviderUnavailable  the provider's discovery document or keys cannot be read
    ├── TooManySignIns       no room for another dashboard sign-in under way
    ├── PlanFileError        a plan JSON given with --current is unreadable or invalid
    ├── NotFoundError        a named thing (workload, tenant, node) does not exist
    ├── HostStateError       a file in the host runtime's state directory is unreadable
    ├── HostBusyError        another gpuplex process holds this host's supervisor lock
    ├── HostActionError      starting, stopping or reshaping something on the host failed
    ├── GpuDriverError       the GPU driver (NVML) is missing, or a call to it failed
    │   └── NvmlCallError        one NVML call failed, with its return code (host/nvml_driver.py)
    ├── CgroupUnavailable    the host cannot give a replica its own cgroup with its limits
    ├── StoreError           the store (SQLite or PostgreSQL) is unreachable, invalid or failed
    │   └── StoreValueRefused    the store refused a value given to it (a NUL character in text)
    ├── StaleRevisionError   a spec was applied on top of a revision that is no longer current
    ├── LimiterUnavailable   the shared rate-limit state (Redis) is unreachable or failed
    ├── GatewayError         the gateway cannot start as asked (as root, a setting missing)
    ├── MeterInputError      a metering or chargeback input is malformed (naive time, empty window)
    ├── KubeRenderError      the plan cannot be expressed as Kubernetes objects as it stands
    ├── KubeApiError         the Kubernetes API refused or failed a request
    │   ├── KubeUnreachable      no Kubernetes API answered
    │   ├── KubeForbidden        RBAC forbids what gpuplex tried
    │   ├── KubeRetryLater       the cluster refused for now, not for good
    │   ├── NotServed            the API does not serve the kind (kube/api.py, as the next two)
    │   ├── Immutable            the change needs a field the API server keeps immutable
    │   └── NamespaceMissing     an object's namespace does not exist
    ├── DcgmInputError       dcgm-exporter text that cannot be read
    ├── TraceInputError      a cluster trace (node or pod CSV) given to `simulate` is malformed
    ├── ExtraMissing         a command needs an optional extra that is not installed (extras.py)
    ├── ControlPlaneUnreachable  a command could not reach the running control plane's API
    ├── StartInterrupted     SIGINT or SIGTERM arrived while `up` was starting (up/lifecycle.py)
    └── RequestRefused       an API refuses a request, with the code given at the refusal:
        ├── ApiProblem           raised by the control plane's routes (server/problems.py)
        ├── ApiError             raised by the gateway (gateway/api_errors.py)
        └── ApiRefusal           an API refusal as the client reads it (client/control_plane.py)

tests/architecture/test_error_tree_drawn.py checks that this picture is the tree the code defines.

Errors say what to do next. "Does not fit" is never an error: the planner returns it as a value.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplex.error_codes import EXIT_BAD_INPUT as EXIT_BAD_INPUT, ErrorCode as ErrorCode

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
    """The root of the tree. `code` says what went wrong, and with it the HTTP status, the CLI exit
    code and whether a retry can help (gpuplex/error_codes.py); a subclass sets its code."""

    code: ErrorCode = ErrorCode.INTERNAL
    #: When known, the seconds after which the same request may succeed (a Retry-After header).
    retry_after_s: int | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def exit_code(self) -> int:
        return self.code.exit_code

    @property
    def status(self) -> int:
        """The HTTP status an API answers this error with."""
        return self.code.status

    @property
    def retryable(self) -> bool:
        """Whether the same request, unchanged, can succeed later."""
        return self.code.retryable


class SpecError(GpuplexError):
    code = ErrorCode.SPEC_INVALID

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


class JobFileError(SpecError):
    """A job file (or a submitted job) that is unreadable, invalid, or does not suit the applied
    spec; every problem is listed with its field path (and line, for a file)."""

    code = ErrorCode.JOB_INVALID


class JobStateError(GpuplexError):
    """A job cannot move to the state asked: it is finished, or the move is not one the job's
    state machine allows (gpuplex.core.jobs.states)."""

    code = ErrorCode.JOB_STATE


class TooManyJobsError(GpuplexError):
    """The tenant already has as many jobs not finished as its queue allows
    (`queues: max_active_jobs`), or submitted as many in the last 60 s
    (`max_submits_per_minute`); one more is taken once one finishes, or a minute later."""

    code = ErrorCode.TOO_MANY_JOBS


class OidcTokenError(GpuplexError):
    """A token from the identity provider that gpuplex does not take: not a JWT, a signature that
    does not verify with the issuer's keys (or none, or an algorithm not allowed), another issuer
    or audience, expired or not yet valid. One code (`unauthenticated`); the message says which."""

    code = ErrorCode.UNAUTHENTICATED


class CredentialSuspended(GpuplexError):
    """A control-plane token that matches, but is suspended: the person who made it (or made the
    token that made it) no longer holds a role that could make it (core.access.credential_grants).
    `unauthenticated` (401), as for a revoked token; the message says it may work again."""

    code = ErrorCode.UNAUTHENTICATED


class IdentityProviderUnavailable(GpuplexError):
    """The identity provider's discovery document or key set cannot be fetched or read (down,
    unreachable, an answer that is not what OpenID Connect Discovery says): tokens cannot be
    checked now, whoever sent them; retry (after `retry_after_s` when known)."""

    code = ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE

    def __init__(self, message: str, *, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class TooManySignIns(GpuplexError):
    """No room for another dashboard sign-in under way: the client address began as many as one
    address may have, or the store holds as many as it keeps in all. Nothing begun before is
    dropped to make room; `retry_after_s` is when the oldest in the way expires (a sign-in that
    is finished or abandoned at the provider frees its place sooner or then)."""

    code = ErrorCode.TOO_MANY_SIGN_INS

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class PlanFileError(GpuplexError):
    code = ErrorCode.PLAN_INVALID


class NotFoundError(GpuplexError):
    code = ErrorCode.NOT_FOUND


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


class MeterInputError(GpuplexError):
    """A metering or chargeback input is malformed: a naive datetime, a window that ends before it
    starts, plan revisions that overlap. The message names the value and the rule it breaks."""

    code = ErrorCode.METER_INPUT_INVALID


class KubeRenderError(GpuplexError):
    """The plan cannot be expressed as Kubernetes objects as it stands: e.g. one node's GPUs need two
    sharing methods the NVIDIA device plugin cannot run side by side. The message names the node or
    tenant, what clashes, and what to change in the spec."""

    code = ErrorCode.KUBE_RENDER


class KubeApiError(GpuplexError):
    """The Kubernetes API refused or failed a request. The message names the object and the verb."""

    code = ErrorCode.KUBE_API


class KubeUnreachable(KubeApiError):
    """No Kubernetes API answered: no kubeconfig, a wrong address, a cluster that is down."""

    code = ErrorCode.KUBE_UNREACHABLE


class KubeForbidden(KubeApiError):
    """RBAC forbids what gpuplex tried: the message names the verb, the resource and the namespace."""

    code = ErrorCode.KUBE_FORBIDDEN


class KubeRetryLater(KubeApiError):
    """The cluster refused for now, not for good: e.g. a namespace that is still being deleted. The
    same command succeeds once the cluster has finished; the message says what it is waiting for."""

    code = ErrorCode.KUBE_RETRY_LATER


class DcgmInputError(GpuplexError):
    """dcgm-exporter text that cannot be read: the message names the line and what is wrong."""

    code = ErrorCode.DCGM_INPUT_INVALID


class TraceInputError(GpuplexError):
    """A cluster trace (openb node or pod CSV) that cannot be read: the message names the file, the
    line and the column, and what is wrong with the value there."""

    code = ErrorCode.TRACE_INVALID


class ExtraMissing(GpuplexError):
    """A command needs a package of an optional extra that is not installed (the Kubernetes client
    for `kube diff` and `kube apply`, matplotlib for `simulate`'s plots): the message names the
    command, the package and the `pip install 'gpuplex[EXTRA]'` that adds it (gpuplex/extras.py)."""

    code = ErrorCode.EXTRA_MISSING


class ControlPlaneUnreachable(GpuplexError):
    """A command that asks the running control plane's API could not reach it."""

    code = ErrorCode.CONTROL_PLANE_UNREACHABLE


class RequestRefused(GpuplexError):
    """An API refuses a request; unlike the errors above, each refusal names its own code (which
    gives its status). The control plane raises ApiProblem, the gateway ApiError."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
