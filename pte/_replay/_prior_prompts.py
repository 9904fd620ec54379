"""The prompts earlier pte versions wrote, by their ``prompts`` hash.

Replay re-drives a run with its recorded model answers and compares every record, the
messages a model was sent included. Those are written by the prompt code the ``prompts`` hash
names; a log recorded by an earlier pte names that version's hash, and today's code cannot
write its messages. For a hash listed here, replay compares everything but those messages and
says so; any other hash that is not today's is a divergence, so a log writer cannot opt a run
out of the comparison by editing its hash. When a version changes the prompts, the hash it
shipped is added here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

PRIOR_PROMPTS: Mapping[str, str] = MappingProxyType(
    {
        "1fd4065ba9e63c6db31ae932f347853348515e03db3afe74d54fc3016eafb176": (
            "pte 0.1.0 as of main 5aa60c6 (2026-11-29), before the prompt cuts of issue 37"
        ),
        "943f6743b8436650fa79c7944f60566c374119490c482938a879c1a48c29837d": (
            "pte 0.1.0 as of main 09f9ad5 (2026-11-29), before the notation keyed only the forms used"
        ),
    }
)
