"""The operations of an OpenAPI 3 document as PTE tools, called over httpx
(``pip install 'plan-then-execute[openapi]'``).

    import ssl, httpx
    from pte.importers.openapi import import_openapi, load_openapi

    corp_ca = ssl.create_default_context(cafile="/etc/ssl/corp-ca.pem")
    with httpx.Client(verify=corp_ca, headers={"Authorization": "Bearer ..."}) as http:
        document = load_openapi("https://billing.internal/openapi.json", client=http)
        registry = import_openapi(document, base_url="https://billing.internal", client=http)
        ...  # runs over `registry`: its tools call through `http`, open until the block ends

One tool per operation, named by its ``operationId``. The input schema is an object of the
operation's path, query and header parameters, plus ``body`` for a JSON request body; the
output schema is the JSON schema of its first 2xx response. ``#/components/schemas`` references
become ``$defs`` of each tool's own schemas, so plans are type-checked through them.

The deployment decides where requests go (`base_url`; the document's ``servers`` are not
used) and how (`client`: proxies, CAs, mTLS, auth). A `client` passed in is the caller's: PTE
never closes it, and it must stay open while the tools are used (``with httpx.Client() as
http:``). Without one, each call opens its own client and closes it before it returns, so
imported tools hold no connection that outlives a call; they trust the environment's CA file as
it is now (`tls_context`: loaded once per state of the file, not per call). Redirects are not
followed. GET and HEAD operations are ``read`` tools (PTE sends them as GET/HEAD), every other method a
non-idempotent ``write``; outputs are ``untrusted`` unless the import manifest says otherwise.
An operation without an ``operationId`` or a JSON response schema is refused with what to
declare. A response that is not 2xx, not strict JSON or not valid against the output schema
fails its step.
"""

from __future__ import annotations

import copy
import json
import os
import ssl
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import quote

from pte._catalogue import Registry, SchemaFunction
from pte._core import (
    FileRefused,
    ImportRefused,
    OpenAPIError,
    StrictJSONError,
    ToolError,
    hash_json,
    read_bounded_bytes,
    sha256_hex,
)
from pte._core import strict_json as strict_json
from pte._core import strict_yaml as strict_yaml
from pte.importers._common import ImportManifest, SourceTool, build_registry

__all__ = ["OpenAPIError", "import_openapi", "load_openapi", "tls_context"]

_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
_READ_METHODS = frozenset({"get", "head"})
_PARAM_LOCATIONS = ("path", "query", "header")
_MAX_ERROR_CHARS = 1000
#: Largest OpenAPI document read from a file or fetched (large public APIs are a few MiB).
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024


def _httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise OpenAPIError(
            "the OpenAPI importer needs httpx: pip install 'plan-then-execute[openapi]'"
        ) from None
    return httpx


def load_openapi(source: str | os.PathLike[str], *, client: Any = None) -> dict[str, Any]:
    """An OpenAPI document (JSON) from a URL (fetched with `client`, an ``httpx.Client``) or a file.

    Parsed strictly (duplicate keys, NaN and deep nesting refused). A ``.yaml``/``.yml``
    document, or one that does not start with ``{``, is read as YAML (PyYAML, the ``openapi``
    extra) with the same strictness: duplicate keys, anchors/aliases and non-JSON values
    (dates stay text) are refused, and the result is checked as strict JSON.
    """
    text = str(source)
    if text.startswith(("http://", "https://")):
        httpx = _httpx()
        owned = client is None
        http = client if client is not None else httpx.Client(timeout=30.0, verify=tls_context())
        try:
            raw: bytes = _fetch_bounded(http, text)
        except httpx.HTTPError as exc:
            raise OpenAPIError(f"cannot fetch OpenAPI document {text!r}: {exc}") from None
        finally:
            if owned:
                http.close()
    else:
        try:
            raw = read_bounded_bytes(source, "OpenAPI document", MAX_DOCUMENT_BYTES)
        except FileRefused as exc:
            raise OpenAPIError(str(exc)) from None
    if _is_yaml(text, raw):
        document = _yaml_document(text, raw)
    else:
        try:
            document = strict_json.loads(raw)
        except StrictJSONError as exc:
            raise OpenAPIError(f"OpenAPI document {text!r} is not strict JSON: {exc.message}") from None
    if not isinstance(document, dict) or not str(document.get("openapi", "")).startswith("3."):
        raise OpenAPIError(f"{text!r} is not an OpenAPI 3 document (no 'openapi': '3.x')")
    return document


