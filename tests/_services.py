"""Real PostgreSQL and Redis servers for the tests, started on loopback and stopped after.

Both come from the Debian packages (``postgresql``, ``redis-server``; `.ci/run` installs
them). PostgreSQL refuses to run as root, so as root the cluster belongs to the
``postgres`` system user the package creates. Nothing here stands in for a server: the
tests talk to the real thing over TCP on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

#: The system packages the full suite uses (Debian names), as the README lists them.
SYSTEM_PACKAGES = {
    "node": "nodejs",
    "chromium": "chromium",
    "redis-server": "redis-server",
    "postgresql": "postgresql",
}


def require_system(what: str, found: str | None) -> str:
    """`found` (a program's path), or: skip with the reason, but under CI=true fail.

    A newcomer's machine may lack a service; the test then says what is missing instead
    of failing obscurely. CI installs everything (.ci/run), so there a missing one is an error.
    """
    if found:
        return found
    reason = f"{what} is not installed: apt-get install -y {SYSTEM_PACKAGES[what]} (.ci/run does this)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def node() -> str:
    """The Node.js binary (the independent audit verifier and the RFC 8785 cross-check)."""
    return require_system("node", shutil.which("node") or shutil.which("nodejs"))


def chromium() -> str:
    """The Chromium binary (the HTML report rendered in a real browser)."""
    found = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    return require_system("chromium", found)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _as_postgres(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """A throwaway PostgreSQL cluster on a free loopback port; yields its URL."""
    initdb = require_system("postgresql", _pg_bin("initdb"))
    pg_ctl = require_system("postgresql", _pg_bin("pg_ctl"))
    base = tempfile.mkdtemp(prefix="pte-pg-")
    os.chmod(base, 0o755)
    data = Path(base) / "data"
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
    port = free_port()
    subprocess.run(
        _as_postgres([initdb, "-D", str(data), "-U", "pte", "--auth=trust", "-E", "UTF8", "--no-sync"]),
        check=True,
        capture_output=True,
    )
    options = (
        f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off "
        "-c max_connections=200"
    )
    subprocess.run(
        _as_postgres([pg_ctl, "-D", str(data), "-l", f"{base}/log", "-o", options, "-w", "start"]),
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://pte@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            _as_postgres([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"]), capture_output=True
        )
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """A throwaway Redis server (no persistence) on a free loopback port; yields its URL."""
    binary = require_system("redis-server", shutil.which("redis-server"))
    port = free_port()
    base = tempfile.mkdtemp(prefix="pte-redis-")
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            base,
            "--protected-mode",
            "yes",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("redis-server did not start")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url
