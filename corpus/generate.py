"""Write airlock's handmade attack corpus: `python corpus/generate.py [OUT]`.

Every email is an order-status request (or a plain question) in one of sixteen languages,
benign or carrying one attack. The X-Airlock-* headers tell the scorer what a correct
reader answers (Expect), what the attacker wanted (Goal), which trick was used (Category)
and the language (Lang); the reader shows the model the Subject only, never these headers.
corpus/README.md explains the fields and the categories.

The output is deterministic: same script, same bytes. OUT (default corpus/handmade/) is
deleted and recreated on each run, so an email removed here disappears from the corpus.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import format_datetime
from pathlib import Path

# Siblings: this file runs as a script (`python corpus/generate.py`), its folder first on the path.
from attacks import (
    attachment,
    base64_hidden,
    bidi,
    charset,
    data_only,
    html_hidden,
    invisible,
    long,
    lookalike_digits,
    marker,
    role_tag,
    subject,
    tool_json,
)
from mails import Mail, Part, benign, override

from airlock.errors import UsageError
from redteam.corpus import FIRST_DATE, MAX_LINE_BYTES, recreate  # the same dates, lines and care

DEFAULT_OUT = Path(__file__).resolve().parent / "handmade"


SENDERS = {
    "en": [("Grace Hopper", "grace@example.com"), ("Tom Baker", "tom.baker@example.org"),
           ("Priya Patel", "priya@example.co.uk"), ("Mallory Quinn", "mallory@example.net")],
    "de": [("Jonas Weber", "jonas.weber@example.de"), ("Petra Schulz", "petra@example.at")],
    "nl": [("Sanne de Vries", "sanne@example.nl"), ("Daan Bakker", "daan@example.be")],
    "fr": [("Claire Dubois", "claire.dubois@example.fr"), ("Luc Martin", "luc@example.ch")],
    "es": [("Lucía Martín", "lucia@example.es"), ("Javier Ruiz", "javier@example.mx")],
    "it": [("Giulia Rossi", "giulia.rossi@example.it"), ("Marco Bianchi", "marco@example.it")],
    "pt": [("Beatriz Costa", "beatriz@example.pt"), ("Rafael Souza", "rafael@example.com.br")],
    "pl": [("Katarzyna Nowak", "kasia@example.pl"), ("Piotr Zieliński", "piotr@example.pl")],
    "tr": [("Mehmet Yılmaz", "mehmet@example.com.tr"), ("Elif Demir", "elif@example.com.tr")],
    "ru": [("Дмитрий Соколов", "dmitry@example.ru"), ("Ольга Иванова", "olga@example.ru")],
    "uk": [("Оксана Шевченко", "oksana@example.ua"), ("Андрій Коваль", "andriy@example.ua")],
    "ar": [("ليلى حسن", "layla@example.eg"), ("عمر خالد", "omar@example.sa")],
    "fa": [("سارا احمدی", "sara@example.ir")],
    "zh": [("王芳", "wangfang@example.cn"), ("李伟", "liwei@example.cn")],
    "ja": [("佐藤 花子", "hanako@example.jp"), ("田中 健", "ken.tanaka@example.jp")],
    "hi": [("प्रिया शर्मा", "priya.sharma@example.in"), ("Rahul Verma", "rahul@example.in")],
    "sv": [("Erik Lindqvist", "erik@example.se"), ("Maja Berg", "maja@example.se")],
}


CATEGORIES = (benign, override, role_tag, tool_json, marker, data_only, lookalike_digits, invisible,
              bidi, base64_hidden, html_hidden, attachment, charset, subject, long)


def text_cte(text: str, charset: str) -> str:
    """8bit (7bit if ASCII) keeps the corpus readable; only over-long lines force quoted-printable."""
    if any(len(line.encode(charset)) > MAX_LINE_BYTES for line in text.splitlines()):
        return "quoted-printable"
    return "7bit" if text.isascii() else "8bit"


def build(mail: Mail, stem: str, index: int) -> EmailMessage:
    senders = SENDERS[mail.lang]
    name, address = senders[index % len(senders)]
    message = EmailMessage()
    message["From"] = Address(name, addr_spec=address)
    message["To"] = "support@shop.example"
    message["Subject"] = mail.subject
    message["Date"] = format_datetime(FIRST_DATE + timedelta(minutes=37 * index))
    message["Message-ID"] = f"<{stem}@corpus.airlock>"
    message["X-Airlock-Expect"] = mail.expect
    message["X-Airlock-Goal"] = mail.goal
    message["X-Airlock-Category"] = mail.category
    message["X-Airlock-Lang"] = mail.lang
    if mail.position:
        message["X-Airlock-Position"] = mail.position
    if mail.text is not None:
        message.set_content(mail.text, charset=mail.charset, cte=mail.cte or text_cte(mail.text, mail.charset))
        if mail.html is not None:
            message.add_alternative(mail.html, subtype="html", cte=text_cte(mail.html, "utf-8"))
    else:
        message.set_content(mail.html, subtype="html", cte=text_cte(mail.html, "utf-8"))
    for part in mail.parts:
        add_part(message, part)
    # the stdlib draws multipart boundaries at random; fixed ones keep the bytes reproducible
    for number, container in enumerate(p for p in message.walk() if p.is_multipart()):
        container.set_boundary(f"=_{stem}_{number}")
    return message


def add_part(message: EmailMessage, part: Part) -> None:
    cte = part.cte or text_cte(part.content, "utf-8")
    if not part.filename:
        message.add_attachment(part.content, disposition="inline", cte=cte)
    elif part.filename.endswith(".json"):
        # application/json is not text/*, so the stdlib wants bytes and encodes them base64
        message.add_attachment(part.content.encode("utf-8"), maintype="application", subtype="json",
                               filename=part.filename)
    else:
        subtype = "csv" if part.filename.endswith(".csv") else "plain"
        message.add_attachment(part.content, subtype=subtype, filename=part.filename, cte=cte)


def write_corpus(out: Path = DEFAULT_OUT) -> list[Path]:
    recreate(out)
    mails = [mail for category in CATEGORIES for mail in category()]
    counters: dict[str, int] = {}
    written = []
    for index, mail in enumerate(mails):
        counters[mail.category] = counters.get(mail.category, 0) + 1
        stem = f"{mail.category}-{mail.lang}-{counters[mail.category]:02d}"
        path = out / f"{stem}.eml"
        path.write_bytes(build(mail, stem, index).as_bytes())
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else DEFAULT_OUT
    try:
        written = write_corpus(out)
    except UsageError as exc:
        raise SystemExit(str(exc)) from None
    print(f"wrote {len(written)} emails to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
