"""What `OpenAIClient` learns about an endpoint, and what it keeps across processes.

- **Its context size.** llama.cpp's server reports its per-slot context (``GET /props``,
  ``default_generation_settings.n_ctx``); an output bound larger than that can never be
  reached and only hides the real limit, so the client caps its bound there. The OpenAI API
  reports nothing: the configured bound stays.
- **Whether it takes Structured Outputs.** A server that refuses ``json_schema`` (llama.cpp
  answers HTTP 500) is asked in JSON mode from then on. With a deployment directory
  (``deployment_dir=``, else ``$PTE_DEPLOYMENT_DIR``) the refusal is remembered per endpoint
  and model in ``llm-endpoints.json`` there for `REMEMBER_FOR` (a week), so a new process does not
  pay the refused request again. The file holds no authority (a plan is compiled and checked
  whichever form the answer came in) and no secrets (endpoints without their credentials).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["ENDPOINTS_FILE", "REMEMBER_FOR", "EndpointMemory", "context_tokens", "props_url"]

#: The cache file's name inside the deployment directory.
ENDPOINTS_FILE = "llm-endpoints.json"
#: How long a remembered refusal holds before the endpoint is asked again (a server upgrade).
REMEMBER_FOR = timedelta(days=7)
_FORMAT = "1"


def props_url(base_url: str) -> str:
    """llama.cpp's ``/props`` for an OpenAI-style base URL (``http://HOST:8080/v1`` -> ``/props``)."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit(parts._replace(path=f"{path}/props", query="", fragment=""))


def context_tokens(props: Any) -> int | None:
    """The per-slot context a ``/props`` answer reports, or None when it reports none."""
    if not isinstance(props, Mapping):
        return None
    settings = props.get("default_generation_settings")
    for where in (settings, props):
        if isinstance(where, Mapping):
            value = where.get("n_ctx")
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


class EndpointMemory:
    """Facts about endpoints, kept in ``DIR/llm-endpoints.json`` (best effort: a file that
    cannot be read or written is ignored, and the client asks the endpoint as it would)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory) / ENDPOINTS_FILE

    @classmethod
    def configured(cls, directory: str | os.PathLike[str] | None) -> EndpointMemory | None:
        """The memory in `directory`, else in ``$PTE_DEPLOYMENT_DIR``, else None (nothing kept)."""
        chosen = directory if directory is not None else os.environ.get("PTE_DEPLOYMENT_DIR") or None
        return cls(chosen) if chosen is not None else None

    def refuses_json_schema(self, endpoint: str, *, now: datetime | None = None) -> bool:
        """Whether `endpoint` refused ``json_schema`` within `REMEMBER_FOR`."""
        entry = self._entries().get(endpoint)
        if not isinstance(entry, Mapping) or entry.get("json_schema") is not False:
            return False
        try:
            since = datetime.fromisoformat(str(entry.get("at")).replace("Z", "+00:00"))
        except ValueError:
            return False
        if since.tzinfo is None:
            return False
        return (now or datetime.now(UTC)) - since < REMEMBER_FOR

    def remember_json_schema_refusal(self, endpoint: str) -> None:
        """Note that `endpoint` refused ``json_schema`` (written atomically; errors ignored)."""
        entries = dict(self._entries())
        entries[endpoint] = {"json_schema": False, "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
        document = {"pte_llm_endpoints": _FORMAT, "endpoints": entries}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".llm-endpoints.", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump(document, fh, indent=1, sort_keys=True)
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:
            return  # a cache: the next process asks the endpoint again

    def _entries(self) -> Mapping[str, Any]:
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(document, Mapping) or document.get("pte_llm_endpoints") != _FORMAT:
            return {}
        entries = document.get("endpoints")
        return entries if isinstance(entries, Mapping) else {}
