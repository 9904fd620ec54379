"""The `pte.tool` decorator, `ToolSpec`, the `Registry` allow-list, tool packs and manifests."""

from __future__ import annotations

import json
import sys
import textwrap
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

import pte
from pte import Registry, ToolError, load_pack, load_registry, tool

# private: the stock packs' list; a tool's spec from its function
from pte._catalogue import STOCK_PACKS, spec_of
from pte.catalogue import ToolSpec
from pte.errors import ToolPackError, ToolRegistrationError
from pte.testing._catalogue import example_registry

# --- the decorator ----------------------------------------------------------------------------


def test_bare_decorator() -> None:
    @tool
    def add(a: int, b: int = 2) -> int:
        """Add two integers."""
        return a + b

    spec = spec_of(add)
    assert add(1) == 3  # the function stays an ordinary function
    assert (spec.name, spec.description, spec.effect) == ("add", "Add two integers.", "read")
    assert (spec.timeout_s, spec.idempotent, spec.provenance, spec.requires_approval) == (
        30.0,
        True,
        "trusted",
        False,
    )
    assert spec.func is add


def test_decorator_with_options() -> None:
    @tool(
        name="pay.invoice",
        description="Pay one invoice.",
        effect="write",
        timeout_s=5,
        provenance="untrusted",
        sinks={"iban": ["request", "trusted"], "memo": "request"},
        requires_approval=True,
    )
    def pay(iban: str, amount: Decimal, memo: str = "") -> bool:
        """Docstring that the description option overrides."""
        return True

    spec = spec_of(pay)
    assert spec.name == "pay.invoice" and spec.description == "Pay one invoice."
    assert spec.effect == "write" and spec.idempotent is False  # writes default to non-idempotent
    assert spec.timeout_s == 5.0 and isinstance(spec.timeout_s, float)
    assert spec.provenance == "untrusted" and spec.requires_approval
    assert spec.sinks == {"iban": frozenset({"request", "trusted"}), "memo": frozenset({"request"})}
    entry = spec.catalogue_entry()
    assert entry["output_provenance"] == "untrusted" and entry["requires_approval"] is True
    assert entry["guarded_parameters"] == {"iban": ["request", "trusted"], "memo": ["request"]}
    described = spec.describe()
    expected = {"name": "pay.invoice", "effect": "write", "idempotent": False, "timeout_s": 5.0}
    expected |= {"provenance": "untrusted", "requires_approval": True}
    assert {k: described[k] for k in expected} == expected
    assert json.loads(json.dumps(described)) == described  # JSON-ready for the audit log


def test_idempotent_write_can_be_declared() -> None:
    @tool(effect="write", idempotent=True)
    def upsert(key: str) -> None:
        return None

    assert spec_of(upsert).idempotent is True


class Line(BaseModel):
    sku: Annotated[str, Field(pattern=r"^[A-Z]{3}-\d{3}$")]
    qty: Annotated[int, Field(ge=1)]


class Order(BaseModel):
    id: int
    lines: list[Line]
    placed: date
    status: Literal["open", "closed"] = "open"


def test_schemas_come_from_the_type_hints() -> None:
    @tool
    def make_order(
        lines: list[Line],
        placed: date,
        note: str | None = None,
        priority: Annotated[int, Field(ge=0, le=9)] = 5,
    ) -> Order:
        """Create an order."""
        return Order(id=1, lines=lines, placed=placed)

    spec = spec_of(make_order)
    schema = spec.input_schema
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert schema["required"] == ["lines", "placed"]
    assert (
        schema["properties"]["priority"]["minimum"] == 0 and schema["properties"]["priority"]["maximum"] == 9
    )
    assert schema["properties"]["placed"] == {"format": "date", "title": "Placed", "type": "string"}
    assert {"type": "null"} in schema["properties"]["note"]["anyOf"]
    assert schema["$defs"]["Line"]["properties"]["qty"]["minimum"] == 1
    out = spec.output_schema
    assert out["type"] == "object" and set(out["required"]) == {"id", "lines", "placed"}
    assert out["properties"]["status"]["enum"] == ["open", "closed"]