def _fetch_bounded(http: Any, url: str) -> bytes:
    """The body at `url`, streamed and refused past `MAX_DOCUMENT_BYTES` (a hostile server
    could otherwise send gigabytes before the parser sees a byte)."""
    with http.stream("GET", url) as response:
        response.raise_for_status()
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > MAX_DOCUMENT_BYTES:
                raise OpenAPIError(f"OpenAPI document {url!r} is over {MAX_DOCUMENT_BYTES} bytes")
            chunks.append(chunk)
    return b"".join(chunks)


def _is_yaml(source: str, raw: bytes) -> bool:
    path = source.split("?", 1)[0].lower()
    if path.endswith((".yaml", ".yml")):
        return True
    return not path.endswith(".json") and raw.lstrip()[:1] not in (b"{", b"[")


def _yaml_document(source: str, raw: bytes) -> Any:
    """A YAML document as JSON values, parsed as strictly as JSON is (pte._core.strict_yaml)."""
    try:
        return strict_yaml.loads(raw.decode("utf-8"))
    except ImportError:
        raise OpenAPIError(
            f"OpenAPI document {source!r} is YAML, which needs PyYAML, a dependency of "
            "plan-then-execute (pip install plan-then-execute)"
        ) from None
    except UnicodeDecodeError:
        raise OpenAPIError(f"OpenAPI document {source!r} is not UTF-8 text") from None
    except StrictJSONError as exc:
        raise OpenAPIError(f"OpenAPI document {source!r}: {exc.message}") from None


# -- schemas --------------------------------------------------------------------------------------


def _convert(schema: Any, refs: set[str]) -> Any:
    """An OpenAPI schema as JSON Schema 2020-12: component refs to $defs, 3.0 ``nullable`` to a null type."""
    if isinstance(schema, list):
        return [_convert(item, refs) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#/components/schemas/"):
            name = value.rsplit("/", 1)[1]
            refs.add(name)
            out[key] = f"#/$defs/{name}"
        elif key == "nullable":
            continue
        else:
            out[key] = _convert(value, refs)
    if schema.get("nullable") is True:
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


def _with_defs(schema: Any, components: Mapping[str, Any]) -> Any:
    """`schema` converted, with every component it reaches (transitively) under ``$defs``."""
    refs: set[str] = set()
    converted = _convert(copy.deepcopy(schema), refs)
    defs: dict[str, Any] = {}
    pending = sorted(refs)
    while pending:
        name = pending.pop()
        if name in defs:
            continue
        if name not in components:
            raise KeyError(name)
        found: set[str] = set()
        defs[name] = _convert(copy.deepcopy(components[name]), found)
        pending.extend(sorted(found - set(defs)))
    if defs and isinstance(converted, dict):
        converted = {**converted, "$defs": {**converted.get("$defs", {}), **defs}}
    return converted


def _resolve(node: Any, document: Mapping[str, Any]) -> Any:
    """Follow a local ``$ref`` to a parameter, request body or response object."""
    seen = 0
    while isinstance(node, dict) and isinstance(node.get("$ref"), str):
        pointer = node["$ref"]
        if not pointer.startswith("#/") or seen > 16:
            raise KeyError(pointer)
        target: Any = document
        for part in pointer[2:].split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        node = target
        seen += 1
    return node


#: The output an operation answering no content is imported with.
EMPTY_OUTPUT: Mapping[str, Any] = {"type": "null"}


def _json_schema_of(content: Any) -> Any:
    if not isinstance(content, Mapping):
        return None
    for media, body in content.items():
        if media == "application/json" or media.endswith("+json"):
            return body.get("schema") if isinstance(body, Mapping) else None
    return None


class _Operation:
    def __init__(
        self, path: str, method: str, operation: Mapping[str, Any], document: Mapping[str, Any]
    ) -> None:
        self.path = path
        self.method = method
        self.operation = operation
        self.document = document
        path_item = document["paths"][path]
        self.parameters: list[dict[str, Any]] = [
            _resolve(p, document)
            for p in [*path_item.get("parameters", ()), *operation.get("parameters", ())]
        ]
        self.components = (document.get("components") or {}).get("schemas") or {}

    def source_tool(self) -> SourceTool:
        operation_id = self.operation.get("operationId")
        name = str(operation_id) if operation_id else f"{self.method.upper()} {self.path}"
        description = str(self.operation.get("description") or self.operation.get("summary") or "")
        input_schema = self.input_schema()
        return SourceTool(
            name=name,
            description=description,
            input_schema=input_schema,
            output_schema=self.output_schema(),
            # "body" is this importer's name for the request body, not the document's text.
            own_names=frozenset({"body"}) & frozenset((input_schema or {}).get("properties") or ()),
            default_effect="read" if self.method in _READ_METHODS else "write",
            # The URL and query of a GET go to the server: guarded unless the manifest opens them.
            default_egress=self.method in _READ_METHODS,
        )

    def input_schema(self) -> dict[str, Any] | None:
        properties: dict[str, Any] = {}
        required: list[str] = []
        for parameter in self.parameters:
            where = parameter.get("in")
            if where not in _PARAM_LOCATIONS:
                continue  # cookies: left to the deployment's client
            name = str(parameter["name"])
            if name in properties:
                return None
            properties[name] = _with_defs(parameter.get("schema") or {}, self.components)
            if parameter.get("description"):
                properties[name].setdefault("description", parameter["description"])
            if parameter.get("required") or where == "path":
                required.append(name)
        body = _resolve(self.operation.get("requestBody"), self.document)
        if isinstance(body, Mapping):
            schema = _json_schema_of(body.get("content"))
            if schema is None or "body" in properties:
                return None
            properties["body"] = _with_defs(schema, self.components)
            if body.get("required"):
                required.append("body")
        # Hoist every $defs to the top: a property's "#/$defs/X" refers to the root of the tool's schema.
        defs: dict[str, Any] = {}
        for value in properties.values():
            defs.update(value.pop("$defs", {}) if isinstance(value, dict) else {})
        schema_out: dict[str, Any] = {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }
        if defs:
            schema_out["$defs"] = defs
        return schema_out

    def output_schema(self) -> Any:
        responses = self.operation.get("responses") or {}
        for status in sorted(str(s) for s in responses):
            if status.startswith("2"):
                response = _resolve(responses[status], self.document)
                content = response.get("content") if isinstance(response, Mapping) else None
                if not content:
                    # No content (204, or a 2xx without a body): a declared empty output. The
                    # caller returns None for an empty body; a body would fail the output check.
                    return dict(EMPTY_OUTPUT)
                schema = _json_schema_of(content)
                return None if schema is None else _with_defs(schema, self.components)
        return None


def _operations(document: Mapping[str, Any]) -> list[_Operation]:
    operations = []
    for path, item in (document.get("paths") or {}).items():
        if not isinstance(item, Mapping):
            continue
        for method in _METHODS:
            if isinstance(item.get(method), Mapping):
                operations.append(_Operation(path, method, item[method], document))
    return operations


# -- calls ------------------------------------------------------------------------------------------


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 3] + "..."


