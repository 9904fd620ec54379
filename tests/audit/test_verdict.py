"""One verdict (#33): `pte audit verify`, the HTML report, replay and the Node verifier judge
a log with the same checks, the deployment's public key and anchors, and say which they made.

The repros of the issue: with the verifier variables set, verify said FAILED (a sealed run the
deployment never anchored) while the report of the same log showed a green "chain intact" and
replay passed; and the Node verifier ignored anchors, so an anchored run with a figure edited
and the chain re-hashed was accepted by it.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

import tests._services as _services
from pte import AuditLog, Engine, SigningKey, load_registry, verify

# private: the one verdict every surface shows
from pte._audit import judge, verdict
from pte.audit import Anchors
from tests._chain import log_text, relinked
from tests._cli_run import cli
from tests._cli_run import ledger as ledger  # the fixture

REPO = Path(__file__).resolve().parents[2]
VERIFIER = REPO / "verifier" / "verify.mjs"
REGISTRY = load_registry(["backoffice"])

#: A read, then a write: the write is anchored before it is called, and the run at its seal.
REMIND = json.dumps(
    {
        "pte_plan": "1",
        "steps": [
            {"id": "overdue", "tool": "list_overdue_invoices", "args": {"days": 30}},
            {
                "id": "remind",
                "tool": "send_reminders",
                "args": {"invoice_ids": {"$ref": "overdue/ids"}, "channel": "email"},
            },
        ],
        "result": {"$ref": "overdue/total"},
    }
)


class Deployment:
    """A deployment key, its public key and anchors files, and the environment a verifier sets."""

    def __init__(self, where: Path) -> None:
        where.mkdir(parents=True, exist_ok=True)
        self.key = SigningKey.generate()
        self.public = where / "deployment.key.pub"
        self.public.write_bytes(self.key.public_key.to_pem())
        self.anchors_file = where / "deployment.key.anchors.jsonl"

    def anchors(self) -> Anchors:
        return Anchors(self.anchors_file, key=self.key)

    def verifier_env(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("PTE_DEPLOYMENT_KEY_FILE", raising=False)
        monkeypatch.setenv("PTE_DEPLOYMENT_PUBLIC_KEY_FILE", str(self.public))
        monkeypatch.setenv("PTE_ANCHORS_FILE", str(self.anchors_file))


def run_reminders(log: Path, anchors: Anchors | None) -> None:
    with AuditLog(log, anchors=anchors) as audit:
        assert Engine(REGISTRY).execute(REMIND, audit).ok


def records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def rehash(edited: list[dict[str, Any]], out: Path) -> None:
    """Re-chain records into a log that verifies: what anyone who can write the file can do."""
    out.write_text(log_text(relinked(edited)), encoding="utf-8")


def node_verdict(log: Path, deployment: Deployment | None) -> dict[str, Any]:
    cmd = [_services.node(), str(VERIFIER), str(log), "--json"]
    if deployment is not None:
        cmd += ["--deployment-key", str(deployment.public), "--anchors", str(deployment.anchors_file)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode in (0, 1), out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    assert (out.returncode == 0) == doc["ok"]
    return doc


def states(doc: dict[str, Any]) -> dict[str, str]:
    return {name: check["state"] for name, check in doc["checks"].items()}


def report_verdict(capsys: pytest.CaptureFixture[str], log: Path, out: Path) -> tuple[str, dict[str, str]]:
    """The banner of `pte audit report`: its verdict and each check's state, as the page says them."""
    code, _, err = cli(capsys, "audit", "report", str(log), "-o", str(out))
    assert code == 0, err
    page = out.read_text(encoding="utf-8")
    banner = page[page.index('<div id="verification"') :]
    banner = banner[: banner.index("</div>")]
    (status,) = re.findall(r'data-verdict="([^"]+)"', banner)
    checks = dict(re.findall(r'data-check="([^"]+)" data-state="([^"]+)"', banner))
    green = re.search(r'class="banner ok"', banner) is not None
    assert green == (status == "ok"), banner  # never green where the verdict is not ok
    return status, checks


