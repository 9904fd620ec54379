"""The back-office tool pack: sample ledger, read tools, transactional and idempotent writes."""

from __future__ import annotations

import functools
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pte import Registry, ToolError, load_pack

# private: a tool's spec from its function
from pte._catalogue import spec_of

REPO = Path(__file__).resolve().parents[2]
AS_OF = date(2026, 11, 1)
TABLES = (
    "meta",
    "customers",
    "invoices",
    "payments",
    "fx_rates",
    "reminders_outbox",
    "suppliers",
    "documents",
    "payments_out",
)
READ_TOOLS = {
    "list_overdue_invoices",
    "get_invoice",
    "get_customer",
    "list_customers",
    "customer_balance",
    "fx_rate",
    "get_supplier",
    "list_suppliers",
    "read_inbox",
    "read_document",
}
WRITE_TOOLS = {"record_payment", "queue_reminder", "send_reminders", "send_payment"}


# --------------------------------------------------------------------------- fixtures and helpers


@pytest.fixture(scope="module")
def pack() -> Registry:
    return load_pack("backoffice")


@pytest.fixture(scope="module")
def module(pack: Registry) -> ModuleType:
    return sys.modules[spec_of(pack["get_invoice"]).func.__module__]


@pytest.fixture(scope="module")
def template(module: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path: Path = module.create_sample_ledger(tmp_path_factory.mktemp("template") / "ledger.sqlite")
    return path


@pytest.fixture
def ledger(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.sqlite"
    shutil.copy(template, path)
    monkeypatch.setenv("PTE_LEDGER", str(path))
    return path


@pytest.fixture
def call(pack: Registry) -> Callable[..., Any]:
    """Call a tool the way the executor does: validate args, invoke, validate the JSON output."""

    def run(name: str, **args: Any) -> Any:
        spec = pack[name]
        spec.validate_args(args)
        out = spec.invoke(args)
        spec.validate_output(out)
        return out

    return run


def snapshot(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(path)
    try:
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall()) for t in TABLES}
    finally:
        conn.close()


def rows(path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def not_yet_due(path: Path) -> str:
    found = rows(
        path, "SELECT id FROM invoices WHERE status = 'open' AND due_date >= ? ORDER BY id", AS_OF.isoformat()
    )
    assert found, "the sample should have open invoices that are not due yet"
    return str(found[0][0])


def paid_invoice(path: Path) -> str:
    return str(rows(path, "SELECT id FROM invoices WHERE status = 'paid' ORDER BY id")[0][0])


def expect_nothing_written(path: Path, action: Callable[[], Any], match: str) -> None:
    before = snapshot(path)
    with pytest.raises(ValueError, match=match):
        action()
    assert snapshot(path) == before


# --------------------------------------------------------------------------- pack and sample ledger


def test_stock_pack_loads_with_flags_and_referenceable_outputs(pack: Registry) -> None:
    assert set(pack.names) == READ_TOOLS | WRITE_TOOLS
    for spec in pack:
        assert spec.description, spec.name
        assert spec.output_schema.get("type") == "object" and spec.output_schema.get("properties"), spec.name
        assert spec.effect == ("write" if spec.name in WRITE_TOOLS else "read"), spec.name
    assert pack["read_inbox"].provenance == pack["read_document"].provenance == "untrusted"
    assert all(pack[n].provenance == "trusted" for n in READ_TOOLS - {"read_inbox", "read_document"})
    assert pack["queue_reminder"].idempotent and pack["send_reminders"].idempotent
    assert not pack["record_payment"].idempotent and not pack["send_payment"].idempotent
    pay = pack["send_payment"]
    assert pay.requires_approval
    # Every parameter of every write tool that moves money or reaches a customer is an honest,
    # declared sink: request or trusted data only (not merely the policy's guarded default).
    guarded = frozenset({"request", "trusted"})
    for name in WRITE_TOOLS:
        spec = pack[name]
        assert dict(spec.sinks) == dict.fromkeys(spec.input_schema["properties"], guarded), name
    assert set(pay.sinks) == {"iban", "amount", "currency", "reference"}
    # Plans reference these outputs by pointer, so they must be declared properties.
    overdue = pack["list_overdue_invoices"].output_schema["properties"]
    assert {"invoices", "ids", "amounts", "currencies", "count", "total", "total_currency"} <= set(overdue)


def test_sample_ledger_contents(template: Path) -> None:
    assert rows(template, "SELECT value FROM meta WHERE key = 'as_of'") == [("2026-11-01",)]
    counts = {t: rows(template, f"SELECT COUNT(*) FROM {t}")[0][0] for t in TABLES}
    assert counts["customers"] == 20 and counts["invoices"] == 60 and counts["suppliers"] == 5
    assert counts["fx_rates"] >= 3 * 250 and counts["documents"] == 5
    assert rows(template, "SELECT MAX(date) FROM fx_rates") == [("2026-10-30",)]  # as_of is a Sunday
    assert counts["reminders_outbox"] == 0 and counts["payments_out"] == 0
    currencies = {c for (c,) in rows(template, "SELECT DISTINCT currency FROM invoices")}
    assert currencies == {"EUR", "USD", "GBP", "CHF"}
    ids = [i for (i,) in rows(template, "SELECT id FROM invoices ORDER BY id")]
    assert ids == [f"INV-{n}" for n in range(1001, 1061)]
    overdue = rows(
        template,
        "SELECT DISTINCT currency FROM invoices WHERE status = 'open' AND due_date < ?",
        AS_OF.isoformat(),
    )
    assert len(overdue) >= 3
    # Amounts are exact decimal text with two places.
    for (amount,) in rows(template, "SELECT amount FROM invoices UNION ALL SELECT amount FROM payments"):
        assert Decimal(amount) == Decimal(amount).quantize(Decimal("0.01")) and Decimal(amount) > 0
    # No invoice is overpaid, and paid invoices are paid exactly.
    for inv_id, amount, status in rows(template, "SELECT id, amount, status FROM invoices"):
        payments = rows(template, "SELECT amount FROM payments WHERE invoice_id = ?", inv_id)
        paid = sum((Decimal(a) for (a,) in payments), Decimal(0))
        assert paid <= Decimal(amount)
        assert (paid == Decimal(amount)) == (status == "paid")


def test_sample_ledger_is_deterministic_and_refuses_to_overwrite(module: ModuleType, tmp_path: Path) -> None:
    first = module.create_sample_ledger(tmp_path / "a.sqlite")
    second = module.create_sample_ledger(tmp_path / "b.sqlite")
    other = module.create_sample_ledger(tmp_path / "c.sqlite", seed=8)
    assert snapshot(first) == snapshot(second)
    assert snapshot(first)["invoices"] != snapshot(other)["invoices"]
    with pytest.raises(FileExistsError):
        module.create_sample_ledger(first, seed=8)
    assert snapshot(first) == snapshot(second)
    module.create_sample_ledger(first, seed=8, overwrite=True)
    assert snapshot(first) == snapshot(other)
    # No scratch files are left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.sqlite", "b.sqlite", "c.sqlite"]


def test_cli_creates_sample(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "cli.sqlite"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PTE_LEDGER")}
    script = str(REPO / "tools" / "backoffice.py")
    done = subprocess.run(
        [sys.executable, script, "create-sample", "--path", str(target)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert target.is_file() and "sample ledger written" in done.stdout
    again = subprocess.run(
        [sys.executable, script, "create-sample", "--path", str(target)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert again.returncode == 1 and "exists" in again.stderr


def test_ledger_path_and_missing_ledger(
    module: ModuleType, call: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PTE_LEDGER", raising=False)
    assert module.ledger_path() == Path("pte_ledger.sqlite")
    missing = tmp_path / "nope.sqlite"
    monkeypatch.setenv("PTE_LEDGER", str(missing))
    assert module.ledger_path() == missing
    with pytest.raises(ValueError, match="no ledger"):
        call("list_overdue_invoices")
    with pytest.raises(ValueError, match="no ledger"):
        call("queue_reminder", invoice_id="INV-1001")
    assert not missing.exists()  # tools never create an empty database


def test_read_connections_cannot_write(module: ModuleType, ledger: Path) -> None:
    with module._connect(write=False) as conn, pytest.raises(sqlite3.OperationalError, match="readonly"):
        conn.execute("DELETE FROM invoices")
    assert rows(ledger, "SELECT COUNT(*) FROM invoices") == [(60,)]


# --------------------------------------------------------------------------- read tools


def test_list_overdue_invoices(call: Callable[..., Any], ledger: Path) -> None:
    out = call("list_overdue_invoices")
    invoices = out["invoices"]
    assert out["as_of"] == "2026-11-01" and out["count"] == len(invoices) >= 10
    assert out["ids"] == [i["invoice_id"] for i in invoices]
    assert out["amounts"] == [i["outstanding"] for i in invoices]
    assert out["currencies"] == [i["currency"] for i in invoices]
    expected = rows(
        ledger,
        "SELECT id FROM invoices WHERE status = 'open' AND due_date < ? ORDER BY id",
        AS_OF.isoformat(),
    )
    assert sorted(out["ids"]) == [i for (i,) in expected]
    for inv in invoices:
        assert (
            inv["status"] == "open"
            and inv["days_overdue"] == (AS_OF - date.fromisoformat(inv["due_date"])).days > 0
        )
        assert Decimal(inv["paid"]) + Decimal(inv["outstanding"]) == Decimal(inv["amount"])
    assert [i["due_date"] for i in invoices] == sorted(i["due_date"] for i in invoices)
    # Totals: per currency unconverted; `total` converted to EUR at the ledger's rates.
    by_currency = {t["currency"]: t for t in out["totals_by_currency"]}
    assert list(by_currency) == sorted(by_currency) and len(by_currency) >= 3
    for code, entry in by_currency.items():
        mine = [Decimal(a) for a, c in zip(out["amounts"], out["currencies"], strict=True) if c == code]
        assert Decimal(entry["total"]) == sum(mine, Decimal(0)) and entry["count"] == len(mine)
    converted = Decimal(0)
    for code, entry in by_currency.items():
        rate = Decimal(1) if code == "EUR" else Decimal(call("fx_rate", base="EUR", quote=code)["rate"])
        converted += Decimal(entry["total"]) / rate
    assert out["total_currency"] == "EUR"
    assert Decimal(out["total"]) == converted.quantize(Decimal("0.01"))


def test_list_overdue_invoices_filters(call: Callable[..., Any], ledger: Path) -> None:
    everything = call("list_overdue_invoices")["invoices"]
    old = call("list_overdue_invoices", days=30)
    assert old["ids"] == [i["invoice_id"] for i in everything if i["days_overdue"] > 30]  # strictly more than
    assert 0 < old["count"] < len(everything)
    usd = call("list_overdue_invoices", currency="usd")
    assert usd["count"] > 0 and set(usd["currencies"]) == {"USD"}
    assert usd["total_currency"] == "USD"
    assert Decimal(usd["total"]) == sum((Decimal(a) for a in usd["amounts"]), Decimal(0))
    earlier = call("list_overdue_invoices", as_of="2026-09-01")
    assert earlier["as_of"] == "2026-09-01" and earlier["count"] < len(everything)
    none = call("list_overdue_invoices", days=10_000)
    assert none["count"] == 0 and none["ids"] == [] and none["total"] == "0.00"
    with pytest.raises(ValueError, match="3-letter"):
        call("list_overdue_invoices", currency="EURO")
    with pytest.raises(ToolError):
        call("list_overdue_invoices", days=-1)


def test_get_invoice_customer_and_balance(call: Callable[..., Any], ledger: Path) -> None:
    overdue = call("list_overdue_invoices")["invoices"][0]
    inv = call("get_invoice", invoice_id=overdue["invoice_id"].lower())
    assert inv == overdue
    customer = call("get_customer", customer_id=inv["customer_id"])
    assert customer["customer_id"] == inv["customer_id"] and customer["currency"] == inv["currency"]
    assert set(customer) == {"customer_id", "name", "country", "currency", "email"}
    balance = call("customer_balance", customer_id=inv["customer_id"])
    assert inv["invoice_id"] in balance["overdue_invoice_ids"]
    assert set(balance["overdue_invoice_ids"]) <= set(balance["open_invoice_ids"])
    mine = [i for i in call("list_overdue_invoices")["invoices"] if i["customer_id"] == inv["customer_id"]]
    assert Decimal(balance["overdue_total"]) == sum((Decimal(i["outstanding"]) for i in mine), Decimal(0))
    assert balance["overdue_count"] == len(mine)
    assert Decimal(balance["open_total"]) >= Decimal(balance["overdue_total"])
    listed = call("list_customers")
    assert listed["count"] == 20 and listed["ids"] == sorted(listed["ids"])
    assert call("list_customers", currency="CHF", country="ch")["count"] >= 1
    for name, arg in (
        ("get_invoice", "invoice_id"),
        ("get_customer", "customer_id"),
        ("customer_balance", "customer_id"),
    ):
        with pytest.raises(ValueError, match="unknown"):
            call(name, **{arg: "X-404"})
    with pytest.raises(ValueError, match="empty"):
        call("get_invoice", invoice_id="  ")


def test_fx_rate(call: Callable[..., Any], ledger: Path) -> None:
    direct = call("fx_rate", base="EUR", quote="USD")
    assert direct["source"] == "ledger" and direct["on"] == "2026-10-30"  # the last business day
    stored = rows(ledger, "SELECT rate FROM fx_rates WHERE date = '2026-10-30' AND quote = 'USD'")[0][0]
    assert direct["rate"] == stored
    inverse = call("fx_rate", base="usd", quote="eur")
    assert inverse["source"] == "inverse"
    assert Decimal(inverse["rate"]) == (1 / Decimal(stored)).quantize(Decimal("0.000001"))
    cross = call("fx_rate", base="USD", quote="GBP")
    gbp = Decimal(call("fx_rate", base="EUR", quote="GBP")["rate"])
    assert cross["source"] == "cross"
    assert Decimal(cross["rate"]) == (gbp / Decimal(stored)).quantize(Decimal("1e-6"))
    assert call("fx_rate", base="CHF", quote="CHF")["rate"] == "1"
    friday = call("fx_rate", base="EUR", quote="GBP", on="2026-10-09")
    saturday = call("fx_rate", base="EUR", quote="GBP", on="2026-10-10")
    assert friday["on"] == saturday["on"] == "2026-10-09" and friday["rate"] == saturday["rate"]
    later = call("fx_rate", base="EUR", quote="GBP", on=(AS_OF + timedelta(days=5)).isoformat())
    assert later["on"] == "2026-10-30"  # the latest rate on or before the date
    with pytest.raises(ValueError, match="on or before"):
        call("fx_rate", base="EUR", quote="USD", on="2020-01-01")
    with pytest.raises(ValueError, match="no EUR/JPY rate"):
        call("fx_rate", base="EUR", quote="JPY")


def test_suppliers(call: Callable[..., Any], module: ModuleType, ledger: Path) -> None:
    listed = call("list_suppliers")
    assert listed["count"] == 5 and listed["ids"] == ["S001", "S002", "S003", "S004", "S005"]
    northwind = call("get_supplier", supplier_id="S002")
    assert northwind["name"].startswith("Northwind") and northwind["iban"] != module.INJECTED_IBAN
    for supplier in listed["suppliers"]:
        assert module._valid_iban(supplier["iban"]) == supplier["iban"]
    with pytest.raises(ValueError, match="unknown supplier"):
        call("get_supplier", supplier_id="S999")


def test_inbox_and_documents(call: Callable[..., Any], module: ModuleType, ledger: Path) -> None:
    inbox = call("read_inbox")
    assert inbox["folder"] == "inbox" and inbox["count"] == len(inbox["messages"]) == 4
    received = [m["received_on"] for m in inbox["messages"]]
    assert received == sorted(received)
    assert set(inbox["messages"][0]) == {"document_id", "sender", "subject", "body", "received_on"}
    injected = [m for m in inbox["messages"] if "Ignore previous instructions" in m["body"]]
    assert len(injected) == 1
    doc = call("read_document", document_id=injected[0]["document_id"])
    assert doc["iban"] == module.INJECTED_IBAN == "DE89370400440532013000"
    assert doc["amount"] == "9800.00" and doc["currency"] == "EUR" and doc["text"] == injected[0]["body"]
    newsletter = call("read_document", document_id="DOC-005")
    assert (newsletter["iban"], newsletter["amount"], newsletter["currency"]) == ("", "0.00", "")
    assert call("read_inbox", folder="archive")["count"] == 1
    with pytest.raises(ValueError, match="unknown folder"):
        call("read_inbox", folder="spam")
    with pytest.raises(ValueError, match="unknown document"):
        call("read_document", document_id="DOC-999")


# --------------------------------------------------------------------------- record_payment


def test_record_payment_partial_then_full(call: Callable[..., Any], ledger: Path) -> None:
    inv = call("list_overdue_invoices")["invoices"][0]
    outstanding = Decimal(inv["outstanding"])
    first = call("record_payment", invoice_id=inv["invoice_id"], amount="10.00", currency=inv["currency"])
    assert first["status"] == "open" and Decimal(first["remaining"]) == outstanding - 10
    assert first["payment_id"].startswith("PAY-")
    second = call(
        "record_payment",
        invoice_id=inv["invoice_id"],
        amount=first["remaining"],
        currency=inv["currency"],
        received_on="2026-10-31",
    )
    assert second["status"] == "paid" and second["remaining"] == "0.00"
    assert int(second["payment_id"][4:]) == int(first["payment_id"][4:]) + 1
    assert call("get_invoice", invoice_id=inv["invoice_id"])["status"] == "paid"
    written = rows(
        ledger, "SELECT amount, currency, received_on FROM payments WHERE id = ?", second["payment_id"]
    )
    assert written == [(str(outstanding - 10), inv["currency"], "2026-10-31")]
    assert inv["invoice_id"] not in call("list_overdue_invoices")["ids"]


def test_record_payment_rejections_write_nothing(call: Callable[..., Any], ledger: Path) -> None:
    inv = call("list_overdue_invoices")["invoices"][0]
    iid, cur = inv["invoice_id"], inv["currency"]
    other = next(c for c in ("EUR", "USD", "GBP") if c != cur)
    over = str(Decimal(inv["outstanding"]) + Decimal("0.01"))
    cases: list[tuple[dict[str, Any], str]] = [
        ({"invoice_id": iid, "amount": "0", "currency": cur}, "greater than 0"),
        ({"invoice_id": iid, "amount": "-5.00", "currency": cur}, "greater than 0"),
        ({"invoice_id": iid, "amount": "1.005", "currency": cur}, "2 decimal places"),
        ({"invoice_id": iid, "amount": "1000000000000000", "currency": cur}, "implausibly large"),
        ({"invoice_id": iid, "amount": "1.00", "currency": other}, f"is in {cur}"),
        ({"invoice_id": iid, "amount": "1.00", "currency": "EU"}, "3-letter"),
        ({"invoice_id": iid, "amount": over, "currency": cur}, "exceeds the outstanding"),
        ({"invoice_id": "INV-9999", "amount": "1.00", "currency": cur}, "unknown invoice"),
        ({"invoice_id": paid_invoice(ledger), "amount": "1.00", "currency": "EUR"}, "already paid"),
        (
            {"invoice_id": iid, "amount": "1.00", "currency": cur, "received_on": "2000-01-01"},
            "before the invoice",
        ),
    ]
    for args, match in cases:
        expect_nothing_written(ledger, functools.partial(call, "record_payment", **args), match)


# --------------------------------------------------------------------------- reminders


def test_queue_reminder_is_idempotent(call: Callable[..., Any], ledger: Path) -> None:
    iid = call("list_overdue_invoices")["ids"][0]
    first = call("queue_reminder", invoice_id=iid)
    assert first == {"reminder_id": f"REM-{iid}-email", "invoice_id": iid, "channel": "email", "queued": True}
    again = call("queue_reminder", invoice_id=iid, message="A different text")
    assert again["reminder_id"] == first["reminder_id"] and again["queued"] is False
    stored = rows(ledger, "SELECT id, invoice_id, channel, message, queued_at FROM reminders_outbox")
    assert len(stored) == 1
    assert stored[0][3].startswith("Dear ") and iid in stored[0][3] and stored[0][4] == "2026-11-01"
    letter = call("queue_reminder", invoice_id=iid, channel="letter", message="  Please pay.  ")
    assert letter["reminder_id"] == f"REM-{iid}-letter" and letter["queued"] is True
    assert rows(ledger, "SELECT message FROM reminders_outbox WHERE channel = 'letter'") == [("Please pay.",)]


def test_queue_reminder_rejections_write_nothing(call: Callable[..., Any], ledger: Path) -> None:
    iid = call("list_overdue_invoices")["ids"][0]
    expect_nothing_written(ledger, lambda: call("queue_reminder", invoice_id="INV-9999"), "unknown invoice")
    expect_nothing_written(ledger, lambda: call("queue_reminder", invoice_id=paid_invoice(ledger)), "is paid")
    expect_nothing_written(
        ledger, lambda: call("queue_reminder", invoice_id=not_yet_due(ledger)), "not overdue"
    )
    expect_nothing_written(
        ledger, lambda: call("queue_reminder", invoice_id=iid, message="  "), "message is empty"
    )
    expect_nothing_written(
        ledger, lambda: call("queue_reminder", invoice_id=iid, message="x" * 2001), "longer"
    )
    with pytest.raises(ToolError):
        call("queue_reminder", invoice_id=iid, channel="sms")


def test_send_reminders_all_idempotent(call: Callable[..., Any], ledger: Path) -> None:
    ids = call("list_overdue_invoices")["ids"]
    out = call("send_reminders", invoice_ids=[*ids, ids[0]])  # a duplicate counts once
    assert out["invoice_ids"] == ids and out["queued"] == len(ids) and out["already_queued"] == 0
    assert out["reminder_ids"] == [f"REM-{i}-email" for i in ids]
    before = snapshot(ledger)
    again = call("send_reminders", invoice_ids=ids)
    assert again["reminder_ids"] == out["reminder_ids"] and again["queued"] == 0
    assert again["already_queued"] == len(ids)
    assert snapshot(ledger) == before
    assert rows(ledger, "SELECT COUNT(*) FROM reminders_outbox") == [(len(ids),)]
    empty = call("send_reminders", invoice_ids=[])
    assert empty == {"reminder_ids": [], "invoice_ids": [], "queued": 0, "already_queued": 0}


def test_send_reminders_is_all_or_nothing(call: Callable[..., Any], ledger: Path) -> None:
    ids = call("list_overdue_invoices")["ids"]
    bad = [ids[0], ids[1], paid_invoice(ledger), "INV-9999", ids[2]]
    before = snapshot(ledger)
    with pytest.raises(ValueError, match="no reminders queued") as caught:
        call("send_reminders", invoice_ids=bad)
    assert paid_invoice(ledger) in str(caught.value) and "INV-9999" in str(caught.value)
    assert snapshot(ledger) == before


def test_send_reminders_rolls_back_on_a_failure_mid_write(
    call: Callable[..., Any], module: ModuleType, ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = call("list_overdue_invoices")["ids"][:4]
    real_queue = module._queue
    calls = {"n": 0}

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise sqlite3.OperationalError("disk I/O error")
        return real_queue(*args, **kwargs)

    monkeypatch.setattr(module, "_queue", flaky)
    before = snapshot(ledger)
    with pytest.raises(sqlite3.OperationalError):
        call("send_reminders", invoice_ids=ids)
    assert snapshot(ledger) == before  # the two rows inserted before the failure were rolled back


def test_concurrent_writes_from_threads(call: Callable[..., Any], ledger: Path) -> None:
    overdue = call("list_overdue_invoices")["invoices"]
    iid = overdue[0]["invoice_id"]
    target = overdue[1]
    results: list[Any] = []
    errors: list[BaseException] = []

    def remind() -> None:
        try:
            results.append(call("queue_reminder", invoice_id=iid))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def pay() -> None:
        try:
            args = {"invoice_id": target["invoice_id"], "amount": "1.00", "currency": target["currency"]}
            results.append(call("record_payment", **args))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=f) for f in (remind, pay) * 6]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    reminders = [r for r in results if "reminder_id" in r]
    assert sum(r["queued"] for r in reminders) == 1 and len({r["reminder_id"] for r in reminders}) == 1
    payment_ids = [r["payment_id"] for r in results if "payment_id" in r]
    assert len(set(payment_ids)) == 6
    assert rows(ledger, "SELECT COUNT(*) FROM reminders_outbox") == [(1,)]


# --------------------------------------------------------------------------- send_payment


def test_send_payment(call: Callable[..., Any], ledger: Path) -> None:
    iban = call("get_supplier", supplier_id="S003")["iban"]
    spaced = " ".join(iban[i : i + 4] for i in range(0, len(iban), 4)).lower()
    out = call("send_payment", iban=spaced, amount="1240.00", currency="eur", reference="Invoice DPM-7781")
    assert out == {
        "payment_id": "PO-0001",
        "status": "submitted",
        "iban": iban,
        "amount": "1240.00",
        "currency": "EUR",
        "reference": "Invoice DPM-7781",
    }
    second = call("send_payment", iban=iban, amount=12, currency="EUR", reference="x")
    assert second["payment_id"] == "PO-0002" and second["amount"] == "12.00"
    assert rows(ledger, "SELECT id, iban, amount, status, created_on FROM payments_out ORDER BY id")[0] == (
        "PO-0001",
        iban,
        "1240.00",
        "submitted",
        "2026-11-01",
    )


def test_send_payment_rejections_write_nothing(call: Callable[..., Any], ledger: Path) -> None:
    good = "DE89370400440532013000"
    cases: list[tuple[dict[str, Any], str]] = [
        ({"iban": "DE89370400440532013001"}, "mod-97"),
        ({"iban": "DE8937040044053201300"}, "DE IBANs have 22"),
        ({"iban": "not an iban"}, "not an IBAN"),
        ({"iban": ""}, "not an IBAN"),
        ({"amount": "0"}, "greater than 0"),
        ({"amount": "-1"}, "greater than 0"),
        ({"amount": "0.001"}, "2 decimal places"),
        ({"currency": "JPY"}, "unsupported currency"),
        ({"currency": "E"}, "3-letter"),
        ({"reference": "   "}, "reference"),
        ({"reference": "r" * 141}, "reference"),
    ]
    for override, match in cases:
        args = {"iban": good, "amount": "10.00", "currency": "EUR", "reference": "ref", **override}
        expect_nothing_written(ledger, functools.partial(call, "send_payment", **args), match)


def test_iban_check(module: ModuleType) -> None:
    assert module._valid_iban("GB82 WEST 1234 5698 7654 32") == "GB82WEST12345698765432"
    assert module._valid_iban("ch93 0076 2011 6238 5295 7") == "CH9300762011623852957"
    assert module._with_check_digits("DE", "370400440532013000") == "DE89370400440532013000"
    with pytest.raises(ValueError, match="mod-97"):
        module._valid_iban("GB83WEST12345698765432")


# --------------------------------------------------------------------------- the packs inside plans


def _ref(pointer: str) -> dict[str, str]:
    return {"$ref": pointer}


def _compile(steps: list[dict[str, Any]], *, policy: bool = False) -> Any:
    import json

    from pte import compile_plan, load_registry

    registry = load_registry(["backoffice", "calculator", "shaping"])
    checks = []
    if policy:
        from pte import Policy

        checks.append(Policy.from_registry(registry).check())
    return compile_plan(json.dumps({"pte_plan": "1", "steps": steps}), registry, checks=checks)


def test_outputs_type_check_as_plan_references() -> None:
    # The design document's example, and a typed shaping pipeline feeding a write tool.
    _compile(
        [
            {"id": "inv", "tool": "list_overdue_invoices", "args": {"days": 30}},
            {
                "id": "total",
                "tool": "calculator",
                "args": {"expression": "sum(amounts)", "variables": {"amounts": _ref("inv/amounts")}},
            },
            {
                "id": "mail",
                "tool": "send_reminders",
                "args": {"invoice_ids": _ref("inv/ids")},
                "after": ["total"],
            },
        ]
    )
    _compile(
        [
            {"id": "inv", "tool": "list_overdue_invoices", "args": {"currency": "EUR"}},
            {
                "id": "big",
                "tool": "filter_records",
                "args": {
                    "records": _ref("inv/invoices"),
                    "field": "outstanding",
                    "op": "gt",
                    "value": "5000",
                },
            },
            {
                "id": "ids",
                "tool": "pluck_text",
                "args": {"records": _ref("big/records"), "field": "invoice_id"},
            },
            {
                "id": "amt",
                "tool": "pluck_numbers",
                "args": {"records": _ref("big/records"), "field": "outstanding"},
            },
            {
                "id": "sum",
                "tool": "calculator",
                "args": {"expression": "sum(x)", "variables": {"x": _ref("amt/values")}},
            },
            {
                "id": "pct",
                "tool": "percentage",
                "args": {"part": _ref("sum/value"), "whole": _ref("inv/total")},
            },
            {"id": "rem", "tool": "send_reminders", "args": {"invoice_ids": _ref("ids/values")}},
            {
                "id": "txt",
                "tool": "format_text",
                "args": {"template": "{n}: {p}%", "values": {"n": _ref("ids/count"), "p": _ref("pct/value")}},
            },
        ]
    )


def test_injected_payment_details_cannot_reach_send_payment() -> None:
    pytest.importorskip("pte._policy._document")
    from pte import PlanRejected, ReasonCode

    doc = {"id": "doc", "tool": "read_document", "args": {"document_id": "DOC-004"}}
    direct = {
        "iban": _ref("doc/iban"),
        "amount": _ref("doc/amount"),
        "currency": "EUR",
        "reference": "NW-2291",
    }
    laundered = [
        doc,
        {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S002"}},
        {
            "id": "amt",
            "tool": "calculator",
            "args": {"expression": "a * 1", "variables": {"a": _ref("doc/amount")}},
        },
        {
            "id": "pay",
            "tool": "send_payment",
            "args": {
                "iban": _ref("sup/iban"),
                "amount": _ref("amt/value"),
                "currency": "EUR",
                "reference": "x",
            },
        },
    ]
    for steps in ([doc, {"id": "pay", "tool": "send_payment", "args": direct}], laundered):
        with pytest.raises(PlanRejected) as caught:
            _compile(steps, policy=True)
        assert caught.value.reason is ReasonCode.POLICY_VIOLATION
    # The supplier's IBAN on file and an amount from the request are fine.
    _compile(
        [
            {"id": "sup", "tool": "get_supplier", "args": {"supplier_id": "S003"}},
            {
                "id": "pay",
                "tool": "send_payment",
                "args": {
                    "iban": _ref("sup/iban"),
                    "amount": "1240.00",
                    "currency": "EUR",
                    "reference": "DPM-7781",
                },
            },
        ],
        policy=True,
    )
