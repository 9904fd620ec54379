"""A local OpenAI-compatible chat-completions server for tests.

`FakeOpenAIServer` is a public test double in the spirit of httpx's ``MockTransport``: it
speaks real HTTP on loopback, so a test drives the *whole* client path (the `openai` SDK,
its serialisation, timeouts and error mapping) instead of a patched client. Replies are
scripted in order; every request body is kept for assertions.

    with FakeOpenAIServer(['{"pte_plan": "1", ...}']) as server:
        client = OpenAIClient("m", base_url=server.base_url)
        client.complete(messages, schema=plan_schema)
        assert server.requests[0]["response_format"]["type"] == "json_schema"
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["FakeOpenAIServer", "Reply"]

#: What llama.cpp's server answers (HTTP 500) when asked for ``response_format.type == "json_schema"``.
LLAMA_CPP_REFUSAL_MESSAGE = (
    "1 validation error for ChatCompletionRequest\nresponse_format.type\n"
    "  Input should be 'text' or 'json_object' [type=literal_error, input_value='json_schema', "
    "input_type=str]"
)


@dataclass
class Reply:
    """One scripted chat completion (or one scripted HTTP error when `status` is not 200)."""

    content: str
    finish_reason: str = "stop"
    #: Token counts to report; by default rough ones from the text lengths (len // 4).
    usage: dict[str, int] | None = None
    #: Seconds to sleep before answering, to exercise client timeouts.
    delay_s: float = 0.0
    #: A non-200 status answers with `error_body` (or a generic OpenAI-style error body).
    status: int = 200
    #: The raw response body to send instead of a chat completion, whatever the status
    #: (with status 200: a server that answers garbage).
    error_body: str | None = None


class FakeOpenAIServer:
    """An OpenAI-compatible HTTP server on loopback that answers from a script.

    * ``POST /v1/chat/completions`` answers the next scripted `Reply` as a real
      ``chat.completion`` object; when the script is exhausted it answers HTTP 500.
    * ``GET /v1/models`` lists the one model; any other path is a 404.
    * ``refuse_json_schema=True`` imitates llama.cpp's server: a request whose
      ``response_format.type`` is ``"json_schema"`` gets HTTP 500 and consumes no reply.
    * ``context_tokens=N`` answers ``GET /props`` as llama.cpp does (its per-slot context,
      ``default_generation_settings.n_ctx``); without it ``/props`` is a 404, as on OpenAI.
    * ``slots=N`` serves at most N requests at once (llama.cpp's ``--parallel``); the others
      wait for a slot. A request whose client hangs up while its reply is being "generated"
      (a `Reply.delay_s`) is abandoned at once, as llama.cpp does, and counted in `cancelled`.

    `requests` holds every JSON body received on the completions route, in order;
    `request_headers` the matching headers (lower-cased names).
    """

    def __init__(
        self,
        replies: Iterable[Reply | str] = (),
        *,
        refuse_json_schema: bool = False,
        model: str = "fake-model",
        host: str = "127.0.0.1",
        port: int = 0,
        context_tokens: int | None = None,
        slots: int | None = None,
    ) -> None:
        self.refuse_json_schema = refuse_json_schema
        self.context_tokens = context_tokens
        self.slots = slots
        #: Requests abandoned because their client hung up while the reply was being generated.
        self.cancelled = 0
        #: How many ``GET /props`` requests arrived.
        self.props_requests = 0
        self._slots = threading.BoundedSemaphore(slots) if slots is not None else None
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []
        self._host = host
        self._port = port
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        # Set on stop() so that handlers sleeping in a delayed reply wake up and give up.
        self._stopping = threading.Event()
        self._httpd: _QuietServer | None = None
        self._thread: threading.Thread | None = None
        self._counter = 0
        self.add(*replies)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> FakeOpenAIServer:
        """Bind and serve on a daemon thread; returns self. Starting twice is an error."""
        if self._httpd is not None:
            raise RuntimeError("FakeOpenAIServer is already running")
        self._stopping.clear()
        httpd = _QuietServer((self._host, self._port), _make_handler(self))
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="FakeOpenAIServer", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket; returns promptly. Idempotent."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        httpd.hang_up()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- script ----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, ``http://HOST:PORT/v1`` (only valid while running)."""
        if self._httpd is None:
            raise RuntimeError("FakeOpenAIServer is not running: call start() or use it as a context manager")
        host, port = self._httpd.server_address[:2]
        host_text = host.decode() if isinstance(host, bytes) else str(host)
        return f"http://{host_text}:{port}/v1"

    @property
    def remaining(self) -> int:
        """How many scripted replies have not been served yet."""
        with self._lock:
            return len(self._replies)

    def add(self, *replies: Reply | str) -> None:
        """Append scripted replies (a plain string is a successful reply with that content)."""
        with self._lock:
            self._replies.extend(Reply(r) if isinstance(r, str) else r for r in replies)

    # -- request handling (called from handler threads) ------------------------------------

    def _record(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        with self._lock:
            self.requests.append(body)
            self.request_headers.append(headers)

    def _next_reply(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | str, float]:
        """Decide the answer to one completions request: (status, JSON object or raw text, delay)."""
        response_format = body.get("response_format")
        if (
            self.refuse_json_schema
            and isinstance(response_format, dict)
            and response_format.get("type") == "json_schema"
        ):
            return 500, _error(500, LLAMA_CPP_REFUSAL_MESSAGE, "server_error"), 0.0
        with self._lock:
            if not self._replies:
                return 500, _error(500, "FakeOpenAIServer: no scripted reply left", "server_error"), 0.0
            reply = self._replies.popleft()
            self._counter += 1
            number = self._counter
        if reply.status != 200 or reply.error_body is not None:
            error_body: dict[str, Any] | str = (
                reply.error_body
                if reply.error_body is not None
                else _error(reply.status, f"FakeOpenAIServer: scripted HTTP {reply.status}", "scripted_error")
            )
            return reply.status, error_body, reply.delay_s
        return 200, self._completion(number, body, reply), reply.delay_s

    def _completion(self, number: int, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        usage = reply.usage
        if usage is None:
            prompt_chars = sum(
                len(m.get("content") or "") for m in body.get("messages", []) if isinstance(m, dict)
            )
            prompt, completion = prompt_chars // 4, len(reply.content) // 4
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
        return {
            "id": f"chatcmpl-fake-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "system_fingerprint": "fp_fake",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.content, "refusal": None},
                    "logprobs": None,
                    "finish_reason": reply.finish_reason,
                }
            ],
            "usage": usage,
        }

    def _props(self) -> dict[str, Any] | None:
        with self._lock:
            self.props_requests += 1
        if self.context_tokens is None:
            return None
        return {
            "default_generation_settings": {"n_ctx": self.context_tokens, "params": {"n_predict": -1}},
            "total_slots": self.slots or 1,
            "model_path": f"/models/{self.model}.gguf",
        }

    def _generate(self, delay_s: float, connection: Any) -> bool:
        """Wait out a reply's generation time; False when the client hung up (or the server is
        stopping) first, which abandons the reply as llama.cpp abandons a disconnected request."""
        deadline = time.monotonic() + delay_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            if self._stopping.wait(min(left, 0.02)):
                return False
            if _hung_up(connection):
                with self._lock:
                    self.cancelled += 1
                return False

    def _models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "pte-testing"}],
        }


