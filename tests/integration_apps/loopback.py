"""Serve an ASGI app with uvicorn on 127.0.0.1 (a free port) on a background thread, for tests."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Literal

import uvicorn


class LoopbackServer:
    """``with LoopbackServer(app) as server: server.url``: a real HTTP server on loopback."""

    def __init__(self, app: Any, *, lifespan: Literal["auto", "on", "off"] = "off", **config: Any) -> None:
        """`config`: more of uvicorn's settings (``ssl_certfile`` and ``ssl_keyfile``: HTTPS)."""
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        scheme = "https" if config.get("ssl_certfile") else "http"
        self.url = f"{scheme}://127.0.0.1:{self._socket.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan=lifespan, **config))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the test app did not start")
            time.sleep(0.02)
        return self

    def open_connections(self, *, settle_s: float = 2.0) -> int:
        """How many client connections the server holds open, once those that are closing have
        closed (a client's close reaches the server a moment later; its own keep-alive timeout,
        5 s, is longer than `settle_s`)."""
        deadline = time.monotonic() + settle_s
        while self._server.server_state.connections and time.monotonic() < deadline:
            time.sleep(0.02)
        return len(self._server.server_state.connections)

    def __exit__(self, *exc_info: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()