def tls_context() -> ssl.SSLContext:
    """The TLS settings of the clients PTE makes (httpx's defaults): the CAs of the environment's
    ``SSL_CERT_FILE``, else ``SSL_CERT_DIR``, else certifi's bundle, as that file is now.

    Loading a CA bundle is most of what a new client costs, so a context is kept per identity
    of what it loaded (the variable, the path, and the file's or folder's inode, size and
    change times): a CA file rotated in place or renamed over, or another file named, is loaded
    afresh; an unchanged one is not. `OpenAPIError` when the file named cannot be loaded.
    """
    _httpx()  # without httpx (and its certifi), the error naming the extra
    try:
        return _context_for(_ca_identity())
    except (OSError, ssl.SSLError) as exc:
        where = os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR") or "certifi's bundle"
        raise OpenAPIError(f"cannot load the CA certificates of {where!r}: {exc}") from None


def _ca_identity() -> tuple[Any, ...]:
    """What `tls_context` loads, as httpx chooses it, and the state of that file or folder."""
    for variable in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        path = os.environ.get(variable)
        if path:
            return variable, path, _file_identity(path)
    import certifi  # httpx's own dependency

    path = certifi.where()
    return "certifi", path, _file_identity(path)


def _file_identity(path: str) -> tuple[int, ...] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None  # loading it says why
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


@lru_cache(maxsize=4)
def _context_for(identity: tuple[Any, ...]) -> ssl.SSLContext:
    context: ssl.SSLContext = _httpx().create_ssl_context()
    return context


def _request(client: Any, timeout_s: float, method: str, url: str, **options: Any) -> Any:
    """One request through `client`, the caller's; without one, through a client that lives
    for this request only (the response is read whole before it is closed)."""
    if client is not None:
        return client.request(method, url, timeout=timeout_s, **options)
    with _httpx().Client(timeout=timeout_s, verify=tls_context()) as own:
        return own.request(method, url, **options)


def _closed_client(method: str, path: str) -> str:
    return (
        f"{method} {path}: the HTTP client its tools call through was closed by its owner (the caller "
        "that passed it to import_openapi, or forget_imports) before this call: keep it open while "
        "its tools are used"
    )


