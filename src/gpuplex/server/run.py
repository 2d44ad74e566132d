"""Run the control plane: open the store, apply the spec file if it changed, serve the app, and
roll usage up, check budgets and run the jobs in the background (and, on Kubernetes, read GPU
samples from the DCGM exporters)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from gpuplex.clock import SYSTEM_CLOCK
from gpuplex.http_guard import uvicorn_options
from gpuplex.http_limits import HttpLimits, fitted_to_file_limit, plain_error_body
from gpuplex.retry import run_pass
from gpuplex.server.app import create_app
from gpuplex.server.budget_alerts import check_budgets, month_figures
from gpuplex.server.budget_enforcement import enforce_budgets
from gpuplex.server.context import ServerContext
from gpuplex.server.dcgm_scrape import DEFAULT_TIMEOUT_S, DcgmScraper
from gpuplex.server.job_runner import JobRunner
from gpuplex.server.sample_retention import prune_samples
from gpuplex.server.spec_apply import SpecHistory, apply, spec_sha256
from gpuplex.settings import ServerSettings
from gpuplex.specfile import load_spec_file
from gpuplex.store.db import open_store

log = logging.getLogger("gpuplex.server")
ROLLUP_WINDOW_S = 300  # a month is 8,640 windows: statements stay quick
#: The control plane's front door (gpuplex/http_guard.py): the defaults, for people and scripts.
HTTP_LIMITS = HttpLimits()


def http_options(limits: HttpLimits = HTTP_LIMITS) -> dict[str, Any]:
    """uvicorn's arguments that put the front door before the control plane's app (the file
    limit raised, and the connection cap fitted to it)."""
    return uvicorn_options(fitted_to_file_limit(limits, fds_per_connection=1), plain_error_body)


def apply_spec_file(history: SpecHistory, path: Path, actor: str) -> int | None:
    """Apply `path` as a new revision unless it is the applied one; the new revision, else None."""
    load_spec_file(path)  # a missing, unreadable or invalid file fails here, located
    text = path.read_text(encoding="utf-8")
    applied = history.current.get()
    if applied is not None and applied.spec_sha256 == spec_sha256(text):
        return None
    revision, _ = apply(
        history, text, applied.revision if applied else 0, actor=actor, source=str(path)
    )
    return revision.revision


class Reconciler(threading.Thread):
    """Every interval: roll up the whole windows since the last pass, check budgets (alerts) and
    store what each budget enforces, for the gateway, then prune the raw GPU samples that are
    rolled up and past their retention."""

    def __init__(self, ctx: ServerContext, settings: ServerSettings) -> None:
        super().__init__(name="gpuplex-reconciler", daemon=True)
        self.ctx = ctx
        self.settings = settings
        self.stopping = threading.Event()
        self.checked_once = False  # budgets are checked at start, then when new windows came

    def run(self) -> None:
        while not self.stopping.wait(self.settings.rollup_interval_s):
            self.pass_once()

    def pass_once(self) -> None:
        """One pass; a failed one is logged and retried at the next, and the server keeps serving."""
        interval_s = self.settings.rollup_interval_s
        run_pass(self._pass, job="roll-up or budget check", retry_in_s=interval_s, log=log)

    def _pass(self) -> None:
        now = self.ctx.now()
        rolled = self.ctx.metering.catch_up(now)
        applied = self.ctx.current.get()
        if applied is not None and (rolled.windows or not self.checked_once):
            self.checked_once = True
            books = self.ctx.budget_books
            figures = month_figures(books, applied, now)
            check_budgets(books, applied, now, self.settings.budget_webhook_timeout_s, figures)
            enforce_budgets(books, applied, now, figures)
        prune_samples(self.ctx, now, self.settings.sample_retention_days * 86400)


def run_server(settings: ServerSettings) -> None:
    import uvicorn

    engine = open_store(settings.store_url)
    ctx = ServerContext.open(engine, SYSTEM_CLOCK, ROLLUP_WINDOW_S)
    if settings.spec_path is not None:
        apply_spec_file(
            ctx.spec_history, settings.spec_path, actor=f"spec file {settings.spec_path}"
        )
    reconciler = Reconciler(ctx, settings)
    reconciler.start()
    job_runner = JobRunner(ctx, settings.jobs_interval_s)
    job_runner.start()
    scraper = None
    if settings.dcgm_urls:  # on Kubernetes: busy time and memory per tenant replica from DCGM
        timeout_s = min(DEFAULT_TIMEOUT_S, settings.dcgm_interval_s)
        scraper = DcgmScraper(ctx, settings.dcgm_urls, settings.dcgm_interval_s, timeout_s)
        scraper.start()
    try:
        uvicorn.run(
            create_app(ctx, settings.metrics_from, settings.metrics_token_sha256),
            host=settings.listen_host,
            port=settings.listen_port,
            log_level="warning",
            access_log=False,
            **http_options(),
        )
    finally:
        reconciler.stopping.set()
        job_runner.stopping.set()
        if scraper is not None:
            scraper.stopping.set()
        engine.dispose()
