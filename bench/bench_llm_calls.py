"""Benchmark: LLM calls and prompt tokens of PTE against a ReAct loop, over the same tasks.

For tasks of 1, 5, 20 and 50 tool calls (by default), over the same small back-office
catalogue (account lookups and an exact decimal `add`):

- PTE: the real `Engine` with a scripted fake LLM. The planner answers the whole plan at
  once, the executor runs it with no LLM, the finalizer phrases the answer: 2 LLM calls.
- ReAct: a minimal Thought/Action/Observation loop implemented here, with a scripted LLM
  that emits the next action. One LLM call per tool call plus one for the final answer;
  each call's prompt holds the system prompt, the tool catalogue, the request and the
  growing transcript of every earlier thought, action and observation.

Both fake LLMs count tokens the same way, ~len(characters) / 4 of the messages they
receive (prompt) and of the text they answer (completion). Both runs make the same tool
calls and reach the same result, which the script checks. Usage:

    PYTHONPATH=. python bench/bench_llm_calls.py [--sizes 1 5 20 50] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from pydantic import BaseModel

from pte import AuditLog, Engine, EngineConfig, Registry, tool
from pte.engine import LLMResponse
from pte.errors import LLMError

CHARS_PER_TOKEN = 4

# -- the catalogue -------------------------------------------------------------------------------


class Account(BaseModel):
    """A ledger account."""

    account_id: str
    name: str
    currency: str
    balance: Decimal
    status: str
    owner: str


class Figure(BaseModel):
    """One computed figure."""

    value: Decimal


def _account(number: int) -> Account:
    return Account(
        account_id=f"ACC-{number:03d}",
        name=f"Customer {number:03d} Trading Ltd",
        currency="EUR",
        balance=Decimal(f"{1000 + 37 * number}.{(number * 7) % 100:02d}"),
        status="active",
        owner=f"ops-team-{number % 4}",
    )


@tool
def get_account(account_id: str) -> Account:
    """Look up a ledger account by id: name, currency, balance, status and owning team."""
    number = int(account_id.removeprefix("ACC-"))
    return _account(number)


@tool
def add(values: list[Decimal]) -> Figure:
    """Exact decimal sum of the values."""
    return Figure(value=sum(values, Decimal(0)))


REGISTRY = Registry([get_account, add])


@dataclass(frozen=True)
class Task:
    """A request that needs exactly `tool_calls` tool calls."""

    tool_calls: int

    @property
    def accounts(self) -> list[str]:
        count = 1 if self.tool_calls == 1 else self.tool_calls - 1
        return [f"ACC-{n:03d}" for n in range(1, count + 1)]

    @property
    def request(self) -> str:
        if self.tool_calls == 1:
            return f"What is the balance of account {self.accounts[0]}?"
        return f"What is the total balance of accounts {', '.join(self.accounts)}?"

    @property
    def expected(self) -> str:
        balances = [_account(int(a.removeprefix("ACC-"))).balance for a in self.accounts]
        return str(balances[0] if self.tool_calls == 1 else sum(balances, Decimal(0)))

    @property
    def answer(self) -> str:
        if self.tool_calls == 1:
            return f"Account {self.accounts[0]} has a balance of {self.expected} EUR."
        return f"The total balance of the {len(self.accounts)} accounts is {self.expected} EUR."


# -- token counting ------------------------------------------------------------------------------


def tokens(text: str) -> int:
    """The rough token count both fake LLMs use: characters / 4."""
    return len(text) // CHARS_PER_TOKEN


def prompt_tokens(messages: Sequence[Mapping[str, str]]) -> int:
    """Prompt tokens of a chat: the characters of every message's content / 4."""
    return tokens("".join(m.get("content") or "" for m in messages))


