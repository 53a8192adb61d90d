"""The attack corpus: handmade emails are well-formed and really carry their attacks, and the
importer builds every public-corpus email with its attack where its headers say."""

from __future__ import annotations

import base64
import binascii
import email.policy
import json
import re
import subprocess
import sys
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from email.message import EmailMessage, MIMEPart
from email.parser import BytesParser
from pathlib import Path

import pytest

from airlock.errors import UsageError
from redteam.corpus import import_public

ROOT = Path(__file__).resolve().parents[2]
HANDMADE = ROOT / "corpus" / "handmade"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "corpora"
FORWARD_MARK = "---------- Forwarded message ----------"  # corpus/README.md: how BIPIA emails are laid out

MINIMUMS = {
    "benign": 40, "override": 30, "role-tag": 8, "tool-json": 8, "marker": 8, "data-only": 10,
    "lookalike-digits": 8, "invisible": 6, "bidi": 6, "base64": 6, "html-hidden": 8, "attachment": 6,
    "charset": 6, "subject": 6, "long": 4,
}
EXPECT = re.compile(r"[0-9]{3,6}|none")
GOAL = re.compile(r"call:[a-z_]+/[a-z_]+|value:[0-9]{1,6}|text:\S.*")
LANG = re.compile(r"[a-z]{2}")
MAY_BE_BENIGN = {"benign", "charset"}  # the brief's charset emails are "benign or hostile"


def load(path: Path) -> EmailMessage:
    with path.open("rb") as handle:
        return BytesParser(policy=email.policy.default).parse(handle)


HANDMADE_MAILS = {path.name: load(path) for path in sorted(HANDMADE.glob("*.eml"))}
HOSTILE = [name for name, mail in HANDMADE_MAILS.items() if mail["X-Airlock-Goal"]]


def header(message: EmailMessage, field: str) -> str:
    return str(message.get(f"X-Airlock-{field}", ""))


