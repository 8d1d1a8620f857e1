"""Python side of the browser driver in ``devtools/browser/driver.mjs``: Debian's Chromium, driven by
playwright-core in a Node process, one JSON command per line. Tests read like a person's steps:
``page.goto(...)``, ``page.fill(...)``, ``page.click(...)``, ``page.evaluate(...)``.

One ``Browser`` is one browser profile (one cookie jar shared by its pages, like tabs). Nothing is faked:
the pages come from a real uvicorn server and the real OpenID provider."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.servers import ROOT, stop_process

DEVTOOLS = ROOT / "devtools"
NODE = DEVTOOLS / "node_modules" / ".bin" / "node"
DRIVER = DEVTOOLS / "browser" / "driver.mjs"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = ROOT / "var" / "browser"
# Playwright's own waits stop at 20 s (driver.mjs); this bounds a driver that stopped answering.
REPLY_TIMEOUT_S = 90.0


class BrowserError(AssertionError):
    """A browser command failed (an element never appeared, a navigation timed out, …)."""


class Browser:
    """A running driver process with one headless Chromium."""

    def __init__(self, log_path: Path) -> None:
        if not NODE.exists() or not (DEVTOOLS / "node_modules" / "playwright-core").exists():
            raise RuntimeError("devtools/node_modules lacks playwright-core: run `make setup` (npm ci in devtools/)")
        if not shutil.which(CHROMIUM):
            raise RuntimeError(f"{CHROMIUM} is missing: run `make setup` (apt chromium)")
        self._log = log_path.open("wb")
        self._process = subprocess.Popen(
            [str(NODE), str(DRIVER)],
            cwd=DEVTOOLS,
            env={**os.environ, "CHROMIUM": CHROMIUM},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        self._next_id = 0
        self.log_path = log_path

    def command(self, op: str, **args: Any) -> Any:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._next_id += 1
        message = {"id": self._next_id, "op": op, **args}
        self._process.stdin.write(json.dumps(message).encode() + b"\n")
        self._process.stdin.flush()
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        ready, _, _ = select.select([self._process.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise BrowserError(f"the browser driver did not answer {op} within {REPLY_TIMEOUT_S:.0f} s")
        line = self._process.stdout.readline()
        if not line:
            raise BrowserError(f"the browser driver exited:\n{self.log_path.read_text(errors='replace')}")
        reply = json.loads(line)
        if not reply["ok"]:
            raise BrowserError(f"{op} {args}: {reply['error']}")
        return reply["result"]

    def new_page(self) -> Page:
        return Page(self, self.command("newPage"))

    def cookie_names(self) -> set[str]:
        return {cookie["name"] for cookie in self.command("cookies")}

    def clear_cookies(self, name: str) -> None:
        self.command("clearCookies", name=name)

    def close(self) -> None:
        if self._process.poll() is None:
            try:
                self.command("close")
            except BrowserError:
                pass
        stop_process(self._process)
        self._log.close()


@dataclass
class Page:
    """One tab."""

    browser: Browser
    id: str

    def _do(self, op: str, **args: Any) -> Any:
        return self.browser.command(op, page=self.id, **args)

    def goto(self, url: str) -> dict[str, Any]:
        return dict(self._do("goto", url=url))

    def fill(self, selector: str, value: str) -> None:
        self._do("fill", selector=selector, value=value)

    def check(self, selector: str) -> None:
        self._do("check", selector=selector)

    def select_option(self, selector: str, value: str) -> None:
        self._do("selectOption", selector=selector, value=value)

    def click(self, selector: str) -> str:
        return str(self._do("click", selector=selector))

    def wait_for_url(self, pattern: str) -> str:
        return str(self._do("waitForUrl", pattern=pattern))

    def wait_for(self, selector: str) -> None:
        self._do("waitForSelector", selector=selector)

    def evaluate(self, expression: str) -> Any:
        return self._do("evaluate", expression=expression)

    def text(self, selector: str) -> str:
        return str(self.evaluate(f"document.querySelector({json.dumps(selector)})?.innerText ?? ''"))

    @property
    def url(self) -> str:
        return str(self._do("url"))

    def content(self) -> str:
        return str(self._do("content"))

    def navigations(self) -> list[str]:
        return list(self._do("navigations"))

    def console_errors(self) -> list[str]:
        return list(self._do("consoleErrors"))

    def failed_resources(self) -> list[str]:
        """Sub-resources (stylesheets, scripts, images, XHR) answered with 4xx/5xx: "404 stylesheet URL"."""
        return list(self._do("failedResources"))

    def screenshot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self._do("screenshot", path=str(path))
        return path
