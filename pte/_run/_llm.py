"""LLM clients behind one small protocol.

The engine talks to a language model through `LLMClient.complete` only. Two implementations:

* `OpenAIClient` — the official `openai` SDK against any OpenAI-compatible Chat Completions
  endpoint (OpenAI, Azure OpenAI, vLLM, Ollama, llama.cpp's server). It asks for Structured
  Outputs and falls back to JSON mode, once and for good, on servers that refuse them.
* `ReplayClient` — serves recorded answers (tests, the offline demo, ``pte replay``).

A client moves text and nothing else: it raises `LLMError` when no answer arrived (transport
failure, timeout, HTTP error) or the answer is empty, and otherwise returns the text exactly
as received, whatever its ``finish_reason``. Parsing and validating it is the engine's job, so
that live and replayed runs go through the same checks.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from pte._core import LLMError
from pte._plan import DEFAULT_LIMITS
from pte._run._llm_endpoint import EndpointMemory, context_tokens, props_url

if TYPE_CHECKING:
    # The SDK is imported where a client is built or called, not with this module: it takes
    # ~0.4 s, which every `pte` command (audit verify, show, ...) would pay for nothing.
    import httpx2  # the HTTP library of the openai SDK (it calls it httpx in its docs)
    import openai
    from openai.types.chat import ChatCompletion

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_MODEL",
    "RUNAWAY_STOPS",
    "LLMClient",
    "LLMResponse",
    "OpenAIClient",
]

#: The model used when neither the argument nor PTE_MODEL / OPENAI_MODEL names one.
DEFAULT_MODEL = "gpt-4o-mini"

#: API key sent to local servers that need none (the SDK refuses to run without some key).
_PLACEHOLDER_KEY = "not-needed"

_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")
_RESPONSE_FORMATS = ("json_schema", "json_object", "text")

# Transport retries back off exponentially (like the SDK's own policy), bounded so that a
# planner call never stalls for minutes; a server's Retry-After is honoured up to the cap.
_RETRY_BASE_DELAY_S = 0.5
_RETRY_MAX_DELAY_S = 8.0
_RETRY_AFTER_CAP_S = 60.0
_RETRYABLE_STATUSES = frozenset({408, 409, 429})

# What servers say when they cannot do response_format={"type": "json_schema"}: llama.cpp
# (HTTP 500, "Input should be 'text' or 'json_object'"), OpenAI for a schema strict mode
# cannot take (400, param "response_format"), other servers (400/422) naming the field.
_REFUSAL_STATUSES = frozenset({400, 422, 500, 501})
_REFUSAL_MARKERS = ("response_format", "json_schema", "'text' or 'json_object'", "structured output")

_MAX_DETAIL_CHARS = 500
#: How long the one ``/props`` request may take (it is answered from memory by llama.cpp).
_PROPS_TIMEOUT_S = 5.0

#: Output-token bound of every request unless configured: room for a plan of a quarter of the
#: default plan byte limit (JSON averages 3-4 bytes a token), capped at 16,384, what current
#: hosted models accept as a completion limit. A longer answer is cut off (finish_reason
#: "length"), which the engine rejects as invalid_json at once.
DEFAULT_MAX_TOKENS = min(DEFAULT_LIMITS.max_bytes // 4, 16_384)

#: For JSON answers: stop sequences no plan contains (JSON needs no blank line and no long
#: whitespace run) but a model stuck emitting whitespace soon does, so the server stops
#: generating at once instead of at the token bound. At most four (OpenAI's limit).
RUNAWAY_STOPS = ("\n\n\n", "\n \n", " " * 48, "\t" * 24)


@dataclass(frozen=True)
class LLMResponse:
    """One answer from an LLM endpoint, exactly as received."""

    text: str
    model: str
    #: "stop", "length", ... exactly as the server said (None when it said nothing).
    finish_reason: str | None
    #: prompt_tokens, completion_tokens, total_tokens (0 when unknown).
    usage: dict[str, int]
    #: "json_schema" | "json_object" | "text": what was actually asked for, after any fallback.
    response_format: str
    #: HTTP requests made for this answer (transport retries and a refused json_schema request included).
    attempts: int = 1
    duration_ms: float = 0.0


@runtime_checkable
class LLMClient(Protocol):
    """What the engine needs from a language model."""

    model: str

    def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        schema: Mapping[str, Any] | None = None,
        schema_name: str = "pte_plan",
    ) -> LLMResponse:
        """Answer a chat; with `schema`, ask for one JSON value matching it, else plain text.

        Raises `LLMError` on transport failure, timeout, HTTP error or an empty answer. The
        text is not interpreted (no JSON parsing, no finish_reason check).
        """
        ...


@runtime_checkable
class DescribedClient(LLMClient, Protocol):
    """An `LLMClient` that says how it is configured (endpoint, timeout, retries, token bound:
    never its key): ``run_started.config.llm`` records it, and replay presents it again. None:
    nothing to say (a replay of a run that recorded none)."""

    @property
    def describe(self) -> Mapping[str, Any] | None: ...


# ---------------------------------------------------------------------------------------------
# OpenAI-compatible endpoints
# ---------------------------------------------------------------------------------------------


class OpenAIClient:
    """`LLMClient` on the official `openai` SDK, for any OpenAI-compatible Chat Completions API.

    Configuration (argument, else environment, else default):

    * `model`: ``PTE_MODEL``, then ``OPENAI_MODEL``, then ``"gpt-4o-mini"``. For Azure OpenAI
      this is the deployment name.
    * `base_url`: ``OPENAI_BASE_URL``, else the SDK default (api.openai.com). Azure OpenAI:
      ``https://RESOURCE.openai.azure.com/openai/v1/``; vLLM: ``http://HOST:8000/v1``;
      Ollama: ``http://HOST:11434/v1``; llama.cpp: ``http://HOST:8080/v1``.
    * `api_key`: ``OPENAI_API_KEY``. Without one, a client with a base URL (local servers need
      no key) sends a placeholder; a client without a base URL raises `LLMError`.

    `http_client`: an HTTP client of your own (the ``httpx2.Client`` the openai SDK takes), for
    proxies, a corporate CA bundle, mTLS client certificates or a test transport
    (``httpx2.MockTransport``); PTE never closes it.

    `timeout_s` bounds each HTTP attempt; up to `max_retries` more attempts are made on
    transport failures only (connection errors, HTTP 408/409/429/5xx) — an answer that arrived
    is never retried into a different one, and a timed-out request is never retried either:
    the server may still be generating it, and a retry would pile a second generation on top.

    `max_tokens` bounds every answer (`DEFAULT_MAX_TOKENS` unless given; None sends no bound),
    capped by the context a local server reports (llama.cpp's ``/props``, asked once:
    `output_bound`); JSON answers also stop at `RUNAWAY_STOPS` (a model stuck emitting
    whitespace). A timed-out request is cancelled by closing its connection.

    `deployment_dir` (else ``$PTE_DEPLOYMENT_DIR``): where a ``json_schema`` refusal is
    remembered per endpoint and model (`pte._run._llm_endpoint`), so that a new process asks
    that server in JSON mode at once. The key never appears in messages, `describe` or `repr`.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        max_tokens: int | None = DEFAULT_MAX_TOKENS,
        temperature: float | None = 0.0,
        seed: int | None = None,
        extra_headers: Mapping[str, str] | None = None,
        http_client: httpx2.Client | None = None,
        deployment_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries!r}")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens!r}")
        self.model: str = (
            model or os.environ.get("PTE_MODEL") or os.environ.get("OPENAI_MODEL") or DEFAULT_MODEL
        )
        self.base_url: str | None = base_url or os.environ.get("OPENAI_BASE_URL") or None
        key = api_key or os.environ.get("OPENAI_API_KEY") or None
        if key is None:
            if self.base_url is None:
                raise LLMError(
                    "OPENAI_API_KEY is not set: export it or pass api_key, or point base_url "
                    "(OPENAI_BASE_URL) at an OpenAI-compatible server that needs no key "
                    "(vLLM, Ollama, llama.cpp)"
                )
            key = _PLACEHOLDER_KEY
        self._api_key = key
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        self._structured_outputs_supported: bool | None = None
        self._owns_http_client = http_client is None
        import openai

        try:
            # SDK retries are off: this class retries itself so that `attempts` is exact and a
            # json_schema refusal answered with HTTP 500 (llama.cpp) is not retried as an outage.
            self._sdk = openai.OpenAI(
                api_key=key,
                base_url=self.base_url,
                timeout=self.timeout_s,
                max_retries=0,
                default_headers=dict(extra_headers) if extra_headers else None,
                http_client=http_client,
            )
        except openai.OpenAIError as exc:
            raise LLMError(f"cannot configure the OpenAI client: {self._redact(str(exc))}") from None
        # OpenAI and Azure reject `max_tokens` for reasoning models and want `max_completion_tokens`;
        # vLLM, Ollama and llama.cpp have long understood only `max_tokens`.
        self._max_tokens_param = "max_completion_tokens" if self._is_openai_host() else "max_tokens"
        # pte._run._llm_endpoint: the server's context (asked once, llama.cpp's /props), and a
        # json_schema refusal remembered per endpoint and model in the deployment directory.
        self._context_tokens: int | None = None
        self._context_asked = False
        self._memory = EndpointMemory.configured(deployment_dir)
        self._memory_key = f"{self._endpoint()} {self.model}"
        if self._memory is not None and self._memory.refuses_json_schema(self._memory_key):
            self._structured_outputs_supported = False

    @property
    def structured_outputs_supported(self) -> bool | None:
        """Whether the server takes ``json_schema`` response formats: None until a schema call tells."""
        return self._structured_outputs_supported

    @property
    def context_tokens(self) -> int | None:
        """The context the server reports (llama.cpp's ``/props``), once asked; None: not reported."""
        return self._context_tokens

    @property
    def output_bound(self) -> int | None:
        """The output-token bound sent: `max_tokens`, capped by a context the server reports."""
        if self.max_tokens is None or self._context_tokens is None:
            return self.max_tokens
        return min(self.max_tokens, self._context_tokens)

    @property
    def describe(self) -> dict[str, Any]:
        """The endpoint configuration for the audit log (never the key)."""
        return {
            "model": self.model,
            "base_url": self._endpoint(),
            "timeout_s": self.timeout_s,
            "max_retries": self.max_retries,
            "max_tokens": self.max_tokens,
        }

    def __repr__(self) -> str:
        return f"OpenAIClient(model={self.model!r}, base_url={self._endpoint()!r})"

    def close(self) -> None:
        """Close the HTTP connection pool, unless it is the caller's `http_client` (theirs to close)."""
        if self._owns_http_client:
            self._sdk.close()

    def __enter__(self) -> OpenAIClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        schema: Mapping[str, Any] | None = None,
        schema_name: str = "pte_plan",
    ) -> LLMResponse:
        """Answer a chat; see `LLMClient.complete`.

        With a schema, Structured Outputs (``json_schema``, strict) are asked for first. If the
        server refuses that form, the call is repeated once with ``json_object`` and the schema
        in the system message, and the client keeps using ``json_object`` from then on.
        """
        started = time.perf_counter()
        self._ask_context()
        chat = [dict(m) for m in messages]
        if schema is None:
            form = "text"
        elif self._structured_outputs_supported is False:
            form = "json_object"
        else:
            form = "json_schema"
        attempts = 0
        retries_left = self.max_retries
        import openai

        while True:
            attempts += 1
            try:
                completion = self._create(chat, schema, schema_name, form)
            except openai.APIStatusError as exc:
                if form == "json_schema" and _is_json_schema_refusal(exc):
                    # Not a transport failure: the same question in the other form, no retry spent.
                    self._structured_outputs_supported = False
                    if self._memory is not None:  # and the next process asks in JSON mode at once
                        self._memory.remember_json_schema_refusal(self._memory_key)
                    form = "json_object"
                    continue
                delay = self._retry_delay(exc, retries_left)
                if delay is None:
                    raise LLMError(self._status_message(exc, attempts), attempts=attempts) from None
            except openai.APITimeoutError:
                # Not retried: the server may still be busy with this very request. The HTTP
                # client has closed its connection (an unread response cannot be reused), which
                # is how a request is cancelled: llama.cpp's server stops generating for a
                # client that hung up (tests/run/test_llm_endpoint.py).
                raise LLMError(
                    f"timed out after {self.timeout_s:g}s waiting for {self._where()}"
                    f"{_attempts_note(attempts)}; the request was cancelled (connection closed) "
                    "and not retried",
                    attempts=attempts,
                ) from None
            except openai.APIConnectionError as exc:
                delay = self._retry_delay(None, retries_left)
                if delay is None:
                    cause = f" ({exc.__cause__})" if exc.__cause__ else ""
                    raise LLMError(
                        self._redact(f"cannot reach {self._where()}: {exc.message}{cause}")
                        + _attempts_note(attempts),
                        attempts=attempts,
                    ) from None
            except (openai.OpenAIError, ValueError) as exc:
                # e.g. a 200 whose body is not a chat completion (or not JSON at all): the server
                # answered, so this is not a transport failure and is never retried.
                raise LLMError(
                    self._redact(f"unusable response from {self._where()}: {exc}"), attempts=attempts
                ) from None
            else:
                if form == "json_schema":
                    self._structured_outputs_supported = True
                try:
                    return self._response(completion, form, attempts, started)
                except LLMError as exc:
                    exc.attempts = attempts
                    raise
            retries_left -= 1
            time.sleep(delay)

    # -- helpers -------------------------------------------------------------------------------

    def _create(
        self, chat: list[dict[str, str]], schema: Mapping[str, Any] | None, schema_name: str, form: str
    ) -> ChatCompletion:
        import openai
        from openai.types.chat import ChatCompletion

        response_format: Any = openai.omit
        if schema is not None and form == "json_schema":
            response_format = {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "schema": dict(schema), "strict": True},
            }
        elif schema is not None and form == "json_object":
            response_format = {"type": "json_object"}
            chat = _with_schema_instruction(chat, schema)
        options: dict[str, Any] = {}
        if schema is not None:
            options["stop"] = list(RUNAWAY_STOPS)
        bound = self.output_bound
        if bound is not None:
            options[self._max_tokens_param] = bound
        if self.temperature is not None:
            options["temperature"] = self.temperature
        if self.seed is not None:
            options["seed"] = self.seed
        result: object = self._sdk.chat.completions.create(
            model=self.model,
            messages=cast(Any, chat),
            response_format=response_format,
            **options,
        )
        if not isinstance(result, ChatCompletion):
            raise openai.OpenAIError(f"expected a chat completion, got {type(result).__name__}")
        return result

    def _response(self, completion: ChatCompletion, form: str, attempts: int, started: float) -> LLMResponse:
        choices = completion.choices or []
        message = choices[0].message if choices else None
        if message is None:
            raise LLMError(f"{self._where()} answered with no choices")
        finish_reason = cast("str | None", getattr(choices[0], "finish_reason", None))
        text = message.content
        if not isinstance(text, str) or not text.strip():
            refusal = getattr(message, "refusal", None)
            detail = f"; the model refused: {_clip(str(refusal))}" if refusal else ""
            raise LLMError(f"empty answer from {self._where()} (finish_reason={finish_reason!r}){detail}")
        return LLMResponse(
            text=text,
            model=completion.model or self.model,
            finish_reason=finish_reason,
            usage=_usage(completion.usage.model_dump() if completion.usage is not None else None),
            response_format=form,
            attempts=attempts,
            duration_ms=(time.perf_counter() - started) * 1000.0,
        )

    def _ask_context(self) -> None:
        """Ask a local server once for its context (llama.cpp: ``GET /props``), to cap the bound.

        Only with a bound to cap and a base URL that is not OpenAI's (whose API reports no
        context); any failure (a 404 from vLLM or Ollama, no answer) leaves the bound as set.
        """
        if self._context_asked:
            return
        self._context_asked = True
        if self.max_tokens is None or self.base_url is None or self._is_openai_host():
            return
        import httpx2
        import openai

        try:
            response = self._sdk.get(
                props_url(self.base_url),
                cast_to=httpx2.Response,
                options={"timeout": min(self.timeout_s, _PROPS_TIMEOUT_S), "max_retries": 0},
            )
            self._context_tokens = context_tokens(response.json())
        except (openai.OpenAIError, httpx2.HTTPError, ValueError):
            return

    def _retry_delay(self, exc: openai.APIStatusError | None, retries_left: int) -> float | None:
        """Seconds to wait before retrying, or None when this failure must not be retried."""
        if retries_left <= 0:
            return None
        retry_after: float | None = None
        if exc is not None:
            headers = exc.response.headers
            should_retry = headers.get("x-should-retry")
            if should_retry == "false":
                return None
            if should_retry != "true" and not (
                exc.status_code in _RETRYABLE_STATUSES or exc.status_code >= 500
            ):
                return None
            retry_after = _parse_retry_after(headers.get("retry-after"))
            if retry_after is not None and retry_after > _RETRY_AFTER_CAP_S:
                return None
        if retry_after is not None and retry_after > 0:
            return retry_after
        done = self.max_retries - retries_left
        # Jitter keeps several engines that failed together from retrying in lockstep.
        return min(_RETRY_BASE_DELAY_S * 2.0**done, _RETRY_MAX_DELAY_S) * (1.0 - 0.25 * random.random())

    def _status_message(self, exc: openai.APIStatusError, attempts: int) -> str:
        detail = _error_detail(exc)
        return self._redact(
            f"{self._where()} answered HTTP {exc.status_code}: {_clip(detail)}{_attempts_note(attempts)}"
        )

    def _is_openai_host(self) -> bool:
        if self.base_url is None:
            return True
        host = (urlsplit(self.base_url).hostname or "").lower()
        return host == "api.openai.com" or host.endswith((".openai.com", ".openai.azure.com"))

    def _endpoint(self) -> str:
        """The base URL actually used, without any user:password part."""
        url = self.base_url or str(self._sdk.base_url)
        parts = urlsplit(url)
        if parts.username is None and parts.password is None:
            return url
        netloc = parts.hostname or ""
        if parts.port is not None:
            netloc += f":{parts.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def _where(self) -> str:
        return f"model {self.model!r} at {self._endpoint()}"

    def _redact(self, text: str) -> str:
        # Servers echo keys back (OpenAI's 401 quotes part of it): never let one into a message.
        if self._api_key and self._api_key != _PLACEHOLDER_KEY:
            text = text.replace(self._api_key, "[REDACTED]")
        return text


