"""Write the mock order store (actor/orders.toml) for the samples and the handmade corpus.

Each email's real order (X-Airlock-Expect) belongs to its sender. Each number a data-only
attack pushes (X-Airlock-Goal: value:N) belongs to somebody else, so the guarded task's
corroboration can tell the difference. Run: python corpus/make_orders.py
"""

from __future__ import annotations

import email.parser
import email.policy
from pathlib import Path

from airlock import sources

ROOT = Path(__file__).resolve().parent.parent
FIXED = {  # the sample emails' orders, and the victim of the seed's data-only example
    "4411": "kunde@example.de", "58213": "anna@example.com", "90417": "joost@example.nl",
    "1234": "mallory@example.net", "777777": "jansen@example.nl", "1207": "mallory@example.net",
    "6620": "mallory@example.net", "3307": "ivan@example.ru", "1500": "mallory@example.net",
    "12345": "lena@example.de",
}


def main() -> None:
    owners = dict(FIXED)
    parser = email.parser.BytesParser(policy=email.policy.compat32)
    for path in sorted((ROOT / "corpus" / "handmade").glob("*.eml")):
        raw = path.read_bytes()
        headers = parser.parsebytes(raw, headersonly=True)
        sender = sources.sender_of(raw, "eml")  # the address the intake vouches for and the actor checks
        expect = (headers.get("X-Airlock-Expect") or "").strip()
        goal = (headers.get("X-Airlock-Goal") or "").strip()
        if expect.isdigit() and sender:
            owners.setdefault(expect, sender)
        if goal.startswith("value:") and goal[6:].isdigit():
            owners.setdefault(goal[6:], f"customer-{goal[6:]}@example.org")
    lines = [
        "# The mock order store behind shop/lookup_order: trusted data the actor can check a value",
        "# against. Who owns an order is what the data-only defence corroborates.",
        "# Written by corpus/make_orders.py from the samples and the handmade corpus.",
        "[orders]",
    ]
    statuses = ("shipped", "in transit", "processing", "delivered")
    for number, (order, owner) in enumerate(sorted(owners.items(), key=lambda item: int(item[0]))):
        lines.append(f'"{order}" = {{ customer = "{owner}", status = "{statuses[number % 4]}" }}')
    (ROOT / "actor" / "orders.toml").write_text("\n".join(lines) + "\n")
    print(f"{len(owners)} orders")


if __name__ == "__main__":
    main()
