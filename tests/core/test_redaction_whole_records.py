"""The audit writer's fast path (`Redactor.canonical_if_clean`): a record checked whole.

A record in which no rule could change anything is encoded once and that encoding is its
line; the property: whenever the fast path answers, its bytes are exactly what the walk
(`redact_fields`, then `canonical_bytes`) gives, and the walk changed nothing. Secrets,
rule keywords and secret key names anywhere in a record (strings, keys, nested, split
across strings, escaped, in non-ASCII text that lower-cases to ASCII) send it to the walk.
"""

from __future__ import annotations

import string
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pte import AuditLog, verify

# private: the record builders, to write records by hand
from pte._audit import records

# private: canonical bytes, to hash records by hand; the default secret key names
from pte._core import DEFAULT_REDACT_KEYS, canonical_bytes
from pte.audit import Redactor
from tests.secrets_corpus import FREE_TEXT, KEYED

SECRET = "pl41n-s3cret-of-the-deployment"
# Texts that may or may not be (or hold) something a rule redacts.
TEXTS = [
    *(text for _, text, _ in FREE_TEXT),
    *KEYED.values(),
    SECRET,
    SECRET.upper(),
    'a "quoted" \\ text\n',
    "K\u212aelvin İstanbul Σίσυφος",  # non-ASCII that lower-cases to ASCII
    "ghp",
    "_",
    "",
]
KEYS = ["id", "note", "api_key", "API-KEY", "password", "pass_word", "tokens", "Authorization", "x"]

texts = st.one_of(
    st.sampled_from(TEXTS), st.text(max_size=30), st.text(string.ascii_letters + "_-", max_size=12)
)
# What JSON escapes, what lower-cases to ASCII (the Kelvin sign, dotted I), separators.
AROUND = ["", "db_", "x", "-", "_", '"', "\\", "\n", "\x00", "é", "\u212a", "\u0130", "Σ", "s"]


@st.composite
def secret_like_keys(draw: st.DrawFn) -> str:
    """A secret key name spelled as `is_secret_key` still matches it (any case, '-' and '_'
    among its letters, a prefix, '-' and '_' after it), or one character away from it."""
    name = draw(st.sampled_from(sorted(DEFAULT_REDACT_KEYS))).replace("_", "")
    spelled = ""
    for letter in name:
        spelled += draw(st.sampled_from(["", "", "-", "_", "_-"]))
        if letter == "k" and draw(st.booleans()):
            letter = "\u212a"  # KELVIN SIGN: lower-cases to "k"
        spelled += letter.upper() if draw(st.booleans()) else letter
    return draw(st.sampled_from(AROUND)) + spelled + draw(st.sampled_from(AROUND))


keys = st.one_of(st.sampled_from(KEYS), texts, secret_like_keys())
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**60), 2**60),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=20,
)
record_dicts = st.dictionaries(keys, values, max_size=6)


def _redactor() -> Redactor:
    redactor = Redactor()
    redactor.add_secret(SECRET)
    return redactor


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(record_dicts)
def test_a_record_checked_whole_is_encoded_as_the_walk_would(record: dict[str, object]) -> None:
    redactor = _redactor()
    encoded = redactor.canonical_if_clean(record)
    if encoded is None:
        return
    walked = redactor.redact_fields("step_finished", record)
    assert walked == record  # nothing was there to redact
    assert encoded == canonical_bytes(walked)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(secret_like_keys(), st.sampled_from(["plain", 7, None, ["x"]]))
def test_a_key_the_walk_redacts_is_never_passed_whole(key: str, value: object) -> None:
    redactor = _redactor()
    record = {"step_id": "a", "output": {"list": [{key: value}]}}
    if redactor.is_secret_key(key):
        assert redactor.canonical_if_clean(record) is None


def test_key_names_a_whole_search_cannot_answer_for_always_walk() -> None:
    plain = {"step_id": "a", "output": {"id": "PO-7"}}
    assert Redactor().canonical_if_clean(plain) is not None
    for odd in ('pass"word', "ключ", "tab\tkey"):
        redactor = Redactor(extra_keys=[odd])
        assert redactor.canonical_if_clean(plain) is None
        assert redactor.redact({f"my_{odd}": "v"}) == {f"my_{odd}": "[REDACTED]"}
    assert Redactor(extra_patterns=["PO-[0-9]"]).canonical_if_clean(plain) is None  # a rule without keywords


