"""One email parse stays bounded, whatever shape a hostile email takes.

Each shape of bench.mailparse (an email under 256 KiB) is parsed once in a fresh child
process under a 1 GiB address-space limit, timed in CPU seconds: past a bound it is refused
as `mail.too_complex`, inside every bound it is read, and either way the parse takes under
1 s and the child stays under 100 MB resident. Before the bounds, the encoded-word Subject
alone passed 1 GiB (a MemoryError in the child) and plain words took 4 s.
"""

from __future__ import annotations

import email.policy

import pytest

from airlock import mailbounds, sources
from bench import mailparse
from reader import mail


def number(row: dict[str, object], key: str) -> float:
    """A figure of a measured row (rows come from a child process as JSON)."""
    value = row[key]
    assert isinstance(value, int | float), row
    return value


@pytest.mark.parametrize("shape", sorted(mailparse.SHAPES))
def test_one_parse_is_bounded_in_memory_and_time(shape: str) -> None:
    """Each hostile shape parses in under 1 s of CPU and 100 MB resident, refused or read as its kind says."""
    kind = mailparse.SHAPES[shape][0]
    row = mailparse.measure(shape)
    assert row["cpu_s"] is not None, row
    assert row["outcome"] == ("mail.too_complex" if kind == "over" else "read"), row
    assert number(row, "cpu_s") < mailparse.BOUNDED_CPU_S, row
    assert number(row, "peak_mb") < mailparse.BOUNDED_MB, row
    assert number(row, "bytes") <= mailparse.SIZE_LIMIT, row


@pytest.mark.parametrize("shape", [name for name, (kind, _, _) in mailparse.SHAPES.items() if kind == "over"])
def test_the_refusal_names_the_bound(shape: str) -> None:
    """An email past a bound gets mail.too_complex with the bound, its limit and what was found."""
    parsed = mail.parse(mailparse.SHAPES[shape][2](), "eml")
    assert isinstance(parsed, mail.MailProblem) and parsed.rule == "mail.too_complex"
    bounds = ("parts", "depth", "header fields", "header chars", "parsed chars", "html rescan", "tag separators")
    assert any(f"{bound}: " in parsed.reason for bound in bounds), parsed.reason
    assert "over the limit of" in parsed.reason


@pytest.mark.parametrize("shape", [name for name, (kind, _, _) in mailparse.SHAPES.items() if kind == "inside"])
def test_inside_the_bounds_the_parse_is_the_stdlibs(shape: str) -> None:
    """Within every bound the bounded parse gives what the stdlib's own parse gives."""
    raw = mailparse.SHAPES[shape][2]()
    assert mail.parse(raw, "eml") == mailparse.reference(raw)


def test_a_header_read_outside_the_checked_set_is_held_to_the_same_bound() -> None:
    """A header the splitter does not check, read by the parse, is still refused past the per-header bound."""
    raw = ("Subject: x\r\nX-Long: " + "a " * mailbounds.MAX_HEADER_CHARS + "\r\n\r\nOrder 4411\r\n").encode()
    message = mailbounds.parse(raw, mail._POLICY, mail._Part)
    assert not isinstance(message, mailbounds.Exceeded)
    with pytest.raises(mailbounds.TooComplex, match="header chars"):
        message.get("X-Long")


def test_the_client_side_sender_is_read_within_the_same_bounds() -> None:
    """airlock.sources reads From through the same bounds: an email past them vouches for no one."""
    ok = b"From: Dana <dana@example.com>\r\nSubject: hi\r\n\r\nOrder 4411\r\n"
    assert sources.sender_of(ok, "eml") == "dana@example.com"
    for shape in ("address-list", "many-headers", "encoded-words"):
        raw = mailparse.SHAPES[shape][2]()
        assert isinstance(mailbounds.parse(raw, email.policy.compat32, headersonly=True), mailbounds.Exceeded)
        assert sources.sender_of(raw, "eml") == ""


def test_the_page_labels_a_typed_email_within_the_same_bounds() -> None:
    """The page's label for a typed .eml reads Subject within the bounds: a bomb's Subject names nothing."""
    from dashboard.inject import label_of
    assert label_of(b"From: a@b.c\r\nSubject: Order 4411\r\n\r\nhi\r\n", "eml") == "Order 4411"
    past_bound = ("Subject: " + "a " * mailbounds.MAX_HEADER_CHARS + "\r\n\r\nhi\r\n").encode()
    assert label_of(past_bound, "eml") == "(no subject)"


def test_one_reader_stays_bounded_across_every_shape() -> None:
    """One reader's handle() meets every shape three times: each answer typed, under 1 s each, under 100 MB in all."""
    row = mailparse.measure_reader(rounds=3)
    assert "error" not in row, row
    assert row["emails"] == 3 * len(mailparse.SHAPES)
    assert row["outcomes"] == {name: "mail.too_complex" if kind == "over" else "read"
                               for name, (kind, _, _) in mailparse.SHAPES.items()}, row
    assert number(row, "slowest_cpu_s") < mailparse.BOUNDED_CPU_S, row
    assert number(row, "peak_mb") < mailparse.BOUNDED_MB, row


def test_the_bench_prints_a_row_per_shape(capsys: pytest.CaptureFixture[str]) -> None:
    """python -m bench.mailparse --shape X prints the bound and one row with the outcome, CPU and memory."""
    assert mailparse.main(["--shape", "encoded-words", "--shape", "at-parts-bound"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "1 s CPU and 100 MB resident" in lines[0]
    assert lines[1].startswith("encoded-words") and "mail.too_complex, " in lines[1] and " MB" in lines[1]
    assert lines[2].startswith("at-parts-bound") and "bounded: read, " in lines[2]
