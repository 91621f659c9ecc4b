"""A ``trocket up`` with the console, and a real headless Chromium (Debian's, driven by
Playwright) looking at it. A failing test leaves a screenshot of its page in
``test-artifacts/console/`` (``TROCKET_TEST_ARTIFACTS`` to change); with
``TROCKET_CONSOLE_SCREENSHOTS=DIR`` every page the tests open is saved there (the README's
picture comes from this)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO, start_trocket

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""The flags that keep Chromium from reaching for Google's hosts on a closed network."""
ARTIFACTS = Path(os.environ.get("TROCKET_TEST_ARTIFACTS", REPO / "test-artifacts")) / "console"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="module")
def up_with_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """``trocket up`` (metrics and console on free ports) in a fresh directory."""
    cwd = tmp_path_factory.mktemp("up")
    process, lines = start_trocket("up", "--metrics-port", "0", "--console-port", "0", cwd=cwd)
    urls = dict(line.strip().split(": ", 1) for line in lines if line.startswith(("console: ", "metrics: ")))
    if "console" not in urls:
        process.kill()
        process.communicate()
        raise AssertionError("trocket up did not print a console URL:\n" + "".join(lines))
    try:
        yield {**urls, "cwd": str(cwd)}
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        message = "Debian's chromium is not installed (./run tests installs it with apt-get as root)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


@pytest.fixture
def page(browser, request: pytest.FixtureRequest) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    tab = context.new_page()
    tab.set_default_timeout(15_000)
    try:
        yield tab
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            tab.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
        context.close()


def screenshot(tab: object, name: str) -> None:
    """Save the page under ``TROCKET_CONSOLE_SCREENSHOTS`` when set (documentation pictures)."""
    folder = os.environ.get("TROCKET_CONSOLE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)  # type: ignore[attr-defined]


def submit(tab: object, form_id: str, **inputs: str) -> None:
    """Fill the named inputs of ``form#form_id`` and press its submit button, as a user would."""
    form = tab.locator(f"form#{form_id}")  # type: ignore[attr-defined]
    for name, value in inputs.items():
        form.locator(f"input[name={name}]").fill(value)
    form.locator("button[type=submit]").click()