def test_redactors_with_the_same_rules_share_one_check_and_each_keeps_its_own_key_names() -> None:
    # The whole-record set is compiled once per rule set and key names (it took ~4 ms on every
    # AuditLog): a redactor made later with other names must not be given an earlier one's.
    plain = {"step_id": "a", "output": {"po_number": "PO-7"}}
    first, second = Redactor(), Redactor()
    assert first.canonical_if_clean(plain) == second.canonical_if_clean(plain) == canonical_bytes(plain)
    with_po = Redactor(extra_keys=["po_number"])
    assert with_po.canonical_if_clean(plain) is None
    assert with_po.redact(plain) == {"step_id": "a", "output": {"po_number": "[REDACTED]"}}
    assert Redactor().canonical_if_clean(plain) == canonical_bytes(plain)  # unchanged by the other


def test_the_fast_path_is_taken_for_plain_records_and_refused_for_each_kind_of_secret() -> None:
    redactor = _redactor()
    plain = {"step_id": "pay_supplier", "tool": "send_payment", "output": {"id": "PO-7", "eur": 12.5}}
    assert redactor.canonical_if_clean(plain) == canonical_bytes(plain)
    for refused in (
        {**plain, "note": f"see {SECRET}"},  # a registered secret
        {**plain, "note": FREE_TEXT[0][1]},  # a rule's finding
        {**plain, "nested": [{"client_secret": "abc"}]},  # a secret key, deep down
        {**plain, "nested": [{"client_secret": None}]},  # checked whole: stricter than the walk
        {**plain, "n": float("nan")},  # not JSON: the walk and the encoder decide (and refuse)
        {**plain, "n": 2**60},  # a number JCS writes differently
    ):
        assert redactor.canonical_if_clean(refused) is None, refused


def test_a_log_written_on_the_fast_path_verifies_and_holds_no_secret(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    redactor = _redactor()
    plan_hash = "a" * 64
    with AuditLog(path, redactor=redactor) as log:
        log.write(records.run_started(mode="execute", request=None, config={}))
        log.write(
            records.step_started(step_id="a", tool="t", effect="read", args={"q": 1}, plan_hash=plan_hash)
        )
        log.write(records.step_finished(step_id="a", tool="t", status="ok", duration_ms=1.0, output="plain"))
        log.write(
            records.step_started(
                step_id="b", tool="t", effect="read", args={"token": "abc"}, plan_hash=plan_hash
            )
        )
        log.write(
            records.step_finished(step_id="b", tool="t", status="ok", duration_ms=1.0, output=f"key {SECRET}")
        )
        log.write(
            records.run_finished(
                status="succeeded",
                reason=None,
                message=None,
                answer=None,
                result=None,
                steps_run=2,
                llm_calls=0,
            )
        )
    data = path.read_bytes()
    assert SECRET.encode() not in data and b'"abc"' not in data
    assert verify(path).ok


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record_dicts, min_size=1, max_size=3))
def test_a_batch_checked_as_one_text_is_clean_only_if_each_record_is(batch: list[dict[str, object]]) -> None:
    # The writer searches a batch's encodings joined (one RE2 search for a step's two records):
    # a joined search may raise a false alarm across a join, never miss what one record holds.
    redactor = _redactor()
    encodings = [redactor.canonical_if_checkable(record) for record in batch]
    if any(encoded is None for encoded in encodings):
        return
    if redactor.clean([e for e in encodings if e is not None]):
        for record in batch:
            assert redactor.canonical_if_clean(record) is not None
            assert redactor.redact_fields("step_finished", record) == record


def test_a_batch_with_one_secret_is_written_through_the_walk_whole(tmp_path: Path) -> None:
    # A step's pair in one write: the clean step_started and a step_finished holding secrets.
    path = tmp_path / "run.jsonl"
    ph = "a" * 64
    with AuditLog(path, redactor=_redactor()) as log:
        log.write(records.run_started(mode="execute", request=None, config={}))
        written = log.write_records(
            [
                records.step_started(step_id="a", tool="t", effect="read", args={"q": 1}, plan_hash=ph),
                records.step_finished(
                    step_id="a",
                    tool="t",
                    status="ok",
                    duration_ms=1.0,
                    output={"api_key": "abc", "n": SECRET},
                ),
            ]
        )
        # Secrets that only a join of the two encodings would spell are no secret: kept as they are.
        split = SECRET[: len(SECRET) // 2], SECRET[len(SECRET) // 2 :]
        kept = log.write_records(
            [
                records.step_started(
                    step_id="b", tool="t", effect="read", args={"q": split[0]}, plan_hash=ph
                ),
                records.step_finished(step_id="b", tool="t", status="ok", duration_ms=1.0, output=split[1]),
            ]
        )
    assert written[0]["args"] == {"q": 1}
    assert written[1]["output"] == {"api_key": "[REDACTED]", "n": "[REDACTED]"}
    assert kept[0]["args"] == {"q": split[0]} and kept[1]["output"] == split[1]
    data = path.read_bytes()
    assert SECRET.encode() not in data and b'"abc"' not in data
    assert verify(path).intact  # the run is left open: its chain is whole
