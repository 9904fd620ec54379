"""`pte.Deployment`: one folder, one document, one fingerprint; found as git finds a repository;
flags narrow it, never widen it; every path it names is checked before a run starts."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

import pte
from pte import Deployment, TrustedKeys
from pte.errors import DeploymentError
from tests._cli_run import approver_keys, cli, ledger, make_deployment

__all__ = ["ledger"]  # the fixture, used by name

PAY = """{"pte_plan": "1", "steps": [
 {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S001"}},
 {"id": "pay", "tool": "send_payment", "args": {"iban": {"$ref": "sup/iban"}, "amount": "120.00",
  "currency": "EUR", "reference": "Invoice 7"}}
], "result": {"$ref": "pay/payment_id"}}"""


def _init(tmp_path: Path, capsys: pytest.CaptureFixture[str], *options: str, folder: str = "dep") -> Path:
    code, out, err = cli(capsys, "init", str(tmp_path / folder), *options)
    assert code == 0, out + err
    return tmp_path / folder


def test_pte_init_writes_one_document_and_a_private_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = _init(tmp_path, capsys, "--tools", "backoffice")
    assert sorted(p.name for p in where.iterdir()) == [
        "deployment.key",
        "deployment.key.pub",
        "pte-deployment.json",
    ]
    assert (where / "deployment.key").stat().st_mode & 0o777 == 0o600
    document = json.loads((where / "pte-deployment.json").read_text(encoding="utf-8"))
    assert document["tools"] == ["backoffice"] and document["store"] == "sqlite:runs.db"
    assert "api_key" not in json.dumps(document)
    deployment = Deployment.from_folder(where)
    assert dataclass_is_frozen(deployment)
    assert deployment.store_url == f"sqlite://{where.resolve() / 'runs.db'}"
    # Never replaced: a second init is a usage error, and the key is untouched.
    key = (where / "deployment.key").read_bytes()
    code, _, err = cli(capsys, "init", str(where))
    assert code == 2 and "refusing to replace" in err
    assert (where / "deployment.key").read_bytes() == key


def test_init_tells_how_to_get_approver_keys_only_when_it_has_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hint for what the deployment already has would send an operator to redo it."""
    code, out, _ = cli(capsys, "init", str(tmp_path / "bare"), "--tools", "backoffice")
    assert code == 0 and "approvers' keys: pte keys generate" in out
    _, public = approver_keys(tmp_path)
    code, out, _ = cli(
        capsys, "init", str(tmp_path / "keyed"), "--tools", "backoffice", "--approval-keys", str(public)
    )
    assert code == 0 and "approvers' keys" not in out and "export PTE_DEPLOYMENT=" in out


def dataclass_is_frozen(value: object) -> bool:
    try:
        value.folder = Path("/")  # type: ignore[attr-defined]
    except AttributeError:
        return True
    return False


def test_discovered_from_the_variable_else_upward_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("PTE_DEPLOYMENT", raising=False)
    project = tmp_path / "project"
    (project / "sub" / "deeper").mkdir(parents=True)
    monkeypatch.chdir(project)
    code, _, err = cli(capsys, "init", "--tools", "calculator")  # .pte here
    assert code == 0, err
    found = Deployment.discover(project / "sub" / "deeper")
    assert found is not None and found.folder == (project / ".pte").resolve()
    assert Deployment.discover(tmp_path) is None
    other = _init(tmp_path, capsys, "--tools", "backoffice", folder="other")
    monkeypatch.setenv("PTE_DEPLOYMENT", str(other))
    assert Deployment.discover(project).folder == other.resolve()  # type: ignore[union-attr]
    # A variable naming no deployment is an error, never a fall-back to another one.
    monkeypatch.setenv("PTE_DEPLOYMENT", str(tmp_path / "missing"))
    with pytest.raises(DeploymentError, match="pte init"):
        Deployment.discover(project)
    monkeypatch.chdir(tmp_path)  # no deployment here or above
    with pytest.raises(DeploymentError, match="pte init"):
        Deployment.from_environment({"PTE_DEPLOYMENT": ""})


def test_the_fingerprint_covers_the_document_and_every_file_it_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # private: the demo's policy
    from pte._cli import ENDORSE_POLICY

    _, public = approver_keys(tmp_path)
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(ENDORSE_POLICY), encoding="utf-8")
    where = _init(
        tmp_path, capsys, "--tools", "backoffice", "--policy", str(policy), "--approval-keys", str(public)
    )
    before = Deployment.from_folder(where).fingerprint
    assert Deployment.from_folder(where).fingerprint == before  # stable
    edits: list[Callable[[], object]] = [
        lambda: policy.write_text(json.dumps({**ENDORSE_POLICY, "default": "open"}), encoding="utf-8"),
        lambda: public.write_bytes(approver_keys(tmp_path, "new")[1].read_bytes()),
        lambda: (where / "pte-deployment.json").write_text(
            (where / "pte-deployment.json")
            .read_text(encoding="utf-8")
            .replace('"backoffice"', '"backoffice", "calculator"'),
            encoding="utf-8",
        ),
    ]
    for edit in edits:
        edit()
        after = Deployment.from_folder(where).fingerprint
        assert after != before
        before = after


