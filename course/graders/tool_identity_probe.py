"""Inside the student's process: what lab `tool-identity`'s grader cannot see from its own.

The contract promises more than a value: inputs left as they were (key order too), Python's
and NumPy's global random state untouched, results that share no container with the inputs
or with each other, and results of exact builtin types. Arguments reach the student's
process as copies and answers come back as copies with subclasses flattened, so none of
that can be judged from the grader's side. The grader puts this module's function in place
of the one it grades (StudentModule.use_reference); it calls the student's own function
twice on the same inputs and answers with a report of plain values:

    result          what the first call returned (the grader compares it with the reference)
    raised          None, or [exception class name, message, whether it is a ValueError]
    inputs_changed  the catalog or the request differs after the call (content, key order, type)
    rng_changed     the global random state of Python or NumPy moved during the call
    exact           the result is an exact dict of exact dicts (or None) and str
    second_raised   like raised, for the second call (None when there was none)
    aliasing        a result dict is an input's, or the two calls' results share one
    other_todo      the call stopped in the other function, which the grader made a TODO
                    (course/graders/tool_identity_todo.py): the seed asks each to work alone

Any other NotImplementedError is raised on, so a TODO stays a TODO. Only the grader's own judgement
of `result` against the reference decides the value; these facts come from the student's
process, where a student who set out to forge them could.
"""

from __future__ import annotations

import importlib
import random
import sys
import traceback
from collections.abc import Callable
from typing import Any

numpy: Any
try:  # NumPy is optional; without it only Python's generator is watched
    numpy = importlib.import_module("numpy")
except ImportError:
    numpy = None

GRADED = ("naive_tool_choice", "bound_tool_choice")
TODO_FILE = "tool_identity_todo.py"


def _student_module() -> Any:
    """The student's selection.py, as the student's process loaded it."""
    for name, module in list(sys.modules.items()):
        if name.startswith("student_") and any(callable(getattr(module, f, None)) for f in GRADED):
            return module
    raise ImportError("the student's module is not loaded")


_STUDENT = _student_module()
_ORIGINAL: dict[str, Callable[..., Any]] = {
    name: getattr(_STUDENT, name) for name in GRADED if callable(getattr(_STUDENT, name, None))}


def naive_tool_choice(catalog: Any, requested: Any) -> dict[str, Any]:
    return _probe(_ORIGINAL["naive_tool_choice"], catalog, requested)


def bound_tool_choice(catalog: Any, requested: Any) -> dict[str, Any]:
    return _probe(_ORIGINAL["bound_tool_choice"], catalog, requested)


def _probe(function: Callable[..., Any], catalog: Any, requested: Any) -> dict[str, Any]:
    before = (_snapshot(catalog), _snapshot(requested))
    rng_before = _rng_state()
    try:
        first, raised = _call(function, catalog, requested)
    except NotImplementedError as exc:
        if not any(frame.filename.endswith(TODO_FILE) for frame in traceback.extract_tb(exc.__traceback__)):
            raise
        first, raised = None, ["NotImplementedError", str(exc), False]
    report: dict[str, Any] = {
        "result": first if raised is None else None,
        "raised": raised,
        "inputs_changed": (_snapshot(catalog), _snapshot(requested)) != before,
        "rng_changed": _rng_state() != rng_before,
        "exact": raised is None and _exact(first),
        "second_raised": None,
        "aliasing": False,
        "other_todo": raised is not None and raised[0] == "NotImplementedError",
    }
    if raised is None:
        second, report["second_raised"] = _call(function, catalog, requested)
        report["aliasing"] = report["second_raised"] is None and _aliasing(first, second, catalog, requested)
    return report


def _call(function: Callable[..., Any], *args: Any) -> tuple[Any, list[Any] | None]:
    try:
        return function(*args), None
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001  the student's error is the answer reported
        try:
            message = str(exc)
        except Exception:  # noqa: BLE001  an exception whose str() raises is still named
            message = "?"
        return None, [type(exc).__name__, message[:500], isinstance(exc, ValueError)]


def _snapshot(value: Any) -> Any:
    if type(value) is dict:
        return ("dict", [(_snapshot(k), _snapshot(v)) for k, v in value.items()])
    if type(value) in (list, tuple):
        return (type(value).__name__, [_snapshot(item) for item in value])
    if isinstance(value, dict | list | tuple):  # a subclass: its type and its items, as they are now
        items = list(value.items()) if isinstance(value, dict) else list(value)
        return (type(value).__qualname__, [_snapshot(item) for item in items])
    return (type(value).__qualname__, repr(value))


def _exact(result: Any) -> bool:
    if type(result) is not dict or list(result) != ["choice", "source"]:
        return False
    return all(value is None or (type(value) is dict and list(value) == ["server", "tool"]
                                 and all(type(part) is str for part in value.values()))
               for value in result.values())


def _aliasing(first: Any, second: Any, catalog: Any, requested: Any) -> bool:
    inputs = {id(catalog), id(requested), *(id(row) for row in _items(catalog) if isinstance(row, dict))}
    mine = [result for result in (first, second) if isinstance(result, dict | list)]
    mine += [value for result in mine for value in _values(result) if isinstance(value, dict | list)]
    ids = {id(obj) for obj in mine}
    return len(ids) != len(mine) or bool(ids & inputs)


def _values(value: Any) -> list[Any]:
    return list(value.values()) if isinstance(value, dict) else list(value)


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _rng_state() -> tuple[Any, Any]:
    if numpy is None:
        return random.getstate(), None
    state = numpy.random.get_state(legacy=False)  # a dict; its key array compared as bytes
    inner = state["state"]
    return random.getstate(), (state["bit_generator"], inner["key"].tobytes(), inner["pos"], state["has_gauss"],
                               state["gauss"])
