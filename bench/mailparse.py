"""python -m bench.mailparse [--stdlib] [--shape NAME]: one email parse's cost on hostile shapes.

Each shape is an email of at most 256 KiB (the broker's default limit) built to make Python's
email parser work hard: a Subject of encoded words, RFC 2231 parameters, comments,
nesting, thousands of parts or headers, an HTML body of unclosed markup; and, for each bound
in airlock.mailbounds, an email just inside it, which must still be read. Every parse runs
in a child process under an address-space limit (RLIMIT_AS), so a shape that explodes kills
its child, not the machine; the child reports the CPU seconds of the parse alone and its
peak resident memory. `--stdlib` also runs the parse as it was before the bounds
(email.parser.BytesParser with policy.default, then the reader's same steps) for comparison.
tests/integration/test_mail_bounds.py runs the same children and holds each to its bound.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable

from airlock import mailbounds
from airlock.interpreter import python_command

SIZE_LIMIT = 256 * 1024  # AIRLOCK_MAX_EMAIL_BYTES' default
BOUNDED_MB = 100  # what the reader may reach, interpreter included
BOUNDED_CPU_S = 1.0  # what one parse may take
CHILD_AS_MB = 1024  # the address space a measuring child gets: past it, the parse fails
CHILD_TIMEOUT_S = 60.0
FROM = "From: customer@example.com\r\n"
BODY = "\r\n\r\nWhere is order 4411?\r\n"


def _repeat(head: str, unit: str, sep: str, tail: str, budget: int = SIZE_LIMIT) -> bytes:
    """head + unit (sep unit)* + tail, as many units as fit in `budget` bytes."""
    count = (budget - len(head) - len(tail)) // (len(unit) + len(sep))
    return (head + sep.join([unit] * count) + tail).encode()


def _nested(depth: int, lines: int = 0) -> bytes:
    """`depth` multiparts, one in another, the innermost text part `lines` lines long."""
    text = FROM + "Content-Type: multipart/mixed; boundary=b0\r\n\r\n"
    for level in range(1, depth):
        text += f"--b{level - 1}\r\nContent-Type: multipart/mixed; boundary=b{level}\r\n\r\n"
    text += f"--b{depth - 1}\r\nContent-Type: text/plain\r\n\r\nWhere is order 4411?\r\n" + "x\r\n" * lines
    return text.encode()


def _parts(count: int, headers: str = "Content-Type: text/plain\r\n") -> bytes:
    part = f"--b\r\n{headers}\r\nOrder 4411\r\n"
    return (FROM + "Content-Type: multipart/mixed; boundary=b\r\n\r\n" + part * count + "--b--\r\n").encode()


def _at_header_bounds() -> bytes:
    """Four headers the reader parses, each at the per-header bound and each of the costliest
    kind for its parser (encoded words, encoded display names, comments, bare words): the
    costliest email the header bounds still read."""
    def field(name: str, head: str, unit: str, sep: str) -> str:
        return name + ": " + _repeat(head, unit, sep, "", mailbounds.MAX_HEADER_CHARS - 8).decode() + "\r\n"
    return (field("Subject", "", "=?utf-8?q?a?=", " ") + field("From", "", '"=?utf-8?q?a?=" <a@b.c>', ", ")
            + field("Content-Type", "text/plain; charset=utf-8 ", "(c)", " ")
            + field("Content-Disposition", "inline ", "a", " ") + BODY[2:]).encode()


def _html(unit: str, tail: str = "", opening: str = "") -> bytes:
    """An HTML body: a paragraph, `opening`, `unit` repeated to the size limit, then `tail`."""
    head = FROM + "Content-Type: text/html; charset=utf-8\r\n\r\n<p>Where is order 4411?</p>" + opening
    return _repeat(head, unit, "", tail)


def _html_at_rescan_bound() -> bytes:
    """Well-formed HTML to the size limit, then as many unclosed "<a " as the bound still reads:
    HTMLParser scans from each to the end in vain, 1.5 * count**2 characters in all."""
    count = int(0.95 * (mailbounds.MAX_HTML_RESCAN / 1.5) ** 0.5)
    return _html("<p>Order 4411 &amp; <b>more</b></p>\n", "<a " * count)


# name -> (what it is, the email). "over": past a bound, so refused as mail.too_complex;
# "inside": within every bound, so read.
SHAPES: dict[str, tuple[str, str, Callable[[], bytes]]] = {
    "encoded-words": ("over", "a Subject of ~18,000 RFC 2047 encoded words (a memory bomb)",
                      lambda: _repeat(FROM + "Subject: ", "=?utf-8?q?a?=", " ", BODY)),
    "plain-words": ("over", "a Subject of 130,000 one-letter words",
                    lambda: _repeat(FROM + "Subject: ", "a", " ", BODY)),
    "address-list": ("over", "a From of 10,000 encoded display names",
                     lambda: _repeat("Subject: hi\r\nFrom: ", '"=?utf-8?q?a?=" <a@b.c>', ", ", BODY)),
    "rfc2231": ("over", "a Content-Type with 9,000 RFC 2231 continued parameters",
                lambda: _repeat(FROM + "Content-Type: text/plain", "x*0*=utf-8''a%41", ";\r\n ", BODY)),
    "comments": ("over", "a Content-Type with 65,000 comments",
                 lambda: _repeat(FROM + "Content-Type: text/plain ", "(c)", " ", BODY)),
    "nested-comments": ("over", "a Content-Type of 60,000 nested parentheses",
                        lambda: (FROM + "Content-Type: text/plain " + "(" * 60_000 + ")" * 60_000 + BODY).encode()),
    "deep-multipart": ("over", "multiparts nested 3,000 deep", lambda: _nested(3_000)),
    "deep-rfc822": ("over", "message/rfc822 nested 4,000 deep",
                    lambda: ((FROM + "Content-Type: message/rfc822\r\n\r\n") * 4_000 + FROM + BODY).encode()),
    "many-parts": ("over", "5,500 text parts", lambda: _parts(5_500)),
    "many-headers": ("over", "32,000 header fields", lambda: _repeat(FROM, "X-A: b", "\r\n", BODY)),
    "html-open-tags": ("over", "an HTML body of 87,000 unclosed '<a '", lambda: _html("<a ")),
    "html-open-quotes": ("over", "an HTML body of 43,000 unclosed \"<a b='\"", lambda: _html("<a b='")),
    "html-open-attrs": ("over", "an HTML body of 52,000 unclosed '<a b='", lambda: _html("<a b=")),
    "html-open-comments": ("over", "an HTML body of 65,000 unclosed '<!--'", lambda: _html("<!--")),
    "html-open-endtags": ("over", "an HTML body of 131,000 unclosed '</'", lambda: _html("</")),
    "html-open-pis": ("over", "an HTML body of 131,000 unclosed '<?'", lambda: _html("<?")),
    "html-well-formed": ("inside", "an HTML body of 7,000 paragraphs",
                         lambda: _html("<p>Order 4411 &amp; <b>more</b></p>\n")),
    "html-open-script": ("inside", "an HTML body that opens a script and never closes it",
                         lambda: _html("x < y && ", opening="<script>")),
    "html-text-then-amp": ("inside", "an HTML body of 250 kB of text ending in an '&'",
                           lambda: _html("Order 4411 and more ", tail="&x")),
    "html-data-uri": ("inside", "an HTML body of one image: a 250 kB data: URI folded at 76 characters",
                      lambda: _html("A" * 76 + "\n", tail='">', opening='<img src="data:image/png;base64,')),
    "html-at-tag-bound": ("inside", f"an HTML tag of {mailbounds.MAX_TAG_SEPARATORS // 2:,} attributes a=1",
                          lambda: (FROM + "Content-Type: text/html\r\n\r\n<p>Where is order 4411?</p><p"
                                         + " a=1" * (mailbounds.MAX_TAG_SEPARATORS // 2) + ">x</p>").encode()),
    "html-unclosed-comment": ("inside", "an HTML body that opens a comment first and never closes it",
                              lambda: _html("<p>Order 4411 &amp; <b>more</b></p>\n", opening="<!-- ")),
    "html-at-rescan-bound": ("inside", "well-formed HTML, then unclosed '<a ' up to the rescan bound",
                             _html_at_rescan_bound),
    "at-header-bounds": ("inside", "Subject, From, Content-Type, Content-Disposition at the header bound",
                         _at_header_bounds),
    "at-parts-bound": ("inside", f"{mailbounds.MAX_PARTS - 1} text parts", lambda: _parts(mailbounds.MAX_PARTS - 1)),
    "at-depth-bound": ("inside", f"parts nested {mailbounds.MAX_DEPTH} deep, 80,000 lines inside",
                       lambda: _nested(mailbounds.MAX_DEPTH - 1, 80_000)),
    "at-fields-bound": ("inside", f"{mailbounds.MAX_HEADER_FIELDS - 1} header fields of 120 characters",
                        lambda: (FROM + ("X-Trace: " + "t" * 120 + "\r\n") * (mailbounds.MAX_HEADER_FIELDS - 1)
                                 + BODY[2:]).encode()),
}


def _html_before(html: str) -> str:
    """reader.mail.html_to_text as it was before the bounds: HTMLParser fed and closed."""
    from reader import mail
    parser = mail._TextOnly()
    parser._scanned = lambda start, end: end  # type: ignore[method-assign]  # no rescan bound: as before
    parser.feed(html)
    parser.close()
    return " ".join(" ".join(parser.parts).split())


def reference(raw: bytes) -> object:
    """The parse as it was before the bounds: the stdlib's own parser, then the reader's steps
    with the HTML read as before (swapped in for this call: the steps look it up by name)."""
    import email.parser
    import email.policy

    from reader import mail
    bounded, mail.html_to_text = mail.html_to_text, _html_before
    try:
        message = email.parser.BytesParser(policy=email.policy.default).parsebytes(raw)
        return mail._charset_problem(message) or mail._checked(mail._from_message(message))
    except Exception as exc:  # noqa: BLE001  as reader.mail: the stdlib raises many things on hostile MIME
        return mail.MailProblem("mail.broken", f"{type(exc).__name__}")
    finally:
        mail.html_to_text = bounded


def _peak_resident_mb() -> float:
    """This process's peak resident memory. VmHWM belongs to the address space exec made; the
    rusage figure does not: Linux carries ru_maxrss over from the parent through fork and exec,
    so a child of a 180 MB test runner would report 180 MB."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(shape: str, stdlib: bool) -> None:
    """In the measuring child: build the shape, parse it once, print one JSON line."""
    from reader import mail
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_AS_MB << 20, CHILD_AS_MB << 20))
    raw = SHAPES[shape][2]()
    start = time.process_time()
    try:
        result = reference(raw) if stdlib else mail.parse(raw, "eml")
        outcome = getattr(result, "rule", "read")
    except MemoryError:
        outcome = f"MemoryError past {CHILD_AS_MB} MB"
    cpu_s = time.process_time() - start
    peak_mb = _peak_resident_mb()
    print(json.dumps({"shape": shape, "bytes": len(raw), "outcome": outcome, "cpu_s": cpu_s, "peak_mb": peak_mb}))


