"""`pte.Deployment.engine` is the one place an engine is made, and it narrows, never widens (#33).

The CLI, the worker's job engine and replay's and resume's engine all come from it
(tests/e2e/test_architecture.py fails on an ``Engine(`` anywhere else in `pte`). A registry a
caller hands it (a command's ``--tools``/``--allow``, a job's packs, a resume's catalogue) must
be a narrowing of the deployment's: a tool it does not serve, or serves with other code or
schemas, is refused, and so is a policy that would replace its own.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import pte
from pte import Deployment, Policy, load_registry
from pte.audit import read_records
from pte.errors import DeploymentError
from tests._cli_run import cli

PAY = """{"pte_plan": "1", "steps": [
 {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S001"}},
 {"id": "pay", "tool": "send_payment", "args": {"iban": {"$ref": "sup/iban"}, "amount": "120.00",
  "currency": "EUR", "reference": "Invoice 7"}}
], "result": {"$ref": "pay/payment_id"}}"""


def _deployment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Deployment:
    folder = tmp_path / "dep"
    code, out, err = cli(
        capsys, "init", str(folder), "--tools", "backoffice", "--allow", "get_supplier,send_payment"
    )
    assert code == 0, out + err
    return Deployment.from_folder(folder).check()


def test_a_narrower_registry_narrows_the_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deployment = _deployment(tmp_path, capsys)
    assert sorted(deployment.engine().registry.names) == ["get_supplier", "send_payment"]
    narrow = load_registry(["backoffice"], allow=["get_supplier"])
    engine = deployment.engine(registry=narrow)
    assert engine.registry.names == ["get_supplier"]
    # Its policy and gates are still the deployment's, over the narrowed tools.
    assert set(engine.policy.tools) <= {"get_supplier"}
    assert engine.endorsement is not None  # the deployment's endorsement store
    # A plan calling a tool the narrowing left out is refused before anything runs.
    with pte.AuditLog(tmp_path / "a.jsonl") as audit:
        result = engine.execute(PAY, audit)
    assert result.status == "failed_closed" and result.reason is not None
    assert not [r for r in read_records(tmp_path / "a.jsonl") if r["type"] == "step_started"]


@pytest.mark.parametrize(
    "wider",
    [
        pytest.param(lambda: load_registry(["backoffice"]), id="outside-the-allow-list"),
        pytest.param(lambda: load_registry(["calculator"]), id="another-pack"),
        pytest.param(
            lambda: load_registry(["backoffice", "calculator"], allow=["get_supplier", "percentage"]),
            id="one-more-tool",
        ),
    ],
)
def test_a_wider_registry_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], wider: object
) -> None:
    deployment = _deployment(tmp_path, capsys)
    with pytest.raises(DeploymentError, match="never widen"):
        deployment.engine(registry=wider())  # type: ignore[operator]


def test_a_tool_of_the_same_name_with_other_code_or_schema_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tamper: a registry naming only the deployment's tools, one of them changed, is not a narrowing."""
    deployment = _deployment(tmp_path, capsys)
    own = load_registry(["backoffice"], allow=["get_supplier", "send_payment"])
    changed = dataclasses.replace(own["send_payment"], description="pays whoever asks")
    forged = pte.Registry([own["get_supplier"], changed])
    with pytest.raises(DeploymentError, match=r"send_payment.*never widen"):
        deployment.engine(registry=forged)


def test_a_policy_never_replaces_the_deployments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deployment = _deployment(tmp_path, capsys)
    registry = deployment.registry()
    with pytest.raises(DeploymentError, match="its own policy"):
        deployment.engine(registry=registry, policy=Policy.from_registry(registry, default="open"))


def test_a_deployment_given_by_its_parts_narrows_the_same_way(tmp_path: Path) -> None:
    served = load_registry(["backoffice"], allow=["get_supplier", "send_payment"])
    given = Deployment.of(registry=served)
    assert given.engine(registry=served.allow(["get_supplier"])).registry.names == ["get_supplier"]
    with pytest.raises(DeploymentError, match="never widen"):
        given.engine(registry=load_registry(["backoffice"]))
    policy = Policy.from_registry(served)
    with pytest.raises(DeploymentError, match="names its policy"):
        Deployment.of(registry=served, policy=policy).engine(
            policy=Policy.from_registry(served, default="open")
        )


def test_replay_and_resume_take_their_engine_from_a_deployment() -> None:
    """Replay's area is below the deployment's: it is handed a deployment, never makes an engine."""
    # private: replay's engine maker, which refuses to work without a deployment
    from pte._replay import engine_for

    with pytest.raises(TypeError, match=r"pte\.Deployment"):
        engine_for([{"type": "run_started"}], None, None, None, None)  # type: ignore[arg-type]
