"""Checks `airlock up` makes before it starts a child, each naming the cause and the fix.

- `require_extra`: an optional dependency a command needs is installed, else ConfigError
  with the exact pip command (checked before any child starts, not after one exits 78).
- `model_silence`: whether the model URL answers at all, in a short probe; a warning for
  the banner, never a refusal (recorded answers still work, and a model may start later).
"""

from __future__ import annotations

import importlib.util
import socket
import urllib.error
import urllib.request

from airlock.errors import ConfigError

PROBE_TIMEOUT_S = 2.0  # a model that takes longer to accept a GET is as good as absent at start

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the model is local, as in the reader


def require_extra(what: str, modules: tuple[str, ...], extra: str) -> None:
    """ConfigError naming the missing modules and the pip command that installs `extra`."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"{what} needs {' and '.join(missing)}, not installed: run pip install -e '.[{extra}]' "
                          f"in the airlock folder (or pip install 'airlock[{extra}]')")


def models_url(base: str) -> str:
    """The OpenAI-compatible model list next to the chat endpoint the reader will use."""
    base = base.rstrip("/").removesuffix("/chat/completions")
    return base + ("/models" if base.endswith("/v1") else "/v1/models")


def model_silence(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None if something answers HTTP at the model URL (any status: a server that lacks
    /v1/models still serves chat), else why not, e.g. "connection refused"."""
    try:
        with _opener.open(urllib.request.Request(models_url(url), method="GET"), timeout=timeout_s):
            return None
    except urllib.error.HTTPError:
        return None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, ConnectionRefusedError):
            return "connection refused"
        if isinstance(reason, (socket.timeout, TimeoutError)):
            return f"no answer within {timeout_s:g} s"
        return str(reason)
    except (socket.timeout, TimeoutError):
        return f"no answer within {timeout_s:g} s"
    except (OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
