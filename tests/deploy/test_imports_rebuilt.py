"""A deployment rebuilt in the same process reads its ``openapi:`` spec file as it is now, and its
fingerprint describes the catalogue it actually serves.

The process's import table shares one import of a spec among the deployments naming it; a spec
file edited since is imported afresh (the table keys a file's import by its content), so a
long-lived process whose operator edited the file serves the new catalogue under a fingerprint
describing it, and a run started under the old catalogue is refused under the new one
(`pte.Deployment.from_run`, as for any other part). A deployment object keeps the imports it
first used: its registry, policy and fingerprint describe one catalogue, whatever the file
says later.

Over a real loopback billing service (uvicorn), the spec a file in the test's folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import pte
from pte.errors import DeploymentError

pytest.importorskip("uvicorn", reason="the loopback test app needs the test extra: 'plan-then-execute[test]'")
pytest.importorskip("httpx", reason="the OpenAPI importer is an optional extra: 'plan-then-execute[openapi]'")

from tests._billing_service import INVOICE_PLAN
from tests._billing_service import billing as billing  # the fixture, for the tests below
from tests._cli_run import make_deployment
from tests.integration_apps.billing_app import openapi
from tests.integration_apps.loopback import LoopbackServer


def _write_spec(path: Path, variant: str, url: str) -> None:
    document: dict[str, Any] = {**openapi(variant), "servers": [{"url": url}]}
    path.write_text(json.dumps(document), encoding="utf-8")


def _parameters(deployment: pte.Deployment) -> list[str]:
    schema = deployment.registry()["getInvoice"].describe()["input_schema"]
    return sorted(schema["properties"])


def test_a_rebuilt_deployment_reads_its_edited_spec_file(
    billing: LoopbackServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = tmp_path / "billing.json"
    _write_spec(spec, "v1", billing.url)
    folder = make_deployment(
        tmp_path, monkeypatch, capsys, "--tools", f"openapi:{spec}#getInvoice", "--no-store"
    )
    one = pte.Deployment.from_folder(folder)
    try:
        with pte.AuditLog(tmp_path / "run.jsonl") as audit:
            run = one.engine(config=pte.EngineConfig(llm_answer=False)).execute(
                json.dumps(INVOICE_PLAN), audit
            )
        assert run.result == 12500
        started = next(
            r for r in pte.audit.read_records(tmp_path / "run.jsonl") if r["type"] == "run_started"
        )
        assert started["deployment"]["fingerprint"] == one.fingerprint

        # The operator edits the spec (an argument renamed) and the process rebuilds the deployment.
        _write_spec(spec, "changed", billing.url)
        two = pte.Deployment.from_folder(folder)
        assert _parameters(two) == ["number"]
        assert two.fingerprint != one.fingerprint
        assert set(two.parts) == set(one.parts)
        assert [k for k in two.parts if two.parts[k] != one.parts[k]] == ["catalogue"]
        # The run started under the old catalogue does not continue under the new one ...
        with pytest.raises(DeploymentError, match="what differs: catalogue"):
            two.from_run(started)
        # ... and the deployment it started under still serves, and describes, the old one.
        assert _parameters(one) == ["invoice_id"]
        assert one.from_run(started) is one

        # The file as it was: the catalogue (and fingerprint) as it was.
        _write_spec(spec, "v1", billing.url)
        three = pte.Deployment.from_folder(folder)
        assert _parameters(three) == ["invoice_id"]
        assert three.fingerprint == one.fingerprint
        assert three.from_run(started) is three
    finally:
        one.close()


def test_a_deployment_keeps_the_imports_it_serves(
    billing: LoopbackServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The spec file edited between a deployment's registry and its fingerprint (or its policy, or
    a narrowing of it): they still describe the catalogue its registry serves."""
    spec = tmp_path / "billing.json"
    _write_spec(spec, "v1", billing.url)
    folder = make_deployment(
        tmp_path, monkeypatch, capsys, "--tools", f"openapi:{spec}#getInvoice", "--no-store"
    )
    original = pte.Deployment.from_folder(folder)
    try:
        fingerprint = original.fingerprint
        serving = pte.Deployment.from_folder(folder)
        registry = serving.registry()
        _write_spec(spec, "changed", billing.url)
        assert serving.fingerprint == fingerprint
        assert serving.narrowed(packs=[f"openapi:{spec}#getInvoice"]).fingerprint == fingerprint
        assert serving.narrowed(packs=[f"openapi:{spec}#getInvoice"]).registry()["getInvoice"].describe() == (
            registry["getInvoice"].describe()
        )
        policy = serving.policy(registry)
        assert policy.registry is registry
        engine = serving.engine(config=pte.EngineConfig(llm_answer=False))
        with pte.AuditLog() as audit:
            assert engine.execute(json.dumps(INVOICE_PLAN), audit).result == 12500
        # Built now, the deployment serves the file as it is.
        assert pte.Deployment.from_folder(folder).fingerprint != fingerprint
    finally:
        original.close()