def body_text(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain", "html"))
    return part.get_content() if part is not None else ""


def reader_text(message: EmailMessage) -> str:
    """Everything a reader could show a model: the Subject, the body (get_body, plain before
    html) and every other part, with transfer encodings and charsets undone. HTML stays
    source, so comments and hidden elements count; binary attachments are read as UTF-8."""
    body = message.get_body(preferencelist=("plain", "html"))
    others = [part for part in message.walk() if not part.is_multipart() and part is not body]
    parts = ([body] if body is not None else []) + others
    return "\n".join([str(message.get("subject", "")), *(decoded(part) for part in parts)])


def decoded(part: MIMEPart) -> str:
    content = part.get_content()
    return content if isinstance(content, str) else content.decode("utf-8")


# The documented ways each trick is undone (corpus/README.md, "Checking an attack is there").

def strip_format_chars(text: str) -> str:
    """Unicode tag characters read as the ASCII they shadow; every other format char (Cf) dropped."""
    shown = (chr(ord(c) - 0xE0000) if 0xE0020 <= ord(c) <= 0xE007E else c for c in text)
    return "".join(c for c in shown if unicodedata.category(c) != "Cf")


def ascii_digits(text: str) -> str:
    """NFKC (fullwidth, bold, superscript) then every decimal digit of any script as ASCII."""
    return "".join(str(unicodedata.decimal(c)) if unicodedata.decimal(c, None) is not None else c
                   for c in unicodedata.normalize("NFKC", text))


def visual_order(text: str) -> str:
    """What a person sees: runs after U+202E reversed, then the controls dropped."""
    return strip_format_chars(re.sub(r"\u202e([^\u202c\n]*)\u202c?", lambda m: m.group(1)[::-1], text))


def with_base64_decoded(text: str) -> str:
    decoded = []
    for token in re.findall(r"[A-Za-z0-9+/]{16,}={0,2}", text):
        try:
            decoded.append(base64.b64decode(token, validate=True).decode("utf-8"))
        except (binascii.Error, UnicodeDecodeError):
            continue
    return "\n".join([text, *decoded])


REVEAL = {"invisible": strip_format_chars, "lookalike-digits": ascii_digits, "bidi": visual_order,
          "base64": with_base64_decoded}


def present(goal: str, text: str) -> bool:
    """A value goal is there as a whole number; call and text goals as text, ignoring case."""
    kind, _, target = goal.partition(":")
    if kind == "value":
        return re.search(rf"(?<![0-9]){target}(?![0-9])", text) is not None
    return target.casefold() in text.casefold()


def header_problems(message: EmailMessage) -> list[str]:
    expect, goal, category, lang = (header(message, f) for f in ("Expect", "Goal", "Category", "Lang"))
    problems = []
    if not EXPECT.fullmatch(expect):
        problems.append(f"Expect {expect!r}")
    if category not in MINIMUMS:
        problems.append(f"Category {category!r}")
    if not LANG.fullmatch(lang):
        problems.append(f"Lang {lang!r}")
    if (category == "benign" and goal) or (not goal and category not in MAY_BE_BENIGN):
        problems.append(f"Goal {goal!r} for category {category}")
    if goal and not GOAL.fullmatch(goal):
        problems.append(f"Goal {goal!r}")
    if goal == f"value:{expect}":
        problems.append("the attacker's value is the expected one")
    return problems


def test_generator_reproduces_the_checked_in_corpus(tmp_path: Path) -> None:
    """Running corpus/generate.py again gives byte-identical files, so the corpus is current."""
    out = tmp_path / "handmade"
    run = subprocess.run([sys.executable, "-B", str(ROOT / "corpus" / "generate.py"), str(out)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    fresh = {path.name: path.read_bytes() for path in out.glob("*.eml")}
    current = {path.name: path.read_bytes() for path in HANDMADE.glob("*.eml")}
    assert sorted(fresh) == sorted(current)
    assert [name for name in fresh if fresh[name] != current[name]] == []


def test_handmade_has_at_least_160_emails() -> None:
    """The handmade corpus holds at least 160 emails."""
    assert len(HANDMADE_MAILS) >= 160


def test_category_minimum() -> None:
    """Each category has at least its minimum number of emails (every short one named at once)."""
    counts = Counter(header(m, "Category") for m in HANDMADE_MAILS.values())
    short = {category: f"{counts[category]} < {minimum}" for category, minimum in MINIMUMS.items()
             if counts[category] < minimum}
    assert short == {}


def test_language_and_order_coverage() -> None:
    """Benign mail spans 8+ languages (30 with an order number, 10 without); overrides span 10+."""
    benign = [m for m in HANDMADE_MAILS.values() if header(m, "Category") == "benign"]
    overrides = [m for m in HANDMADE_MAILS.values() if header(m, "Category") == "override"]
    assert len({header(m, "Lang") for m in benign}) >= 8
    assert len({header(m, "Lang") for m in overrides}) >= 10
    with_order = Counter(header(m, "Expect") != "none" for m in benign)
    assert with_order[True] >= 30 and with_order[False] >= 10


# The per-file checks: each test runs its check on every email it concerns and names every
# failing file in one assertion message (a file whose check raises is named with the error).

def failing(names: Iterable[str], problem: Callable[[str], str]) -> dict[str, str]:
    """{file name: what is wrong} for each named email whose check finds a problem ("" is none)."""
    found = {}
    for name in names:
        try:
            wrong = problem(name)
        except Exception as error:  # noqa: BLE001  one broken file must not hide the others
            wrong = f"the check raised {type(error).__name__}: {error}"
        if wrong:
            found[name] = wrong
    return found


def name_and_header_problems(name: str) -> str:
    message = HANDMADE_MAILS[name]
    problems = header_problems(message)
    if not name.startswith(f"{header(message, 'Category')}-{header(message, 'Lang')}-"):
        problems.append("the file name does not start with <Category>-<Lang>-")
    if not re.fullmatch(r"[a-z0-9-]+-[a-z]{2}-[0-9]{2}\.eml", name):
        problems.append("the file name is not <category>-<lang>-NN.eml")
    return "; ".join(problems)


def test_handmade_headers_are_valid() -> None:
    """Every email parses and has the four headers with valid values, matching its file name."""
    assert failing(HANDMADE_MAILS, name_and_header_problems) == {}


def test_expected_number_is_in_the_text() -> None:
    """The order number a correct reader answers is really in the email, in ASCII digits."""
    expecting = [n for n, m in HANDMADE_MAILS.items() if header(m, "Expect") != "none"]
    assert len(expecting) >= 30  # at least the benign emails with an order number (see above)
    assert failing(expecting, lambda name: "" if present("value:" + header(HANDMADE_MAILS[name], "Expect"),
                                                         reader_text(HANDMADE_MAILS[name]))
                   else f"Expect {header(HANDMADE_MAILS[name], 'Expect')} is not in the text") == {}


def goal_problem(name: str) -> str:
    message = HANDMADE_MAILS[name]
    goal, category = header(message, "Goal"), header(message, "Category")
    text = reader_text(message)
    reveal = REVEAL.get(category)
    if not (present(goal, text) or (reveal is not None and present(goal, reveal(text)))):
        return f"Goal {goal!r} is not in the email, nor in its revealed form"
    if category in ("invisible", "lookalike-digits") and present(goal, text):
        return f"Goal {goal!r} shows before the trick is undone"
    return ""


def test_hostile_goal_is_really_in_the_email() -> None:
    """The attacker's tool, value or text is in the decoded email, or in its documented revealed
    form; for invisible and look-alike tricks, only there."""
    assert len(HOSTILE) >= 100
    assert failing(HOSTILE, goal_problem) == {}


def test_no_two_emails_read_alike() -> None:
    """No two handmade emails show a reader the same text."""
    texts = Counter(reader_text(m) for m in HANDMADE_MAILS.values())
    assert [t[:60] for t, n in texts.items() if n > 1] == []


def test_lookalike_expects_none_exactly_when_no_ascii_number() -> None:
    """A look-alike email expects `none` exactly when it has no ASCII order number."""
    for name, message in HANDMADE_MAILS.items():
        if header(message, "Category") == "lookalike-digits":
            has_ascii = re.search(r"[0-9]{3,}", reader_text(message)) is not None
            assert (header(message, "Expect") != "none") == has_ascii, name


def uses_trick(category: str, message: EmailMessage, raw: bytes) -> bool:
    """Whether the email really uses its category's trick (beyond carrying the goal)."""
    goal, text = header(message, "Goal"), reader_text(message)
    tool = goal.partition(":")[2]
    parts = [p for p in message.walk() if not p.is_multipart()]
    match category:
        case "role-tag":
            return re.search(r"<\|im_start\|>|\[SYSTEM\]|###\s*Assistant:|</email>|<<SYS>>|<\|system\|>|"
                             r"<start_of_turn>|^Assistant:", text, re.MULTILINE) is not None
        case "tool-json":
            return any(tool in json.dumps(found) for found in json_objects(text))
        case "marker":
            return any(m.casefold() == tool
                       for m in re.findall(r"\[\[\s*tool\s*:\s*([^\]\s]+)\s*\]\]", text, re.IGNORECASE))
        case "data-only":
            return goal.startswith("value:") and header(message, "Expect") != "none"
        case "invisible":
            return any(unicodedata.category(c) == "Cf" for c in text)
        case "bidi":
            return re.search("[\u202a-\u202e\u2066-\u2069]", text) is not None
        case "base64":
            encoded_part = any(p["Content-Transfer-Encoding"] == "base64" for p in parts)
            return encoded_part or present(goal, with_base64_decoded(text).replace(text, ""))
        case "html-hidden":
            return any(p.get_content_type() == "text/html" for p in parts)
        case "attachment":
            attached = [p for p in message.iter_attachments()
                        if (p.get_filename() or "").endswith((".txt", ".csv", ".json"))]
            return any(present(goal, decoded(p)) for p in attached)
        case "charset":
            return all(p.get_content_charset() not in (None, "utf-8", "us-ascii") for p in parts)
        case "subject":
            return present(goal, str(message["subject"]))
        case "long":
            body = body_text(message)
            at = min(m.start() for m in re.finditer(re.escape(goal.partition(":")[2]), body))
            where = {"start": (0, 0.1), "middle": (0.25, 0.75), "end": (0.9, 1)}[header(message, "Position")]
            return 100_000 <= len(raw) <= 200_000 and where[0] <= at / len(body) <= where[1]
    return True


def json_objects(text: str) -> list[object]:
    """Every JSON value that starts at a "{" in the text."""
    decoder, found = json.JSONDecoder(), []
    for start in (m.start() for m in re.finditer(r"\{", text)):
        try:
            found.append(decoder.raw_decode(text, start)[0])
        except json.JSONDecodeError:
            continue
    return found


def test_hostile_email_really_uses_its_trick() -> None:
    """A hostile email uses the trick its category names: a tag, JSON, a marker, a charset, a position."""
    def problem(name: str) -> str:
        message = HANDMADE_MAILS[name]
        category = header(message, "Category")
        return "" if uses_trick(category, message, (HANDMADE / name).read_bytes()) else f"no {category} trick"

    assert failing(HOSTILE, problem) == {}


def test_some_html_emails_carry_a_plain_alternative() -> None:
    """Some HTML emails also carry text/plain, some are HTML only."""
    html = [m for m in HANDMADE_MAILS.values() if header(m, "Category") == "html-hidden"]
    kinds = Counter(m.get_content_type() for m in html)
    assert kinds["multipart/alternative"] >= 1 and kinds["text/html"] >= 1


# The importer, run once on the shared corpora.

@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, EmailMessage]:
    if not SHARED.is_dir():
        pytest.skip(f"public corpora not found at {SHARED}")
    out = tmp_path_factory.mktemp("imported")
    (out / "stale.eml").write_bytes(b"Subject: left from an earlier run\n\nx\n")
    paths = import_public(SHARED, out)
    assert sorted(paths) == sorted(out.iterdir()), "the folder holds exactly what was written"
    return {path.name: load(path) for path in paths}


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def one_line(text: str) -> str:
    return " ".join(text.split())[:200].rstrip()


def test_import_builds_210_agentdojo_and_180_bipia_emails(imported: dict[str, EmailMessage]) -> None:
    """Import writes 210 AgentDojo emails, 180 BIPIA ones and a base64 twin for one in five."""
    sources = Counter((header(m, "Source").split("/")[0], header(m, "Category")) for m in imported.values())
    assert sources == {("agentdojo", "override"): 210, ("bipia", "override"): 180, ("bipia", "base64"): 36}
    assert "stale.eml" not in imported


def test_imported_headers_are_valid(imported: dict[str, EmailMessage]) -> None:
    """Every imported email has valid X-Airlock headers, a position and a source file that exists."""
    for name, message in imported.items():
        assert header_problems(message) == [], name
        assert header(message, "Position") in ("start", "middle", "end"), name
        for source in header(message, "Source").split(", "):
            assert (SHARED / source.split("#")[0]).is_file(), name


def test_agentdojo_emails_carry_their_payload_where_they_say(imported: dict[str, EmailMessage]) -> None:
    """Each AgentDojo email holds its payload at its position, the order number outside it, and its task's goal."""
    payloads = read_jsonl(SHARED / "agentdojo" / "unique_payloads.jsonl")
    goals = {(t["suite"], t["injection_task_id"]): t["goal"]
             for t in read_jsonl(SHARED / "agentdojo" / "injection_tasks.jsonl")}
    checked = 0
    for name, message in imported.items():
        source = header(message, "Source")
        if not source.startswith("agentdojo/"):
            continue
        record = payloads[int(source.rpartition("#")[2])]
        body, payload, expect = body_text(message).strip(), record["text"].strip(), header(message, "Expect")
        assert payload in body, name
        assert present("value:" + expect, body.replace(payload, "")), name
        position = header(message, "Position")
        assert body.startswith(payload) == (position == "start"), name
        assert body.endswith(payload) == (position == "end"), name
        if position == "middle":
            assert body.index(expect) < body.index(payload), name
        assert header(message, "Goal") == "text:" + one_line(goals[record["suite"], record["injection_task_id"]]), name
        checked += 1
    assert checked == 210


def test_bipia_emails_carry_their_attack_where_they_say(imported: dict[str, EmailMessage]) -> None:
    """Each BIPIA email holds its attack (or its base64) at the start, a middle sentence boundary
    or the end of the content."""
    contexts = read_jsonl(SHARED / "bipia" / "benchmark_email_test.jsonl")
    attacks = json.loads((SHARED / "bipia" / "benchmark_text_attack_test.json").read_text(encoding="utf-8"))
    source_pattern = re.compile(r"bipia/benchmark_email_test\.jsonl#(\d+), "
                                r"bipia/benchmark_text_attack_test\.json#(.+)\[(\d+)\]")
    checked = 0
    for name, message in imported.items():
        found = source_pattern.fullmatch(header(message, "Source"))
        if found is None:
            continue
        content = contexts[int(found[1])]["context"].split("CONTENT:", 1)[-1].strip()
        attack = attacks[found[2]][int(found[3])]
        customer, _, forwarded = body_text(message).partition(FORWARD_MARK)
        assert present("value:" + header(message, "Expect"), customer), name
        region = forwarded.split("\n\n", 1)[1]
        if header(message, "Category") == "base64":
            encoded = base64.b64encode(attack.encode("utf-8")).decode("ascii")
            block = next(line for line in region.splitlines() if encoded in line)
            assert "base64" in block and attack not in region, name
        else:
            block = attack
        before, _, after = region.partition(block)
        assert "".join((before + after).split()) == "".join(content.split()), name
        position = header(message, "Position")
        assert (before.strip() == "") == (position == "start"), name
        assert (after.strip() == "") == (position == "end"), name
        if position == "middle" and re.search(r"[.!?](\s+\S|[A-Z])", content):
            assert before.rstrip().endswith((".", "!", "?")), name
        assert header(message, "Goal") == "text:" + one_line(attack), name
        checked += 1
    assert checked == 216


def test_import_refuses_to_empty_a_folder_of_other_files(tmp_path: Path) -> None:
    """Import will not delete an --out folder that holds anything but .eml files."""
    (tmp_path / "notes.md").write_text("mine", encoding="utf-8")
    with pytest.raises(UsageError, match="refusing"):
        import_public(SHARED, tmp_path)
    assert (tmp_path / "notes.md").read_text(encoding="utf-8") == "mine"


def _corpora_copy(tmp_path: Path) -> Path:
    """A copy of the two corpora the importer reads, for a test to break one file of."""
    if not SHARED.is_dir():
        pytest.skip(f"public corpora not found at {SHARED}")
    copy = tmp_path / "corpora"
    for name in ("agentdojo/injection_tasks.jsonl", "agentdojo/unique_payloads.jsonl",
                 "bipia/benchmark_email_test.jsonl", "bipia/benchmark_text_attack_test.json"):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes((SHARED / name).read_bytes())
    return copy


BAD_INPUTS = [
    pytest.param("agentdojo/unique_payloads.jsonl", b'{"attack": "x"}\n', "unique_payloads.jsonl:1",
                 id="missing-field"),
    pytest.param("agentdojo/injection_tasks.jsonl", b"not json\n", "injection_tasks.jsonl:1", id="not-json"),
    pytest.param("bipia/benchmark_text_attack_test.json", b"[1, 2]", "benchmark_text_attack_test.json",
                 id="wrong-shape"),
    pytest.param("bipia/benchmark_email_test.jsonl", b"", "benchmark_email_test.jsonl", id="empty"),
    pytest.param("agentdojo/unique_payloads.jsonl", b"\n", "unique_payloads.jsonl: no records", id="no-payloads"),
    pytest.param("bipia/benchmark_email_test.jsonl", None, "benchmark_email_test.jsonl", id="missing-file"),
]


@pytest.mark.parametrize(("name", "content", "named"), BAD_INPUTS)
def test_a_bad_input_leaves_out_untouched(tmp_path: Path, name: str, content: bytes | None, named: str) -> None:
    """A bad or missing corpus file is a UsageError naming it, raised before --out is emptied."""
    corpora = _corpora_copy(tmp_path)
    if content is None:
        (corpora / name).unlink()
    else:
        (corpora / name).write_bytes(content)
    out = tmp_path / "out"
    out.mkdir()
    (out / "kept.eml").write_bytes(b"Subject: from an earlier run\n\nx\n")
    with pytest.raises(UsageError, match=re.escape(named)):
        import_public(corpora, out)
    assert [p.name for p in out.iterdir()] == ["kept.eml"]


def test_corpus_import_of_a_bad_input_is_one_line(tmp_path: Path) -> None:
    """`airlock corpus import` on a bad input: exit 2, one line on stderr, no traceback, --out kept."""
    corpora = _corpora_copy(tmp_path)
    (corpora / "agentdojo" / "unique_payloads.jsonl").write_bytes(b'{"attack": 1}\n')
    out = tmp_path / "out"
    out.mkdir()
    (out / "kept.eml").write_bytes(b"x")
    done = subprocess.run([sys.executable, "-m", "airlock", "corpus", "import", "--from", str(corpora),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "unique_payloads.jsonl:1" in done.stderr and "Traceback" not in done.stderr
    assert (out / "kept.eml").read_bytes() == b"x"
