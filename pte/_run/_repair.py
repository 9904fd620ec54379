"""Repair: a plan rejected for a reason the planner can fix goes back to it once, as a replan.

A model that writes a wrong pointer, an argument of the wrong type, a cycle, a reused id or
a flow the policy forbids cannot know that from the catalogue alone; the compiler can, and
says where (``$.steps[2].args.values.s``) and why. Like the output retries of Instructor and
Pydantic AI, the run loop (pte._run._loop) then, with the decisions made here

1. checks that the rejection is fixable (`pte._core._errors.REPAIRABLE_REASONS`), that repair is
   on (``EngineConfig.repair``) and that a replan is left (``max_replans``; the repair
   uses one, so ``max_replans=0`` disables it), and that the rejected plan is not itself a
   repair: each plan gets one second chance;
2. writes a ``repair`` record (attempt, who wrote the plan, reason, message, path);
3. asks the same model again, role ``repair``, with the conversation that produced the
   plan, the plan as it wrote it, and the rejection (`pte._run._prompts.repair_messages`); the
   conversation's catalogue is cut to the tools the plan calls and those their descriptions
   name (`pte._run._prompts.repair_tools`); the rules stay as they were;
4. compiles the answer with every check a plan of the rejected plan's writer gets: its
   literals count as what the run has shown a model so far (`pte._run._exposure.literal_of`:
   untrusted once untrusted data was shown), since its prompt holds all of that conversation;
   the prompt says so.

`invalid_json`, `schema_violation`, `tool_not_allowed` and `plan_too_large` are not
repaired: the run ends at once, as the fail-closed table says. A repaired plan that is
rejected again for a fixable reason ends the run ``replans_exhausted``, with both reasons.
Replay reproduces all of it: the config is recorded, and so are the calls and records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pte._run._prompts as prompts
from pte._core import REPAIRABLE_REASONS, FailedClosed, PlanRejected, ReasonCode

if TYPE_CHECKING:
    from pte._run._state import EngineConfig, Planning, PlanOrigin

__all__ = ["may_repair", "repair_failed", "repair_prompt"]


def may_repair(config: EngineConfig, replans_used: int, origin: PlanOrigin, rejection: PlanRejected) -> bool:
    """Whether a plan from `origin` rejected with `rejection` goes back to its writer."""
    return (
        config.repair
        and origin != "repair"
        and rejection.reason in REPAIRABLE_REASONS
        and replans_used < config.max_replans
    )


def repair_prompt(
    planning: Planning,
    messages: list[dict[str, str]],
    rejected_text: str,
    rejection: PlanRejected,
    literal: str,
) -> list[dict[str, str]]:
    """The conversation that produced the rejected plan (its catalogue cut to the plan's tools,
    `pte._run._prompts.repair_tools`), the plan and the rejection; `literal`:
    what the corrected plan's literals count as (`pte._run._exposure.literal_of`), as its policy
    check will count them."""
    return prompts.repair_messages(
        messages,
        rejected_text,
        rejection.to_dict(),
        literals=literal,
        registry=planning.planner_registry,
        policy=planning.policy,
    )


def repair_failed(rejection: PlanRejected, again: PlanRejected) -> FailedClosed | None:
    """How a repaired plan rejected again ends the run: ``replans_exhausted`` with both reasons
    when the second is fixable too; None (the second rejection stands) when it is not."""
    if again.reason not in REPAIRABLE_REASONS:
        return None
    return FailedClosed(
        ReasonCode.REPLANS_EXHAUSTED,
        f"the plan was rejected ({rejection.reason.value} at {rejection.path}: {rejection.message}); "
        f"it was sent back once and the repaired plan was rejected too ({again.reason.value} at "
        f"{again.path}: {again.message})",
    )
