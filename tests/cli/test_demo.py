"""`pte demo`: every scenario ends as expected, every audit log verifies and replays.

And the classic multi-figure task (`three_figures_share`): the total is checked to the cent
against the SQLite ledger, read here straight from its tables with `decimal.Decimal` (not
through the tools), next to a stand-in for a free-form agent that carries the figures
between steps the way an LLM does, and gets a different total.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import sqlite3
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pte import verify

# private: the demo's scenarios; the demo's answer check; the demo, run in-process
from pte._cli import SCENARIOS, answer_problem, run_demo
from pte.audit import read_records
from pte.cli import main
from pte.runs import replay_file

REPO = Path(__file__).resolve().parents[2]
NAMES = [s.name for s in SCENARIOS]
THREE = "three_figures_share"
CUSTOMERS = ("C002", "C004", "C016")


@dataclass(frozen=True)
class DemoRun:
    """One `run_demo(out_dir=..., as_json=True)` run: its exit code, its JSON and its directory."""

    code: int
    doc: dict[str, Any]
    out_dir: Path

    def scenario(self, name: str) -> dict[str, Any]:
        """The JSON entry of one scenario."""
        found: dict[str, Any] = next(s for s in self.doc["scenarios"] if s["scenario"] == name)
        return found


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoRun]:
    """The demo, run once for this module with its logs and ledger kept in a directory."""
    out_dir = tmp_path_factory.mktemp("demo") / "out"
    buffer = io.StringIO()
    previous = os.environ.get("PTE_LEDGER")
    with contextlib.redirect_stdout(buffer):
        code = run_demo(out_dir=str(out_dir), as_json=True)
    assert os.environ.get("PTE_LEDGER") == previous  # the demo restores the environment
    yield DemoRun(code, json.loads(buffer.getvalue()), out_dir)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run `pte --quiet ARGV` in-process; return (exit code, stdout)."""
    try:
        code = main(["--quiet", *argv])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    return code, capsys.readouterr().out


# --- the demo as a command -------------------------------------------------------------------


def test_pte_demo_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = cli(capsys, "demo")
    assert code == 0
    assert "recorded" in out.splitlines()[0]  # says up front that the LLM answers are recorded
    assert "no network" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("scenario"))
    assert lines[header].split() == [
        "scenario",
        "status",
        "reason",
        "LLM",
        "calls",
        "steps",
        "audit",
        "answer",
    ]
    rows = {line.split()[0]: line.split() for line in lines[header + 2 : header + 2 + len(SCENARIOS)]}
    assert list(rows) == NAMES
    for s in SCENARIOS:
        row = rows[s.name]
        assert row[1] == s.expect_status
        assert row[2] == (s.expect_reason or "-")
        assert row[-2] == "verified"
        # A run that succeeded has an answer that agrees with its result (none otherwise).
        assert row[-1] == ("agrees" if s.expect_status == "succeeded" else "-")
    assert "all scenarios ended as expected" in out
    assert '"total_eur": "59093.25"' in out


