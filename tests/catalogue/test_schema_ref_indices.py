"""A schema's local ``$ref`` reads an array index by the one rule (`pte._core.array_index`).

Found in the review of #37: `SchemaWalk` followed ``#/prefixItems/01`` to position 1 (RFC 6901
has no leading zeros: it names nothing), and raised a bare ValueError on an index of more than
4300 digits, which `int` refuses: a catalogue declaring one (an imported OpenAPI document) broke
whatever walked its schema. The property fails before the fix.
"""

from __future__ import annotations

from hypothesis import given

# private: the walk over a tool's schema (labels, types) that follows local references
from pte._catalogue import SchemaWalk

# private: the one rule the walk must agree with
from pte._core import array_index
from tests._pointer_tokens import index_tokens

TYPES = ["string", "integer", "boolean"]


def _escaped(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1").replace("%", "%25")


@given(index_tokens)
def test_a_local_ref_into_a_list_follows_an_index_exactly_when_it_is_one(token: str) -> None:
    document = {
        "$ref": f"#/prefixItems/{_escaped(token)}",
        "prefixItems": [{"type": name} for name in TYPES],
    }
    walk = SchemaWalk(document)
    index = array_index(token)
    expected = [TYPES[index]] if index is not None and index < len(TYPES) else []
    assert walk.keyword(walk.root, "type") == expected