class _QuietServer(ThreadingHTTPServer):
    # Daemon handler threads: stop() never waits for a reply that is still sleeping.
    daemon_threads = True

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def hang_up(self) -> None:
        """End the connections still open, as a server that stops does: a client's kept-alive
        connection held its handler thread waiting for a next request that never came, past
        the test that started the server (until the client was collected)."""
        with self._open_lock:
            connections = list(self._open)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by its handler
                connection.shutdown(socket.SHUT_RDWR)  # the handler reads end of stream and ends

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (timeout, closed pool) is normal in tests, not worth a traceback;
        # anything else is a bug in the double and must stay visible.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


def _hung_up(connection: Any) -> bool:
    """Whether the peer closed `connection` (readable with nothing to read: end of stream)."""
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        if not readable:
            return False
        return bool(connection.recv(1, socket.MSG_PEEK) == b"")
    except (OSError, ValueError):
        return True


def _error(code: int, message: str, kind: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "type": kind, "param": None}}


def _make_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        # HTTP/1.1 so that the SDK's connection pool keeps connections alive, as with real servers.
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            # Tests must stay quiet: no per-request lines on stderr.
            return

        def _path(self) -> str:
            return self.path.split("?", 1)[0].rstrip("/")

        def _send(self, status: int, payload: dict[str, Any] | str) -> None:
            data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                # The client gave up (e.g. its timeout fired during a delayed reply): nothing to tell it.
                self.close_connection = True

        def do_GET(self) -> None:
            if self._path() == "/v1/models":
                self._send(200, server._models())
            elif self._path() == "/props":
                props = server._props()
                if props is None:
                    self._send(404, _error(404, f"no route for GET {self.path}", "not_found"))
                else:
                    self._send(200, props)
            else:
                self._send(404, _error(404, f"no route for GET {self.path}", "not_found"))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self._path() != "/v1/chat/completions":
                self._send(404, _error(404, f"no route for POST {self.path}", "not_found"))
                return
            try:
                body = json.loads(raw or b"null")
            except ValueError:
                body = None
            if not isinstance(body, dict):
                self._send(400, _error(400, "request body is not a JSON object", "invalid_request_error"))
                return
            server._record(body, {k.lower(): v for k, v in self.headers.items()})
            slot = server._slots
            if slot is not None:
                while not slot.acquire(timeout=0.05):  # wait for a free slot, as a busy server does
                    if server._stopping.is_set() or _hung_up(self.connection):
                        self.close_connection = True
                        return
            try:
                status, payload, delay_s = server._next_reply(body)
                if delay_s > 0 and not server._generate(delay_s, self.connection):
                    # The client hung up, or the server is stopping: drop the request.
                    self.close_connection = True
                    return
                self._send(status, payload)
            finally:
                if slot is not None:
                    slot.release()

    return _Handler
