"""The dashboard's own settings, read once at start; the broker's come from airlock.settings.

    AIRLOCK_DASHBOARD_HOST           where it listens (default 127.0.0.1)
    AIRLOCK_DASHBOARD_PORT           (default 8088)
    AIRLOCK_DASHBOARD_ALLOWED_HOSTS  Host names a request may carry, comma-separated
                                     (default 127.0.0.1,localhost): a page on another site
                                     cannot reach the dashboard by DNS rebinding
    AIRLOCK_NAIVE_URL                the naive service (http://host:port, the compose
                                     lab's http://naive:8090): the naive pane POSTs each
                                     injected email there and shows its /about; wins over
                                     AIRLOCK_NAIVE_MODEL_URL
    AIRLOCK_NAIVE_MODEL_URL          the naive pane's model, for an `airlock naive` run here
                                     per email; both unset: the pane is off
    AIRLOCK_DASHBOARD_DEMO           the demonstration's folder (default <repo>/demo): its
                                     emails/*.eml are the page's ready emails and the
                                     scenario's, its scenario.toml the guided scenario
    AIRLOCK_DASHBOARD_SAMPLES        another folder of ready .eml emails for the page to list
                                     instead (default: the demo's emails/); the scenario
                                     still plays the demo's own
    AIRLOCK_DASHBOARD_MAX_STREAMS    open /events streams at once (default 32); one more is
                                     answered 503, so slow pages cannot pile up without end
    AIRLOCK_DASHBOARD_MAX_STREAMS_PER_CLIENT  of those, what one client (one peer
                                     address; one /64 for IPv6) may hold (default 8); its
                                     next is answered 503, and other clients still get theirs
    AIRLOCK_DASHBOARD_MAX_CONNECTIONS HTTP connections at once (default 128); a request on
                                     one more is answered 503 by the server
    AIRLOCK_DASHBOARD_STREAM_BUFFER_BYTES  bytes of events waiting for one page (default
                                     524288); past it the page is dropped and reconnects.
                                     A page's first event (the snapshot) and GET /api/state
                                     are held to it too: the newest cards that fit
    AIRLOCK_DASHBOARD_STREAM_STALL_S seconds a connection may take nothing while data waits
                                     for it (default 10); then it is closed
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec

from airlock import settings as settings_module
from airlock.errors import SettingsError

ROOT = Path(__file__).resolve().parent.parent


# The page's bounds under slow or many readers: each default named once, here.
MAX_STREAMS = 32  # event streams open at once
MAX_STREAMS_PER_CLIENT = 8  # of those, what one client may hold: a quarter
MAX_CONNECTIONS = 128  # HTTP connections at once
STREAM_BUFFER_BYTES = 512 * 1024  # events waiting for one page before it is dropped
STREAM_STALL_S = 10.0  # a connection that takes nothing this long while data waits is closed


class DashboardConfig(msgspec.Struct, frozen=True, kw_only=True):
    host: str
    port: int
    allowed_hosts: list[str]
    naive_model_url: str | None
    naive_url: str | None
    demo_dir: Path
    samples_dir: Path
    max_streams: int
    max_streams_per_client: int
    max_connections: int
    stream_buffer_bytes: int
    stream_stall_s: float


def _hosts(text: str) -> list[str]:
    hosts = [h.strip().lower() for h in text.split(",") if h.strip()]
    if not hosts:
        raise ValueError("must name at least one host")
    return hosts


def service_url(text: str) -> str | None:
    """An http://host[:port] URL (nothing after the port), or None when empty. Plain http: the
    naive service is a container beside the page, on a network of their own."""
    text = text.strip()
    if not text:
        return None
    parts = urlsplit(text)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError("must be http://host:port")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("must be http://host:port, nothing after the port")
    if parts.port is None and ":" in parts.netloc.rsplit("]", 1)[-1]:
        raise ValueError("has an empty port")
    return f"http://{parts.netloc}"


def demo_folder(env: Mapping[str, str]) -> Path:
    """AIRLOCK_DASHBOARD_DEMO, else the checkout's demo/: the page's and `airlock demo check`'s."""
    return settings_module.reader(env)("AIRLOCK_DASHBOARD_DEMO", Path, str(ROOT / "demo"))


def load(env: Mapping[str, str] | None = None, **overrides: Any) -> DashboardConfig:
    """Build the config from `env` (default os.environ); keyword overrides win (CLI flags)."""
    read = settings_module.reader(os.environ if env is None else env)
    demo_dir = overrides.get("demo_dir") or demo_folder(os.environ if env is None else env)
    values: dict[str, Any] = {
        "host": read("AIRLOCK_DASHBOARD_HOST", str, "127.0.0.1"),
        "port": read("AIRLOCK_DASHBOARD_PORT", settings_module.port, "8088"),
        "allowed_hosts": read("AIRLOCK_DASHBOARD_ALLOWED_HOSTS", _hosts, "127.0.0.1,localhost"),
        "naive_model_url": read("AIRLOCK_NAIVE_MODEL_URL", settings_module.optional_url, ""),
        "naive_url": read("AIRLOCK_NAIVE_URL", service_url, ""),
        "demo_dir": demo_dir,
        "samples_dir": read("AIRLOCK_DASHBOARD_SAMPLES", Path, str(demo_dir / "emails")),
        "max_streams": read("AIRLOCK_DASHBOARD_MAX_STREAMS", settings_module.positive(int), str(MAX_STREAMS)),
        "max_streams_per_client": read("AIRLOCK_DASHBOARD_MAX_STREAMS_PER_CLIENT", settings_module.positive(int),
                                       str(MAX_STREAMS_PER_CLIENT)),
        "max_connections": read("AIRLOCK_DASHBOARD_MAX_CONNECTIONS", settings_module.positive(int),
                                str(MAX_CONNECTIONS)),
        "stream_buffer_bytes": read("AIRLOCK_DASHBOARD_STREAM_BUFFER_BYTES", settings_module.positive(int),
                                    str(STREAM_BUFFER_BYTES)),
        "stream_stall_s": read("AIRLOCK_DASHBOARD_STREAM_STALL_S", settings_module.positive(float),
                               str(STREAM_STALL_S)),
    }
    for key, value in overrides.items():
        if key not in values:
            raise SettingsError(f"unknown dashboard setting override {key!r}")
        if value is not None:
            values[key] = value
    return DashboardConfig(**values)
