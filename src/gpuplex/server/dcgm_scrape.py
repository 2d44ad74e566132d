"""Every interval: read every dcgm-exporter, turn what it says into GPU samples of the tenants'
replicas and store them, so that the roll-ups meter busy GPU time and memory on Kubernetes the way
`gpuplex up`'s sampler does on one server.

dcgm-exporter runs on every GPU node. Behind an ordinary Service each read would reach one node at
random, so a URL whose host name resolves to several addresses of one family (a headless Service)
is read at each address. An exporter that cannot be read (refused, timed out, bad text) is logged
when its error changes and read again at the next interval; the others' samples are stored anyway.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from gpuplex.errors import DcgmInputError
from gpuplex.http_client import call
from gpuplex.observe.dcgm import DcgmReading, parse_exposition
from gpuplex.retry import run_pass
from gpuplex.server.context import ServerContext
from gpuplex.server.dcgm_attribution import SkipReason, attribute
from gpuplex.server.metrics.dcgm_metrics import DCGM_STATS, DcgmScrapeStats
from gpuplex.server.sample_intake import store_samples

log = logging.getLogger("gpuplex.server.dcgm")
DEFAULT_INTERVAL_S = 15.0  # dcgm-exporter itself collects every 30 s by default
DEFAULT_TIMEOUT_S = 5.0
MAX_BODY_BYTES = 32 * 1024 * 1024  # one node's exporter prints some 100 KiB
MAX_PARALLEL = 16
#: Errors a read can end with; anything else is a bug and reaches the pass's own handler.
_READ_ERRORS = (OSError, DcgmInputError)


def check_dcgm_url(url: str) -> str:
    """The URL if it is one gpuplex can read; ValueError saying what is wrong otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"{url!r} is not an http(s) URL with a host, e.g. "
            "http://nvidia-dcgm-exporter.gpu-operator.svc:9400/metrics"
        )
    try:
        parts.port  # noqa: B018 (parsing it is the check)
    except ValueError:
        raise ValueError(f"{url!r}: the port is not a number from 0 to 65535") from None
    if "@" in parts.netloc:
        raise ValueError(
            f"{parts.scheme}://...@{parts.hostname}: gpuplex sends no credentials to a "
            "dcgm-exporter; give the URL without them"
        )
    return url


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    """One address to read: the URL to open, and the Host header it needs (None: the URL's)."""

    url: str
    host_header: str | None = None