def test_a_run_records_its_deployment_and_continues_only_under_it(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    one_folder = make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice", folder="one")
    one = Deployment.from_folder(one_folder)
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    code, out, err = cli(capsys, "approve", "pay.json", "--by", "alice")
    assert code == 0, err
    # Cut before the write ran: a run to resume.
    code, out, err = cli(capsys, "execute", "pay.json", "--audit", "run.jsonl")
    assert code == 0, err
    started = next(r for r in pte.audit.read_records("run.jsonl") if r["type"] == "run_started")
    assert started["deployment"]["fingerprint"] == one.fingerprint
    assert set(started["deployment"]["parts"]) >= {"catalogue", "document", "deployment_key"}
    assert one.from_run(started) is one
    two = Deployment.from_folder(
        make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice", folder="two")
    )
    with pytest.raises(DeploymentError, match="deployment_key"):
        two.from_run(started)
    # The CLI under the other deployment refuses to continue it, naming what differs.
    log = (tmp_path / "run.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    cut = next(i for i, line in enumerate(log) if '"run_finished"' in line)
    (tmp_path / "cut.jsonl").write_text("".join(log[:cut]), encoding="utf-8")
    code, out, err = cli(capsys, "resume", "cut.jsonl")
    assert code == 1 and "deployment_key" in out + err, out + err


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({"pte_deployment": "1", "tools": ["backoffice"], "approval_key": "x"}, "unknown key"),
        ({"pte_deployment": "2"}, "pte_deployment"),
        ({"pte_deployment": "1", "tools": "backoffice"}, "list"),
        ({"pte_deployment": "1", "model": {"api_key": "sk-123"}}, "never an API key"),
        ({"pte_deployment": "1", "model": {"base_url": "file:///etc"}}, "http"),
        ({"pte_deployment": "1", "approvals": None}, "approvals"),
        ([1, 2], "JSON object"),
    ],
)
def test_a_bad_document_is_refused_with_its_reason(
    tmp_path: Path,
    document: object,
    problem: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "pte-deployment.json").write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(DeploymentError, match=problem):
        Deployment.from_folder(tmp_path)
    # The CLI says so as a usage error (exit 2), never a traceback.
    monkeypatch.setenv("PTE_DEPLOYMENT", str(tmp_path))
    code, _, err = cli(capsys, "validate", "plan.json")
    assert code == 2 and problem.split()[0] in err and "Traceback" not in err


def test_duplicate_keys_in_the_document_are_refused(tmp_path: Path) -> None:
    (tmp_path / "pte-deployment.json").write_text(
        '{"pte_deployment": "1", "tools": ["calculator"], "tools": ["backoffice"]}', encoding="utf-8"
    )
    with pytest.raises(DeploymentError, match="not JSON"):
        Deployment.from_folder(tmp_path)


