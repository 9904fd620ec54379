"""pte.testing's doubles import without hypothesis; its strategies say they need it (#35)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]

#: A fresh interpreter in which ``import hypothesis`` fails, as where it is not installed.
_BLOCK = textwrap.dedent(
    """
    import sys
    class _NoHypothesis:
        def find_spec(self, name, path=None, target=None):
            if name == "hypothesis" or name.startswith("hypothesis."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, _NoHypothesis())
    """
)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _BLOCK + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=_ROOT,
        check=False,
    )


def test_the_doubles_import_and_run_without_hypothesis() -> None:
    done = _run(
        """
        import json
        from pte.testing import FakeOpenAIServer, FunctionClient, Reply, ScriptedModel, example_registry
        from pte.testing.cookbook import run_task
        from pte import AuditLog, Engine, EngineConfig
        import pte
        plan = {"pte_plan": "1", "steps": [{"id": "share", "tool": "percentage",
                "args": {"part": 1, "whole": 4}}], "result": {"$ref": "share/value"}}
        model = ScriptedModel(planner=[json.dumps(plan)])
        registry = pte.load_registry(["calculator"])
        with AuditLog(None) as audit:
            result = Engine(registry, model, config=EngineConfig(llm_answer=False)).run("1 of 4?", audit)
        assert result.status == "succeeded", result.message
        assert "hypothesis" not in sys.modules
        print(result.result)
        """
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "25.00"


def test_a_strategy_without_hypothesis_is_an_import_error_that_says_so() -> None:
    done = _run(
        """
        import pte.testing
        try:
            pte.testing.valid_plans
        except ImportError as exc:
            print("ImportError:", exc)
        """
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ImportError:" in done.stdout and "hypothesis" in done.stdout


def test_the_strategies_are_there_with_hypothesis() -> None:
    import pte.testing

    for name in pte.testing.__all__:
        assert getattr(pte.testing, name) is not None, name