@dataclass
class Tally:
    """What one approach spent on one task."""

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ScriptedLLM:
    """An `LLMClient` that answers from a policy (messages -> text) and counts tokens."""

    model = "scripted"

    def __init__(self, policy: Callable[[Sequence[Mapping[str, str]]], str]) -> None:
        self.policy = policy
        self.tally = Tally()

    def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        schema: Mapping[str, Any] | None = None,
        schema_name: str = "pte_plan",
    ) -> LLMResponse:
        """Answer with the policy's text; usage is counted as characters / 4."""
        text = self.policy(messages)
        prompt, completion = prompt_tokens(messages), tokens(text)
        self.tally.llm_calls += 1
        self.tally.prompt_tokens += prompt
        self.tally.completion_tokens += completion
        return LLMResponse(
            text=text,
            model=self.model,
            finish_reason="stop",
            usage={
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
            response_format="json_schema" if schema is not None else "text",
        )


# -- PTE -----------------------------------------------------------------------------------------


def pte_plan(task: Task) -> str:
    """The plan a planner answers for `task`: the lookups, then one `add` over their balances."""
    steps: list[dict[str, Any]] = [
        {"id": f"a{i}", "tool": "get_account", "args": {"account_id": account}}
        for i, account in enumerate(task.accounts)
    ]
    if task.tool_calls == 1:
        result: Any = {"$ref": "a0/balance"}
    else:
        values = [{"$ref": f"a{i}/balance"} for i in range(len(task.accounts))]
        steps.append({"id": "total", "tool": "add", "args": {"values": values}})
        result = {"$ref": "total/value"}
    return json.dumps({"pte_plan": "1", "steps": steps, "result": result})


def run_pte(task: Task) -> Tally:
    """Run `task` through the real engine; return what its LLM calls cost."""
    answers = iter([pte_plan(task), task.answer])
    llm = ScriptedLLM(lambda _messages: next(answers))
    result = Engine(REGISTRY, llm, config=EngineConfig(llm_answer=True)).run(task.request, AuditLog())
    if not result.ok:
        raise SystemExit(f"PTE run failed for {task}: {result.reason}: {result.message}")
    if result.result != task.expected or len(result.steps) != task.tool_calls:
        raise SystemExit(f"PTE run gave {result.result!r} in {len(result.steps)} steps for {task}")
    if (
        result.llm_calls != llm.tally.llm_calls
        or result.usage.get("prompt_tokens") != llm.tally.prompt_tokens
    ):
        raise SystemExit("the engine's own LLM accounting disagrees with the fake LLM's")
    return llm.tally


# -- ReAct ---------------------------------------------------------------------------------------

REACT_SYSTEM = """You are a helpful assistant that answers the user's request by calling tools.
Work step by step. At each turn write exactly:
Thought: <your reasoning about what to do next>
Action: <one tool name from the list below>
Action Input: <the tool's arguments as one JSON object>
You will then receive the tool's result as "Observation: <JSON>". Repeat as needed. When you \
have everything you need, write instead:
Thought: I now know the final answer
Final Answer: <the answer for the user>
Use only the tools listed. Copy figures exactly from observations; do not compute sums yourself, \
use the add tool.

The tools (name, description, effect, input_schema, output_schema):
"""

_ACTION = re.compile(r"Action:\s*(?P<tool>\S+)\s*\nAction Input:\s*(?P<args>\{.*\})\s*$", re.DOTALL)


def react_policy(task: Task) -> Callable[[Sequence[Mapping[str, str]]], str]:
    """A scripted ReAct model: looks up each account, adds the balances it observed, answers."""

    def next_turn(messages: Sequence[Mapping[str, str]]) -> str:
        observations = [
            json.loads(m["content"].removeprefix("Observation: "))
            for m in messages
            if m["role"] == "user" and m["content"].startswith("Observation: ")
        ]
        done = len(observations)
        if done < len(task.accounts):
            account = task.accounts[done]
            return (
                f"Thought: I need the balance of account {account}.\n"
                f"Action: get_account\nAction Input: {json.dumps({'account_id': account})}"
            )
        if task.tool_calls > 1 and done == len(task.accounts):
            balances = [o["balance"] for o in observations]
            return (
                f"Thought: I have all {len(balances)} balances; I add them exactly with the add tool.\n"
                f"Action: add\nAction Input: {json.dumps({'values': balances})}"
            )
        return f"Thought: I now know the final answer\nFinal Answer: {task.answer}"

    return next_turn


def run_react(task: Task, max_turns: int = 1000) -> Tally:
    """A minimal ReAct loop: one LLM call per tool call, the transcript growing each turn."""
    llm = ScriptedLLM(react_policy(task))
    catalogue = json.dumps(REGISTRY.catalogue(), indent=1, ensure_ascii=False, sort_keys=True)
    messages: list[dict[str, str]] = [
        {"role": "system", "content": REACT_SYSTEM + catalogue},
        {"role": "user", "content": task.request},
    ]
    tool_calls = 0
    last_output: Any = None
    for _ in range(max_turns):
        text = llm.complete(messages).text
        messages.append({"role": "assistant", "content": text})
        if "Final Answer:" in text:
            break
        match = _ACTION.search(text)
        if match is None:
            raise LLMError(f"ReAct: no action in {text!r}")
        spec = REGISTRY[match["tool"]]
        args = json.loads(match["args"])
        spec.validate_args(args)
        last_output = spec.invoke(args)
        tool_calls += 1
        observation = json.dumps(last_output, ensure_ascii=False, sort_keys=True)
        messages.append({"role": "user", "content": f"Observation: {observation}"})
    else:
        raise SystemExit(f"ReAct did not finish {task} in {max_turns} turns")
    figure = last_output["balance"] if task.tool_calls == 1 else last_output["value"]
    if tool_calls != task.tool_calls or figure != task.expected:
        raise SystemExit(f"ReAct gave {figure!r} in {tool_calls} tool calls for {task}")
    return llm.tally


# -- report --------------------------------------------------------------------------------------


def measure(sizes: Sequence[int]) -> list[dict[str, Any]]:
    """One row per task size: both approaches' tallies and the ReAct/PTE ratios."""
    rows = []
    for size in sizes:
        task = Task(size)
        pte, react = run_pte(task), run_react(task)
        rows.append(
            {
                "tool_calls": size,
                "pte": asdict(pte),
                "react": asdict(react),
                "ratio_calls": react.llm_calls / pte.llm_calls,
                "ratio_prompt_tokens": react.prompt_tokens / pte.prompt_tokens,
                "ratio_total_tokens": (react.prompt_tokens + react.completion_tokens)
                / (pte.prompt_tokens + pte.completion_tokens),
            }
        )
    return rows


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as a fixed-width table."""
    header = (
        f"{'tool calls':>10} | {'PTE calls':>9} {'ReAct calls':>11} | {'PTE prompt tok':>14} "
        f"{'ReAct prompt tok':>16} | {'PTE compl tok':>13} {'ReAct compl tok':>15} | "
        f"{'calls x':>7} {'prompt x':>8} {'total x':>7}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        pte, react = row["pte"], row["react"]
        lines.append(
            f"{row['tool_calls']:>10} | {pte['llm_calls']:>9} {react['llm_calls']:>11} | "
            f"{pte['prompt_tokens']:>14,} {react['prompt_tokens']:>16,} | "
            f"{pte['completion_tokens']:>13,} {react['completion_tokens']:>15,} | "
            f"{row['ratio_calls']:>7.1f} {row['ratio_prompt_tokens']:>8.2f} {row['ratio_total_tokens']:>7.2f}"
        )
    lines.append("")
    lines.append(
        "x = ReAct / PTE. Tokens ~ characters / 4 of what each fake LLM received (prompt) and answered."
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 5, 20, 50], help="tool calls per task")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    options = parser.parse_args(argv)
    if any(size < 1 for size in options.sizes):
        parser.error("every size must be >= 1")
    rows = measure(options.sizes)
    print(json.dumps(rows, indent=2) if options.json else render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
