"""`Redactor.remember` (texts redacted together, ahead of the records that carry them) never
changes what is written: every text redacts exactly as it would have one at a time."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from pte import AuditLog, Executor, Registry, compile_plan, tool
from pte._redaction import REDACTED, Redactor
from tests.audit_runs import begun
from tests.secrets_corpus import FREE_TEXT

#: Texts a plan's records carry: step ids (schema: ``[a-z][a-z0-9_]{0,63}``), and others.
STEP_IDS = st.from_regex(r"[a-z][a-z0-9_]{0,63}", fullmatch=True)
SECRET_TEXTS = st.sampled_from([text for _, text, _ in FREE_TEXT])
TEXTS = st.one_of(STEP_IDS, SECRET_TEXTS, st.text(max_size=40))


def one_at_a_time(texts: list[str], secrets: list[str]) -> dict[str, str]:
    fresh = Redactor()
    for secret in secrets:
        fresh.add_secret(secret)
    return {text: fresh.redact_text(text) for text in texts}


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(TEXTS, max_size=30),
    secrets=st.lists(st.sampled_from(["abc", "s1", "zz_9", "token"]), max_size=2),
)
def test_remembered_texts_redact_as_they_would_one_at_a_time(texts: list[str], secrets: list[str]) -> None:
    redactor = Redactor()
    for secret in secrets:
        redactor.add_secret(secret)
    redactor.remember(texts)
    expected = one_at_a_time(texts, secrets)
    assert {text: redactor.redact_text(text) for text in texts} == expected
    # And inside values, as records carry them.
    assert redactor.redact({"step_id": texts}) == {"step_id": [expected[t] for t in texts]}


def test_texts_without_a_keyword_are_remembered_in_one_pass() -> None:
    redactor = Redactor()
    ids = [f"s{i}" for i in range(500)]
    redactor.remember(ids)
    assert all(redactor._text_cache.get(i) == i for i in ids)


def test_a_keyword_anywhere_leaves_every_text_to_its_own_scan() -> None:
    redactor = Redactor()
    secret_text = next(text for _, text, _ in FREE_TEXT)
    redactor.remember(["s1", "s2", secret_text])
    assert "s1" not in redactor._text_cache and secret_text not in redactor._text_cache
    assert REDACTED in redactor.redact_text(secret_text)  # still found when it is carried


def test_a_registered_secret_inside_a_remembered_text_is_still_replaced() -> None:
    redactor = Redactor()
    redactor.add_secret("q7x")
    redactor.remember(["step_q7x_a", "plain"])
    assert redactor.redact_text("step_q7x_a") == f"step_{REDACTED}_a"
    assert redactor.redact_text("plain") == "plain"


def test_rules_without_keywords_run_on_every_text() -> None:
    # An extra pattern has no keywords: the shortcut must not apply.
    redactor = Redactor(extra_patterns=[r"s[0-9]{3}"])
    redactor.remember(["s123", "s1"])
    assert redactor.redact_text("s123") == REDACTED
    assert redactor.redact_text("s1") == "s1"


def test_the_cache_bounds_hold() -> None:
    redactor = Redactor()
    redactor.remember(["x" * 201, *[f"t{i}" for i in range(5000)]])
    assert len(redactor._text_cache) == 4096 and "x" * 201 not in redactor._text_cache


@tool
def echo(note: str) -> str:
    """Returns its note."""
    return note


def test_a_step_id_that_looks_like_a_secret_is_redacted_in_the_log(tmp_path: Path) -> None:
    # The executor hands the plan's step ids to the log up front (AuditLog.expect): an id the
    # rules flag must still be redacted in every record that carries it.
    registry = Registry([echo])
    redactor = Redactor(extra_patterns=[r"leaky_[0-9]+"])
    text = json.dumps(
        {
            "pte_plan": "1",
            "steps": [
                {"id": "a", "tool": "echo", "args": {"note": "x"}},
                {"id": "leaky_42", "tool": "echo", "args": {"note": "y"}},
            ],
        }
    )
    path = tmp_path / "audit.jsonl"
    with begun(AuditLog(path, redactor=redactor)) as log:
        assert Executor(registry).run(compile_plan(text, registry), log).ok
    data = path.read_text(encoding="utf-8")
    assert "leaky_42" not in data
    steps = [json.loads(line) for line in data.splitlines()][1:]
    assert [r["step_id"] for r in steps] == ["a", "a", REDACTED, REDACTED]
