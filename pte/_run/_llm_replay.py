"""`ReplayClient`: an `LLMClient` that serves recorded answers (tests, the demo, ``pte replay``)."""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from pte._core import FileRefused, LLMError, ReplayDataError, read_bounded_text
from pte._run._llm import _RESPONSE_FORMATS, LLMResponse, _usage

__all__ = ["ReplayClient"]

#: Largest recorded responses file read (answers are plans: a few KiB each).
MAX_RESPONSES_FILE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class RecordedReply:
    """A recorded answer whose response_format may depend on the call (None: decided then)."""

    text: str
    finish_reason: str | None = "stop"
    usage: dict[str, int] | None = None
    model: str | None = None
    response_format: str | None = None
    attempts: int = 1
    duration_ms: float = 0.0


_ReplayItem: TypeAlias = RecordedReply | LLMResponse | LLMError


class ReplayClient:
    """`LLMClient` that serves recorded answers in order: tests, the offline demo, ``pte replay``.

    Items are strings (an answer with finish_reason "stop" and zero usage, whose
    response_format is "json_schema" when the call passes a schema and "text" otherwise),
    `LLMResponse` objects (served as they are) or `LLMError` objects (raised: a recorded
    failure). `calls` records each call's messages and schema for assertions.
    """

    def __init__(self, responses: Iterable[str | LLMResponse | LLMError], *, model: str = "replay") -> None:
        self.model = model
        self.calls: list[dict[str, Any]] = []
        self._items: deque[_ReplayItem] = deque()
        for index, item in enumerate(responses):
            if isinstance(item, str):
                self._items.append(RecordedReply(item))
            elif isinstance(item, LLMResponse | LLMError | RecordedReply):
                self._items.append(item)
            else:
                kind = type(item).__name__
                raise TypeError(f"ReplayClient item {index} must be str, LLMResponse or LLMError, not {kind}")

    @property
    def remaining(self) -> int:
        """How many recorded answers have not been served yet."""
        return len(self._items)

    @property
    def describe(self) -> dict[str, Any]:
        """The configuration for the audit log."""
        return {"model": self.model, "replay": True, "recorded": len(self.calls) + len(self._items)}

    def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        schema: Mapping[str, Any] | None = None,
        schema_name: str = "pte_plan",
    ) -> LLMResponse:
        """Serve the next recorded answer; see `LLMClient.complete`."""
        self.calls.append(
            {
                "messages": [dict(m) for m in messages],
                "schema": dict(schema) if schema is not None else None,
                "schema_name": schema_name,
            }
        )
        if not self._items:
            raise LLMError(f"replay: no recorded response left (call {len(self.calls)})")
        item = self._items.popleft()
        if isinstance(item, LLMError):
            raise item
        if isinstance(item, LLMResponse):
            return item
        return LLMResponse(
            text=item.text,
            model=item.model or self.model,
            finish_reason=item.finish_reason,
            usage=_usage(item.usage),
            response_format=item.response_format or ("json_schema" if schema is not None else "text"),
            attempts=item.attempts,
            duration_ms=item.duration_ms,
        )

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, model: str = "replay") -> ReplayClient:
        """Load recorded answers from a JSON file.

        The file is a list of strings, or of objects ``{"text", "finish_reason"?, "usage"?,
        "response_format"?, "model"?}`` (an answer) or ``{"error": "message"}`` (a failure).
        Raises `ReplayDataError` when the file is not such a list, OSError when unreadable.
        """
        source = Path(path)
        try:
            data = json.loads(read_bounded_text(source, "recorded responses file", MAX_RESPONSES_FILE_BYTES))
        except FileRefused as exc:
            raise ReplayDataError(str(exc)) from None
        except ValueError as exc:
            raise ReplayDataError(f"{source}: not valid JSON: {exc}") from None
        if not isinstance(data, list):
            raise ReplayDataError(f"{source}: expected a JSON list of recorded responses")
        items: list[_ReplayItem] = []
        for index, entry in enumerate(data):
            where = f"{source}: item {index}"
            if isinstance(entry, str):
                items.append(RecordedReply(entry))
            elif isinstance(entry, Mapping) and "error" in entry:
                items.append(LLMError(_require_str(entry["error"], f"{where}: error")))
            elif isinstance(entry, Mapping) and "text" in entry:
                items.append(
                    RecordedReply(
                        text=_require_str(entry["text"], f"{where}: text"),
                        finish_reason=_optional_str(
                            entry.get("finish_reason", "stop"), f"{where}: finish_reason"
                        ),
                        usage=_usage(entry.get("usage")),
                        model=_optional_str(entry.get("model"), f"{where}: model"),
                        response_format=_response_format(entry.get("response_format"), where),
                    )
                )
            else:
                raise ReplayDataError(f"{where}: expected a string, {{'text': ...}} or {{'error': ...}}")
        return cls._of(items, model)

    @classmethod
    def from_audit(cls, records: Iterable[Mapping[str, Any]], *, model: str | None = None) -> ReplayClient:
        """Replay the `llm_call` records of an audit log, in order.

        A record with an ``error`` is replayed as that `LLMError`; otherwise as an
        `LLMResponse` with the recorded text, model, finish_reason, usage, response_format,
        attempts and duration. Records whose ``type`` names another event are skipped, so a
        whole log can be passed. `model` defaults to the first record's model.
        """
        items: list[_ReplayItem] = []
        first_model: str | None = None
        for index, record in enumerate(records):
            if record.get("type", "llm_call") != "llm_call":
                continue
            where = f"llm_call record {index}" + (f" (seq {record['seq']})" if "seq" in record else "")
            recorded_model = _optional_str(record.get("model"), f"{where}: model")
            first_model = first_model or recorded_model
            error = record.get("error")
            attempts = record.get("attempts", 1)
            attempts = attempts if isinstance(attempts, int) and attempts >= 1 else 1
            if error is not None:
                items.append(LLMError(_require_str(error, f"{where}: error"), attempts=attempts))
                continue
            text = record.get("response")
            if not isinstance(text, str):
                raise ReplayDataError(f"{where}: has neither a response text nor an error")
            duration_ms = record.get("duration_ms", 0.0)
            items.append(
                RecordedReply(
                    text=text,
                    finish_reason=_optional_str(record.get("finish_reason"), f"{where}: finish_reason"),
                    usage=_usage(record.get("usage")),
                    model=recorded_model,
                    response_format=_response_format(record.get("response_format"), where),
                    attempts=attempts,
                    duration_ms=float(duration_ms) if isinstance(duration_ms, int | float) else 0.0,
                )
            )
        return cls._of(items, model or first_model or "replay")

    @classmethod
    def _of(cls, items: Iterable[_ReplayItem], model: str) -> ReplayClient:
        client = cls((), model=model)
        client._items.extend(items)
        return client


def _require_str(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ReplayDataError(f"{where}: expected a string, got {type(value).__name__}")
    return value


def _optional_str(value: object, where: str) -> str | None:
    return None if value is None else _require_str(value, where)


def _response_format(value: object, where: str) -> str | None:
    if value is None:
        return None
    if value not in _RESPONSE_FORMATS:
        raise ReplayDataError(f"{where}: response_format must be one of {', '.join(_RESPONSE_FORMATS)}")
    return value