def test_every_path_is_checked_before_a_run_starts(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A typo in a path the deployment names is found before anything runs: exit 2, nothing
    appended (it used to be found after steps ran, the write logged as started)."""
    where = make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice")
    document = json.loads((where / "pte-deployment.json").read_text(encoding="utf-8"))
    document["anchors"] = str(tmp_path / "no-such-folder" / "anchors.jsonl")
    document["policy"] = "polcy.json"
    (where / "pte-deployment.json").write_text(json.dumps(document), encoding="utf-8")
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    code, out, err = cli(capsys, "execute", "pay.json", "--audit", "audit.jsonl")
    assert code == 2, out + err
    assert "anchors" in err and "polcy.json" in err
    assert not (tmp_path / "audit.jsonl").exists() and not (where / "runs.db").exists()


@pytest.mark.parametrize(
    "flag",
    [
        ["--approval-keys", "other.pub"],
        ["--approvals", "other-approvals.jsonl"],
        ["--endorsements", "other-endorsements.jsonl"],
        ["--policy", "open-policy.json"],
        ["--store", "sqlite:other.db"],
        ["--tools", "calculator"],
    ],
    ids=lambda f: f[0],
)
def test_a_flag_never_widens_or_replaces_the_deployments_authority(
    tmp_path: Path,
    ledger: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flag: list[str],
) -> None:
    _, public = approver_keys(tmp_path)
    approver_keys(tmp_path, "other")
    (tmp_path / "open-policy.json").write_text(
        json.dumps({"pte_policy": "1", "default": "open"}), encoding="utf-8"
    )
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice", "--approval-keys", str(public))
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    code, out, err = cli(capsys, "execute", "pay.json", *flag, "--run-id", "w1")
    assert code == 2, out + err
    assert "never widen" in err
    assert not (tmp_path / "deployment" / "runs.db").exists()
    # The same value the deployment names is accepted (it narrows nothing, widens nothing).
    code, out, err = cli(capsys, "execute", "pay.json", "--approval-keys", str(public), "--run-id", "w2")
    assert code == 0 and "awaiting_approval" in out, err


def test_a_variable_naming_other_keys_is_refused_under_a_deployment(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, public = approver_keys(tmp_path)
    make_deployment(tmp_path, monkeypatch, capsys, "--tools", "backoffice")
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    for name, value in (
        ("PTE_APPROVAL_PUBLIC_KEYS_FILE", str(public)),
        ("PTE_STORE", f"sqlite:{tmp_path / 'elsewhere.db'}"),
        ("PTE_DEPLOYMENT_KEY_FILE", str(tmp_path / "approver.pem")),
    ):
        monkeypatch.setenv(name, value)
        code, _, err = cli(capsys, "execute", "pay.json")
        assert code == 2 and name in err, err
        monkeypatch.delenv(name)


def test_narrowing_the_allow_list_is_accepted_and_carried_into_hints(
    tmp_path: Path, ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    make_deployment(
        tmp_path, monkeypatch, capsys, "--tools", "backoffice", "--allow", "get_supplier,send_payment"
    )
    (tmp_path / "pay.json").write_text(PAY, encoding="utf-8")
    code, _, err = cli(capsys, "execute", "pay.json", "--allow", "get_supplier,list_overdue_invoices")
    assert code == 2 and "outside the deployment's allow-list" in err
    code, out, err = cli(
        capsys, "execute", "pay.json", "--allow", "get_supplier,send_payment", "--run-id", "n1"
    )
    assert code == 0, err
    assert "then:    pte resume n1 --allow get_supplier,send_payment" in out


def test_the_engine_comes_from_the_deployment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, public = approver_keys(tmp_path)
    deployment = Deployment.from_folder(
        _init(tmp_path, capsys, "--tools", "backoffice", "--approval-keys", str(public))
    ).check()
    engine = deployment.engine()
    assert isinstance(engine, pte.Engine)
    assert sorted(engine.registry.names) == sorted(pte.load_registry(["backoffice"]).names)
    assert engine.endorsement is not None
    gate = deployment.approval_gate(engine.registry)
    assert gate.keys is not None and list(gate.keys) == list(TrustedKeys.load(public))
    assert deployment.anchors() is not None
    narrowed = deployment.narrowed(allow=["get_supplier"])
    assert narrowed.engine().registry.names == ["get_supplier"]
    with pytest.raises(DeploymentError, match="never widen"):
        deployment.narrowed(packs=["calculator"])
    assert os.fspath(deployment.approvals_path).startswith(os.fspath(deployment.folder))