def test_run_demo_directly(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_demo() == 0
    out = capsys.readouterr().out
    for name in NAMES:
        assert name in out
    assert "recorded" in out
    assert "temporary" in out  # without --out the logs are not kept


def test_pte_demo_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = cli(capsys, "demo", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["status"] == "ok"
    assert [s["scenario"] for s in doc["scenarios"]] == NAMES
    for entry in doc["scenarios"]:
        assert entry["as_expected"] is True, entry["scenario"]
        assert entry["audit_verified"] is True, entry["scenario"]
        assert entry["audit"] is None  # not kept without --out


def test_demo_json_matches_each_scenarios_expectation(demo_run: DemoRun) -> None:
    assert demo_run.code == 0
    assert demo_run.doc["status"] == "ok"
    for s in SCENARIOS:
        entry = demo_run.scenario(s.name)
        assert entry["status"] == s.expect_status, s.name
        assert entry["reason"] == s.expect_reason, s.name
        assert entry["as_expected"] and entry["audit_verified"], s.name
        # Each recorded answer is consumed exactly once: no hidden extra LLM call.
        assert entry["llm_calls"] <= len(s.responses), s.name
        if s.expect_status == "failed_closed" and s.expect_reason != "replans_exhausted":
            assert entry["steps"] == [], s.name  # refused before any step ran


def test_the_docs_say_the_demo_uses_recorded_responses() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "pte demo" in readme and re.search(r"recorded\s+responses", readme), (
        "the README must say the demo's LLM answers are recorded"
    )
    page = (REPO / "docs" / "demo.md").read_text(encoding="utf-8")
    assert re.search(r"recorded\s+responses", page)
    for name in NAMES:
        assert name in page, f"the demo table in docs/demo.md lacks {name}"


# --- --out DIR: the logs are kept, and each verifies and replays ------------------------------


def test_out_dir_keeps_one_log_per_scenario(demo_run: DemoRun) -> None:
    stores = ("approvals.jsonl", "endorsements.jsonl")
    logs = sorted(p.name for p in demo_run.out_dir.glob("*.jsonl") if p.name not in stores)
    assert logs == sorted(f"{name}.jsonl" for name in NAMES)
    for name in NAMES:
        assert demo_run.scenario(name)["audit"] == str(demo_run.out_dir / f"{name}.jsonl")
    assert (demo_run.out_dir / "ledger.sqlite").is_file()


@pytest.mark.parametrize("name", NAMES)
def test_each_kept_log_verifies_and_replays(demo_run: DemoRun, name: str) -> None:
    log = demo_run.out_dir / f"{name}.jsonl"
    report = verify(log)
    assert report.ok, report.issue
    assert report.runs == 1
    replay = replay_file(log)
    assert replay.ok, replay.render()
    assert [r.outcome for r in replay.runs] == ["same"]
    entry = demo_run.scenario(name)
    assert replay.runs[0].status == entry["status"]
    assert replay.runs[0].reason == entry["reason"]
    finished = read_records(log)[-1]
    assert finished["type"] == "run_finished"
    assert finished["run_id"] == entry["run_id"]


def test_the_demo_runs_under_deployments_it_made(demo_run: DemoRun) -> None:
    """`pte demo` makes its own deployments (#33): each run is bound to one, anchored with its
    key as it starts, and an edited, re-chained log is refused by the verdict with its anchors."""
    import pte

    # private: the binding check and the verdict with anchors
    from pte._audit import deployment_problem, verdict
    from tests._chain import log_text, relinked

    for name in NAMES:
        folder = "pte-demo-deployment-endorsing" if name == "bill_endorsed" else "pte-demo-deployment"
        deployment = pte.Deployment.from_folder(demo_run.out_dir / folder)
        log = demo_run.out_dir / f"{name}.jsonl"
        records = read_records(log)
        assert records[0].get("deployment") is not None
        assert deployment_problem(records[0], deployment) is None, name
        found = verdict(log, anchors=deployment.anchors())
        anchors = found.check("anchors")
        assert found.ok and anchors is not None and anchors.state == "checked", (name, found.summary())
    # A writer of the log changes the total and re-hashes the chain: the anchors refuse it.
    deployment = pte.Deployment.from_folder(demo_run.out_dir / "pte-demo-deployment")
    records = read_records(demo_run.out_dir / f"{THREE}.jsonl")
    finished = next(r for r in records if r["type"] == "run_finished")
    finished["result"]["total_eur"] = "1.00"
    edited = demo_run.out_dir / "edited.jsonl"
    edited.write_text(log_text(relinked(records)), encoding="utf-8")
    assert verify(edited).ok  # the chain alone cannot tell
    assert verdict(edited, anchors=deployment.anchors()).status == "tampered"
    edited.unlink()


def test_demo_out_dir_can_be_reused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "again"
    for _ in range(2):
        code, _ = cli(capsys, "demo", "--out", str(out_dir), "--json")
        assert code == 0
    for name in NAMES:
        assert verify(out_dir / f"{name}.jsonl").runs == 1


def test_demo_out_dir_leaves_other_files_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "shared"
    out_dir.mkdir()
    precious = out_dir / "production-audit.jsonl"
    precious.write_text('{"not": "the demo\'s"}\n', encoding="utf-8")
    code, _ = cli(capsys, "demo", "--out", str(out_dir))
    assert code == 0
    assert precious.is_file()


# --- the classic multi-figure task: exact, checked against the ledger --------------------------


def open_balances_from_ledger(ledger: Path, customers: tuple[str, ...]) -> dict[str, Decimal]:
    """Each customer's open balance, straight from the tables: open invoices' amounts minus payments."""
    balances: dict[str, Decimal] = {}
    with contextlib.closing(sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)) as conn:
        for customer in customers:
            (currency,) = conn.execute("SELECT currency FROM customers WHERE id = ?", (customer,)).fetchone()
            assert currency == "EUR", customer  # the task totals EUR figures
            total = Decimal(0)
            invoices = conn.execute(
                "SELECT id, amount FROM invoices WHERE customer_id = ? AND status = 'open'", (customer,)
            ).fetchall()
            assert invoices, f"{customer} has no open invoice: the task would be trivial"
            for invoice_id, amount in invoices:
                paid = sum(
                    (
                        Decimal(row[0])
                        for row in conn.execute(
                            "SELECT amount FROM payments WHERE invoice_id = ?", (invoice_id,)
                        )
                    ),
                    Decimal(0),
                )
                total += Decimal(amount) - paid
            balances[customer] = total
    return balances


def test_three_figures_total_is_exact(demo_run: DemoRun) -> None:
    balances = open_balances_from_ledger(demo_run.out_dir / "ledger.sqlite", CUSTOMERS)
    exact_total = sum(balances.values(), Decimal(0))
    share = (balances["C016"] / exact_total * 100).quantize(Decimal("0.01"))

    result = demo_run.scenario(THREE)["result"]
    assert result["total_eur"] == str(exact_total)
    assert result["c016_share_pct"] == str(share)
    assert result["figures"] == {c: str(b) for c, b in balances.items()}
    # The finalizer's recorded sentence states the same figures (it is shown the result).
    answer = demo_run.scenario(THREE)["answer"]
    assert str(exact_total) in answer and f"{share}%" in answer


def test_three_figures_ledger_is_the_stock_sample(demo_run: DemoRun, tmp_path: Path) -> None:
    """The figures are not an artefact of the demo's run: a fresh `pte ledger init` has the same."""
    fresh = tmp_path / "fresh.sqlite"
    try:
        assert main(["--quiet", "ledger", "init", "--path", str(fresh)]) == 0
    except SystemExit as exc:  # pragma: no cover - a usage error
        pytest.fail(f"pte ledger init failed: {exc}")
    assert open_balances_from_ledger(fresh, CUSTOMERS) == open_balances_from_ledger(
        demo_run.out_dir / "ledger.sqlite", CUSTOMERS
    )


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf of a JSON value with its path; a reference counts as one leaf."""
    if isinstance(value, Mapping):
        if set(value) == {"$ref"}:
            yield path, value
            return
        for key, item in value.items():
            yield from _leaves(item, f"{path}/{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}/{i}")
    else:
        yield path, value


def _accepted_plan(log: Path) -> dict[str, Any]:
    (accepted,) = [r for r in read_records(log) if r["type"] == "plan_accepted"]
    plan: dict[str, Any] = accepted["plan"]
    return plan


def test_every_figure_moves_by_reference(demo_run: DemoRun) -> None:
    log = demo_run.out_dir / f"{THREE}.jsonl"
    plan = _accepted_plan(log)
    steps = {s["id"]: s for s in plan["steps"]}
    lookup = {s["args"]["customer_id"]: s["id"] for s in plan["steps"] if s["tool"] == "customer_balance"}
    assert sorted(lookup) == sorted(CUSTOMERS)

    # The totalling step: the calculator step that takes the customer_balance outputs.
    (total,) = [
        s
        for s in plan["steps"]
        if s["tool"] == "calculator"
        and all(v["$ref"].split("/")[0] in lookup.values() for v in s["args"]["variables"].values())
    ]
    variables = total["args"]["variables"]
    refs = {v["$ref"] for v in variables.values()}
    assert refs == {f"{lookup[c]}/open_total" for c in CUSTOMERS}  # each figure, by reference
    # No literal number anywhere in the calculator step: not in the expression, not as a value.
    for path, leaf in _leaves(total["args"]):
        if isinstance(leaf, Mapping):
            continue
        assert not isinstance(leaf, int | float), path
        assert not re.search(r"\d", str(leaf)), f"literal digits at {path}: {leaf!r}"
    # The share is computed from the same references, never from a retyped figure.
    share = steps["share"]
    assert share["args"]["variables"]["c"] == {"$ref": f"{lookup['C016']}/open_total"}
    assert share["args"]["variables"]["t"] == {"$ref": f"{total['id']}/value"}

    # At run time the calculator received the tools' outputs unchanged.
    records = read_records(log)
    outputs = {r["step_id"]: r["output"] for r in records if r["type"] == "step_finished"}
    started = next(r for r in records if r["type"] == "step_started" and r["step_id"] == total["id"])
    for name, ref in variables.items():
        source = ref["$ref"].split("/")[0]
        assert started["args"]["variables"][name] == outputs[source]["open_total"]


class FreeFormAgent:
    """A deterministic stand-in for a free-form agent loop.

    After each tool call the LLM "records the result" as a sentence in its working notes,
    and the loop keeps only the most recent notes in the prompt (a context window, or a
    summary that keeps "the latest figures"). When asked for the total it adds up the
    figures it can still see. Here: the last two figures it mentioned.
    """

    def __init__(self, window: int = 2) -> None:
        self.notes: deque[str] = deque(maxlen=window)

    def observe(self, customer: str, output: Mapping[str, Any]) -> None:
        """The LLM paraphrases a tool result into its notes."""
        self.notes.append(f"{customer} ({output['name']}) owes EUR {output['open_total']}.")

    def total(self) -> Decimal:
        """The total of the figures still in the notes."""
        figures = [Decimal(m) for note in self.notes for m in re.findall(r"EUR (\d+(?:\.\d+)?)", note)]
        return sum(figures, Decimal(0))


def test_a_free_form_agent_loses_a_figure_pte_does_not(demo_run: DemoRun) -> None:
    log = demo_run.out_dir / f"{THREE}.jsonl"
    balances = open_balances_from_ledger(demo_run.out_dir / "ledger.sqlite", CUSTOMERS)
    exact_total = sum(balances.values(), Decimal(0))

    # The same tool outputs PTE's run got, fed to the free-form loop in the same order.
    records = read_records(log)
    outputs = [
        r["output"] for r in records if r["type"] == "step_finished" and r["tool"] == "customer_balance"
    ]
    agent = FreeFormAgent()
    for output in outputs:
        agent.observe(output["customer_id"], output)
    agent_total = agent.total()
    assert agent_total != exact_total
    assert agent_total == balances["C004"] + balances["C016"]  # C002's figure fell out of the notes
    assert exact_total - agent_total == balances["C002"]

    # PTE: the plan carries references, not figures, so nothing can fall out.
    assert demo_run.scenario(THREE)["result"]["total_eur"] == str(exact_total)
    plan_text = json.dumps(_accepted_plan(log))
    for figure in balances.values():
        assert str(figure) not in plan_text


@pytest.mark.parametrize("verbose", [False, True])
def test_the_demo_prints_its_table_without_log_lines_unless_verbose(tmp_path: Path, verbose: bool) -> None:
    """A newcomer's first command shows its table, not 25 JSON log lines before it."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("PTE_")}
    repo = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p)
    argv = [sys.executable, "-m", "pte._cli", "demo", *(["--verbose"] if verbose else [])]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "all scenarios ended as expected" in out.stdout
    logged = [line for line in out.stderr.splitlines() if '"event"' in line or "run_finished" in line]
    assert bool(logged) is verbose, out.stderr[-2000:]


