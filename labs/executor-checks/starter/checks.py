"""Lab executor-checks (seed 003): the checks between a proposed tool call and its side effect.

The model proposes a call as JSON, for example
    {"server": "shop", "tool": "lookup_order", "arguments": {"order_id": "12345"}}
To the executor that JSON is untrusted input, exactly like the email it came from: any JSON
value at all may arrive. The executor decides; the model only proposes.

Each function below is checked on its own (`airlock lab check executor-checks`), so you can
write them in any order. None of them may raise: every problem is an `Error` value, and a
failure is never reported as success.
"""

from __future__ import annotations

import json  # noqa: F401  # run_tool measures a result with json.dumps
import math  # noqa: F401  # range_problem needs math.isfinite
import threading  # noqa: F401  # run_tool waits for a tool with a timeout
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# ---- Given: the results the executor returns. Do not change this part. ----------------


@dataclass(frozen=True)
class Ok:
    result: dict


@dataclass(frozen=True)
class Error:
    kind: str  # one of KINDS: which check stopped the call
    detail: str  # for the person who reads the trace


KINDS = ("not_allowed", "permission", "schema", "range", "timeout", "result_too_large", "tool_error")

# ---- Yours. -------------------------------------------------------------------------------


def allowlist_problem(call: Any, allowlist: set[tuple[str, str]]) -> Error | None:
    """None when `call` is a dict whose "server" and "tool" are strings and the pair
    (server, tool) is in `allowlist` exactly as written: no case folding, no trimming, no
    matching on the tool's name alone. Otherwise Error("not_allowed", ...)."""
    raise NotImplementedError("TODO: write allowlist_problem")


def schema_problem(args: Any, schema: dict[str, dict]) -> Error | None:
    """None when `args` is a dict with exactly the keys of `schema` (none missing, none
    extra) and each value has its declared type: "int" an int but not a bool, "float" an
    int or a float but not a bool, "str" a str, "bool" a bool (any other type accepts
    nothing). Otherwise Error("schema", ...). Ranges and lengths are range_problem's job,
    not this one's."""
    raise NotImplementedError("TODO: write schema_problem")


def range_problem(args: dict, schema: dict[str, dict]) -> Error | None:
    """`args` already passed schema_problem. None when every float is finite (never nan,
    inf or -inf, whether or not the schema gives a range), every number lies within the
    spec's "min" and "max" (inclusive, where given) and every str has at most "max_length"
    characters (where given). Otherwise Error("range", ...)."""
    raise NotImplementedError("TODO: write range_problem")


def run_tool(tool: Callable[[dict], Any], args: dict, timeout_s: float, max_result_bytes: int) -> Ok | Error:
    """Call tool(args) once. Ok(result) when it returns a dict within `timeout_s` seconds
    whose size, len(json.dumps(result).encode()), is at most `max_result_bytes`.
    Error("timeout") when no result came within timeout_s (return then; do not wait for it),
    Error("tool_error") when it raised or returned anything but a JSON-encodable dict,
    Error("result_too_large") when the result is bigger than the cap. Never an invented Ok."""
    raise NotImplementedError("TODO: write run_tool")


def execute(call: Any, tools: dict[tuple[str, str], dict], allowlist: set[tuple[str, str]], grant: str,
            max_result_bytes: int) -> Ok | Error:
    """The executor: every check, in this order, before the side effect; the tool runs only
    when all pass, and then exactly once.
      1. allowlist_problem(call, allowlist)
      2. the pair is in `tools` (the catalog), else Error("not_allowed")
      3. permission: a tool whose "permission" is "write" needs grant == "write", else
         Error("permission"); a "read" tool runs under either grant
      4. schema_problem(call["arguments"], tool["args"]) (a call without "arguments" fails here)
      5. range_problem(...)
      6. run_tool(tool["run"], arguments, tool["timeout_s"], max_result_bytes)
    Each entry of `tools` is {"permission", "args" (a schema), "timeout_s", "run"}."""
    raise NotImplementedError("TODO: write execute")
