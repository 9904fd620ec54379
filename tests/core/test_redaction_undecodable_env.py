"""A secret in the environment whose bytes are not UTF-8 (review of #37).

Python reads such an environment variable with ``surrogateescape``: its value holds lone
surrogates. `Redactor.add_secret` keeps each secret's JSON encoding for the audit writer's
search of whole records, made by orjson, which refuses a lone surrogate: `Redactor.from_env`
raised a bare TypeError, and with it every `pte` command. Such a secret is still scrubbed
wherever it occurs, and a record holding it is written redacted.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pte import AuditLog

# private: the record builders, to write a record by hand
from pte._audit import records

# private: what a redacted value reads (the core's face)
from pte._core import REDACTED
from pte.audit import Redactor

# Bytes that are not UTF-8, as Python decodes an environment variable holding them.
UNDECODABLE = b"hunter2-\xff\xfe-of-the-db".decode("utf-8", "surrogateescape")


@given(st.binary(min_size=32, max_size=48))  # at least 8 characters however decoded
def test_any_bytes_of_a_secret_variable_are_taken_and_scrubbed(raw: bytes) -> None:
    value = raw.decode("utf-8", "surrogateescape")
    redactor = Redactor.from_env({"DB_PASSWORD": value})
    assert redactor.redact_text(f"dsn: {value};") == f"dsn: {REDACTED};"


def test_a_record_holding_such_a_secret_is_written_redacted() -> None:
    log = AuditLog(redactor=Redactor.from_env({"DB_PASSWORD": UNDECODABLE}))
    log.write(records.run_started(mode="execute", request=f"connect with {UNDECODABLE}", config={}))
    assert log.records[-1]["request"] == f"connect with {REDACTED}"


def test_the_cli_starts_with_such_a_variable_set(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests._cli_run import cli

    monkeypatch.setenv("DB_PASSWORD", UNDECODABLE)
    code, _, _ = cli(capsys, "tools")
    assert code == 0