def every_verdict(
    capsys: pytest.CaptureFixture[str], log: Path, deployment: Deployment | None, tmp_path: Path
) -> dict[str, tuple[str, dict[str, str]]]:
    """(status, check states) from verify --json, the report, replay --json and the Node verifier."""
    code, out, _ = cli(capsys, "audit", "verify", str(log), "--json")
    verified = json.loads(out)
    assert (code == 0) == verified["ok"]
    found = {"verify": (verified["status"], states(verified))}
    found["report"] = report_verdict(capsys, log, tmp_path / f"{log.stem}.html")
    code, out, _ = cli(capsys, "replay", str(log), "--json")
    replayed = json.loads(out)
    if replayed["status"] == "refused":  # replay does not act on a log that does not verify
        assert code == 1
        found["replay"] = ("tampered", {})
    else:
        found["replay"] = ("ok" if verified["status"] == "ok" else verified["status"], states(replayed))
    node = node_verdict(log, deployment)
    found["node"] = (node["status"], states(node))
    return found


def assert_one_verdict(found: dict[str, tuple[str, dict[str, str]]], status: str) -> dict[str, str]:
    reference = found["verify"][1]
    for surface, (said, checks) in found.items():
        assert said == status, (surface, found)
        if checks:
            assert checks == reference, (surface, found)
    return reference


#: A deployment and the log of a run it anchored.
Anchored = tuple[Deployment, Path]


@pytest.fixture
def anchored(tmp_path: Path, ledger: Path) -> Anchored:
    """A deployment, and the reminders run it anchored, logged to anchored.jsonl."""
    deployment = Deployment(tmp_path / "deployment")
    log = tmp_path / "anchored.jsonl"
    run_reminders(log, deployment.anchors())
    return deployment, log


# --- the repros -------------------------------------------------------------------------------


def test_a_never_anchored_run_fails_everywhere_with_the_verifier_variables_set(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: verify said FAILED, the report showed "chain intact" and replay passed."""
    deployment = Deployment(tmp_path / "deployment")
    log = tmp_path / "unanchored.jsonl"
    run_reminders(log, anchors=None)  # written without the deployment key
    deployment.verifier_env(monkeypatch)
    found = every_verdict(capsys, log, deployment, tmp_path)
    checks = assert_one_verdict(found, "tampered")
    assert checks == {"chain": "checked", "schema": "checked", "sealed": "checked", "anchors": "failed"}


def test_an_edited_and_rehashed_anchored_run_is_refused_by_every_checker_with_the_key(
    tmp_path: Path, anchored: Anchored, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's Node case: a figure in an anchored run edited (84454.79 -> 8445.48), the chain
    re-hashed. The chain holds; only the anchors can tell, and a checker with the key MUST."""
    deployment, log = anchored
    edited = records(log)
    (read,) = [r for r in edited if r["type"] == "step_finished" and r["step_id"] == "overdue"]
    assert read["output"]["total"] == "84454.79"
    read["output"]["total"] = "8445.48"
    tampered = tmp_path / "tampered.jsonl"
    rehash(edited, tampered)
    assert verify(tampered).ok  # the chain alone cannot tell
    assert node_verdict(tampered, None)["ok"]  # nor Node without the key
    deployment.verifier_env(monkeypatch)
    found = every_verdict(capsys, tampered, deployment, tmp_path)
    checks = assert_one_verdict(found, "tampered")
    assert checks["anchors"] == "failed" and checks["chain"] == "checked"
    assert "edited and re-hashed" in node_verdict(tampered, deployment)["problem"]


def test_an_anchored_run_cut_short_is_refused_by_every_checker_with_the_key(
    tmp_path: Path, anchored: Anchored, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment, log = anchored
    lines = log.read_bytes().splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[:-2]))  # before the write's step_finished and the seal
    deployment.verifier_env(monkeypatch)
    found = every_verdict(capsys, cut, deployment, tmp_path)
    assert_one_verdict(found, "tampered")
    assert "truncated" in node_verdict(cut, deployment)["problem"]


