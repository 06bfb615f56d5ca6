"""Browser tests of the management web UI: a real `amqp-broker` process (the launcher) and
Debian's headless Chromium driven by Selenium (`.ci/run` installs `chromium` and
`chromium-driver`).

Without Chromium the tests skip, except in CI (CI=true), where a missing browser is a failure.
A failing test leaves a screenshot and the page's HTML in `WEBUI_ARTIFACTS` (default: the
session's pytest temp directory, `webui-artifacts/`), and says where.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from compat_tests.support.launcher import Broker

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
# Headless, and nothing that reaches for the network (the machines have no internet).
_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--disable-dev-shm-usage", "--window-size=1400,1000")


def _need_browser() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip)")
    if missing:
        msg = f"browser tests need {', '.join(missing)} (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)


@pytest.fixture(scope="session")
def web_broker(tmp_path_factory):
    """One broker for the browser tests; rates sampled every 500 ms so charts move quickly."""
    with Broker(tmp_path_factory.mktemp("webui-broker"),
                config="collect_statistics_interval = 500\n").start() as b:
        yield b


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory) -> Path:
    path = Path(os.environ.get("WEBUI_ARTIFACTS") or tmp_path_factory.getbasetemp() / "webui-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def driver(tmp_path_factory, artifacts):
    _need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in _FLAGS:
        opts.add_argument(flag)
    profile = tmp_path_factory.mktemp("chromium-profile")
    opts.add_argument(f"--user-data-dir={profile}")
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    d.set_page_load_timeout(30)
    try:
        yield d
    finally:
        d.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    d = item.funcargs.get("driver")
    where = item.funcargs.get("artifacts")
    if d is None or where is None:
        return
    stem = where / item.name.replace("/", "_")
    try:
        d.save_screenshot(str(stem.with_suffix(".png")))
        stem.with_suffix(".html").write_text(d.page_source)
        report.sections.append(("webui", f"screenshot and page source: {stem}.png / .html"))
    except Exception as e:  # the browser itself may be what failed
        report.sections.append(("webui", f"no screenshot: {e!r}"))
