"""The OpenAPI importer's TLS settings follow the CA file in force, over real HTTPS on loopback.

A server certificate signed by a CA of the test's own (tests/integration_apps/tls.py) is served
by the billing app (uvicorn). The CA the clients PTE makes trust is the environment's
(``SSL_CERT_FILE``, as httpx reads it): tools imported without a client, and the client a
deployment's ``openapi:`` spec makes, trust the file as it is when they connect or the
deployment is rebuilt, not as it was when the process first made one (the TLS context was
cached for the process: a rotated CA file, or another ``SSL_CERT_FILE``, was ignored).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn", reason="the loopback test app needs the test extra: 'plan-then-execute[test]'")

from pte import AuditLog, Engine, EngineConfig, RunResult

# private: the process's imports are the deployment area's (no public way to drop them)
from pte._deploy import forget_imports, import_spec
from pte.errors import DeploymentError
from pte.importers.openapi import import_openapi
from tests.integration_apps.billing_app import make_app, openapi
from tests.integration_apps.loopback import LoopbackServer
from tests.integration_apps.tls import CertificateAuthority

GET = {
    "pte_plan": "1",
    "steps": [{"id": "inv", "tool": "getInvoice", "args": {"invoice_id": "INV-1001"}}],
    "result": {"$ref": "inv/amount_cents"},
}


@pytest.fixture(scope="module")
def cas() -> dict[str, CertificateAuthority]:
    return {"old": CertificateAuthority("old"), "new": CertificateAuthority("new")}


@pytest.fixture(scope="module")
def https_billing(
    cas: dict[str, CertificateAuthority], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LoopbackServer]:
    """The billing service over HTTPS, its certificate signed by the "new" CA."""
    certfile, keyfile = cas["new"].issue(tmp_path_factory.mktemp("tls"))
    app, _ = make_app("v1")
    with LoopbackServer(app, ssl_certfile=str(certfile), ssl_keyfile=str(keyfile)) as server:
        yield server


def _rotate(ca_file: Path, pem: bytes) -> None:
    """Replace the CA file as an operator's tooling does: a new file renamed over the old."""
    staged = ca_file.with_suffix(".new")
    staged.write_bytes(pem)
    os.replace(staged, ca_file)


def _run(registry: Any) -> RunResult:
    engine = Engine(registry, config=EngineConfig(llm_answer=False))
    with AuditLog() as audit:
        result: RunResult = engine.execute(json.dumps(GET), audit)
    return result


def test_tools_without_a_client_trust_the_ca_file_as_it_is_now(
    https_billing: LoopbackServer,
    cas: dict[str, CertificateAuthority],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(cas["old"].pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    registry = import_openapi(openapi("v1"), base_url=https_billing.url, only=["getInvoice"])
    refused = _run(registry)
    error = refused.steps[0].error
    assert error is not None and error.kind == "unavailable" and "CERTIFICATE_VERIFY_FAILED" in error.message
    _rotate(ca_file, cas["new"].pem)  # the server's CA rotated in: the next call trusts it
    result = _run(registry)
    assert result.ok and result.result == 12500, result.message
    other = tmp_path / "other-ca.pem"
    other.write_bytes(cas["old"].pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(other))  # another file named: that one is trusted now
    error = _run(registry).steps[0].error
    assert error is not None and "CERTIFICATE_VERIFY_FAILED" in error.message


def test_a_rebuilt_deployment_trusts_the_ca_file_as_it_is_now(
    https_billing: LoopbackServer,
    cas: dict[str, CertificateAuthority],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A deployment's ``openapi:`` spec is imported once per process and its client pooled; built
    again after the CA file changed, the deployment imports it afresh under the new file (the
    client it made before keeps serving whoever still holds it, until `forget_imports`)."""
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(cas["new"].pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    spec = f"openapi:{https_billing.url}/openapi.json#getInvoice"
    try:
        registry = import_spec(spec)
        assert _run(registry).result == 12500
        assert import_spec(spec) is registry  # the CA file unchanged: the same import
        _rotate(ca_file, cas["old"].pem)  # the server's CA withdrawn
        with pytest.raises(DeploymentError, match="CERTIFICATE_VERIFY_FAILED"):
            import_spec(spec)
        _rotate(ca_file, cas["new"].pem + cas["old"].pem)
        rebuilt = import_spec(spec)
        assert rebuilt is not registry and _run(rebuilt).result == 12500
    finally:
        forget_imports()


@pytest.mark.parametrize("content", [None, b"not a certificate\n"], ids=["missing", "garbage"])
def test_a_ca_file_that_cannot_be_loaded_fails_saying_which(
    https_billing: LoopbackServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes | None
) -> None:
    ca_file = tmp_path / "ca.pem"
    if content is not None:
        ca_file.write_bytes(content)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    registry = import_openapi(openapi("v1"), base_url=https_billing.url, only=["getInvoice"])
    error = _run(registry).steps[0].error
    assert error is not None and error.kind == "unavailable", error
    assert f"cannot load the CA certificates of {str(ca_file)!r}" in error.message
    with pytest.raises(DeploymentError, match="cannot load the CA certificates"):
        import_spec(f"openapi:{https_billing.url}/openapi.json#getInvoice")
