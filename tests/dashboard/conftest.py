"""Fixtures for the dashboard: a real server (uvicorn in a thread) over the test
Redis and namespace, a real worker (the integration tests' start_master), and
headless Chromium from the system (Debian's package) driven by Playwright.

Browser tests skip, saying why, only where no Chromium is installed or Playwright
is missing; `./dev test` installs Chromium where it can (root with apt-get).
Screenshots go to the run's temporary directory (printed at the end of the run)."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from runtime import Client
from tests.integration.conftest import cli, start_master, workdir  # noqa: F401 - fixtures used here
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
NO_CHROMIUM = (
    "no Chromium found (looked for chromium on PATH and in /usr/bin): install Debian's "
    "package with `apt-get install -y chromium` (./dev test does so as root)"
)


def chromium_binary() -> str | None:
    found = os.environ.get("RUNTIME_TEST_CHROMIUM") or shutil.which("chromium")
    candidates = [found] if found else []
    candidates += [p for p in CHROMIUM_PATHS if os.access(p, os.X_OK)]
    return candidates[0] if candidates else None


@dataclass
class Dashboard:
    """A running dashboard: its base URL (no trailing slash) and a client of its data."""

    url: str
    client: Client
    shots: Path

    def shot(self, page: Page, name: str) -> Path:
        path = self.shots / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path


SHOTS: list[Path] = []  # this run's screenshot directory, for the summary


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    SHOTS.append(tmp_path_factory.mktemp("dashboard-screenshots"))
    return SHOTS[-1]


def serve(client: Client, **options: Any) -> tuple[str, Any, threading.Thread]:
    """Starts the dashboard on a free loopback port; (base url, server, thread)."""
    import uvicorn  # noqa: PLC0415

    from runtime.commands.dashboard import listen, url_of  # noqa: PLC0415
    from runtime.dashboard import Options, create_app  # noqa: PLC0415

    settings = Options(**{"sample_interval_s": 0.25, **options})
    sock = listen("127.0.0.1", 0)
    config = uvicorn.Config(create_app(client, settings), log_config=None, access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 10, what="the dashboard to start")
    return url_of(sock, settings.url_prefix).rstrip("/"), server, thread


@pytest.fixture
def dashboard(
    default_server: RedisServer, plain_client: Client, screenshots: Path
) -> Iterator[Dashboard]:
    client = Client.from_url(default_server.url, namespace=plain_client.keys.namespace)
    url, server, thread = serve(client)
    yield Dashboard(url, plain_client, screenshots)
    server.should_exit = True
    thread.join(timeout=10)
    client.close()


# module scope: the sync API keeps an event loop running in this thread while it is
# open, and later tests (of other modules) call asyncio.run
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    binary = chromium_binary()
    if binary is None:
        pytest.skip(NO_CHROMIUM)
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=binary, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    opened.on("dialog", lambda dialog: dialog.accept())  # the confirmations of actions
    yield opened
    context.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if SHOTS and any(SHOTS[-1].iterdir()):
        terminalreporter.write_line(f"dashboard screenshots: {SHOTS[-1]}")