def targets(url: str) -> list[ScrapeTarget]:
    """Where to read `url`: each address of its host where it has several of one family (a
    headless Service: one per exporter pod), else the URL itself. https is read as given (a
    certificate names the host, not the pod's address)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme != "http" or _is_address(host):
        return [ScrapeTarget(url)]
    port = parts.port or 80
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    by_family: dict[int, list[str]] = {}
    for family, _, _, _, address in found:
        listed = by_family.setdefault(int(family), [])
        if str(address[0]) not in listed:
            listed.append(str(address[0]))
    addresses = max(by_family.values(), key=len, default=[])
    if len(addresses) < 2:
        return [ScrapeTarget(url)]
    return [
        ScrapeTarget(urlunsplit(parts._replace(netloc=f"{_bracketed(a)}:{port}")), parts.netloc)
        for a in sorted(addresses)
    ]  # the netloc is host[:port]: check_dcgm_url refuses credentials


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _bracketed(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def fetch(target: ScrapeTarget, timeout_s: float) -> str:
    """The exporter's text. Raises OSError (refused, timed out, an HTTP error status) or
    DcgmInputError (too long, not UTF-8)."""
    headers = {"Accept": "text/plain"}
    if target.host_header is not None:
        headers["Host"] = target.host_header
    answer = call(  # exporters are in the cluster: never through a proxy from the environment
        "GET", target.url, headers=headers, timeout_s=timeout_s, max_bytes=MAX_BODY_BYTES
    )
    if not answer.ok:
        raise ConnectionError(f"{target.url}: answered {answer.status}")
    if not answer.complete:
        raise DcgmInputError(f"{target.url}: the reply is over {MAX_BODY_BYTES} bytes")
    try:
        return answer.body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DcgmInputError(f"{target.url}: not UTF-8 at byte {error.start}") from None


def read_target(target: ScrapeTarget, timeout_s: float) -> list[DcgmReading]:
    return parse_exposition(fetch(target, timeout_s), source=target.url)


class DcgmScraper(threading.Thread):
    """Reads the exporters every interval and stores the samples of the applied spec's tenants."""

    def __init__(
        self,
        ctx: ServerContext,
        urls: Sequence[str],
        interval_s: float = DEFAULT_INTERVAL_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        stats: DcgmScrapeStats = DCGM_STATS,
    ) -> None:
        super().__init__(name="gpuplex-dcgm", daemon=True)
        self.ctx = ctx
        self.urls = [check_dcgm_url(url) for url in urls]
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self.stats = stats
        self.stopping = threading.Event()
        self._errors: dict[str, str] = {}  # what each failing URL or address last failed with
        self._errors_lock = threading.Lock()  # reads run side by side
        self._skipped: dict[SkipReason, int] = {}

    def run(self) -> None:
        while not self.stopping.wait(self.interval_s):
            self.pass_once()

    def pass_once(self) -> int:
        """Read, attribute and store once; the samples stored. Never raises: the server goes on
        serving and the next interval tries again."""
        stored = run_pass(self._pass, job="DCGM scrape", retry_in_s=self.interval_s, log=log)
        return stored or 0

    def _pass(self) -> int:
        applied = self.ctx.current.get()
        if applied is None:
            return 0  # no tenants yet: nothing could be attributed
        at = self.ctx.now()
        readings = self.read_all()
        attributed = attribute(readings, applied.spec, at)
        stored = store_samples(self.ctx, attributed.samples)
        self.stats.stored(stored, attributed.skipped, at)
        self._log_skipped(attributed.skipped, attributed.examples)
        return stored

    def read_all(self) -> list[DcgmReading]:
        """Every exporter's readings, read side by side; failures logged and left out."""
        found: list[ScrapeTarget] = []
        for url in self.urls:
            try:
                found.extend(targets(url))
            except OSError as error:  # the name does not resolve
                self._failed(url, error)
        readings: list[DcgmReading] = []
        if not found:
            return readings
        with ThreadPoolExecutor(min(MAX_PARALLEL, len(found)), "gpuplex-dcgm-read") as pool:
            results = pool.map(self._read_one, found)
            for result in results:
                readings.extend(result)
        return readings

    def _read_one(self, target: ScrapeTarget) -> list[DcgmReading]:
        try:
            readings = read_target(target, self.timeout_s)
        except _READ_ERRORS as error:
            self._failed(target.url, error)
            return []
        self.stats.scraped(ok=True)
        with self._errors_lock:
            recovered = self._errors.pop(target.url, None) is not None
        if recovered:
            log.info("DCGM exporter %s is read again", target.url)
        return readings

    def _failed(self, url: str, error: BaseException) -> None:
        self.stats.scraped(ok=False)
        message = str(error) or type(error).__name__
        with self._errors_lock:
            changed = self._errors.get(url) != message
            self._errors[url] = message
        if changed:
            log.warning(
                "cannot read DCGM exporter %s: %s; retrying every %ss",
                url,
                message,
                self.interval_s,
            )

    def _log_skipped(
        self, skipped: Mapping[SkipReason, int], examples: Mapping[SkipReason, list[str]]
    ) -> None:
        """Say what was left out whenever that changes (not at every pass: idle GPUs stay idle)."""
        if dict(skipped) == self._skipped:
            return
        self._skipped = dict(skipped)
        if not skipped:
            log.info("DCGM: every reading is metered to a tenant replica again")
            return
        parts = []
        for reason, count in sorted(skipped.items()):
            shown = ", ".join(examples.get(reason, []))
            parts.append(f"{count} {reason}" + (f" (e.g. {shown})" if shown else ""))
        # a tenant's pod named like none of its workloads is a billing gap: say it louder
        level = logging.WARNING if skipped.get("unknown_workload") else logging.INFO
        log.log(level, "DCGM readings metered to no tenant: %s", "; ".join(parts))
