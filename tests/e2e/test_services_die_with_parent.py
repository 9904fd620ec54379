"""A test run killed before its teardown leaves no server behind (tests/_services.py, tests/_browser.py).

The servers the tests start on loopback are children of the test process that the kernel
signals when it ends (`dies_with_parent`). Before, PostgreSQL was started by `pg_ctl` (an orphan
from the start): every killed run left a /tmp/pte-pg-* server listening.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._services import sweep_server_folders

REPO = Path(__file__).resolve().parents[2]

#: A test process holding a server: it prints the server's pid, port and folder, then waits to
#: be killed.
HOLDERS = {
    "postgresql": (
        "import os, psycopg, time\n"
        "from tests._services import postgres_server\n"
        "with postgres_server() as url, psycopg.connect(url) as conn:\n"
        "    data = conn.execute('SHOW data_directory').fetchone()[0]\n"
        "    pid = open(data + '/postmaster.pid').readline().strip()\n"
        "    print(pid, url.rsplit(':', 1)[1].split('/')[0], os.path.dirname(data), flush=True)\n"
        "    time.sleep(600)\n"
    ),
    "redis": (
        "import socket, time\n"
        "from tests._services import redis_server\n"
        "with redis_server() as url:\n"
        "    port = int(url.rsplit(':', 1)[1].split('/')[0])\n"
        "    with socket.create_connection(('127.0.0.1', port)) as sock:\n"
        "        sock.sendall(b'INFO server\\r\\nCONFIG GET dir\\r\\n'); time.sleep(0.2)\n"
        "        said = sock.recv(65536).decode().splitlines()\n"
        "    pid = next(l.split(':')[1] for l in said if l.startswith('process_id:'))\n"
        "    print(pid, port, said[-1], flush=True)\n"
        "    time.sleep(600)\n"
    ),
    # No port: the browser is driven over a pipe. It ends when the pipe closes; its profile
    # folder is swept like a server's.
    "chromium": (
        "import os, tempfile, time\n"
        "from pathlib import Path\n"
        "import tests._browser as browser\n"
        "page = Path(tempfile.gettempdir(), f'pte-page-{os.getpid()}.html')\n"
        "page.write_text('<!doctype html><html><body>x</body></html>')\n"
        "browser.dump_dom(page); page.unlink()\n"
        "print(browser._browser.process.pid, 0, browser._browser.profile, flush=True)\n"
        "time.sleep(600)\n"
    ),
}


def _running(pid: int) -> bool:
    """Whether `pid` still runs (a zombie nobody reaps, in a container without an init, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _listening(port: int) -> bool:
    if port == 0:
        return False  # nothing to listen on
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
@pytest.mark.parametrize("service", sorted(HOLDERS))
def test_a_killed_test_process_takes_its_server_with_it(service: str) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDERS[service]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line, holder.stderr.read() if holder.stderr else ""
        pid, port, folder = int(line.split()[0]), int(line.split()[1]), Path(line.split()[2])
        assert _running(pid) and (folder / "owner.lock").is_file()
        assert _listening(port) or port == 0
    finally:
        holder.kill()  # as a CI timeout or the OOM killer does: no teardown runs
        holder.wait()
    deadline = time.monotonic() + 30
    while (_running(pid) or _listening(port)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid), f"{service} (pid {pid}) outlived the test process that started it"
    assert not _listening(port)
    # Its folder (a PostgreSQL cluster is ~40 MB) goes at the next start of a server, or now:
    sweep_server_folders(folder.name.rsplit("-", 1)[0] + "-")
    assert not folder.exists()
