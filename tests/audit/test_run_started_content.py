"""A run's catalogue and policy are redacted once, by the log's redactor, and stored as redacted.

`run_started_fields` redacts the content a ``run_started`` stores with the log's redactor
(`Redactor.redact_content`), hashes it, and the writer takes the content the redactor gave out
as it is instead of walking it again (#37). What must hold whatever the content: the stored
content is what `redact_structure` makes of it, under the hash of exactly those bytes; content
changed after it was redacted (a secret written into it), content another redactor redacted,
and content redacted before a secret was registered are all redacted again by the writer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pte import AuditLog, Registry, tool, verify

# private: the record builders, to write a run_started by hand
from pte._audit import records as rec

# private: the run_started content the engine records, built as the engine builds it
from pte._catalogue import run_started_fields
from pte.audit import Redactor, hash_json, read_records

SECRET = "pl41n-s3cret-of-the-deployment"


@tool
def lookup(customer_id: str, password: str | None = None) -> str:
    """Looks a customer up (the key is ghp_0123456789abcdefghijklmnopqrstuvwxyzAB)."""
    return customer_id


REGISTRY = Registry([lookup])
POLICY = {"version": 1, "rules": [{"tool": "set_password", "note": "token sk-live-0123456789abcdefSECRETS"}]}


def _started(log: AuditLog, content: dict[str, Any]) -> dict[str, Any]:
    return log.write(rec.run_started(mode="execute", request=None, config={}, content=content))


def _stored_as_redacted(written: dict[str, Any], redactor: Redactor) -> None:
    """Every stored content is `redact_structure` of the source, under its own hash."""
    catalogue = redactor.redact_structure(REGISTRY.describe())
    policy = redactor.redact_structure(POLICY)
    assert written["stored"] == {hash_json(catalogue): catalogue, hash_json(policy): policy}
    assert written["catalogue"] == hash_json(catalogue) and written["policy"] == hash_json(policy)


def test_the_content_is_stored_redacted_once_and_the_log_verifies(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with AuditLog(path) as log:
        written = _started(log, run_started_fields(REGISTRY, POLICY, log.redactor.redact_content))
    _stored_as_redacted(written, log.redactor)
    text = path.read_text()
    assert "ghp_0123456789" not in text and "sk-live-0123456789" not in text
    assert '"password"' in text  # a schema property named password stays a property
    assert verify(path).intact  # the chain holds (the run itself goes on: not sealed here)
    assert read_records(path)[0]["stored"] == written["stored"]


def test_content_changed_after_it_was_redacted_is_redacted_again() -> None:
    log = AuditLog()
    content = run_started_fields(REGISTRY, POLICY, log.redactor.redact_content)
    key = content["catalogue"]
    content["stored"][key][0]["description"] = (
        f"leaked {SECRET} and ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"
    )
    log.redactor.add_secret(SECRET)
    written = _started(log, content)
    assert SECRET not in repr(written) and "ghp_0123456789" not in repr(written)


def test_content_another_redactor_gave_out_is_redacted_by_the_log() -> None:
    lenient = Redactor(patterns=(), keys=())  # redacts nothing
    content = run_started_fields(REGISTRY, POLICY, lenient.redact_content)
    assert "ghp_0123456789" in repr(content["stored"])
    log = AuditLog()
    written = _started(log, content)
    assert "ghp_0123456789" not in repr(written["stored"]) and "sk-live-0123" not in repr(written["stored"])


def test_a_secret_registered_after_the_content_was_redacted_is_still_scrubbed() -> None:
    log = AuditLog()
    described = f"Looks a customer up with {SECRET}."
    content = run_started_fields(REGISTRY, {"note": described}, log.redactor.redact_content)
    log.redactor.add_secret(SECRET)
    written = _started(log, content)
    assert SECRET not in repr(written)


_texts = st.sampled_from(
    ["plain words", SECRET, "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB", "key: value", ""]
)
_content = st.recursive(
    _texts | st.integers(-5, 5) | st.floats(-1e3, 1e3) | st.sampled_from([30.0, -0.0, None, True]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(_texts | st.sampled_from(["token", "a"]), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None)
@given(
    policy=st.dictionaries(st.sampled_from(["rules", "password", "x"]), _content, max_size=3),
    tamper=st.booleans(),
)
def test_whatever_the_content_the_log_holds_it_redacted_under_its_hash(
    policy: dict[str, Any], tamper: bool
) -> None:
    log = AuditLog()
    log.redactor.add_secret(SECRET)
    content = run_started_fields(REGISTRY, policy, log.redactor.redact_content)
    if tamper and content["policy"] is not None:
        content["stored"][content["policy"]]["tampered"] = SECRET
    written = _started(log, content)
    for key, stored in written["stored"].items():
        assert stored == log.redactor.redact_structure(stored)  # nothing left to redact
        if not tamper:
            assert hash_json(stored) == key
    assert SECRET not in repr(written)