def _is_json_schema_refusal(exc: openai.APIStatusError) -> bool:
    """Whether an HTTP error is the server declining ``response_format.type == "json_schema"``."""
    if exc.status_code not in _REFUSAL_STATUSES:
        return False
    text = _error_detail(exc).lower()
    return any(marker in text for marker in _REFUSAL_MARKERS)


def _error_detail(exc: openai.APIStatusError) -> str:
    """The server's own words about an error: message, param and validation details.

    Deliberately not the whole body: FastAPI-style 422 bodies echo the request, which always
    mentions response_format and would make every 422 look like a json_schema refusal.
    """
    body = exc.body
    parts: list[str] = []
    if isinstance(body, Mapping):
        for key in ("message", "msg", "error"):
            value = body.get(key)
            if isinstance(value, str) and value:
                parts.append(value)
        if isinstance(body.get("param"), str):
            parts.append(f"(param {body['param']})")
        detail = body.get("detail")
        if isinstance(detail, str):
            parts.append(detail)
        elif isinstance(detail, list):
            for item in detail:
                if isinstance(item, Mapping):
                    parts.append(f"{item.get('loc')}: {item.get('msg')}")
    elif isinstance(body, str) and body:
        parts.append(body)
    if not parts:
        parts.append(exc.message)
    return " ".join(parts)