def test_schemas_are_read_only() -> None:
    spec = spec_of(example_registry()["calculator"].func)
    with pytest.raises(TypeError):
        spec.input_schema["type"] = "array"  # type: ignore[index]


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("def f(a, b: int) -> int: ...", "parameter 'a' has no type hint"),
        ("def f(a: int): ...", "no return type hint"),
        ("def f(*args: int) -> int: ...", "*args/**kwargs"),
        ("def f(**kwargs: int) -> int: ...", "*args/**kwargs"),
        ("def f(a: int, /) -> int: ...", "positional-only parameter 'a'"),
        ("def f(a: 'NoSuchType') -> int: ...", "cannot read type hints"),
        ("def f(a: socket.socket) -> int: ...", "do not give a JSON Schema"),
        ("def f(a: int) -> socket.socket: ...", "do not give a JSON Schema"),
        ("def f(a: int) -> Callable[[], int]: ...", "do not give a JSON Schema"),
    ],
)
def test_unusable_signatures_are_refused(source: str, words: str) -> None:
    namespace: dict[str, Any] = {}
    exec("import socket\nfrom collections.abc import Callable\n" + source, namespace)
    with pytest.raises(ToolRegistrationError) as info:
        tool(namespace["f"])
    assert words in str(info.value)
    assert "'f'" in str(info.value)  # names the tool


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"effect": "delete"}, "effect must be 'read' or 'write'"),
        ({"provenance": "maybe"}, "provenance must be"),
        ({"timeout_s": 0}, "timeout_s must be a positive number"),
        ({"timeout_s": -1.5}, "timeout_s must be a positive number"),
        ({"name": "1st"}, "must match"),
        ({"name": "has space"}, "must match"),
        ({"name": "x" * 65}, "must match"),
        ({"sinks": {"nope": ["request"]}}, "sink 'nope' names no parameter"),
        ({"sinks": {"a": ["anyone"]}}, "unknown provenance ['anyone']"),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], words: str) -> None:
    def f(a: int) -> int:
        return a

    with pytest.raises(ToolRegistrationError) as info:
        tool(**options)(f)
    assert words in str(info.value)


def test_tool_registration_error_is_a_type_error() -> None:
    assert issubclass(ToolRegistrationError, TypeError)
    assert issubclass(ToolRegistrationError, pte.PTEError)


def test_spec_of_refuses_plain_functions() -> None:
    def plain(a: int) -> int:
        return a

    with pytest.raises(ToolRegistrationError, match="not a PTE tool"):
        spec_of(plain)
    with pytest.raises(ToolRegistrationError):
        Registry([plain])


# --- ToolSpec: invoke and validate ------------------------------------------------------------


@tool
def split_amount(
    amount: Decimal, parts: Annotated[int, Field(ge=1, le=10)] = 2, on: date | None = None
) -> list[Decimal]:
    """Split an amount into equal parts."""
    share = (amount / parts).quantize(Decimal("0.01"))
    return [share] * parts


def test_invoke_converts_arguments_and_output() -> None:
    spec = spec_of(split_amount)
    assert spec.invoke({"amount": "10.00", "parts": 4}) == ["2.50"] * 4  # Decimal -> JSON string
    assert spec.invoke({"amount": 1}) == ["0.50", "0.50"]  # the default applies
    assert spec.invoke({"amount": "3", "parts": 3, "on": "2024-06-30"}) == ["1.00"] * 3


def test_invoke_rejects_bad_arguments() -> None:
    spec = spec_of(split_amount)
    with pytest.raises(ToolError) as info:
        spec.invoke({"amount": "ten"})
    assert info.value.kind == "invalid_args"
    assert info.value.to_dict()["kind"] == "invalid_args"
    with pytest.raises(ToolError):
        spec.invoke({"amount": 1, "parts": 11})
    with pytest.raises(ToolError):
        spec.invoke({"amount": 1, "extra": True})


