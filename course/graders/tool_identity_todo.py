"""Inside the student's process: lab `tool-identity`'s two functions as untouched TODOs.

The grader puts the function it is not grading in place from here (use_reference), since
the seed asks that each function works while the other is still a TODO.
"""

from typing import Any


def naive_tool_choice(catalog: Any, requested: Any) -> Any:
    raise NotImplementedError("TODO: naive_tool_choice")


def bound_tool_choice(catalog: Any, requested: Any) -> Any:
    raise NotImplementedError("TODO: bound_tool_choice")
