"""Real PostgreSQL and Redis servers for the tests, started on loopback and stopped after.

Both come from the Debian packages (``postgresql``, ``redis-server``; `.ci/run` installs
them). PostgreSQL refuses to run as root, so as root the cluster belongs to the
``postgres`` system user the package creates. Nothing here stands in for a server: the
tests talk to the real thing over TCP on 127.0.0.1.

Every server is a child of the test process that dies with it (`dies_with_parent`): a test run
killed before its fixtures' teardown (a CI timeout, ^C twice, an OOM kill) leaves no server
behind.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import glob
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

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


#: prctl(2)'s option: the signal the kernel sends a process when its parent ends (Linux only).
_PR_SET_PDEATHSIG = 1


def dies_with_parent(signal_number: int) -> Callable[[], None] | None:
    """A `subprocess.Popen` ``preexec_fn``: the child gets `signal_number` when this process ends.

    However the test process ends (SIGKILL included), the kernel signals the server, so no
    teardown has to run. Set in the child after `Popen`'s ``user=`` switch (the kernel clears it
    when the user changes) and kept across ``exec``. It fires when the *thread* that started the
    child ends: start servers from the test's own thread, not a short-lived one. None (nothing
    to arm) off Linux.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def arm() -> None:
        if prctl(_PR_SET_PDEATHSIG, signal_number, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the parent ended before the signal was armed
            os.kill(os.getpid(), signal_number)

    return arm


#: In a server's folder: the file its test process holds locked for as long as it lives.
_OWNER = "owner.lock"


def server_folder(prefix: str) -> tuple[str, int]:
    """A new folder for a server (after removing those of servers whose test process is gone)
    and the descriptor of its lock, held until the server is stopped (or this process ends)."""
    sweep_server_folders(prefix)
    base = tempfile.mkdtemp(prefix=prefix)
    lock = os.open(os.path.join(base, ".owner"), os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    # Locked under another name first: a sweep never finds the lock file free in between.
    os.rename(os.path.join(base, ".owner"), os.path.join(base, _OWNER))
    return base, lock


def sweep_server_folders(prefix: str) -> None:
    """Remove the folders (a PostgreSQL cluster is ~40 MB) of servers whose test process was
    killed before its teardown: their lock is free. Folders without a lock are left alone."""
    for base in glob.glob(os.path.join(tempfile.gettempdir(), f"{prefix}*")):
        try:
            lock = os.open(os.path.join(base, _OWNER), os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its test process is alive
        else:
            shutil.rmtree(base, ignore_errors=True)
        finally:
            os.close(lock)


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
    postgres = require_system("postgresql", _pg_bin("postgres"))
    as_root = os.geteuid() == 0
    base, lock = server_folder("pte-pg-")
    server: subprocess.Popen[bytes] | None = None
    try:
        os.chmod(base, 0o755)
        data = Path(base) / "data"
        if as_root:
            shutil.chown(base, "postgres")
        port = free_port()
        subprocess.run(
            _as_postgres([initdb, "-D", str(data), "-U", "pte", "--auth=trust", "-E", "UTF8", "--no-sync"]),
            check=True,
            capture_output=True,
        )
        # The server itself, not `pg_ctl start` (which leaves it an orphan): a child of this
        # process that gets SIGQUIT, PostgreSQL's immediate shutdown, when this process ends.
        options = ["-p", str(port), "-k", base, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                   "-c", "full_page_writes=off", "-c", "max_connections=200"]  # fmt: skip
        with open(f"{base}/log", "wb") as log:
            server = subprocess.Popen(
                [postgres, "-D", str(data), *options],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                user="postgres" if as_root else None,
                group="postgres" if as_root else None,
                extra_groups=[] if as_root else None,
                preexec_fn=dies_with_parent(signal.SIGQUIT),
            )
        _wait_until_ready(server, data, Path(base, "log"))
        yield f"postgresql://pte@127.0.0.1:{port}/postgres"
    finally:
        if server is not None:
            server.send_signal(signal.SIGQUIT)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        shutil.rmtree(base, ignore_errors=True)
        os.close(lock)


def _wait_until_ready(server: subprocess.Popen[bytes], data: Path, log: Path) -> None:
    """Until the server accepts connections: the status line of its postmaster.pid says "ready"
    (what `pg_ctl -w` waits for, polled here ten times as often)."""
    deadline = time.monotonic() + 60
    pid_file = data / "postmaster.pid"
    while True:
        with contextlib.suppress(OSError):
            lines = pid_file.read_text(encoding="utf-8").splitlines()
            if len(lines) >= 8 and lines[7].strip() == "ready":
                return
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            server.wait()
            pytest.fail(f"PostgreSQL did not start: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.01)


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """A throwaway Redis server (no persistence) on a free loopback port; yields its URL."""
    binary = require_system("redis-server", shutil.which("redis-server"))
    port = free_port()
    base, lock = server_folder("pte-redis-")
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
        preexec_fn=dies_with_parent(signal.SIGKILL),  # no data to save: it keeps none
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
            time.sleep(0.01)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(base, ignore_errors=True)
        os.close(lock)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


# A Python process that forks a child per script: the crash tests kill a child by SIGKILL at
# every record boundary, dozens of times per test, and most of a fresh interpreter's second
# is importing pte. The server imports it once; each child is a fork of that clean process
# (it never ran anything) that sets its environment and argv as `python -c` would, runs the
# script given, and exits through the interpreter's normal shutdown (or dies by its signal).
# What the test sees is the same: a separate process, its exit status, its stdout/stderr.
_FORK_SERVER = r"""
import importlib, json, os, select, signal, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
from pte._catalogue._registry import load_registry
answer = os.fdopen(os.dup(1), "w")
while True:
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    job = json.loads(line)
    try:  # modules and tool packs to import here once (their children find them loaded)
        for name in job["imports"]:
            importlib.import_module(name)
        if job["warm"]:
            load_registry(job["warm"])
    except Exception:
        pass  # the child imports it again and fails with the reason, as a fresh process would
    pid = os.fork()
    if pid == 0:
        break
    pidfd = os.pidfd_open(pid)
    ready, _, _ = select.select([pidfd], [], [], job["timeout"])
    timed_out = not ready
    if timed_out:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os.close(pidfd)
    answer.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status), "timed_out": timed_out}) + "\n")
    answer.flush()
# The child: `python -c CODE ARGV...` in the job's folder with its environment, stdin closed,
# output to files.
answer.close()
for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, job["stdout"], os.O_WRONLY | os.O_TRUNC),
                        (2, job["stderr"], os.O_WRONLY | os.O_TRUNC)):
    opened = os.open(path, flags)
    os.dup2(opened, fd)
    os.close(opened)
if job["cwd"] is not None:
    os.chdir(job["cwd"])
os.environ.clear()
os.environ.update(job["env"])
sys.argv = ["-c", *job["argv"]]
code = compile(job["code"], "<string>", "exec")
del job, line, pid, answer
exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
"""

#: What the fork server imports before it forks (the slow part of a child's start).
_PRELOAD = ("pte", "pte._audit", "pte._run", "pte._catalogue", "pte._replay")
_fork_server: subprocess.Popen[str] | None = None


def _server() -> subprocess.Popen[str]:
    global _fork_server
    if _fork_server is None or _fork_server.poll() is not None:
        _fork_server = subprocess.Popen(
            [sys.executable, "-c", _FORK_SERVER, *_PRELOAD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        atexit.register(_stop, _fork_server)
    return _fork_server


def _stop(server: subprocess.Popen[str]) -> None:
    """End of input: the server exits (and is waited for, so its CPU time is the test run's)."""
    assert server.stdin is not None
    server.stdin.close()
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def run_python(
    code: str,
    *argv: str,
    env: dict[str, str],
    timeout: float,
    warm: Sequence[str] = (),
    imports: Sequence[str] = (),
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """`subprocess.run([python, "-c", code, *argv], env=env, cwd=cwd, capture_output=True,
    timeout=timeout)`, in a child forked from a Python process that has pte imported already
    (fast to start).

    Like `subprocess.run`: the exit code, negative for a signal (-9 after SIGKILL), the output
    as bytes, and `subprocess.TimeoutExpired` when the child is still running after `timeout`.
    `warm` (tool packs) and `imports` (modules): what the child loads that the server may import
    first, once; only code that reads nothing from the environment when it is imported (the
    server's environment is not the job's).
    """
    server = _server()
    assert server.stdin is not None and server.stdout is not None
    with tempfile.TemporaryDirectory(prefix="pte-child-") as tmp:
        out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
        out.touch()
        err.touch()
        job = {"code": code, "argv": list(argv), "env": env, "timeout": timeout, "stdout": str(out),
               "stderr": str(err), "warm": list(warm), "imports": list(imports),
               "cwd": None if cwd is None else os.fspath(cwd)}  # fmt: skip
        server.stdin.write(json.dumps(job) + "\n")
        server.stdin.flush()
        answer = json.loads(server.stdout.readline())
        args = [sys.executable, "-c", code, *argv]
        if answer["timed_out"]:
            raise subprocess.TimeoutExpired(args, timeout, out.read_bytes(), err.read_bytes())
        return subprocess.CompletedProcess(args, answer["returncode"], out.read_bytes(), err.read_bytes())


# --- run stores over both SQL backends, for the tests that tamper with their tables ------------

#: The databases made in this process (one per test file; xdist runs a file in one process).
_DATABASES: set[str] = set()


def database(postgres_url: str, name: str) -> str:
    """The URL of database `name` on the test server, made empty the first time it is asked for."""
    if name not in _DATABASES:
        import psycopg

        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")
            conn.execute(f"CREATE DATABASE {name}")
        _DATABASES.add(name)
    return postgres_url.rsplit("/", 1)[0] + "/" + name


def write_tables(store: Any, statement: str, params: tuple[Any, ...] = ()) -> None:
    """Write a run store's tables directly, as anyone with database access can (no key);
    `?` placeholders, for SQLite and PostgreSQL alike."""
    from pte.stores import SQLiteStore

    if isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as conn:
            conn.execute(statement, params)
    else:
        import psycopg

        with psycopg.connect(store.url, autocommit=True) as conn:
            conn.execute(statement.replace("?", "%s"), params)


def store_fixture(database_name: str) -> Any:
    """A `store` fixture over SQLite (in the test's folder) and PostgreSQL (database
    `database_name`, emptied before each test: one database per file, since a database per
    test would cost a checkpoint each)."""

    @pytest.fixture(params=["sqlite", "postgresql"])
    def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
        from pte.stores import open_store

        if request.param == "sqlite":
            url = f"sqlite://{tmp_path / 'runs.db'}"
        else:
            url = database(request.getfixturevalue("postgres_url"), database_name)
        with open_store(url) as opened:
            if request.param == "postgresql":
                write_tables(
                    opened, "TRUNCATE pte_runs, pte_records, pte_approvals, pte_checkpoints, pte_anchors"
                )
            yield opened

    return store
