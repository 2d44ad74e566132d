"""One control plane and one browser for the dashboard tests; a fresh page per test that fails on
any console error or uncaught exception."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.dashboard.browser import CHROMIUM_ARGS, chromium_or_skip
from tests.e2e.dashboard.stack import Stack, running_stack

pytest.importorskip("playwright", reason="the dashboard tests drive chromium with playwright")
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("control-plane")) as running:
        yield running


# Per module, not per session: Playwright's sync API keeps an asyncio loop running in this thread
# while it is open, and every later test of the worker that calls asyncio.run() would fail.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = chromium_or_skip()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(executable), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page_errors() -> list[str]:
    """Console errors and uncaught exceptions of the test's page; each test checks them."""
    return []


@pytest.fixture
def page(browser: Browser, stack: Stack, page_errors: list[str]) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1360, "height": 900}, base_url=stack.base_url)
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    problems = page_errors

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(f"console error: {message.text} at {message.location}")

    opened.on("console", on_console)
    opened.on("pageerror", lambda error: problems.append(f"uncaught: {error}"))
    try:
        yield opened
    finally:
        context.close()