# --- the demo checks what each answer says against its result (#36) ---------------------------


def test_every_answer_agrees_with_its_result(demo_run: DemoRun) -> None:
    for s in SCENARIOS:
        entry = demo_run.scenario(s.name)
        assert entry["answer_problem"] is None, (s.name, entry["answer"], entry["result"])
    # bill_endorsed paid the second payment of the demo's ledger, and says so.
    bill = demo_run.scenario("bill_endorsed")
    assert bill["result"] == "PO-0002" and "PO-0002" in bill["answer"]


def test_an_answer_contradicting_its_result_fails_the_demo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: bill_endorsed paid PO-0002 and its answer said "Payment PO-0001…", and
    the demo still printed "all scenarios ended as expected"."""
    wrong = "Payment PO-0001 of EUR 612.40 to the IBAN in the bill (endorsed by a person) was submitted."
    scenarios = [
        dataclasses.replace(s, responses=[s.responses[0], wrong]) if s.name == "bill_endorsed" else s
        for s in SCENARIOS
        if s.name in ("payment_approved", "bill_endorsed")
    ]
    code = run_demo(out_dir=str(tmp_path / "out"), scenarios=scenarios)
    out = capsys.readouterr().out
    assert code == 1
    assert "SOME SCENARIOS DID NOT END AS EXPECTED" in out and "CONTRADICTS" in out
    assert "bill_endorsed: the answer says PO-0001, the result is PO-0002" in out


@pytest.mark.parametrize(
    ("answer", "result", "agrees"),
    [
        ("Payment PO-0002 was submitted.", "PO-0002", True),
        ("Payment PO-0001 was submitted.", "PO-0002", False),
        ("Payments PO-0002 and PO-0003 were submitted.", "PO-0002", False),
        ("GBP 6088.40 is outstanding on invoice INV-1006.", "6088.40", True),
        ("GBP 6088.4 is outstanding.", "6088.40", False),
        ("GBP 16088.40 is outstanding.", "6088.40", False),
        ("Reminders were queued for the 10 invoices.", 0, False),
        ("0 reminders were newly queued.", 0, True),
        ("EUR 59093.25 in total, of which 15.04%.", {"total": "59093.25", "share": "15.04"}, True),
        ("EUR 59093.25 in total.", {"total": "59093.25", "share": "15.04"}, False),
        ("Anything at all.", None, True),
    ],
)
def test_answer_problem(answer: str, result: Any, agrees: bool) -> None:
    assert (answer_problem(answer, result) is None) == agrees


@given(paid=st.integers(1, 9999), said=st.integers(1, 9999), amount=st.decimals("0.01", "99999.99", places=2))
def test_property_an_answer_naming_another_payment_or_amount_is_caught(
    paid: int, said: int, amount: Decimal
) -> None:
    result = {"payment_id": f"PO-{paid:04d}", "amount": str(amount)}
    answer = f"Payment PO-{said:04d} of EUR {amount} was submitted."
    assert (answer_problem(answer, result) is None) == (paid == said)
    assert answer_problem(f"Payment PO-{paid:04d} was submitted.", result) is not None  # no amount
