"""The `airlock` command: the runtime's commands and the tools around it.

The runtime's (up, inject, trace, status, pending, approve, deny, keys) run here; the tools
no service runs (attack, verify, record, pins, naive, model, corpus, bench, prompts, k8s,
swarm: cli/tools.py; lab: cli/lab.py) are imported only for their own command, in this
process, and every command's failures go through one handler (cli/handling.py).

Every failure the user can cause or meet is one line on stderr and a non-zero exit:
1 for a refusal or a runtime failure (no keys, a key the broker refused, a silent broker,
an unknown id, a decision not taken, an email over the limit), 2 for bad usage (a missing
file, nothing to inject), 73 when `airlock up` finds its data dir held by another stack
(airlock.locks), 74 when the broker could not write an email down ("not accepted: disk
full"; retry once it has space), 75 when the broker's queue stayed full
(AIRLOCK_QUEUE_MAX_BYTES; retry later), 78 for bad configuration (a tool run where the tool
packages are not installed, too), 130 after Ctrl-C (airlock.errors names each code, and its
exit_code maps each error to one). Tracebacks are bugs.

`airlock inject` prints each email's id the moment the broker accepts it (with --wait,
each outcome the moment it arrives), so whatever ends it part way (a silent broker, a
full queue or disk, Ctrl-C), what went in has been printed. The rest is listed on stderr,
`not accepted: FILE` (never taken: safe to send again; --rest FILE writes their paths for
`airlock inject --from-list FILE`) or `no answer: FILE` (sent, never answered: the broker
may still take it, so look for it in `airlock trace` before sending it again).
Whatever came from an email or a peer is shown through airlock.terminal, errors included.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from airlock import __version__, settings as settings_module, sources, trace
from airlock.errors import (
    EX_CONFIG,
    EX_INTERRUPTED,
    AirlockError,
    KeysMissing,
    RequestRefused,
    UsageError,
    exit_code,
)
from airlock.terminal import json_line, shown
from cli import handling
from ops import escalations, injected

if TYPE_CHECKING:  # the client pulls in zmq: commands that need no broker do not import it
    from airlock.client import IntakeClient
    from airlock.wire import Email, Result, Status, Waiting

LIMIT_SETTING = "AIRLOCK_MAX_EMAIL_BYTES"
# The tools no service runs, with the one line `airlock --help` shows for each. Their code
# (the harness, the course, the red team, the bench) is imported only when one runs; where
# it is not installed (the CLI image), the command says so. cli/tools.py builds these
# commands' parsers and takes their help from here; `lab` is cli/lab.py's.
# The packages a tool needs beyond the command line and the operator's tools.
TOOL_PACKAGES = ("harness", "course", "redteam", "bench")
LAB_COMMANDS = {
    "attack": "inject a corpus and score the side effects that ran",
    "verify": "prove the running lab (compose, or a swarm stack) is isolated",
    "record": "record a live model's answers as samples",
    "pins": "print the pin of each planned tool, to paste into the task's [[plan]] steps",
    "naive": "run the naive agent (email and tools in one model call) on emails",
    "model": "serve a worst-case model for tests and demos",
    "corpus": "build attack emails from the public corpora",
    "bench": "measure what the separation costs",
    "prompts": "compare prompt variants of a task on a corpus, with a live model",
    "lab": "hands-on labs: list, start, check, run, compose, hint, notes, reset, progress, wrong, grade, mutants",
    "k8s": "Kubernetes: write a namespace per student (kustomize overlays with their own keys)",
    "swarm": "Docker Swarm: render the lab as a stack (keys as secrets), deploy it, remove it",
    "demo": "the trainers' guided scenario: check a scenario file as the page reads it",
}


def _settings(args: argparse.Namespace) -> settings_module.Settings:
    return settings_module.load(
        data_dir=Path(args.data_dir) if getattr(args, "data_dir", None) else None,
        task=Path(args.task) if getattr(args, "task", None) else None,
    )


def cmd_up(args: argparse.Namespace) -> int:
    from airlock import extras, locks
    from airlock.service import stop_on_signals
    from airlock.task import describe_recordings
    from ops import preflight
    from ops.supervisor import Supervisor, check_config, child_env

    if args.readers is not None and args.readers < 1:
        raise UsageError("--readers must be at least 1")
    env = dict(os.environ)
    if args.model_url is not None:
        env["AIRLOCK_MODEL_URL"] = args.model_url
    if args.dashboard_port is not None:
        env["AIRLOCK_DASHBOARD_PORT"] = str(args.dashboard_port)
    settings = settings_module.load(env, data_dir=Path(args.data_dir) if args.data_dir else None,
                                    task=Path(args.task) if args.task else None)
    # Everything that can be known wrong is checked before any child starts: a child that
    # exits 78 stops the stack too, but only after the others have started and said so.
    task = check_config(settings)
    dashboard: dict[str, tuple[str, int]] = {}
    if args.dashboard:
        extras.require_extra("airlock up --dashboard", ("starlette", "uvicorn"), "dashboard")
        read = settings_module.reader(env)
        dashboard["dashboard"] = (read("AIRLOCK_DASHBOARD_HOST", str, "127.0.0.1"),
                                  read("AIRLOCK_DASHBOARD_PORT", settings_module.port, "8088"))
    with locks.one_stack(settings.data_dir):
        preflight.check_left_running(settings.data_dir / "run")
        preflight.check_ports(settings, dashboard)
        from airlock import keys

        closed, added = False, []
        keys_folder = settings.keys_folder  # looked up once: the folder this stack uses
        if keys_folder is None:  # every endpoint is authenticated: make this data dir its keys
            keys_folder = settings.data_dir / "keys"
            keys.generate(keys_folder)
            settings = msgspec.structs.replace(settings, keys=keys_folder)
        else:  # keys an older version made open to other users (0755) are closed now
            closed = keys.tighten(keys_folder)
            # ... and get the roles added since (the SMTP intake's own key), all else kept.
            added = keys.add_new_roles(keys_folder) if (keys_folder / "broker.key_secret").is_file() else []
        people = _approver_keys(settings, task)
        silence = preflight.model_silence(settings.model_url) if settings.model_url else None
        slots = preflight.model_slots(settings.model_url) if settings.model_url and not silence else None
        readers, why = args.readers or 1, ""
        if args.readers is None and slots:
            readers, because = preflight.readers_for_slots(slots)
            why = f" ({because})"
        data = settings.data_dir.resolve()
        print(f"airlock {__version__}: task {settings.task.resolve()}, {readers} reader(s){why}")
        if not settings.model_url:
            print("  model:      none set: readers answer from recorded samples")
        elif silence:
            print(f"  model:      WARNING: {settings.model_url} does not answer ({silence}): "
                  "readers will answer from recorded samples where they have one")
        else:
            print(f"  model:      {settings.model_url}")
        print(f"  recordings: {describe_recordings(task)}")
        for name in settings.ports:
            print(f"  {name + ':':<11} {' '.join(settings.bind_endpoints(name))}")
        print(f"  trace:      {data / 'trace.jsonl'} (and, past {settings.trace_segment_bytes // 2**20} MiB, "
              f"segments trace.000001.jsonl, ... beside it)\n  calls:      {data / 'calls.jsonl'}")
        print(f"  keys:       {keys_folder.resolve()} (CURVE on every endpoint)"
              + ("; it was open to other users, now 0700" if closed else "")
              + (f"; added the key pair of {', '.join(added)}" if added else ""))
        if people:
            print(f"  approvers:  {', '.join(people)} (each decides with their own key in "
                  f"{keys_folder.resolve() / 'people'})")
        if dashboard:
            host, port = dashboard["dashboard"]
            print(f"  dashboard:  http://{host}:{port}/")
        print("  Ctrl-C stops everything.", flush=True)
        supervisor = Supervisor(settings, child_env(settings, env), readers, dashboard=args.dashboard)
        return supervisor.run(stop_on_signals(), announce=lambda line: print(line, flush=True))


def _approver_keys(settings: settings_module.Settings, task: object) -> list[str]:
    """The task's principals, each with a key pair of their own in the keys folder (made
    now where missing): an escalation is decided only with one of them (airlock approve)."""
    from airlock import keys

    path = getattr(task, "principals_path", None)
    if path is None or settings.keys_folder is None:
        return []
    names = keys.principal_names(path)
    keys.make_people(settings.keys_folder, names)
    return sorted(set(names))


def _client(args: argparse.Namespace, settings: settings_module.Settings) -> IntakeClient:
    """The CLI's client of the intake endpoint: it must hold keys (`airlock up` always
    authenticates), so without them it stops here, naming where it looked."""
    from airlock.client import IntakeClient

    return IntakeClient(settings, timeout_s=args.timeout, require_keys=True)


def _emails(args: argparse.Namespace, limit: int) -> list[Email]:
    """Every email to inject, each checked against the size limit before anything is sent."""
    from airlock.wire import Email

    items: list[Email] = []
    if args.text is not None:
        # The argument's own bytes (Python holds the ones that are not UTF-8 as surrogates):
        # the reader refuses text that is not UTF-8 (mail.charset), nothing guesses here.
        raw = args.text.encode("utf-8", "surrogateescape")
        if len(raw) > limit:
            raise sources.too_large("--text", str(len(raw)), limit, LIMIT_SETTING)
        items.append(Email(raw, "text", "--text"))
    for name in [*args.files, *injected.listed(getattr(args, "from_list", []))]:
        if name == "-":
            raw = sources.read_stream(sys.stdin.buffer, limit, LIMIT_SETTING)
            fmt = sources.sniff(raw)
            items.append(Email(raw, fmt, "<stdin>", sources.sender_of(raw, fmt)))
            continue
        for path, raw in sources.emails([name], limit, LIMIT_SETTING):  # no link out of a folder given
            fmt = sources.format_of(path)
            items.append(Email(raw, fmt, str(path), sources.sender_of(raw, fmt)))
    if not items:
        raise UsageError("nothing to inject: give files, '-' for standard input, or --text")
    return items


def cmd_inject(args: argparse.Namespace) -> int:
    """Each accepted email's line is printed (and flushed) the moment the broker accepts it,
    or with --wait the moment its outcome arrives, so a run that fails or is killed part
    way has already said what went in. A failure part way says which files were not
    accepted (stderr, and --json lines), and --rest writes them for a re-run."""
    settings = _settings(args)
    items = _emails(args, settings.max_email_bytes)
    accepted: list[tuple[Email, str]] = []
    origins: dict[str, str] = {}  # message id -> its file, for outcomes in the order they arrive
    results: dict[str, Result] = {}
    interrupted, failure, printed = False, None, 0
    with _client(args, settings) as client:
        submitting = client.submit_each(items)
        try:
            try:
                for item, message_id in submitting:
                    accepted.append((item, message_id))
                    origins[message_id] = item.origin
                    if not args.wait:
                        injected.accepted_line(message_id, item.origin, args.json)
                        printed += 1
            except AirlockError as exc:  # what went in is printed (and awaited); the rest is listed
                failure = exc
                injected.not_accepted(items, accepted, client.unanswered, exc, args.json, args.rest)
            if args.wait:
                for arrived in client.outcomes([message_id for _, message_id in accepted], args.wait_timeout):
                    results[arrived.message_id] = arrived
                    injected.outcome(arrived.message_id, origins[arrived.message_id], arrived, "", args.json)
        except KeyboardInterrupt:  # Ctrl-C: say what finished and what still runs, then 130
            interrupted = True
            submitting.close()  # interrupted between two yields, it has yet to say what it left unanswered
            if not args.wait:  # one accepted as the interrupt came still gets its line
                for item, message_id in accepted[printed:]:
                    injected.accepted_line(message_id, item.origin, args.json)
            if args.wait:  # a Result may have arrived while the interrupt was being raised
                for arrived in client.arrived([i for _, i in accepted if i not in results]):
                    results[arrived.message_id] = arrived
                    injected.outcome(arrived.message_id, origins[arrived.message_id], arrived, "", args.json)
            if failure is None:
                injected.not_accepted(items, accepted, client.unanswered, None, args.json, args.rest)
    code = 0
    if args.wait:
        for item, message_id in accepted:
            if message_id not in results:
                injected.outcome(message_id, item.origin, None,
                                 f"interrupted; it still runs: airlock trace {message_id}" if interrupted
                                 else f"no outcome within {args.wait_timeout} s", args.json)
                code = 1
    if interrupted:
        print(f"airlock: interrupted: {len(results) if args.wait else len(accepted)} of {len(accepted)} accepted "
              f"emails {'finished' if args.wait else 'printed'}", file=sys.stderr, flush=True)
        return EX_INTERRUPTED
    if failure is not None:
        return exit_code(failure)
    return code


def cmd_trace(args: argparse.Namespace) -> int:
    path = _settings(args).trace_path
    if not path.exists() and not args.follow:
        raise RequestRefused(f"no trace yet at {path}" + (f", so nothing for {args.id}" if args.id else ""))
    damage = trace.Damage()
    lines = trace.follow(path, args.id, damage=damage) if args.follow else trace.read(path, args.id, damage)
    found, reported = False, 0
    for record in lines:
        found = True
        print(json_line(trace.as_line(record)) if args.json else trace.render(record), flush=args.follow)
        if args.follow and damage.count > reported:  # a follower never ends: said as met
            reported = damage.count
            print(f"airlock trace: {damage.report()}", file=sys.stderr, flush=True)
    if damage.count and not args.follow:
        print(f"airlock trace: {damage.report()}", file=sys.stderr)
    if args.id and not found:
        raise RequestRefused(f"no trace lines for {args.id} in {path}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    with _client(args, _settings(args)) as client:
        status = client.status()
    if args.json:
        print(json_line(status_record(status)))
        return 0
    for line in status_lines(status):
        print(line)
    return 0


PIPELINE = ("reader", "validator", "actor")  # the stages in the order an email passes them


def status_lines(status: Status) -> list[str]:
    """`airlock status` as a person reads it: a table of the stages and their connected
    workers (the pipeline's order, then any other role), the queue, a table of the broker's
    counters, then a line per stuck stage. Every name the broker sent is shown escaped."""
    stages = sorted(status.workers, key=lambda role: (PIPELINE.index(role) if role in PIPELINE else len(PIPELINE),
                                                      role))
    lines = (_two_columns(("stage", "workers"), [(role, status.workers[role]) for role in stages])
             if stages else ["no worker connected"])
    lines += ["", *_two_columns(("queued", status.queued), [("in flight", status.in_flight)])]
    if status.counters:
        lines += ["", *_two_columns(("counter", "count"), sorted(status.counters.items()))]
    waiting = waiting_lines(status.waiting)
    return lines + ([""] + waiting if waiting else [])


def _two_columns(head: tuple[str, object], rows: list[tuple[str, int]]) -> list[str]:
    """Rows of a name (escaped, left-aligned) and a value (right-aligned), `head` first."""
    cells = [(shown(name), str(value)) for name, value in [head, *rows]]
    left, right = max(len(name) for name, _ in cells), max(len(value) for _, value in cells)
    return [f"{name:<{left}}  {value:>{right}}" for name, value in cells]


def status_record(status: Status) -> dict[str, object]:
    """`airlock status --json`: every field of every stuck stage, defaults included, so a
    reader finds the same keys whatever is stuck."""
    return {"workers": status.workers, "queued": status.queued, "in_flight": status.in_flight,
            "counters": status.counters,
            "waiting": {stage: msgspec.structs.asdict(wait) for stage, wait in status.waiting.items()}}


def waiting_lines(waiting: dict[str, Waiting]) -> list[str]:
    """What a Status says is stuck (wire.Waiting), one line per stage and kind: emails
    waiting for a stage with no worker connected, and emails waiting to be sent again."""
    lines = []
    for stage, wait in sorted(waiting.items()):
        name = shown(stage)
        if wait.no_worker:
            end = (f"each ends failed once it has waited {wait.limit_s:g} s (AIRLOCK_NO_WORKER_WAIT_S)"
                   if wait.limit_s else "they wait for ever (AIRLOCK_NO_WORKER_WAIT_S=0)")
            lines.append(f"stuck at the {name} stage: {wait.no_worker} waiting with no {name} connected or heard "
                         f"from, the longest for {wait.no_worker_s:.0f} s; {end}")
        if wait.redelivery:
            lines.append(f"stuck at the {name} stage: {wait.redelivery} waiting to be sent again (the {name} "
                         f"holding it was lost or missed its deadline), the oldest for {wait.redelivery_s:.0f} s")
    return lines


def cmd_pending(args: argparse.Namespace) -> int:
    """Escalated emails with no decision yet, read from the trace."""
    damage = trace.Damage()
    waiting = escalations.waiting(_settings(args).trace_path, damage)
    unknown = [] if args.json else escalations.unknown_steps(_settings(args).trace_path)
    if damage.count:
        print(f"airlock pending: {damage.report()}", file=sys.stderr)
    if args.json:
        for entry in waiting:
            print(json_line(entry))
        return 0
    if not waiting:
        print("nothing is waiting for a decision")
    for entry in waiting:
        if "step" not in entry:
            print(f"{entry['id']}  escalated (its authorization record is not in the trace)")
            continue
        print(f"{entry['id']}  step {entry['step']} {shown(str(entry['tool']))}  "
              f"needs a {shown(str(entry['needs']))}: {shown(str(entry['reason']))}")
        sender = shown(str(entry.get("sender") or "(none vouched for)"))
        print(f"    value {json_line(entry.get('value'))}  sender {sender}  from {shown(str(entry.get('file', '')))}")
    if unknown:
        print("steps whose effect is unknown (called, never recorded; they never run again: check the tool's "
              "own records):")
    for entry in unknown:
        print(f"{shown(str(entry['id']))}  step {entry['step']} {shown(str(entry['tool']))}: unknown "
              f"(key {shown(str(entry['key']))})")
    return 0


def cmd_decide(args: argparse.Namespace) -> int:
    from airlock import keys
    from airlock.client import IntakeClient

    settings = _settings(args)
    if not keys.PERSON_NAME.fullmatch(args.by):
        raise UsageError(f"--by {shown(args.by)}: a person's name is lower case letters, digits, . _ -")
    # The decision is proven by the person's own key, never by the name alone: the broker
    # takes it only from keys/people/<by>.key_secret (the intake's key cannot decide).
    folder = settings.keys_folder
    own = f"{keys.person(args.by)}.key_secret"
    if folder is not None and not settings_module.holds(folder, own):
        raise KeysMissing(f"no key for {shown(args.by)} ({folder.resolve() / own}): only a person with a key of "
                          f"their own decides; `airlock up` makes one for each of its task's principals, or "
                          f"airlock keys --person {shown(args.by)} --out {folder}")
    with IntakeClient(settings, timeout_s=args.timeout, role=keys.person(args.by), require_keys=True) as client:
        refusal = client.decide(args.id, args.command == "approve", args.role, args.by)
        if refusal:
            raise RequestRefused(refusal)
        result = next(client.outcomes([args.id], args.wait_timeout), None)
    said, reason = ((result.outcome, result.reason) if result
                    else ("pending", f"no outcome within {args.wait_timeout} s"))
    if args.json:
        print(json_line({"id": args.id, "outcome": said, "reason": reason}))
    else:
        print(f"{shown(args.id)}  {said}" + (f"  ({shown(reason)})" if reason else ""))
    if result is None:
        return 1
    if result.outcome == "escalated":
        why = escalations.decision_refused(settings.trace_path, args.id)
        if why:
            raise RequestRefused(f"the {args.command} was not taken: {why}; the email still waits")
    return 0


def run_tool(argv: Sequence[str]) -> int:
    """`airlock NAME ...` for a tool no service runs (`airlock lab ...` for the labs), in this
    process: Ctrl-C and SIGTERM reach the process that owns what the command started
    (attack's private stack, the hostile model's port). Where the tools are not installed
    (the CLI image: the kernel, the command line and the operator's tools only), one line
    and 78, not a traceback."""
    import importlib.util

    missing = [name for name in TOOL_PACKAGES if importlib.util.find_spec(name) is None]  # looks, never imports
    if missing:
        print(f"airlock: `airlock {shown(argv[0])}` comes with the tool packages ({', '.join(missing)} missing "
              "here: the service images and the CLI image hold the kernel and the operator's command line only): "
              "pip install -e '.[lab]' in a checkout", file=sys.stderr)
        return EX_CONFIG
    if argv[0] == "lab":
        from cli import lab

        return lab.main(argv[1:])
    from cli import tools

    return tools.main(argv)


def cmd_keys(args: argparse.Namespace) -> int:
    from airlock import keys

    folder = Path(args.out)
    if args.person and (folder / "broker.key_secret").exists() and not args.force:
        made_people = keys.make_people(folder, args.person)  # people join a folder that has its roles
        print(f"key pairs for {', '.join(made_people) or 'nobody new'} in {folder / keys.PEOPLE}; "
              "each person's .key_secret is theirs alone (airlock approve --by NAME uses it)")
        return 0
    made = keys.generate(folder, force=args.force)
    keys.make_people(folder, args.person)
    print(f"{len(made)} key files in {folder}: a pair for the broker and each role, allow lists in {folder / 'allow'}")
    print("each process needs only its own <role>.key_secret and broker.key; keep the secrets secret")
    if args.person:
        print(f"a pair for each of {', '.join(sorted(set(args.person)))} in {folder / keys.PEOPLE}: "
              "the only keys that can approve or deny")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="airlock", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"airlock {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, handler, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        sub.set_defaults(handler=handler)
        sub.add_argument("--data-dir", help="where trace.jsonl and calls.jsonl live "
                                            "(default $AIRLOCK_DATA_DIR or ./airlock-data)")
        return sub

    up = command("up", cmd_up, "start broker, validator, actor and readers; Ctrl-C stops them")
    up.add_argument("--model-url",
                    help="OpenAI-compatible endpoint (default $AIRLOCK_MODEL_URL; none: recorded samples)")
    up.add_argument("--task", help="task file (default tasks/order_status.toml)")
    up.add_argument("--readers", type=int, help="reader processes (default: as many as the model serves at "
                    "once, where it says (llama.cpp's /props); else 1)")
    up.add_argument("--dashboard", action="store_true", help="also run the trainers' live page (python -m dashboard)")
    up.add_argument("--dashboard-port", type=int, help="its port (default $AIRLOCK_DASHBOARD_PORT or 8088)")

    inject = command("inject", cmd_inject, "put emails into the reader queue")
    inject.add_argument("files", nargs="*", help=".eml or .txt files, folders of them, or - for stdin")
    inject.add_argument("--text", help="inject this text as a plain email")
    inject.add_argument("--json", action="store_true",
                        help='one JSON line per email: {"id", "file"[, "outcome", "reason"]}; '
                             'after a failure, {"file", "status": "not_accepted" or "no_answer"}')
    inject.add_argument("--wait", action="store_true",
                        help="wait for each email's outcome (Ctrl-C prints what finished so far, exit 130)")
    inject.add_argument("--wait-timeout", type=float, default=120.0, help="seconds to wait for outcomes")
    inject.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the broker")
    inject.add_argument("--from-list", metavar="FILE", action="append", default=[],
                        help="also inject the files named in FILE, one path a line (what --rest wrote)")
    inject.add_argument("--rest", metavar="FILE",
                        help="if not every email is accepted, write the paths of the files not accepted "
                             "here, one a line, for a re-run with --from-list FILE")

    trace_cmd = command("trace", cmd_trace, "show what happened to one email, or to all")
    trace_cmd.add_argument("id", nargs="?", help="a message id from `airlock inject`")
    trace_cmd.add_argument("--follow", "-f", action="store_true",
                           help="keep printing new lines (on across the trace's rotation into segments)")
    trace_cmd.add_argument("--json", action="store_true", help="print each record as one JSON line")

    status = command("status", cmd_status, "show connected workers, queue lengths and emails stuck at a stage")
    status.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the broker")
    status.add_argument("--json", action="store_true",
                        help="one JSON line: workers, queued, in_flight, counters, waiting")

    pending = command("pending", cmd_pending, "list escalated calls waiting for a person")
    pending.add_argument("--json", action="store_true",
                         help='one JSON line per email: '
                              '{"id", "step", "tool", "needs", "reason", "value", "sender", "file"}')
    for verb in ("approve", "deny"):
        decide = command(verb, cmd_decide, f"{verb} an escalated call, as a named person in a role")
        decide.add_argument("id", help="the message id from `airlock pending`")
        decide.add_argument("--as", dest="role", required=True, help="the role you act in, e.g. support-lead")
        decide.add_argument("--by", required=True, help="your name, as listed in the task's principals file; "
                            "the decision is sent with your key, <keys>/people/NAME.key_secret")
        decide.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the broker")
        decide.add_argument("--wait-timeout", type=float, default=60.0, help="seconds to wait for the outcome")
        decide.add_argument("--json", action="store_true",
                            help='one JSON line: {"id", "outcome", "reason"} ("pending" if none came in time)')

    keys_cmd = commands.add_parser("keys", help="generate CURVE key pairs for the broker and every role",
                                   description="generate CURVE key pairs for the broker and every role")
    keys_cmd.set_defaults(handler=cmd_keys)
    keys_cmd.add_argument("--out", default="airlock-keys", help="folder for the keys (default ./airlock-keys)")
    keys_cmd.add_argument("--force", action="store_true", help="replace existing keys")
    keys_cmd.add_argument("--person", action="append", default=[], metavar="NAME",
                          help="also a key pair for this person, who may then approve and deny (repeatable; "
                               "added to an existing folder without touching its other keys)")

    # Listed here for `airlock --help` only: main() hands them to run_tool before parsing.
    for name, text in LAB_COMMANDS.items():
        commands.add_parser(name, help=text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] and argv[0] in LAB_COMMANDS:
        return run_tool(argv)  # their help and options are their own
    parser = build_parser()
    return handled(parser.parse_args(argv))


def handled(args: argparse.Namespace) -> int:
    """Run a parsed command through the one error handler (cli/handling.py): each failure one
    escaped line on stderr with its exit code (the module docstring's table); cli/tools.py
    runs its commands through this too."""
    return handling.handled(lambda: args.handler(args))