def _caller(operation: _Operation, base_url: str, client: Any, timeout_s: float) -> SchemaFunction:
    httpx = _httpx()
    locations = {str(p["name"]): p.get("in") for p in operation.parameters}
    method = operation.method.upper()

    def call(args: dict[str, Any]) -> Any:
        path = operation.path
        query: dict[str, Any] = {}
        headers: dict[str, str] = {}
        for name, value in args.items():
            where = locations.get(name)
            if where == "path":
                text = value if isinstance(value, str) else str(value)
                if text in ("", ".", ".."):
                    # "/items/.." would address another resource than the plan names.
                    raise ToolError("invalid_args", f"path parameter {name!r} cannot be {text!r}")
                path = path.replace("{" + name + "}", quote(text, safe=""))
            elif where == "query":
                query[name] = value
            elif where == "header":
                headers[name] = value if isinstance(value, str) else str(value)
        if client is not None and client.is_closed:
            raise ToolError("client_closed", _closed_client(method, operation.path))
        try:
            response = _request(
                client,
                timeout_s,
                method,
                base_url.rstrip("/") + path,
                params=query or None,
                headers=headers or None,
                json=args.get("body") if "body" in args else None,
                follow_redirects=False,
            )
        except httpx.TimeoutException:
            raise ToolError("timeout", f"{method} {operation.path} timed out") from None
        except httpx.HTTPError as exc:
            raise ToolError("unavailable", f"{method} {operation.path}: {exc}") from None
        except OpenAPIError as exc:  # the CA file named cannot be loaded (tls_context)
            raise ToolError("unavailable", f"{method} {operation.path}: {exc}") from None
        except RuntimeError:
            if client is not None and client.is_closed:  # closed while this call was starting
                raise ToolError("client_closed", _closed_client(method, operation.path)) from None
            raise
        if not 200 <= response.status_code < 300:
            raise ToolError(
                "http_error",
                f"{method} {operation.path} answered HTTP {response.status_code}: {_clip(response.text)}",
            )
        if not response.content:
            return None
        try:
            return strict_json.loads(response.content)
        except StrictJSONError as exc:
            raise ToolError(
                "invalid_output", f"{method} {operation.path}: not strict JSON: {exc.message}"
            ) from None

    call.__qualname__ = call.__name__ = f"{operation.method}_{operation.path}"
    return call


def import_openapi(
    document: Mapping[str, Any],
    *,
    base_url: str,
    client: Any = None,
    manifest: ImportManifest | Mapping[str, Any] | str | os.PathLike[str] | None = None,
    prefix: str = "",
    only: Iterable[str] | None = None,
    timeout_s: float = 30.0,
) -> Registry:
    """PTE tools for the operations of an OpenAPI 3 `document` (see the module docstring).

    `base_url`: where requests go. `client`: an ``httpx.Client`` the caller owns and closes
    after the tools' last use (PTE never closes it); None: each call opens and closes its own.
    `manifest`, `prefix`, `only`: as for every importer (`pte.importers.build_registry`).
    Raises `ImportRefused` listing every operation that cannot be typed.
    """
    _httpx()  # without httpx, refused at import rather than at the first call
    if not base_url.startswith(("http://", "https://")):
        raise ImportRefused(f"base_url must be an http(s) URL, not {base_url!r}")
    operations = _operations(document)
    sources: list[SourceTool] = []
    by_name: dict[str, _Operation] = {}
    problems: list[str] = []
    for operation in operations:
        try:
            source = operation.source_tool()
        except KeyError as exc:
            problems.append(f"{operation.method.upper()} {operation.path}: unresolvable reference {exc}")
            continue
        if not operation.operation.get("operationId"):
            if manifest is None and only is None:  # asked for everything: say what is left out
                problems.append(
                    f"{source.name}: no operationId; PTE names tools by it (add one to the document)"
                )
            continue
        sources.append(source)
        by_name[source.name] = operation
    if problems:
        raise ImportRefused(
            f"cannot import {len(problems)} OpenAPI operation(s):\n- " + "\n- ".join(problems)
        )

    def make_func(source: SourceTool, output_schema: Mapping[str, Any]) -> SchemaFunction:
        return _caller(by_name[source.name], base_url, client, timeout_s)

    try:
        spec_sha256 = hash_json(document)
    except ValueError:  # a number JCS cannot write (an integer beyond 2**53): Python's form then
        spec_sha256 = sha256_hex(json.dumps(document, sort_keys=True, default=str))

    def runs(source: SourceTool) -> Mapping[str, Any]:
        operation = by_name[source.name]
        return {
            "base_url": base_url,
            "method": operation.method,
            "path": operation.path,
            "parameters": {str(p.get("name")): p.get("in") for p in operation.parameters},
            "spec_sha256": spec_sha256,
        }

    return build_registry(
        "OpenAPI", sources, make_func, manifest=manifest, prefix=prefix, only=only, runs=runs
    )
