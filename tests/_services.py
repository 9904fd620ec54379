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
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.fail("PostgreSQL is not installed: apt-get install -y postgresql (.ci/run does this)")
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
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("Redis is not installed: apt-get install -y redis-server (.ci/run does this)")
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
