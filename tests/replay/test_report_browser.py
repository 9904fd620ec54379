"""`pte audit report` rendered in a real headless Chromium: the DOM an auditor sees.

For every sample: the verification banner says what `verify` says, every step of every
accepted plan is there with its status, tool, effect and provenance, and the sections the
run needs (approvals, replans, policy decisions, LLM calls) are present. Injected markup in
the log stays text, and a tampered log shows a failing banner.
"""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pte import AuditLog

# private: the one verdict every surface shows
from pte._audit import verdict

# private: run_started's stored fingerprint, expanded; the content store of a run_started
from pte._catalogue import expand_run_started, stored_contents
from pte.audit import read_records
from pte.cli import main
from pte.runs import write_report
from tests._browser import dump_dom
from tests._chain import GENESIS, chain_hash, line_of

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "audit_samples").glob("*.jsonl"))


class Elements(HTMLParser):
    """Every element of a document as (tag, attributes, text directly inside it)."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str], list[str]]] = []
        self._open: list[int] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}, []))
        if tag not in {"br", "meta", "img", "input", "link", "hr", "rect", "line", "path"}:
            self._open.append(len(self.elements) - 1)

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            index = self._open.pop()
            if self.elements[index][0] == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._open:
            self.elements[self._open[-1]][2].append(data)

    def find(self, tag: str | None = None, **attrs: str) -> list[tuple[str, dict[str, str], list[str]]]:
        return [
            e
            for e in self.elements
            if (tag is None or e[0] == tag)
            and all(e[1].get(k.replace("_", "-")) == v for k, v in attrs.items())
        ]


def parse(dom: str) -> Elements:
    parser = Elements()
    parser.feed(dom)
    return parser


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Elements]:
    where = tmp_path_factory.mktemp("reports")
    out = {}
    for sample in SAMPLES:
        page = write_report(sample, where / f"{sample.stem}.html")
        out[sample.stem] = parse(dump_dom(page))
    return out


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
def test_the_report_of_every_sample_in_chromium(sample: Path, rendered: dict[str, Elements]) -> None:
    dom = rendered[sample.stem]
    found = verdict(sample)  # what `pte audit verify` says, check by check
    (banner,) = dom.find("div", id="verification")
    assert banner[1]["data-verdict"] == found.status
    assert ("ok" in banner[1]["class"].split()) == found.ok  # never green where verify is not ok
    shown = {e[1]["data-check"]: e[1]["data-state"] for e in dom.find("tr") if "data-check" in e[1]}
    assert shown == found.states()
    assert "checkpoint" not in shown
    # Nothing active, nothing fetched: no script, no external reference.
    assert not dom.find("script") and not dom.find("img") and not dom.find("link")
    records = read_records(sample)
    contents = stored_contents(records)
    for run_id in dict.fromkeys(r["run_id"] for r in records):
        run = [r for r in records if r["run_id"] == run_id]
        (section,) = dom.find("section", data_run_id=run_id)
        finished = [r for r in run if r["type"] == "run_finished"]
        assert section[1]["data-status"] == (finished[0]["status"] if finished else "unfinished")
        tools = {t["name"]: t for t in expand_run_started(run[0], contents)["tools"]}
        rows = [e for e in dom.find("tr") if "step" in e[1].get("class", "").split()]
        for accepted in (r for r in run if r["type"] == "plan_accepted"):
            # Tool steps (control steps such as a stage or a require have no tool to label).
            for step in (s for s in accepted["plan"]["steps"] if "tool" in s):
                (row,) = [
                    e
                    for e in rows
                    if e[1].get("data-step-id") == step["id"] and e[1]["data-tool"] == step["tool"]
                ][:1]
                attrs = row[1]
                assert attrs["data-effect"] == tools[step["tool"]]["effect"]
                assert attrs["data-provenance"] == tools[step["tool"]]["provenance"]
                ends = [r for r in run if r["type"] == "step_finished" and r["step_id"] == step["id"]]
                if ends:
                    assert attrs["data-status"] in {e["status"] for e in ends}
                # and it is a node of the plan's DAG
                assert dom.find("g", data_step_id=step["id"])
        types = {r["type"] for r in run}
        if "approval" in types or "run_paused" in types:
            assert dom.find("tr", data_kind="approval") or dom.find("tr", data_kind="run_paused")
        if "replan" in types:
            assert dom.find("tr", **{"class": "replan"})
        for repair in (r for r in run if r["type"] == "repair"):
            assert dom.find("tr", **{"class": "repair"}, data_reason=repair["reason"])
        for rejected in (r for r in run if r["type"] == "plan_rejected"):
            assert dom.find("tr", data_reason=rejected["reason"])
        calls = [r for r in run if r["type"] == "llm_call"]
        assert (
            len([e for e in dom.find("tr") if e[1].get("class") == "llm-call"]) >= len(calls) > 0 or not calls
        )


INJECTION = (
    '</pre><script>document.title="pwned"</script>'
    '<img src="http://example.invalid/x.png" onerror="alert(1)"><b>bold</b>'
)


def _run_with(path: Path, text: str) -> None:
    with AuditLog(path, run_id="inj") as audit:
        audit.append("run_started", mode="run", request=text, tools=[], config={})
        plan = {"pte_plan": "1", "steps": [{"id": "a", "tool": "read_document", "args": {"q": text}}]}
        audit.append("plan_accepted", origin="planner", plan_hash="0" * 64, plan=plan, order=["a"])
        audit.append(
            "step_started",
            step_id="a",
            tool="read_document",
            effect="read",
            args={"q": text},
            plan_hash="0" * 64,
        )
        audit.append(
            "step_finished",
            step_id="a",
            tool="read_document",
            status="ok",
            output={"body": text},
            duration_ms=1.5,
        )
        audit.append(
            "run_finished",
            status="failed_closed",
            reason="step_failed",
            message=text,
            answer=text,
            result=None,
            steps_run=1,
            llm_calls=0,
        )


def test_injected_markup_stays_text(tmp_path: Path) -> None:
    log = tmp_path / "injected.jsonl"
    _run_with(log, INJECTION)
    page = write_report(log, tmp_path / "injected.html")
    dom_text = dump_dom(page)
    dom = parse(dom_text)
    assert not dom.find("script") and not dom.find("img")
    assert not [e for e in dom.find("b") if "bold" in e[2]]  # the report's own <b>s only
    assert "pwned" not in "".join("".join(e[2]) for e in dom.find("title"))
    marked = [e for e in dom.elements if "untrusted" in e[1].get("class", "").split()]
    assert any(INJECTION in "".join(e[2]) for e in marked)  # shown, as text, marked untrusted


def test_a_tampered_log_shows_a_failing_banner(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "tampered.jsonl"
    lines = (REPO / "audit_samples" / "approved_payment.jsonl").read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join([lines[0], lines[2], lines[1], *lines[3:]]))
    page = tmp_path / "tampered.html"
    assert main(["--quiet", "audit", "report", str(log), "-o", str(page)]) == 0
    (banner,) = parse(dump_dom(page)).find("div", id="verification")
    assert banner[1]["data-verdict"] == "tampered" and "bad" in banner[1]["class"]


def test_report_with_a_failing_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "log.jsonl"
    shutil.copyfile(REPO / "audit_samples" / "success.jsonl", log)
    key = tmp_path / "k.pem"
    main(["--quiet", "audit", "keygen", str(key)])
    main(["--quiet", "audit", "checkpoint", str(log), "--key", str(key)])
    log.write_bytes(b"".join(log.read_bytes().splitlines(keepends=True)[:-1]))
    page = tmp_path / "cp.html"
    argv = ["--quiet", "audit", "report", str(log), "-o", str(page)]
    assert main([*argv, "--checkpoint", f"{log}.checkpoints", "--public-key", f"{key}.pub"]) == 0
    dom = parse(dump_dom(page))
    (banner,) = dom.find("div", id="verification")
    assert banner[1]["data-verdict"] == "tampered" and "bad" in banner[1]["class"]
    assert dom.find("tr", data_check="checkpoint", data_state="failed")


def test_approvals_show_their_signature_verified_from_the_log(
    rendered: dict[str, Elements], tmp_path: Path
) -> None:
    # The sample's approval is Ed25519-signed: the report checks it as `verify` does.
    (row,) = rendered["paused_then_approved"].find("tr", data_kind="approval")
    assert row[1]["data-verified"] == "true" and row[1]["data-signed"] == "True"
    (unsigned,) = rendered["approved_payment"].find("tr", data_kind="approval")
    assert unsigned[1]["data-verified"] == "true" and unsigned[1]["data-signed"] == "False"
    # The same approval with its signer renamed (chain re-hashed, so only the signature can tell).
    lines = (REPO / "audit_samples" / "paused_then_approved.jsonl").read_bytes().splitlines(keepends=True)
    prev = GENESIS
    edited = []
    for raw in lines:
        record = json.loads(raw)
        if record["type"] == "approval":
            record["by"] = "mallory"
        record.pop("hash")
        record["prev"] = prev
        prev = chain_hash(prev, record)
        edited.append(line_of({**record, "hash": prev}))
    log = tmp_path / "edited.jsonl"
    log.write_bytes(b"".join(edited))
    dom = parse(dump_dom(write_report(log, tmp_path / "edited.html")))
    (row,) = dom.find("tr", data_kind="approval")
    assert row[1]["data-verified"] == "false"
    (banner,) = dom.find("div", id="verification")
    assert banner[1]["data-verdict"] == "tampered"


CONTROL_SAMPLES = ["control", "staged", "paused_then_approved"]


def _true_outcomes(records: list[dict[str, object]]) -> dict[tuple[str, str], dict[str, object]]:
    """(plan hash, step id) -> what the records say happened, worked out here from the raw records."""
    out: dict[tuple[str, str], dict[str, object]] = {}
    plan_hash = ""
    steps: dict[str, dict[str, object]] = {}
    for r in records:
        kind = r["type"]
        if kind == "plan_accepted":
            plan_hash = str(r["plan_hash"])
            steps = {str(s["id"]): s for s in r["plan"]["steps"]}  # type: ignore[index]
            for step_id, step in steps.items():
                out[(plan_hash, step_id)] = {"step": step, "status": "not run", "args": [], "elements": {}}
            continue
        step_id = str(r.get("step_id"))
        base, _, index = step_id.partition("[")
        entry = out.get((plan_hash, base))
        if entry is None:
            continue
        if kind == "condition":
            outcome = str(r["outcome"])
            if r["kind"] == "require":
                entry["status"] = "met" if outcome == "met" else "not met"
            elif outcome == "skipped":
                entry["status"] = "skipped"
            entry["condition"] = outcome
        elif kind == "for_each":
            entry["items"] = r["items"]
        elif kind == "step_started":
            entry["args"].append((step_id, r["args"]))  # type: ignore[attr-defined]
        elif kind == "step_finished":
            if index:
                entry["elements"][int(index.rstrip("]"))] = r["status"]  # type: ignore[index]
            else:
                entry["status"] = r["status"]
    for entry in out.values():
        if "items" in entry:
            statuses = list(entry["elements"].values())  # type: ignore[attr-defined]
            ok = len(statuses) == entry["items"] and all(s == "ok" for s in statuses)
            entry["status"] = "ok" if ok else next((s for s in statuses if s != "ok"), "started")
    return out


@pytest.mark.parametrize("name", CONTROL_SAMPLES)
def test_every_step_shows_its_true_outcome_in_chromium(name: str, rendered: dict[str, Elements]) -> None:
    """for_each steps as N elements, `when` as skipped/ran with the condition, `require` as met or
    not, and each call's resolved arguments: what an auditor needs, as the records say it."""
    dom = rendered[name]
    records = read_records(REPO / "audit_samples" / f"{name}.jsonl")
    rows = [e for e in dom.find("tr") if "step" in e[1].get("class", "").split()]
    shown_args = {
        e[1]["data-step-id"]: json.loads("".join(e[2]))
        for e in dom.find("pre")
        if "args" in e[1].get("class", "")
    }
    conditions = ["".join(e[2]) for e in dom.find("b")]
    outcomes = _true_outcomes(records)
    assert outcomes
    for (_plan, step_id), truth in outcomes.items():
        (row,) = [e for e in rows if e[1]["data-step-id"] == step_id][:1]
        assert row[1]["data-status"] == truth["status"], (step_id, row[1], truth)
        assert row[1]["data-status"] != "not run" or not truth["args"]
        if "items" in truth:
            assert row[1]["data-items"] == str(truth["items"])
            elements = dom.find("tr", **{"class": "element"})
            mine = [e for e in elements if e[1]["data-step-id"].startswith(f"{step_id}[")]
            assert len(mine) == truth["items"]
            for e in mine:
                assert e[1]["data-status"] == truth["elements"][int(e[1]["data-index"])]  # type: ignore[index]
        for called_id, args in truth["args"]:  # type: ignore[attr-defined]
            assert shown_args[called_id] == args
        if "condition" in truth:
            assert truth["condition"].replace("_", " ") in conditions  # type: ignore[attr-defined]
    # The summary block comes first in each run's section.
    assert dom.find("table", **{"class": "summary"})