def test_invoke_rejects_unserialisable_output() -> None:
    @tool
    def leaky(a: int) -> Any:
        return object()

    with pytest.raises(ToolError) as info:
        spec_of(leaky).invoke({"a": 1})
    assert info.value.kind == "invalid_output"


def test_exceptions_in_the_tool_propagate_from_invoke() -> None:
    @tool
    def boom(a: int) -> int:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        spec_of(boom).invoke({"a": 1})


@pytest.mark.parametrize(
    ("args", "where"),
    [
        ({}, "(root)"),
        ({"amount": "ten"}, "amount"),
        ({"amount": 1, "parts": 0}, "parts"),
        ({"amount": 1, "parts": "2"}, "parts"),
        ({"amount": 1, "bogus": 1}, "(root)"),
    ],
)
def test_validate_args(args: dict[str, Any], where: str) -> None:
    spec = spec_of(split_amount)
    with pytest.raises(ToolError) as info:
        spec.validate_args(args)
    assert info.value.kind == "invalid_args"
    assert info.value.message.startswith(where + ":")
    assert spec.args_error(args) is not None


def test_validate_args_accepts_valid_args() -> None:
    spec = spec_of(split_amount)
    spec.validate_args({"amount": "1.5", "parts": 3, "on": None})
    assert spec.args_error({"amount": 2}) is None


def test_validate_output() -> None:
    spec = spec_of(split_amount)
    spec.validate_output(["1.00", "2"])
    for bad in (["x"], "1.00", [1.5], None, {"a": 1}):
        with pytest.raises(ToolError) as info:
            spec.validate_output(bad)
        assert info.value.kind == "invalid_output"


def test_validate_output_reports_the_path() -> None:
    spec = example_registry()["lookup_customer"]
    good = spec.invoke({"customer_id": "C001"})
    spec.validate_output(good)
    good["address"]["country"] = "XX"
    with pytest.raises(ToolError) as info:
        spec.validate_output(good)
    assert "address.country" in info.value.message


# --- the registry -----------------------------------------------------------------------------


def test_registry_basics() -> None:
    registry = example_registry()
    assert len(registry) == 8
    assert registry.names[:3] == ["list_overdue_invoices", "lookup_customer", "calculator"]
    assert "calculator" in registry and "nope" not in registry and 5 not in registry
    assert registry["calculator"].name == "calculator"
    assert registry.get("nope") is None
    with pytest.raises(KeyError):
        registry["nope"]
    assert [t.name for t in registry] == registry.names
    assert [d["name"] for d in registry.describe()] == registry.names
    catalogue = registry.catalogue()
    assert {"name", "description", "effect", "input_schema", "output_schema"} <= set(catalogue[0])
    assert json.loads(json.dumps(catalogue, default=dict))  # JSON-ready for a planner prompt
    assert {t.name for t in registry if t.effect == "write"} == {"send_reminder", "post_journal_entry"}


def test_duplicate_names_are_refused() -> None:
    def one(a: int) -> int:
        return a

    def two(a: int) -> int:
        return a

    first = tool(name="same")(one)
    second = tool(name="same")(two)
    with pytest.raises(ToolRegistrationError, match="'same'"):
        Registry([first, second])
    registry = Registry([first])
    registry.register(first)  # the same tool again is harmless
    assert len(registry) == 1
    with pytest.raises(ToolRegistrationError):
        registry.merged(Registry([second]))


def test_register_accepts_specs_and_functions() -> None:
    registry = Registry()
    spec = registry.register(split_amount)
    assert isinstance(spec, ToolSpec) and registry.register(spec) is spec
    assert registry.names == ["split_amount"]


