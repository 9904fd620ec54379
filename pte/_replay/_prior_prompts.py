"""The prompts earlier pte versions wrote, by their ``prompts`` hash.

Replay re-drives a run with its recorded model answers and compares every record, the
messages a model was sent included. Those are written by the prompt code the ``prompts`` hash
names; a log recorded by an earlier pte names that version's hash, and today's code cannot
write its messages. For a hash listed here, replay compares everything but those messages and
says so; any other hash that is not today's is a divergence, so a log writer cannot opt a run
out of the comparison by editing its hash. When a version changes the prompts, the hash it
shipped is added here.

This is replay's half of the reader of older records (pte._audit._older_records reads what a
record means; this says what of an older run's records replay cannot re-derive): a format 1
log records no prompts hash at all, and its messages are not compared either.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pte._audit import record_format

__all__ = ["PRIOR_PROMPTS", "RecordedPrompts"]

PRIOR_PROMPTS: Mapping[str, str] = MappingProxyType(
    {
        "1fd4065ba9e63c6db31ae932f347853348515e03db3afe74d54fc3016eafb176": (
            "pte 0.1.0 as of main 5aa60c6 (2026-11-29), before the prompt cuts of issue 37"
        ),
        "943f6743b8436650fa79c7944f60566c374119490c482938a879c1a48c29837d": (
            "pte 0.1.0 as of main 09f9ad5 (2026-11-29), before the notation keyed only the forms used"
        ),
        "83fb8aa96cea83a34d2732bef9d77ed3d8621fe698e4b9f3b802e37bdcd7b7e6": (
            "pte 0.1.0 as of main aadc173 (2026-11-29), before shared shapes were named"
        ),
        "e0ec9cf93ace09c01ddda23847527ab505597bc2974fc67c0989fed0b20ac2f3": (
            "pte 0.1.0 as of main 80c17a8 (2026-11-29), before a str was written by its name alone"
        ),
        "e235e1c3c06dd15fddf7934ca10f993228cf8c6c822ff385b0c7d9451a0df93c": (
            "pte 0.1.0 as of main e461f99 (2026-11-29), before a repair was shown only its plan's tools"
        ),
        "653944e11c2ff5fa918ef2ef52f5fd7a5771556911935911dda01f346489a5bb": (
            "pte 0.1.0 as of main e140079 (2026-11-29), before a coordinator's repair was cut too"
        ),
        "ca567e0c1287df7246e389bdee58428f37287660f4585ee127a0082a7493dc0b": (
            "pte 0.1.0 as of main ffe56f9 (2026-11-29), before the finalizer's steps shared one budget"
        ),
        "096880eceb9f48b423eea51eb01c8f8394863d7aee391c07574eaf6c1fc4c285": (
            "pte 0.1.0 as of main 548690c (2026-11-29), before the finalizer's steps were ranked by distance"
        ),
        "efe7ec56d2c70f7aac6ce7f1ce339f62b91b06677ccf1a2a4b2af9fc3de61fe8": (
            "pte 0.1.0 as of main 8d82f99 (2026-11-29), before a when condition counted as a dependency"
        ),
        "def5410245f8321015fa70a0ee4ed5c0c480515d1a6ef062ef94a1bec12735fd": (
            "pte 0.1.0 as of main ee2cb12 (2026-11-29), before the finalizer took a for_each step's place "
            "in the run from its plan"
        ),
    }
)


class RecordedPrompts:
    """What replay compares of one run's model calls, by the prompts its ``run_started`` names.

    Under today's prompts every message is compared. A run recorded under an earlier pte's
    prompts (`PRIOR_PROMPTS`), or in format 1, keeps its recorded messages uncompared: the
    replayed record is given the recorded ones; its answers and every decision are compared.
    """

    def __init__(self) -> None:
        #: The earlier pte whose prompts the run was recorded under (else None).
        self.prior: str | None = None
        self._messages_uncompared = False

    def at_run_started(self, recorded: Mapping[str, Any], replayed: dict[str, Any]) -> dict[str, Any]:
        """`replayed` as compared with the recorded ``run_started``."""
        self._messages_uncompared = record_format(recorded) == 1
        prior = PRIOR_PROMPTS.get(str(recorded.get("prompts")))
        if prior is None or recorded["prompts"] == replayed.get("prompts"):
            return replayed
        self.prior = prior
        self._messages_uncompared = True
        return {**replayed, "prompts": recorded["prompts"]}

    def at_llm_call(self, recorded: Mapping[str, Any], replayed: dict[str, Any]) -> dict[str, Any]:
        """`replayed` as compared with a recorded ``llm_call``."""
        if not self._messages_uncompared or "messages" not in recorded:
            return replayed
        return {**replayed, "messages": recorded["messages"]}

    def note(self) -> str | None:
        """What the replay did not compare, for the run's note (None: everything)."""
        if self.prior is None:
            return None
        return (
            f"recorded under the prompts of {self.prior}: the model's recorded answers and every "
            "decision were compared, not the messages it was sent"
        )
