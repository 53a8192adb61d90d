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

import json
import math
import threading
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
    if not isinstance(call, dict):
        return Error("not_allowed", f"a call is a JSON object, not {type(call).__name__}")
    server, tool = call.get("server"), call.get("tool")
    if not isinstance(server, str) or not isinstance(tool, str):
        return Error("not_allowed", "a call names its tool by two strings, server and tool")
    if (server, tool) not in allowlist:
        return Error("not_allowed", f"{server!r}/{tool!r} is not in the allowlist")
    return None


# What each declared type accepts. bool is a subclass of int in Python, so it is excluded
# by hand wherever a number is wanted: True is not the quantity 1.
def _has_type(value: Any, wanted: str) -> bool:
    if wanted == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if wanted == "int":
        return isinstance(value, int)
    if wanted == "float":
        return isinstance(value, (int, float))
    if wanted == "str":
        return isinstance(value, str)
    return False  # an unknown type in a schema accepts nothing: fail closed


def schema_problem(args: Any, schema: dict[str, dict]) -> Error | None:
    """None when `args` is a dict with exactly the keys of `schema` (none missing, none
    extra) and each value has its declared type: "int" an int but not a bool, "float" an
    int or a float but not a bool, "str" a str, "bool" a bool (any other type accepts
    nothing). Otherwise Error("schema", ...). Ranges and lengths are range_problem's job,
    not this one's."""
    if not isinstance(args, dict):
        return Error("schema", f"arguments are a JSON object, not {type(args).__name__}")
    missing = [name for name in schema if name not in args]
    extra = [name for name in args if name not in schema]
    if missing or extra:
        return Error("schema", f"missing {missing}, unexpected {extra!r}")
    for name, spec in schema.items():
        if not _has_type(args[name], spec["type"]):
            return Error("schema", f"{name}: expected {spec['type']}, got {type(args[name]).__name__}")
    return None


def range_problem(args: dict, schema: dict[str, dict]) -> Error | None:
    """`args` already passed schema_problem. None when every float is finite (never nan,
    inf or -inf, whether or not the schema gives a range), every number lies within the
    spec's "min" and "max" (inclusive, where given) and every str has at most "max_length"
    characters (where given). Otherwise Error("range", ...)."""
    for name, spec in schema.items():
        value = args[name]
        if isinstance(value, bool):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            # nan compares False with everything, so `value < min` alone would let it through
            return Error("range", f"{name}: {value} is not a finite number")
        if isinstance(value, (int, float)):
            low, high = spec.get("min"), spec.get("max")
            if (low is not None and value < low) or (high is not None and value > high):
                return Error("range", f"{name}: {value} is outside {low}..{high}")
        if isinstance(value, str) and spec.get("max_length") is not None and len(value) > spec["max_length"]:
            return Error("range", f"{name}: {len(value)} characters, at most {spec['max_length']}")
    return None


def run_tool(tool: Callable[[dict], Any], args: dict, timeout_s: float, max_result_bytes: int) -> Ok | Error:
    """Call tool(args) once. Ok(result) when it returns a dict within `timeout_s` seconds
    whose size, len(json.dumps(result).encode()), is at most `max_result_bytes`.
    Error("timeout") when no result came within timeout_s (return then; do not wait for it),
    Error("tool_error") when it raised or returned anything but a JSON-encodable dict,
    Error("result_too_large") when the result is bigger than the cap. Never an invented Ok."""
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["result"] = tool(args)
        except Exception as exc:  # noqa: BLE001  the tool's boundary: its failure becomes a value below
            outcome["error"] = exc

    worker = threading.Thread(target=call, daemon=True)  # daemon: a hung tool cannot hold the process
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        return Error("timeout", f"no result within {timeout_s} s")
    if "error" in outcome:
        exc = outcome["error"]
        return Error("tool_error", f"{type(exc).__name__}: {exc}")
    result = outcome.get("result")
    if not isinstance(result, dict):
        return Error("tool_error", f"the tool returned {type(result).__name__}, not a JSON object")
    try:
        size = len(json.dumps(result).encode())
    except (TypeError, ValueError) as exc:
        return Error("tool_error", f"the result is not JSON: {exc}")
    if size > max_result_bytes:
        return Error("result_too_large", f"{size} bytes, cap {max_result_bytes}")
    return Ok(result)


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
    problem = allowlist_problem(call, allowlist)
    if problem:
        return problem
    tool = tools.get((call["server"], call["tool"]))
    if tool is None:
        return Error("not_allowed", f"{call['server']}/{call['tool']} is not in the catalog")
    if tool["permission"] == "write" and grant != "write":
        return Error("permission", f"the step grants {grant}, the tool needs write")
    args = call.get("arguments")
    problem = schema_problem(args, tool["args"]) or range_problem(args, tool["args"])
    if problem:
        return problem
    return run_tool(tool["run"], args, tool["timeout_s"], max_result_bytes)