def test_allow_narrows_in_the_given_order() -> None:
    registry = example_registry()
    narrowed = registry.allow(["send_reminder", "calculator", "calculator"])
    assert narrowed.names == ["send_reminder", "calculator"]
    assert len(registry) == 8  # the original is unchanged
    with pytest.raises(ToolPackError) as info:
        registry.allow(["calculator", "rm_rf"])
    assert "rm_rf" in str(info.value)
    assert registry.allow([]).names == []


def test_deny_removes_tools() -> None:
    registry = example_registry()
    narrowed = registry.deny(["send_reminder", "post_journal_entry"])
    assert "send_reminder" not in narrowed and "post_journal_entry" not in narrowed
    assert len(narrowed) == 6 and len(registry) == 8
    assert registry.deny([]).names == registry.names


def test_merged() -> None:
    merged = example_registry().deny(["calculator"]).merged(Registry([split_amount]))
    assert "split_amount" in merged and "calculator" not in merged and len(merged) == 8


# --- tool packs -------------------------------------------------------------------------------

PACK_SOURCE = '''
"""A tiny pack."""
from pte import tool

@tool
def double(x: int) -> int:
    """Twice x."""
    return 2 * x

@tool(effect="write")
def shout(text: str) -> str:
    return text.upper()

def helper(x):  # not a tool: no decorator
    return x
'''


def _write(path: Path, source: str) -> Path:
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def test_load_pack_from_a_file(tmp_path: Path) -> None:
    registry = load_pack(_write(tmp_path / "mypack.py", PACK_SOURCE))
    assert registry.names == ["double", "shout"]
    assert registry["double"].invoke({"x": 21}) == 42
    assert registry["shout"].effect == "write"
    assert load_pack(str(tmp_path / "mypack.py")).names == ["double", "shout"]


def test_load_pack_from_a_module_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "pte_test_pack_module.py", PACK_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert load_pack("pte_test_pack_module").names == ["double", "shout"]
        assert load_pack(sys.modules["pte_test_pack_module"]).names == ["double", "shout"]
    finally:
        sys.modules.pop("pte_test_pack_module", None)


def test_load_pack_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ToolPackError, match="does not exist"):
        load_pack(tmp_path / "nope.py")
    with pytest.raises(ToolPackError, match="does not exist"):
        load_pack(str(tmp_path / "sub" / "nope.py"))


def test_load_pack_unknown_module() -> None:
    with pytest.raises(ToolPackError) as info:
        load_pack("pte_no_such_module_anywhere")
    assert "stock pack" in str(info.value) and "importable module" in str(info.value)


def test_load_pack_without_tools(tmp_path: Path) -> None:
    with pytest.raises(ToolPackError, match=r"defines no @pte\.tool functions"):
        load_pack(_write(tmp_path / "empty_pack.py", "def f(x: int) -> int:\n    return x\n"))


def test_load_pack_import_error(tmp_path: Path) -> None:
    with pytest.raises(ToolPackError) as info:
        load_pack(_write(tmp_path / "broken_pack.py", "import pte_no_such_dependency\n"))
    assert "failed to import" in str(info.value) and "ModuleNotFoundError" in str(info.value)
    with pytest.raises(ToolPackError, match="ZeroDivisionError"):
        load_pack(_write(tmp_path / "raising_pack.py", "1 / 0\n"))
    with pytest.raises(ToolPackError, match="SyntaxError"):
        load_pack(_write(tmp_path / "syntax_pack.py", "def (:\n"))


def test_load_pack_with_a_bad_tool(tmp_path: Path) -> None:
    source = "from pte import tool\n\n@tool\ndef f(x) -> int:\n    return 1\n"
    with pytest.raises(ToolRegistrationError, match="parameter 'x' has no type hint"):
        load_pack(_write(tmp_path / "bad_tool_pack.py", source))


@pytest.mark.parametrize("name", STOCK_PACKS)
def test_stock_packs_load(name: str) -> None:
    # private: the shipped data folder
    from pte._core import data_dir

    if not (data_dir("tools") / f"{name}.py").exists():
        pytest.skip(f"stock pack {name} is not in tools/ yet")
    registry = load_pack(name)
    assert len(registry) > 0
    for spec in registry:
        assert spec.description, f"{spec.name} needs a description (the planner reads it)"


