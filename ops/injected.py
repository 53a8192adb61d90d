"""What `airlock inject` says about what went in, and what did not.

Each accepted email's line is printed by cmd_inject the moment it is accepted; this module
says the rest when a run ends part way: which files were certainly not accepted (never
sent, or refused: safe to send again) and which were sent and never answered (a paused
broker may still take them when it resumes). Whatever came from an email or a path is
shown escaped (airlock.terminal).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from airlock.errors import AirlockError, UsageError
from airlock.terminal import json_line, shown

if TYPE_CHECKING:  # the client pulls in zmq
    from airlock.wire import Email, Result

STATUS_WORDS = {"not_accepted": "not accepted", "no_answer": "no answer"}
NOT_FILES = ("--text", "<stdin>")  # origins a re-run cannot read back


def listed(lists: list[str]) -> list[str]:
    """The paths named in each --from-list FILE, one a line, blank lines skipped."""
    names: list[str] = []
    for name in lists:
        try:
            text = Path(name).read_text(encoding="utf-8", errors="surrogateescape")
        except OSError as exc:
            raise UsageError(f"--from-list {shown(name)}: {shown(exc.strerror or str(exc))}") from None
        names += [line for line in text.split("\n") if line.strip()]
    return names


def not_accepted(items: list[Email], accepted: list[tuple[Email, str]], unanswered: list[Email],
                 failure: AirlockError | None, as_json: bool, rest: str | None) -> None:
    """Say which emails did not go in: `not accepted` (never sent, or refused: certainly not
    taken, safe to send again) and `no answer` (sent, never answered: the broker may still
    take them, so look in `airlock trace` before sending them again). One escaped line each
    on stderr after a line of counts, or with --json a JSON line each on stdout and the
    counts on the failure's one stderr line (scripts read one line there); when nothing
    went in, the failure's line says so alone. `rest` (--rest FILE) gets the paths of the
    files not accepted, for `airlock inject --from-list FILE`."""
    taken = {id(item) for item, _ in accepted}
    maybe = {id(item) for item in unanswered}
    left = [item for item in items if id(item) not in taken and id(item) not in maybe]
    unknown = [item for item in items if id(item) in maybe and id(item) not in taken]
    lines = [] if failure is None else [shown(str(failure))]
    nothing_in = not accepted and not unknown  # then the failure's one line says it all
    counts = (f"{len(accepted)} of {len(items)} emails accepted; {len(left)} not accepted"
              + (f", {len(unknown)} sent with no answer (the broker may still take them: look for their files in "
                 "`airlock trace` before sending them again)" if unknown else ""))
    if nothing_in:
        lines = [line + f"; none of the {len(items)} emails was accepted" if len(items) > 1 else line for line in lines]
    elif not left and not unknown:
        pass  # everything went in: only the failure, if any, is left to say
    elif as_json:  # one line on stderr; each file is a JSON line on standard output
        lines = ["; ".join([*lines, counts + ", each listed on standard output"])]
    else:
        lines.append(counts + "; their ids are above, the rest below")
    for line in lines:
        print(f"airlock: {line}", file=sys.stderr)
    for status, group in (("not_accepted", left), ("no_answer", unknown)):
        for item in group:
            if as_json:
                print(json_line({"file": item.origin, "status": status}))
            elif not nothing_in:
                print(f"{STATUS_WORDS[status]}: {shown(item.origin)}", file=sys.stderr)
    if rest and left:
        _write_rest(rest, [item.origin for item in left if item.origin not in NOT_FILES])
    sys.stdout.flush()
    sys.stderr.flush()


def _write_rest(rest: str, files: list[str]) -> None:
    """--rest FILE: the paths of the files not accepted, one a line, for --from-list FILE."""
    Path(rest).write_text("".join(f"{origin}\n" for origin in files), encoding="utf-8", errors="surrogateescape")
    print(f"airlock: the {len(files)} file(s) not accepted are listed in {shown(rest)}: "
          f"airlock inject --from-list {shown(rest)} sends only those", file=sys.stderr)


def accepted_line(message_id: str, origin: str, as_json: bool) -> None:
    """One accepted email's line, flushed at once: a run killed later has already said it."""
    print(json_line({"id": message_id, "file": origin}) if as_json else f"{message_id}  {shown(origin)}", flush=True)


def outcome(message_id: str, origin: str, result: Result | None, pending_reason: str, as_json: bool) -> None:
    """One email's line with --wait, flushed: its outcome, or `pending` and why."""
    said = result.outcome if result else "pending"
    reason = result.reason if result else pending_reason
    if as_json:
        print(json_line({"id": message_id, "file": origin, "outcome": said, "reason": reason}), flush=True)
    else:
        print(f"{message_id}  {said:<9} {shown(origin)}" + (f"  ({shown(reason)})" if reason else ""), flush=True)
