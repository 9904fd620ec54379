"""Planner prompt size for the stock catalogue: characters and (approximate) tokens, before and after.

The planner sees every allowed tool's name, description and schemas, so each new stock tool
costs prompt tokens on every run. This prints the system prompt's size for:

- the recorded baseline: the three original stock packs (28 tools) as main shipped them
  before the data operations (commit e214c2b, measured with this same counter);
- the three original packs today (same tools, compact catalogue text);
- every stock pack today (the data operations included).

Tokens: tiktoken needs its BPE files from a non-registry host, so this counts the pieces of
cl100k's pre-tokenizer (words with their leading space, runs of 1-3 digits, punctuation
runs, whitespace); BPE only splits long pieces further, so it is a close lower bound.
JSON-heavy text is mostly short pieces. ``chars / 4`` is printed next to it as a check.

    PYTHONPATH=. python bench/bench_prompt.py
"""

from __future__ import annotations

import re

from pte._prompts import planner_messages
from pte._tools import STOCK_PACKS, load_registry

#: cl100k's pre-tokenizer pattern with the Unicode classes written for Python's `re`.
_PIECES = re.compile(
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\w]?[^\W\d_]+|\d{1,3}| ?[^\s\w]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
#: Measured on commit e214c2b (before the data operations): tools, characters, pieces.
BASELINE = (28, 53_150, 14_294)


def size(packs: tuple[str, ...]) -> tuple[int, int, int]:
    registry = load_registry(packs)
    text = planner_messages("x", registry)[0]["content"]
    return len(registry), len(text), len(_PIECES.findall(text))


def main() -> None:
    rows = [
        ("baseline: 3 packs, before (e214c2b)", BASELINE),
        ("3 original packs, now", size(("backoffice", "calculator", "shaping"))),
        (f"all {len(STOCK_PACKS)} stock packs, now", size(STOCK_PACKS)),
    ]
    print(
        f"{'planner system prompt':40} {'tools':>6} {'chars':>8} {'~tokens':>8} {'chars/4':>8} {'x base':>7}"
    )
    for label, (tools, chars, pieces) in rows:
        print(f"{label:40} {tools:6d} {chars:8,d} {pieces:8,d} {chars // 4:8,d} {pieces / BASELINE[2]:7.2f}")
    tools, _, pieces = rows[-1][1]
    added = tools - BASELINE[0]
    per_tool = (pieces - rows[1][1][2]) / added if added else 0
    print(f"\n{added} tools added, ~{per_tool:.0f} tokens each on average")


if __name__ == "__main__":
    main()