def _with_schema_instruction(chat: list[dict[str, str]], schema: Mapping[str, Any]) -> list[dict[str, str]]:
    """The chat with the JSON Schema stated in its system message (JSON mode cannot carry it).

    Merged into a leading system message rather than added as a second one: several local
    chat templates reject a system message that is not the first message.
    """
    instruction = "Answer with one JSON object valid against this JSON Schema:\n" + json.dumps(
        schema, ensure_ascii=False, separators=(",", ":")
    )
    if chat and chat[0].get("role") == "system":
        first = dict(chat[0])
        first["content"] = f"{first.get('content', '')}\n\n{instruction}"
        return [first, *chat[1:]]
    return [{"role": "system", "content": instruction}, *chat]


def _parse_retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # An HTTP date: rare for LLM APIs; the exponential backoff applies.
    return seconds if seconds == seconds and seconds >= 0 else None


def _attempts_note(attempts: int) -> str:
    return f" after {attempts} attempts" if attempts > 1 else ""


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_DETAIL_CHARS else text[: _MAX_DETAIL_CHARS - 3] + "..."


def _usage(raw: object) -> dict[str, int]:
    """prompt/completion/total token counts; 0 for what is unknown, total summed when missing."""
    usage = dict.fromkeys(_USAGE_KEYS, 0)
    if isinstance(raw, Mapping):
        for key in _USAGE_KEYS:
            value = raw.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                usage[key] = value
        if not usage["total_tokens"]:
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return usage