def test_a_stored_run_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pte audit report STORE_URL --run ID`: a run store's run, with its verification banner."""
    from pte import Engine, load_registry
    from pte.stores import open_store

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    assert main(["--quiet", "ledger", "init", "--path", str(tmp_path / "ledger.sqlite")]) == 0
    monkeypatch.setenv("PTE_LEDGER", str(tmp_path / "ledger.sqlite"))
    plan = next(
        r["plan"]
        for r in read_records(REPO / "audit_samples" / "control.jsonl")
        if r["type"] == "plan_accepted"
    )
    with open_store(url) as store, store.audit_log("stored-run") as audit:
        assert Engine(load_registry(["backoffice", "calculator"])).execute(json.dumps(plan), audit).ok
    out = tmp_path / "stored.html"
    assert main(["audit", "report", url, "--run", "stored-run", "-o", str(out)]) == 0
    dom = parse(dump_dom(out))
    (banner,) = dom.find("div", id="verification")
    assert banner[1]["data-verdict"] == "ok"
    (section,) = dom.find("section", data_run_id="stored-run")
    assert section[1]["data-status"] == "succeeded"
    assert dom.find("tr", data_step_id="remind", data_status="ok", data_items="6")
    for bad, message in ((["--run", "no-such-run"], "no run"), ([], "--run RUN_ID is required")):
        with pytest.raises(SystemExit) as exit_info:
            main(["audit", "report", url, *bad, "-o", str(out)])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err


# --- the report in an auditor's words (#36) ----------------------------------------------------

#: Reasons whose message is PTE's own decision on a plan: shown plainly, not as untrusted text.
PTE_DECISIONS = {"policy_violation", "tool_not_allowed", "invalid_args", "bad_reference", "invalid_json"}


def _text(dom: Elements, element: tuple[str, dict[str, str], list[str]]) -> str:
    """The text of `element` and everything inside it (the parser keeps elements in document order)."""
    start = dom.elements.index(element)
    depth_end = next(
        (i for i in range(start + 1, len(dom.elements)) if dom.elements[i][0] == element[0]),
        len(dom.elements),
    )
    return " ".join("".join(e[2]) for e in dom.elements[start:depth_end])


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
def test_the_report_says_what_waits_for_whom_and_who_allowed_each_flow(
    sample: Path, rendered: dict[str, Elements]
) -> None:
    dom = rendered[sample.stem]
    records = read_records(sample)
    page = " ".join("".join(e[2]) for e in dom.elements)
    assert "every sink receives data it accepts" not in page
    # A pause says what the run waits for, from whom: an approval of its plan, or an endorsement.
    for row in dom.find("tr", data_kind="run_paused"):
        words = _text(dom, row)
        if "approval" in row[1].get("class", ""):
            assert "waits for a person to approve plan" in words and "endorse" not in words, words
        else:
            assert "waits for a person to endorse the exact values" in words, words
    pauses = [r for r in records if r["type"] == "run_paused"]
    assert len(dom.find("tr", data_kind="run_paused")) == len(pauses)
    # Each flow into a sink names who or what allowed it; a parameter the policy did not accept
    # on its own (needs_endorsement) was allowed by a person's endorsement, or by nobody.
    needs = {
        (step, param)
        for r in records
        if r["type"] == "plan_accepted"
        for step, params in (r.get("needs_endorsement") or {}).items()
        for param in params
    }
    endorsed = any(r["type"] == "endorsement" for r in records)
    for flow in dom.find("li"):
        if "flow" not in flow[1].get("class", "").split():
            continue
        allowed = flow[1]["data-allowed-by"]
        words = _text(dom, flow)
        assert "Allowed by" in words
        if "approval-needed" in flow[1]["class"]:
            approved = any(r["type"] == "approval" for r in records)
            assert allowed == ("approval" if approved else "none"), words
        elif (flow[1]["data-step-id"], flow[1]["data-param"]) in needs:
            assert allowed == ("endorsement" if endorsed else "none"), words
        else:
            assert allowed == "policy", words
    # PTE's own decisions and trusted results are not framed as untrusted text.
    for r in records:
        if (
            r["type"] in ("plan_rejected", "run_finished")
            and r.get("reason") in PTE_DECISIONS
            and r.get("message")
        ):
            decisions = ["".join(e[2]) for e in dom.elements if "decision" in e[1].get("class", "").split()]
            assert r["message"] in decisions, (r["reason"], r["message"])


def test_an_endorsement_pause_is_not_a_wait_for_approval(rendered: dict[str, Elements]) -> None:
    """The issue's case: an endorsement pause was listed under approvals as "waiting for approval"."""
    dom = rendered["endorsed_payment"]
    (pause,) = dom.find("tr", data_kind="run_paused")
    assert "endorsement" in pause[1]["class"]
    words = _text(dom, pause)
    assert (
        "endorse the exact values of send_payment.amount, send_payment.currency, send_payment.iban" in words
    )
    flows = {f[1]["data-param"]: f[1]["data-allowed-by"] for f in dom.find("li") if f[1].get("data-param")}
    assert flows == {
        "iban": "endorsement",
        "amount": "endorsement",
        "currency": "endorsement",
        "reference": "policy",
    }
    # The trusted result is shown plainly, the model's answer about it as untrusted text.
    records = read_records(REPO / "audit_samples" / "endorsed_payment.jsonl")
    finished = records[-1]
    framed = ["".join(e[2]) for e in dom.elements if "untrusted" in e[1].get("class", "").split()]
    plain = ["".join(e[2]) for e in dom.elements if "data" in e[1].get("class", "").split()]
    assert finished["result"] in plain and finished["result"] not in framed
    assert finished["answer"] in framed


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
def test_every_label_on_the_page_is_in_its_glossary(sample: Path, rendered: dict[str, Elements]) -> None:
    dom = rendered[sample.stem]
    (glossary,) = dom.find("details", id="glossary")
    words = _text(dom, glossary)
    badges = {"".join(e[2]).split(" (")[0] for e in dom.elements if "badge" in e[1].get("class", "").split()}
    assert badges
    for badge in badges:
        assert re.search(rf"(?<![\w_]){re.escape(badge)}(?![\w_])", words), badge
