"""A catalogue rendering measured and not adopted (#37): what it would save.

Families: consecutive tools with the same type variables, the same output and the same first
parameter written as one signature line (`a, b, c(values: T[], ...) -> OUTPUT`) and one line per
member with its own parameters and description (`- a(op: ..., value: any): ...`).

(The shared shapes this script also measured, `Values<T>` for `{values: T[], count: int}` and
`Records<T>`, were adopted in #37's fourth round: a list and its length written by three tools or
more is named once under Types, so they are part of today's rendering.)

Computed from today's rendering (`pte._run.catalogue_text`) of the six generic packs and of the
whole stock catalogue, in characters; docs/prompts.md ("Sizes") says why it was not adopted.

    PYTHONPATH=. python bench/bench_prompt_families.py
"""

from __future__ import annotations

import re

from pte._catalogue import STOCK_PACKS, load_registry
from pte._policy import Policy
from pte._run import catalogue_text

GENERIC_PACKS = ("calculator", "shaping", "text", "extract", "dates", "containers")
_SIGNATURE = re.compile(r"([a-z_0-9]+)(\[[^\]]*\])?\((.*)\) -> (.*)$")


def families_saving(catalogue: str) -> tuple[int, list[list[str]]]:
    """Characters saved by writing each family once, and the families found."""
    tools = catalogue[catalogue.index("\nTools:\n") + 8 :] if "\nTools:\n" in catalogue else catalogue
    parsed = []
    for block in tools.split("\n\n"):
        signature, *rest = block.split("\n")
        found = _SIGNATURE.match(signature)
        if found is None:
            continue
        name, variables, params, output = found.groups()
        first, _, others = params.partition(", ")
        labelled = bool(rest) and rest[0].startswith("[")  # a labels line: never grouped
        parsed.append((name, variables or "", first, others, output, rest, block, labelled))
    saved, families, i = 0, [], 0
    while i < len(parsed):
        j = i + 1
        while (
            j < len(parsed)
            and not parsed[i][7]
            and not parsed[j][7]
            and all(parsed[j][k] == parsed[i][k] for k in (1, 2, 4))
        ):
            j += 1
        if j - i >= 2:
            members = parsed[i:j]
            before = sum(len(m[6]) + 2 for m in members)
            head = (
                f"{', '.join(m[0] for m in members)}{members[0][1]}({members[0][2]}, ...) -> {members[0][4]}"
            )
            lines = [head] + [f"- {m[0]}({m[3]}): {' '.join(m[5])}" for m in members]
            saved += before - (sum(len(line) + 1 for line in lines) + 1)
            families.append([m[0] for m in members])
        i = j
    return saved, families


def main() -> None:
    for label, packs in (("six generic packs", GENERIC_PACKS), ("whole stock catalogue", STOCK_PACKS)):
        registry = load_registry(packs)
        catalogue = catalogue_text(registry, Policy.from_registry(registry))
        saved, families = families_saving(catalogue)
        print(f"{label}: catalogue {len(catalogue):,d} characters")
        print(f"  families as one signature: {saved:5,d} saved ({saved / len(catalogue):.1%}), {families}")


if __name__ == "__main__":
    main()
