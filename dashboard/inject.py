"""Emails from the page: typed text or a ready sample, submitted like `airlock inject`.

Text that starts with header lines is an .eml (`airlock.sources.sniff`), and then its
From address is the sender the intake vouches for, as `airlock inject` reads it. Ready
emails are a folder's *.eml (the demo's emails/ unless AIRLOCK_DASHBOARD_SAMPLES names
another), read once at start, by language (English, then the seeds' languages), the
seed's 4411 email first in its own, then the benign before the hostile. Each names what it tries in
an `X-Airlock-Label` header and its language in `X-Airlock-Lang` (harness/campaign.py
reads the same file's X-Airlock-Expect, -Goal and -Category); without them the file name
is its label. No folder, no ready emails.
"""

from __future__ import annotations

import email.policy
from dataclasses import dataclass
from pathlib import Path

import msgspec

from airlock import mailbounds, sources
from airlock.client import IntakeClient
from airlock.settings import Settings
from airlock.wire import Email, EmailFormat

SEED_SAMPLE = "seed_4411_de.eml"
MAX_SAMPLES = 32
MAX_LABEL_CHARS = 120
LANGUAGE_ORDER = ("en", "nl", "de", "ru", "tr")  # English, then the seeds' languages
ORIGIN = "dashboard"
INTAKE_TIMEOUT_S = 5.0


class InjectError(ValueError):
    """A request the page should not have sent; the message is shown to the user."""


class InjectRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """POST /api/inject: exactly one of `text` (what was typed) or `sample` (a file name)."""

    text: str | None = None
    sample: str | None = None


@dataclass(frozen=True)
class Sample:
    name: str
    label: str
    raw: bytes
    lang: str = ""  # X-Airlock-Lang, "" when the file does not say
    category: str = ""  # X-Airlock-Category: "benign", or what the attack is
    origin: str = ""  # how the trace names where it came from: <folder>/<file>


def load_samples(folder: Path) -> list[Sample]:
    """The ready emails of `folder` by language, the seed first in its own, then the benign
    before the hostile (without headers: hostile-named files first); none if no folder."""
    if not folder.is_dir():
        return []
    found = [read_sample(p, f"{folder.name}/{p.name}") for p in sorted(folder.glob("*.eml")) if p.is_file()]

    def order(sample: Sample) -> tuple[int, int, int, str]:
        lang = LANGUAGE_ORDER.index(sample.lang) if sample.lang in LANGUAGE_ORDER else len(LANGUAGE_ORDER)
        kind = (0 if sample.category == "benign" else 1) if sample.category else (
            1 if sample.name.startswith("hostile") else 2)
        return (lang, 0 if sample.name == SEED_SAMPLE else 1, kind, sample.name)

    return sorted(found, key=order)[:MAX_SAMPLES]


def read_sample(path: Path, origin: str) -> Sample:
    """One ready email with its label and language; `origin` names it in the trace."""
    raw = path.read_bytes()
    headers = _headers(raw)
    label = " ".join(headers.get("X-Airlock-Label", "").split())[:MAX_LABEL_CHARS]
    return Sample(path.name, label or path.stem.replace("_", " "), raw,
                  lang=headers.get("X-Airlock-Lang", "").strip().lower()[:8],
                  category=headers.get("X-Airlock-Category", "").strip().lower()[:32],
                  origin=origin)


def _headers(raw: bytes) -> dict[str, str]:
    """An email's headers as text, parsed within the reader's bounds; {} if it has none."""
    try:
        parsed = mailbounds.parse(raw, email.policy.default, headersonly=True)
        if isinstance(parsed, mailbounds.Exceeded):
            return {}
        return {name: str(value) for name, value in parsed.items()}
    except Exception:  # noqa: BLE001  a header the parser cannot read names nothing
        return {}


def email_for(request: InjectRequest, samples: dict[str, Sample], max_bytes: int) -> tuple[Email, str]:
    """The Email for a request, and a short label for the page; InjectError if unusable."""
    text, name = request.text, request.sample
    if name is not None and text is None:
        sample = samples.get(name)
        if sample is None:
            raise InjectError(f"no sample named {name!r}")
        fmt: EmailFormat = "eml"
        return (Email(sample.raw, fmt, f"{ORIGIN}:{sample.origin or 'samples/' + sample.name}",
                      sources.sender_of(sample.raw, fmt)), sample.label)
    if text is None or name is not None:
        raise InjectError("send either text or a sample name")
    raw = text.encode("utf-8", errors="replace")
    if not raw.strip():
        raise InjectError("the text is empty")
    if len(raw) > max_bytes:
        raise InjectError(f"the text is {len(raw)} bytes; the page sends at most {max_bytes}")
    fmt = sources.sniff(raw)
    return Email(raw, fmt, f"{ORIGIN}:typed", sources.sender_of(raw, fmt)), label_of(raw, fmt)


def label_of(raw: bytes, fmt: str, limit: int = 80) -> str:
    """A short name for the naive pane: the Subject of an .eml, else the first line."""
    if fmt == "eml":
        try:
            # Within the reader's bounds: an unbounded policy.default Subject parse is the
            # reader's memory bomb, here in the page's process.
            headers = mailbounds.parse(raw, email.policy.default, headersonly=True)
            subject = "" if isinstance(headers, mailbounds.Exceeded) else str(headers.get("Subject", "")).strip()
        except Exception:  # noqa: BLE001  a header the parser cannot read names nothing
            subject = ""
        return subject[:limit] or "(no subject)"
    first = next((line.strip() for line in raw.decode("utf-8", errors="replace").splitlines() if line.strip()), "")
    return first[:limit] or "(empty)"


def submit(settings: Settings, item: Email) -> str:
    """Hand one email to the broker's intake; return its message id. Blocking: run in a thread.
    Raises BrokerUnreachable if the broker does not answer."""
    with IntakeClient(settings, timeout_s=INTAKE_TIMEOUT_S, role="dashboard") as client:
        return client.submit_one(item)
