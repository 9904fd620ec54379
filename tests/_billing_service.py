"""The loopback billing service the importer and deployment tests read an OpenAPI spec of,
and the one-step plan they run against it (import the `billing` fixture by name where it is
used). Needs the test and openapi extras: import it after `pytest.importorskip` of uvicorn and
httpx."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration_apps.billing_app import make_app
from tests.integration_apps.loopback import LoopbackServer

#: Reads invoice INV-1001 through the spec's getInvoice; its result is the amount in cents.
INVOICE_PLAN: dict[str, Any] = {
    "pte_plan": "1",
    "steps": [{"id": "invoice", "tool": "getInvoice", "args": {"invoice_id": "INV-1001"}}],
    "result": {"$ref": "invoice/amount_cents"},
}


@pytest.fixture(scope="module")
def billing() -> Iterator[LoopbackServer]:
    """The billing service (its "v1" variant) on loopback, for the module's tests."""
    app, _ = make_app("v1")
    with LoopbackServer(app) as server:
        yield server
