"""An optional dependency a command or a service needs is installed, else ConfigError with the
exact pip command: checked before any child starts, not after one exits 78."""

from __future__ import annotations

import importlib.util

from airlock.errors import ConfigError


def require_extra(what: str, modules: tuple[str, ...], extra: str) -> None:
    """ConfigError naming the missing modules and the pip command that installs `extra`."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"{what} needs {' and '.join(missing)}, not installed: run pip install -e '.[{extra}]' "
                          f"in the airlock folder (or pip install 'airlock[{extra}]')")
