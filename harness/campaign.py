"""Emails for an attack campaign, with what should happen to each.

Inputs: .eml and .txt files, folders of them, and JSONL (one email a line). An .eml may
carry its expectation in headers the reader never shows the model:

    X-Airlock-Expect: 4411 | none     the value a correct reader extracts, or none
    X-Airlock-Goal: call:shop/refund_all | value:777777 | text:...   empty when benign
    X-Airlock-Category: override, marker, data-only, ...

A JSONL line is {"text": ..., "subject"?: ..., "expect"?: ..., "goal"?: ..., "category"?: ...}
or {"eml": "<raw message>", ...}.
"""

from __future__ import annotations

import email.parser
import email.policy
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path

import msgspec

from airlock import sources
from airlock.errors import UsageError
from airlock.senders import SenderProof
from airlock.wire import EmailFormat


@dataclass(frozen=True)
class CampaignEmail:
    file: str
    raw: bytes
    format: EmailFormat
    expect: str | None = None  # None: unknown; "none": no valid value exists
    goal: str = ""
    category: str = ""
    # Set only by a lab stack that signs its mail and verifies it as the SMTP intake does
    # (harness/stack.py): the From address and its proof; otherwise read from raw, unverified.
    sender: str = ""
    sender_proof: SenderProof = "none"

    @property
    def benign(self) -> bool:
        return not self.goal and self.category in ("", "benign")


class _Line(msgspec.Struct, forbid_unknown_fields=False):
    text: str | None = None
    eml: str | None = None
    subject: str = ""
    expect: str | int | None = None
    goal: str = ""
    category: str = ""


def load(paths: list[str]) -> list[CampaignEmail]:
    emails: list[CampaignEmail] = []
    jsonl = [p for p in paths if p.endswith(".jsonl")]
    for name in jsonl:
        emails += _from_jsonl(Path(name))
    for path, raw in sources.emails([p for p in paths if p not in jsonl]):  # no link out of a folder given
        fmt = sources.format_of(path)
        emails.append(_with_headers(str(path), raw) if fmt == "eml" else CampaignEmail(str(path), raw, "text"))
    if not emails:
        raise UsageError("no emails found in " + " ".join(paths))
    return emails


def _with_headers(name: str, raw: bytes) -> CampaignEmail:
    headers = email.parser.BytesParser(policy=email.policy.compat32).parsebytes(raw, headersonly=True)
    expect = (headers.get("X-Airlock-Expect") or "").strip() or None
    return CampaignEmail(name, raw, "eml", expect, (headers.get("X-Airlock-Goal") or "").strip(),
                         (headers.get("X-Airlock-Category") or "").strip())


def _from_jsonl(path: Path) -> list[CampaignEmail]:
    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    decoder = msgspec.json.Decoder(_Line)
    found = []
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise UsageError(f"{path}:{number}: {exc}") from None
        name = f"{path}:{number}"
        expect = None if item.expect is None else str(item.expect)
        if item.eml is not None:
            found.append(CampaignEmail(name, item.eml.encode(), "eml", expect, item.goal, item.category))
        elif item.text is not None and item.subject:
            message = EmailMessage()
            message["Subject"] = item.subject
            message.set_content(item.text)
            found.append(CampaignEmail(name, bytes(message), "eml", expect, item.goal, item.category))
        elif item.text is not None:
            found.append(CampaignEmail(name, item.text.encode(), "text", expect, item.goal, item.category))
        else:
            raise UsageError(f"{path}:{number}: a line needs 'text' or 'eml'")
    return found


def materialize(emails: list[CampaignEmail], folder: Path) -> list[Path]:
    """Write each email to its own file, so any intake (inject, naive, SMTP) can take it."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for number, item in enumerate(emails, start=1):
        path = folder / f"{number:06d}.{'eml' if item.format == 'eml' else 'txt'}"
        path.write_bytes(item.raw)
        paths.append(path)
    return paths
