"""Open a page in headless Chromium and look at it through the DevTools protocol.

Chromium speaks the protocol over two pipes (`--remote-debugging-pipe`: it reads commands on
file descriptor 3 and writes replies and events on 4, each message JSON ending in a NUL byte), so
no port is opened and no client library is needed. `inspect_page` loads a file, collects console
errors, uncaught exceptions, failed loads and every request that would leave the machine, measures
each plot, and takes a full-page screenshot.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")

# Flags that work as root in a container: no sandbox, no GPU, nothing fetched in the background.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)

# Every plot on the page: its rendered size, how many drawing elements its SVG holds, and the
# rendered size of its legend's smallest text in CSS pixels (null: no legend). Matplotlib puts a
# legend in a group `legend_N` and writes each text's font size in the SVG's own units; the text's
# screen transform scales them to what the page shows (the SVG's points, and the page shrinking a
# figure wider than its column).
_MEASURE_PLOTS = """
JSON.stringify(Array.from(document.querySelectorAll('figure.plot')).map(figure => {
  const svg = figure.querySelector('svg');
  if (!svg) return {width: 0, height: 0, marks: 0, legend_font_px: null};
  const box = svg.getBoundingClientRect();
  const sizes = Array.from(svg.querySelectorAll('g[id^="legend"] text')).map(text => {
    const screen = text.getScreenCTM();
    return parseFloat(getComputedStyle(text).fontSize) * Math.hypot(screen.a, screen.b);
  });
  return {width: box.width, height: box.height,
          marks: svg.querySelectorAll('path, use, rect, line, polyline, text').length,
          legend_font_px: sizes.length ? Math.min(...sizes) : null};
}))
"""


def find_chromium() -> str | None:
    """Return the Chromium executable, or None when none is installed."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path is not None:
            return path
    return None


@dataclass(frozen=True)
class PlotBox:
    width: float
    height: float
    marks: int
    legend_font_px: float | None


@dataclass(frozen=True)
class PageInspection:
    """What the browser saw: errors, requests off the machine, plots and a PNG screenshot."""

    console_errors: tuple[str, ...]
    external_requests: tuple[str, ...]
    plots: tuple[PlotBox, ...]
    title: str
    text: str
    screenshot_png: bytes


class _DevTools:
    """A minimal DevTools client over Chromium's debugging pipes."""

    def __init__(self, process: subprocess.Popen[bytes], to_browser: int, from_browser: int):
        self.process = process
        self.to_browser = to_browser
        self.from_browser = from_browser
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self.from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed its debugging pipe")
            self.buffer += chunk
        message, _, self.buffer = self.buffer.partition(b"\0")
        parsed: dict[str, Any] = json.loads(message)
        return parsed

    def call(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        self.next_id += 1
        command: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session is not None:
            command["sessionId"] = session
        os.write(self.to_browser, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + 30
        while True:
            message = self._read_message(deadline)
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    def wait_for(self, method: str, timeout_s: float = 30) -> dict[str, Any]:
        for index, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(index)
        deadline = time.monotonic() + timeout_s
        while True:
            message = self._read_message(deadline)
            if message.get("method") == method:
                return message
            self.events.append(message)


def _event_error(event: dict[str, Any]) -> str | None:
    """Describe an event that is an error on the page, or return None."""
    method = event.get("method")
    params = event.get("params", {})
    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
        return "console: " + " ".join(str(a.get("value", a)) for a in params.get("args", []))
    if method == "Runtime.exceptionThrown":
        return "exception: " + str(params.get("exceptionDetails", {}).get("text"))
    if method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
        return "log: " + str(params["entry"].get("text"))
    if method == "Network.loadingFailed":
        return "load failed: " + str(params.get("errorText"))
    return None


def _place_pipes(commands_read: int, replies_write: int) -> None:
    """In the child: put the pipes on fds 3 and 4, by way of fds above both so none is lost."""
    high_commands = fcntl.fcntl(commands_read, fcntl.F_DUPFD, 10)
    high_replies = fcntl.fcntl(replies_write, fcntl.F_DUPFD, 10)
    os.dup2(high_commands, 3)
    os.dup2(high_replies, 4)


def inspect_page(page: Path, width: int = 1200) -> PageInspection:
    """Load `page` (a local file) in headless Chromium and report what it saw."""
    executable = find_chromium()
    assert executable is not None, "find_chromium() first"
    commands_read, commands_write = os.pipe()
    replies_read, replies_write = os.pipe()
    with tempfile.TemporaryDirectory(prefix="ireetune-chromium-") as profile:
        # Chromium expects the command pipe on fd 3 and the reply pipe on fd 4.
        process = subprocess.Popen(
            [executable, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4),
            preexec_fn=lambda: _place_pipes(commands_read, replies_write),
        )
        os.close(commands_read)
        os.close(replies_write)
        tools = _DevTools(process, commands_write, replies_read)
        try:
            return _inspect(tools, page, width)
        finally:
            with contextlib.suppress(RuntimeError, TimeoutError, OSError):
                tools.call("Browser.close")
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            os.close(commands_write)
            os.close(replies_read)


def _inspect(tools: _DevTools, page: Path, width: int) -> PageInspection:
    target = tools.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = tools.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
        "sessionId"
    ]
    for domain in ("Page", "Runtime", "Log", "Network"):
        tools.call(f"{domain}.enable", session=session)
    tools.call(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
        session=session,
    )
    tools.call("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
    tools.wait_for("Page.loadEventFired")

    def evaluate(expression: str) -> Any:
        reply = tools.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session
        )
        return reply["result"].get("value")

    plots = tuple(PlotBox(**box) for box in json.loads(evaluate(_MEASURE_PLOTS)))
    title = str(evaluate("document.title"))
    text = str(evaluate("document.body.innerText"))
    screenshot = tools.call(
        "Page.captureScreenshot",
        {"format": "png", "captureBeyondViewport": True},
        session=session,
    )["data"]
    errors = []
    external = []
    for event in tools.events:
        error = _event_error(event)
        if error is not None:
            errors.append(error)
        if event.get("method") == "Network.requestWillBeSent":
            url = str(event["params"]["request"]["url"])
            if not url.startswith(("file:", "data:", "about:")):
                external.append(url)
    return PageInspection(
        console_errors=tuple(errors),
        external_requests=tuple(external),
        plots=plots,
        title=title,
        text=text,
        screenshot_png=base64.b64decode(screenshot),
    )