def _reader_child(rounds: int) -> None:
    """In the measuring child: the reader's own handle() (no model, no recordings) on every
    shape, `rounds` times over, as one long-lived reader would meet them; one JSON line."""
    from airlock import task as task_module
    from airlock.wire import Read, Unreadable
    from bench import TASK
    from reader.app import Reader, not_configured
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_AS_MB << 20, CHILD_AS_MB << 20))
    reader = Reader(task_module.load(TASK), not_configured, {})
    emails = [(name, build()) for name, (_, _, build) in SHAPES.items()]
    slowest, outcomes = 0.0, {}
    for turn in range(rounds):
        for name, raw in emails:
            start = time.process_time()
            [answer] = reader.handle(Read(message_id=f"{name}-{turn}", raw=raw, format="eml"))
            slowest = max(slowest, time.process_time() - start)
            outcomes[name] = answer.rule if isinstance(answer, Unreadable) else "read"
    print(json.dumps({"emails": rounds * len(emails), "slowest_cpu_s": slowest, "peak_mb": _peak_resident_mb(),
                      "outcomes": outcomes}))


def measure_reader(rounds: int) -> dict[str, object]:
    """Every shape through one reader's handle(), `rounds` times, in a fresh child process."""
    argv = python_command("-m", "bench.mailparse", "--reader-rounds", str(rounds))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S * 4, check=False)
    if done.returncode != 0:
        return {"error": f"child died ({done.returncode}): {done.stderr.strip()[-300:]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(shape: str, stdlib: bool = False) -> dict[str, object]:
    """One parse of `shape` in a fresh child process: its outcome, CPU seconds and peak MB."""
    argv = python_command("-m", "bench.mailparse", "--child", shape) + (["--stdlib"] if stdlib else [])
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return {"shape": shape, "outcome": f"over {CHILD_TIMEOUT_S:.0f} s", "cpu_s": None, "peak_mb": None}
    if done.returncode != 0:
        return {"shape": shape, "outcome": f"child died ({done.returncode}): {done.stderr.strip()[-200:]}",
                "cpu_s": None, "peak_mb": None}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cell(row: dict[str, object]) -> str:
    if row["cpu_s"] is None:
        return f"{row['outcome']}"
    return f"{row['outcome']}, {row['cpu_s']:.3f} s, {row['peak_mb']:.0f} MB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mailparse", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stdlib", action="store_true", help="also measure the parse as it was before the bounds")
    parser.add_argument("--shape", action="append", choices=sorted(SHAPES), help="only this shape (repeatable)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="then every shape this many times through one reader's handle() (default 3)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--reader-rounds", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.stdlib)
        return 0
    if args.reader_rounds:
        _reader_child(args.reader_rounds)
        return 0
    print(f"one parse per shape, each in a child limited to {CHILD_AS_MB} MB of address space; "
          f"bound: {BOUNDED_CPU_S:.0f} s CPU and {BOUNDED_MB} MB resident (interpreter included)")
    for name in args.shape or SHAPES:
        kind, what, _ = SHAPES[name]
        line = f"{name:18} {kind:6} bounded: {_cell(measure(name))}"
        if args.stdlib:
            line += f" | stdlib: {_cell(measure(name, stdlib=True))}"
        print(f"{line}   ({what})", flush=True)
    if args.rounds > 0 and not args.shape:
        row = measure_reader(args.rounds)
        if "error" in row:
            print(f"one reader, every shape {args.rounds} times: {row['error']}")
        else:
            print(f"one reader, every shape {args.rounds} times: {row['emails']} emails, slowest "
                  f"{row['slowest_cpu_s']:.3f} s, peak {row['peak_mb']:.0f} MB resident")
    return 0


if __name__ == "__main__":
    sys.exit(main())
