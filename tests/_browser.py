"""One real headless Chromium per test process, driven over its DevTools pipe.

`chromium --headless --dump-dom URL` starts a browser for each page: a second or more each,
dozens of times in tests/replay/test_report_browser.py. Here one browser is started on first
use (and stopped at exit, like `tests._services.run_python`'s fork server) with one tab in a
browser context of its own; each page is a navigation of that tab (a new document: the reports
run no script, their CSP says so, so nothing carries over from one page to the next; a fresh
context per page cost three times the CPU), and its DOM is read the way ``--dump-dom`` prints
it: the doctype, then ``document.documentElement.outerHTML`` after the load event.

The DevTools protocol over ``--remote-debugging-pipe``: JSON messages ending in a NUL byte,
Chromium reading commands from its fd 3 and writing replies and events to its fd 4. No
network: not even a loopback port is opened.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from tests._services import chromium, server_folder

__all__ = ["dump_dom"]

#: The DOM as ``--dump-dom`` prints it (the doctype on its own line, then the html element).
_DOM = (
    "(document.doctype ? new XMLSerializer().serializeToString(document.doctype) + '\\n' : '')"
    " + document.documentElement.outerHTML"
)
#: The flags the tests used with ``--dump-dom``: no background traffic, no first-run work.
_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
)  # fmt: skip


class _Browser:
    def __init__(self) -> None:
        # Held locked while the browser runs: a run killed before stop() leaves the profile to
        # the next start's sweep (the browser itself ends when its DevTools pipe closes).
        self.profile, self._owner = server_folder("pte-chromium-")
        self._log = Path(self.profile, "stderr.log")
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()
        # Bash (sh may take only one-digit fds) puts the pipe ends on the fds Chromium expects, 3 and 4.
        self.process = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{commands_read} 4>&{replies_write}', chromium(), *_FLAGS,
             f"--user-data-dir={self.profile}", "--remote-debugging-pipe", "about:blank"],
            pass_fds=(commands_read, replies_write), stdout=subprocess.DEVNULL, stderr=self._log.open("wb"),
        )  # fmt: skip
        os.close(commands_read)
        os.close(replies_write)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        self._session = ""

    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._replies], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(self._replies, 1 << 16) if ready else b""
            if not chunk:
                said = self._log.read_text(errors="replace")[-2000:]
                raise AssertionError(f"Chromium did not answer (exit status {self.process.poll()}): {said}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        found: dict[str, Any] = json.loads(message)
        return found

    def send(self, method: str, session: str | None = None, timeout: float = 120, **params: Any) -> Any:
        """Send a command and return its result (events that arrive meanwhile are kept)."""
        self._next_id += 1
        command: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            command["sessionId"] = session
        os.write(self._commands, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            message = self._message(deadline)
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise AssertionError(f"Chromium refused {method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self._events.append(message)

    def wait_for(self, event: str, session: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for message in self._events:
                if message["method"] == event and message.get("sessionId") == session:
                    self._events.remove(message)
                    return
            self._events.append(self._message(deadline))

    def open_tab(self) -> None:
        context = self.send("Target.createBrowserContext")["browserContextId"]
        target = self.send("Target.createTarget", url="about:blank", browserContextId=context)["targetId"]
        self._session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send("Page.enable", self._session)

    def dump_dom(self, page: Path) -> str:
        self._events.clear()
        navigated = self.send("Page.navigate", self._session, url=page.as_uri())
        assert "errorText" not in navigated, navigated
        self.wait_for("Page.loadEventFired", self._session)
        value = self.send("Runtime.evaluate", self._session, expression=_DOM, returnByValue=True)
        assert "exceptionDetails" not in value, value
        dom: str = value["result"]["value"]
        return dom

    def stop(self) -> None:
        if self._commands < 0:
            return
        with contextlib.suppress(AssertionError, OSError):  # it may be gone already
            self.send("Browser.close", timeout=10)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._commands)
        os.close(self._replies)
        self._commands = self._replies = -1
        shutil.rmtree(self.profile, ignore_errors=True)
        os.close(self._owner)


_browser: _Browser | None = None


def dump_dom(page: Path) -> str:
    """The DOM of `page` after Chromium loaded it, as ``chromium --headless --dump-dom`` prints
    it (no network: the page must not need any); one browser per process, started on first use."""
    global _browser
    if _browser is None or _browser.process.poll() is not None:
        if _browser is not None:
            _browser.stop()
        _browser = _Browser()
        atexit.register(_browser.stop)
        _browser.open_tab()
    dom = _browser.dump_dom(page)
    assert "<html" in dom, dom[:2000]
    return dom