# --- load_registry and manifests --------------------------------------------------------------


@pytest.fixture
def pack(tmp_path: Path) -> Path:
    return _write(tmp_path / "manifest_pack.py", PACK_SOURCE)


def _manifest(tmp_path: Path, content: Any) -> Path:
    path = tmp_path / "manifest.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def test_load_registry_merges_packs(pack: Path, tmp_path: Path) -> None:
    other = _write(
        tmp_path / "other_pack.py", "from pte import tool\n\n@tool\ndef third(x: int) -> int:\n    return x\n"
    )
    assert load_registry([pack, other]).names == ["double", "shout", "third"]


def test_load_registry_refuses_clashing_packs(pack: Path, tmp_path: Path) -> None:
    clash = _write(
        tmp_path / "clash_pack.py",
        "from pte import tool\n\n@tool\ndef double(x: int) -> int:\n    return x\n",
    )
    with pytest.raises(ToolRegistrationError, match="'double'"):
        load_registry([pack, clash])


def test_load_registry_with_allow(pack: Path) -> None:
    assert load_registry([pack], allow=["double"]).names == ["double"]
    with pytest.raises(ToolPackError):
        load_registry([pack], allow=["triple"])


@pytest.mark.parametrize(
    ("manifest", "names"),
    [
        ({"allow": ["double"]}, ["double"]),
        ({"deny": ["shout"]}, ["double"]),
        ({"allow": ["double", "shout"], "deny": ["double"]}, ["shout"]),
        ({}, ["double", "shout"]),
        ({"allow": []}, []),
    ],
)
def test_manifest(pack: Path, tmp_path: Path, manifest: dict[str, Any], names: list[str]) -> None:
    assert load_registry([pack], manifest=_manifest(tmp_path, manifest)).names == names


def test_manifest_and_allow_combine(pack: Path, tmp_path: Path) -> None:
    path = _manifest(tmp_path, {"deny": ["shout"]})
    assert load_registry([pack], manifest=path, allow=["double"]).names == ["double"]
    with pytest.raises(ToolPackError):  # --allow cannot bring back what the manifest denied
        load_registry([pack], manifest=path, allow=["shout"])


def test_manifest_conforms_to_its_schema() -> None:
    import jsonschema

    # private: the JSON Schemas shipped in schemas/
    from pte._core import load_schema

    schema = load_schema("tool-manifest.schema.json")
    jsonschema.Draft202012Validator.check_schema(schema)
    assert jsonschema.Draft202012Validator(schema).is_valid({"allow": ["a"], "deny": ["b"]})


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ({"allow": "double"}, "is not of type 'array'"),
        ({"allow": [1]}, "is not of type 'string'"),
        ({"deny": ["a", "a"]}, "non-unique"),
        ({"permit": ["double"]}, "'permit'"),
        (["double"], "is not of type 'object'"),
        ("{not json", "cannot read tool manifest"),
        ({"allow": ["double", "nope"]}, "nope"),
    ],
)
def test_invalid_manifest(pack: Path, tmp_path: Path, content: Any, words: str) -> None:
    with pytest.raises(ToolPackError) as info:
        load_registry([pack], manifest=_manifest(tmp_path, content))
    assert words in str(info.value)


def test_missing_manifest(pack: Path, tmp_path: Path) -> None:
    with pytest.raises(ToolPackError, match="cannot read tool manifest"):
        load_registry([pack], manifest=tmp_path / "missing.json")


def test_deny_of_an_unknown_tool_is_an_error_like_allow() -> None:
    registry = pte.load_pack("calculator")
    with pytest.raises(pte.errors.ToolPackError, match="calculater"):
        registry.deny(["calculater"])
    assert "calculator" not in registry.deny(["calculator"])