def test_an_anchored_log_is_ok_everywhere_and_says_anchors_were_checked(
    tmp_path: Path, anchored: Anchored, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment, log = anchored
    deployment.verifier_env(monkeypatch)
    found = every_verdict(capsys, log, deployment, tmp_path)
    checks = assert_one_verdict(found, "ok")
    assert checks == {"chain": "checked", "schema": "checked", "sealed": "checked", "anchors": "checked"}
    code, out, _ = cli(capsys, "audit", "verify", str(log))
    assert code == 0 and re.search(r"anchors\s+checked: 1 run\(s\) as the deployment signed them", out)


def test_without_the_key_every_checker_says_anchors_were_not_checked(
    tmp_path: Path, anchored: Anchored, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, log = anchored
    for name in ("PTE_DEPLOYMENT_KEY_FILE", "PTE_DEPLOYMENT_PUBLIC_KEY_FILE", "PTE_ANCHORS_FILE"):
        monkeypatch.delenv(name, raising=False)
    found = every_verdict(capsys, log, None, tmp_path)
    checks = assert_one_verdict(found, "ok")
    assert checks["anchors"] == "not available"
    code, out, _ = cli(capsys, "audit", "verify", str(log))
    assert "anchors    not available: no deployment public key" in out
    code, out, _ = cli(capsys, "replay", str(log))
    assert code == 0 and "anchors not available" in out


def test_a_damaged_anchors_file_fails_every_checker(
    tmp_path: Path, anchored: Anchored, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An anchors line removed from the middle breaks the anchors' own chain: nothing is vouched for."""
    deployment, log = anchored
    lines = deployment.anchors_file.read_bytes().splitlines(keepends=True)
    assert len(lines) >= 2
    deployment.anchors_file.write_bytes(b"".join(lines[1:]))
    deployment.verifier_env(monkeypatch)
    found = every_verdict(capsys, log, deployment, tmp_path)
    assert_one_verdict(found, "tampered")


def test_an_incomplete_log_is_incomplete_everywhere(
    tmp_path: Path, anchored: Anchored, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash before the first anchor: the chain holds, the run is not sealed, no anchor is missed."""
    _, log = anchored
    crashed = tmp_path / "crashed.jsonl"
    kept = [r for r in records(log)]
    first_write = next(i for i, r in enumerate(kept) if r.get("step_id") == "remind")
    crashed.write_bytes(b"".join(log.read_bytes().splitlines(keepends=True)[:first_write]))
    other = Deployment(tmp_path / "other")  # a deployment that never anchored this run
    other.verifier_env(monkeypatch)
    found = every_verdict(capsys, crashed, other, tmp_path)
    checks = assert_one_verdict(found, "incomplete")
    assert checks["sealed"] == "failed" and checks["anchors"] == "checked"


def test_one_function_judges(tmp_path: Path, ledger: Path) -> None:
    """`verdict` is `judge` over a log file: the same checks in the same order, whatever the caller."""
    deployment = Deployment(tmp_path / "deployment")
    log = tmp_path / "anchored.jsonl"
    run_reminders(log, deployment.anchors())
    public = Anchors(deployment.anchors_file, public=deployment.key.public_key)
    found = verdict(log, anchors=public)
    assert found.ok and [c.name for c in found.checks] == ["chain", "schema", "sealed", "anchors"]
    again = judge(verify(log), lambda: [records(log)], anchors=public)
    assert again.states() == found.states()
    assert verdict(log).states()["anchors"] == "not available"


def test_a_stored_run_has_the_same_verdict_in_verify_and_in_its_report(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run store's run: `pte audit verify URL` and `pte audit report URL --run` judge it alike."""
    from pte.deployment import run_in_store
    from pte.stores import open_store

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    deployment = Deployment(tmp_path / "deployment")
    with open_store(url) as store:
        assert run_in_store(
            Engine(REGISTRY), store, run_id="anchored", plan_text=REMIND, anchors=deployment.anchors()
        ).ok
        assert run_in_store(Engine(REGISTRY), store, run_id="unanchored", plan_text=REMIND).ok
    deployment.verifier_env(monkeypatch)
    # `pte runs --verify` shows each run's verdict, and replay refuses the one that does not verify.
    code, out, _ = cli(capsys, "runs", "--store", url, "--verify", "--json")
    assert code == 0
    listed = {row["run_id"]: row["verdict"]["status"] for row in json.loads(out)}
    assert listed == {"anchored": "ok", "unanchored": "tampered"}
    code, out, err = cli(capsys, "replay", url, "--run", "unanchored")
    assert code == 1 and "replay refused: run unanchored does not verify" in err
    code, out, _ = cli(capsys, "replay", url, "--run", "anchored", "--json")
    assert code == 0 and json.loads(out)["checks"]["anchors"]["state"] == "checked"
    for run_id, status in (("anchored", "ok"), ("unanchored", "tampered")):
        code, out, _ = cli(capsys, "audit", "verify", url, "--run", run_id, "--json")
        (verified,) = json.loads(out)["results"]
        assert (code == 0) == (status == "ok") and verified["status"] == status
        page = tmp_path / f"{run_id}.html"
        code, _, err = cli(capsys, "audit", "report", url, "--run", run_id, "-o", str(page))
        assert code == 0, err
        text = page.read_text(encoding="utf-8")
        assert f'data-verdict="{status}"' in text
        shown = dict(re.findall(r'data-check="([^"]+)" data-state="([^"]+)"', text))
        assert shown == states(verified)


def test_a_bound_run_never_anchored_is_refused_even_unfinished(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose run_started names its deployment is anchored as it starts: one with no anchor,
    even one that never finished (made up, or crashed and rewritten), is not the deployment's."""
    deployment = Deployment(tmp_path / "deployment")
    log = tmp_path / "bound.jsonl"
    with AuditLog(log) as audit:  # bound to a deployment, but written without its key
        assert Engine(REGISTRY, deployment="the-deployment").execute(REMIND, audit).ok
    assert records(log)[0]["deployment"]["fingerprint"] == "the-deployment"
    unfinished = tmp_path / "unfinished.jsonl"
    unfinished.write_bytes(b"".join(log.read_bytes().splitlines(keepends=True)[:3]))
    deployment.verifier_env(monkeypatch)
    found = every_verdict(capsys, unfinished, deployment, tmp_path)
    checks = assert_one_verdict(found, "tampered")
    assert checks["anchors"] == "failed" and checks["sealed"] == "failed"
    assert "never anchored" in node_verdict(unfinished, deployment)["problem"]
    # Anchored as it starts (and at its plan), a crash after its first read is only incomplete:
    # the run and the anchors file as the crash leaves them.
    anchored = tmp_path / "anchored.jsonl"
    with AuditLog(anchored, anchors=deployment.anchors()) as audit:
        assert Engine(REGISTRY, deployment="the-deployment").execute(REMIND, audit).ok
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(anchored.read_bytes().splitlines(keepends=True)[:3]))
    signed = deployment.anchors_file.read_bytes().splitlines(keepends=True)
    assert [json.loads(line)["seq"] for line in signed[:2]] == [0, 1]  # its start, its plan
    deployment.anchors_file.write_bytes(b"".join(signed[:2]))
    found = every_verdict(capsys, cut, deployment, tmp_path)
    checks = assert_one_verdict(found, "incomplete")
    assert checks["anchors"] == "checked"
