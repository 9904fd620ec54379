"""Every exception PTE raises on purpose survives pickle (a multiprocessing pool, a celery-style
worker hands errors back pickled).

Found in the review of #37: an exception whose ``__init__`` takes other arguments than its one
message (`ToolError(kind, message)`, `FailedClosed(reason, message, path)`, ...) pickled as
``(cls, self.args)`` and failed to unpickle (``TypeError: missing 1 required positional
argument``), so a worker's `ToolError` became a crash of the pool. The property covers the whole
tree: every exception class of `pte._core` and `pte.errors` and every subclass of theirs.
"""

from __future__ import annotations

import inspect
import pickle
from types import SimpleNamespace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

# private: every exception the core defines, whether or not a public module re-exports it
import pte._core as core
import pte.errors
from pte.errors import ReasonCode


def _exception_classes() -> list[type[BaseException]]:
    roots = [
        value
        for module in (core, pte.errors)
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, BaseException) and value.__module__.startswith("pte")
    ]
    found: set[type[BaseException]] = set()
    stack = list(roots)
    while stack:
        cls = stack.pop()
        if cls not in found and cls.__module__.startswith("pte"):
            found.add(cls)
            stack.extend(cls.__subclasses__())
    return sorted(found, key=lambda cls: cls.__qualname__)


EXCEPTIONS = _exception_classes()

text = st.text(max_size=20)
#: Values for a constructor's parameters, by name (the tree's constructors take these only).
ARGUMENTS: dict[str, st.SearchStrategy[Any]] = {
    "message": text,
    "kind": text,
    "path": text,
    "step_id": text,
    "run_id": text,
    "expires_at": text,
    "record_type": text,
    "field_name": text,
    "reason": st.sampled_from(ReasonCode),
    "line": st.integers(min_value=0, max_value=10**6),
    "attempts": st.integers(min_value=1, max_value=10),
    "fatal": st.booleans(),
    "recorded": st.none() | st.integers() | text,
    "replayed": st.none() | st.integers() | text,
    "tools": st.lists(text, max_size=3),
    # What RunPaused and LogNotIntact read of their plan and report (a picklable stand-in).
    "plan": text.map(lambda h: SimpleNamespace(hash=h)),
    "report": text.map(lambda issue: SimpleNamespace(issue=issue)),
}


def _arguments(cls: type[BaseException]) -> st.SearchStrategy[dict[str, Any]]:
    """Keyword arguments for `cls` (every parameter, optional ones too, so each is pickled)."""
    init = next((c.__dict__["__init__"] for c in cls.__mro__ if "__init__" in c.__dict__), None)
    if not inspect.isfunction(init):  # Exception's own (*args): one message
        return st.just({})
    parameters = [name for name, p in inspect.signature(init).parameters.items() if name != "self"]
    if not parameters:
        return st.fixed_dictionaries({}).map(lambda _: {})
    missing = [name for name in parameters if name not in ARGUMENTS]
    assert not missing, f"{cls.__qualname__}({', '.join(missing)}): say how to make such a value in ARGUMENTS"
    return st.fixed_dictionaries({name: ARGUMENTS[name] for name in parameters})


def _made(cls: type[BaseException], kwargs: dict[str, Any], message: str) -> BaseException:
    return cls(**kwargs) if kwargs else cls(message)


def _state(error: BaseException) -> tuple[Any, ...]:
    return (type(error), str(error), error.args, vars(error))


def test_the_tree_is_found() -> None:
    names = {cls.__name__ for cls in EXCEPTIONS}
    assert {"ToolError", "TransientError", "PlanRejected", "EndorsementRejected", "StrictJSONError"} <= names
    assert {"RunPaused", "ReplayDivergence", "LogNotIntact", "AuditFormatError", "LLMError"} <= names


@given(st.sampled_from(EXCEPTIONS).flatmap(lambda cls: st.tuples(st.just(cls), _arguments(cls))), text)
def test_every_exception_round_trips_through_pickle(
    case: tuple[type[BaseException], dict[str, Any]], message: str
) -> None:
    cls, kwargs = case
    error = _made(cls, kwargs, message)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        again = pickle.loads(pickle.dumps(error, protocol=protocol))
        assert _state(again) == _state(error), (cls.__qualname__, protocol)


def test_a_tool_error_raised_in_a_pool_worker_reaches_the_caller() -> None:
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1) as pool:
        future = pool.submit(_fails_as_a_tool)
        error = future.exception(timeout=60)
    assert isinstance(error, pte.errors.ToolError)
    assert (error.kind, error.message, error.fatal) == ("bad_output", "no rows", True)


def _fails_as_a_tool() -> None:
    raise pte.errors.ToolError("bad_output", "no rows", fatal=True)
