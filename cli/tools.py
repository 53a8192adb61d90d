"""The tools around the runtime, which no service runs: `airlock attack`, verify, record,
pins, naive, model, corpus, bench, prompts, k8s, swarm and demo.

`airlock COMMAND ...` runs this module's main in the same process (cli/runtime.py run_tool).
cli/runtime.py owns each command's one-line help (LAB_COMMANDS, what `airlock --help`
lists) and runs each through the one error handler (cli.runtime.handled); this module
owns the commands' options and runs them. Heavy imports (ZeroMQ, the reader's and
the actor's code) wait inside the handler that needs them.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from airlock import settings as settings_module
from airlock.errors import UsageError
from cli.runtime import LAB_COMMANDS, handled

_json = msgspec.json.Encoder()


def _settings(args: argparse.Namespace) -> settings_module.Settings:
    return settings_module.load(
        data_dir=Path(args.data_dir) if getattr(args, "data_dir", None) else None,
        task=Path(args.task) if getattr(args, "task", None) else None,
    )


def cmd_attack(args: argparse.Namespace) -> int:
    from airlock import measured, task as task_module
    from harness import attack, score

    settings = _settings(args)
    task = task_module.load(settings.task)
    model_url = args.model_url if args.model_url is not None else settings.model_url
    for name in ("readers", "in_flight"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if args.mode in ("naive", "both") and not model_url:
        raise UsageError(f"--mode {args.mode} needs a model: --model-url URL (try `airlock model --hostile`)")
    if args.unconstrained and args.mode == "separated":
        raise UsageError("--unconstrained is for the naive agent (--mode naive or both): airlock's reader has "
                         "its own constraint (the task's)")
    if args.comparison and args.mode != "both":
        raise UsageError("--comparison needs --mode both: the naive agent and airlock on the same emails")
    results = {}
    for mode in ("naive", "separated") if args.mode == "both" else (args.mode,):
        results[mode] = attack.run(args.paths, mode, task, model_url, args.readers, args.timeout, args.running,
                                   attack.progress_bar(), args.in_flight, settings,
                                   naive_constrained=not args.unconstrained)
        print(score.table(results[mode]))
    report: Any = results[args.mode] if args.mode != "both" else results
    if args.report:
        Path(args.report).write_bytes(msgspec.json.format(_json.encode(report)) + b"\n")
        print(f"  report: {args.report}")
    if args.mode == "both":
        compared = score.comparison(results["naive"], results["separated"], args.paths, settings.model_name,
                                    _attack_command(args, model_url or ""))
        print(score.comparison_table(compared))
        if args.comparison:
            Path(args.comparison).write_bytes(measured.encode(compared))
            print(f"  comparison: {args.comparison}")
    return 0


def _attack_command(args: argparse.Namespace, model_url: str) -> str:
    """The command that measures it again, as the comparison file records it."""
    words = ["airlock", "attack", *args.paths, "--mode", args.mode, "--model-url", model_url]
    words += ["--unconstrained"] if args.unconstrained else []
    words += ["--task", args.task] if args.task else []
    words += ["--comparison", args.comparison] if args.comparison else []
    return shlex.join(words)


def verify_target(args: argparse.Namespace) -> tuple[str, str]:
    """("swarm", stack) or ("compose", project), from verify's options: --stack names a
    stack and goes with --swarm only, --project a compose project and never with --swarm."""
    if args.swarm and not args.stack:
        raise UsageError("verify --swarm needs --stack NAME (the stack's name, as `docker stack ls` lists it)")
    if args.swarm and args.project:
        raise UsageError("--project names a compose project; with --swarm, name the stack: --stack NAME")
    if args.stack and not args.swarm:
        raise UsageError("--stack names a swarm stack: verify --swarm --stack NAME")
    if args.swarm:
        return "swarm", args.stack
    return "compose", args.project


def cmd_verify(args: argparse.Namespace) -> int:
    from ops import verify

    kind, name = verify_target(args)
    if kind == "swarm":
        from ops import verify_swarm

        checks = verify_swarm.run(name)
    else:
        checks = verify.run(name or verify.default_project())
    if args.json:
        # compose's rows as they were; a stack's also carry the status, which may be GAP
        print(_json.encode([{"service": c.service, "check": c.name, "ok": c.ok, "reason": c.reason}
                            | ({"status": c.status} if kind == "swarm" else {}) for c in checks]).decode())
    else:
        print(verify.table(checks))
    return 0 if verify.passed(checks) else 1


def cmd_record(args: argparse.Namespace) -> int:
    from redteam import record  # the reader's prompt and model client: this process, never the kernel's

    return record.run(args.files, args.model_url, args.task)


def cmd_pins(args: argparse.Namespace) -> int:
    from ops import pins

    return pins.run(args.task, args.catalog)


def cmd_naive(args: argparse.Namespace) -> int:
    from redteam.naive.run import run  # imports reader and actor code, by design

    return run(args.files, args.model_url, args.data_dir, constrained=not args.unconstrained)


def cmd_model(args: argparse.Namespace) -> int:
    import threading

    from airlock.service import stop_on_signals
    from harness.hostile import HostileModel

    if not args.hostile:
        raise UsageError("only the worst-case model is built in (--hostile); for a real one see docs/running.md")
    server = HostileModel(args.host, args.port).start()
    print(f"hostile model: {server.url}/v1/chat/completions (obeys the last instruction in each email)", flush=True)
    stop: threading.Event = stop_on_signals()
    stop.wait()
    server.close()
    return 0


def cmd_corpus(args: argparse.Namespace) -> int:
    from redteam import corpus

    source = Path(args.source)
    if not source.is_dir():
        raise UsageError(f"no corpora folder at {source}")
    built = corpus.import_public(source, Path(args.out))
    print(f"{len(built)} emails written to {args.out}")
    return 0


def cmd_prompts(args: argparse.Namespace) -> int:
    from redteam import prompts  # the reader's and the validator's code, in this process

    model_url = args.model_url or settings_module.load().model_url
    if not model_url:
        raise UsageError("prompts compares what a live model answers: --model-url URL (or AIRLOCK_MODEL_URL)")
    if args.rounds < 1:
        raise UsageError("--rounds must be at least 1")
    result = prompts.run(args.paths, Path(args.task or settings_module.load().task), [Path(v) for v in args.variants],
                         model_url, args.rounds, lambda text: print(text, file=sys.stderr, flush=True))
    if args.report:
        Path(args.report).write_bytes(msgspec.json.format(_json.encode(result)) + b"\n")
    print(prompts.table(result))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from bench.__main__ import main as bench  # the benchmark parses its own options

    return bench(args.rest)


def cmd_demo_check(args: argparse.Namespace) -> int:
    """Decode a scenario file as the page does, and find each step's email (and task)."""
    from airlock.task import SHIPPED_TASKS
    from airlock.terminal import shown
    from dashboard import config, scenario  # the page's own schema: one decoder for both

    path = Path(args.file) if args.file else config.demo_folder(os.environ) / "scenario.toml"
    emails = Path(args.emails) if args.emails else path.parent / "emails"
    tasks = Path(args.tasks) if args.tasks else (SHIPPED_TASKS if SHIPPED_TASKS.is_dir() else None)
    found = scenario.load(path, emails, tasks)
    for number, step in enumerate(found.steps, start=1):
        approve = f"  approved by {step.approve.by} as {step.approve.role}" if step.approve else ""
        print(f"{number:>2}  {step.email:<28} {step.task:<24} {step.outcome}{approve}")
    checked = f" and its task in {tasks}" if tasks is not None else ""
    print(shown(f"scenario {path}: {len(found.steps)} steps, each step's email in {emails}{checked}"))
    return 0


def cmd_k8s_class(args: argparse.Namespace) -> int:
    from ops import kubernetes

    out = Path(args.out)
    for name, keys_made in kubernetes.make_class(out, args.name, args.students):
        print(f"{name}: keys {keys_made}")
    print(f"kubectl apply -k {out}   # every namespace; one student: kubectl apply -k {out}/<namespace>")
    return 0


def _swarm_shape(args: argparse.Namespace) -> dict[str, Any]:
    return {"model_cpus": args.model_cpus, "first_octets": args.subnets}


def cmd_swarm_render(args: argparse.Namespace) -> int:
    from ops import swarm_deploy

    keys_folder = Path(args.keys)
    out = Path(args.out) if args.out else swarm_deploy.stack_file(keys_folder, args.stack)
    made = swarm_deploy.render(args.stack, keys_folder, args.readers, out, **_swarm_shape(args))
    print(f"keys {made} in {keys_folder}\nwrote {out}   # airlock swarm up --stack {args.stack} --keys {keys_folder}")
    return 0


def cmd_swarm_up(args: argparse.Namespace) -> int:
    from ops import swarm_deploy

    made, created, out = swarm_deploy.up(args.stack, Path(args.keys), args.readers, rebuild=args.build,
                                         **_swarm_shape(args))
    print(f"keys {made}; {len(created)} secret(s) created; deployed {out} as stack {args.stack}")
    return 0


def cmd_swarm_down(args: argparse.Namespace) -> int:
    from ops import swarm_deploy

    swarm_deploy.down(args.stack)
    print(f"removed stack {args.stack}; its secrets stay (label {swarm_deploy.STACK_LABEL}={args.stack})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="airlock", description="the tools around the runtime, which no service runs")
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, handler, data_dir: bool = True) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=LAB_COMMANDS[name], description=LAB_COMMANDS[name])
        sub.set_defaults(handler=handler)
        if data_dir:
            sub.add_argument("--data-dir", help="where trace.jsonl and calls.jsonl live "
                                                "(default $AIRLOCK_DATA_DIR or ./airlock-data)")
        return sub

    attack = command("attack", cmd_attack)
    attack.add_argument("paths", nargs="+", help=".eml/.txt files, folders, or .jsonl")
    attack.add_argument("--mode", choices=["separated", "naive", "both"], default="separated",
                        help="separated: the airlock pipeline (default); naive: one model call with the tools; "
                             "both: the naive agent, then airlock, on the same emails and model")
    attack.add_argument("--comparison", help="with --mode both: write the two runs' figures side by side here "
                                             "(JSON; the page shows demo/measured.json)")
    attack.add_argument("--model-url", help="model endpoint (default $AIRLOCK_MODEL_URL; separated mode may use none)")
    attack.add_argument("--report", help="write the JSON report here")
    attack.add_argument("--task", help="task file (default tasks/order_status.toml)")
    attack.add_argument("--readers", type=int, help="readers in the private stack (default: as many as the "
                        "model serves at once, from llama.cpp's /props; else 2)")
    attack.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for all outcomes")
    attack.add_argument("--in-flight", type=int,
                        help="emails in flight at once (default 2 per reader with a model, 4 without)")
    attack.add_argument("--unconstrained", action="store_true",
                        help="naive mode: the model answers freely (default: its calls held to the catalog's grammar)")
    attack.add_argument("--running", action="store_true",
                        help="attack the running stack of $AIRLOCK_* instead of a private one")

    verify = command("verify", cmd_verify, data_dir=False)
    verify.description = ("inspect and probe the running compose lab, or with --swarm a stack; exit 1 on any "
                          "FAIL (a GAP, what swarm cannot enforce, is reported and fails nothing)")
    verify.add_argument("--project", "-p",
                        help="compose project name (default $COMPOSE_PROJECT_NAME or this folder's name)")
    verify.add_argument("--swarm", action="store_true",
                        help="verify a Docker Swarm stack (`airlock swarm up`) instead; needs --stack")
    verify.add_argument("--stack", help="the stack's name, with --swarm (as `docker stack ls` lists it)")
    verify.add_argument("--json", action="store_true", help="print the checks as JSON")

    record = command("record", cmd_record, data_dir=False)
    record.description = "record a live model's answers for sample emails"
    record.add_argument("files", nargs="+", help=".eml or .txt files or folders")
    record.add_argument("--model-url", required=True, help="the OpenAI-compatible endpoint to record")
    record.add_argument("--task", help="task file (default tasks/order_status.toml)")

    pins = command("pins", cmd_pins, data_dir=False)
    pins.description = ("print `call = ...  pin = ...` for each step of a task's plan: a pinned step refuses "
                        "to run its tool once the tool's server, name, description, schema or policy changes")
    pins.add_argument("task", nargs="?", default="tasks/order_status.toml",
                      help="task file (default tasks/order_status.toml)")
    pins.add_argument("--catalog", type=Path, help="tool catalog (default the actor's catalog.toml)")

    naive = command("naive", cmd_naive)
    naive.add_argument("files", nargs="+", help=".eml or .txt files or folders")
    naive.add_argument("--model-url", help="OpenAI-compatible endpoint (default $AIRLOCK_MODEL_URL; required "
                                           "unless AIRLOCK_NAIVE_MODEL=worst-case)")
    naive.add_argument("--unconstrained", action="store_true",
                       help="send no grammar: the model writes its tool calls freely (default: a GBNF grammar "
                            "of the catalog's calls, for llama.cpp's server)")

    model = command("model", cmd_model, data_dir=False)
    model.description = "serve an OpenAI-compatible model that obeys the last instruction in the email"
    model.add_argument("--hostile", action="store_true",
                       help="obey the email's last instruction (the only model built in)")
    model.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    model.add_argument("--port", type=int, default=8090, help="port to listen on (default 8090)")

    corpus = command("corpus", cmd_corpus, data_dir=False)
    corpus_commands = corpus.add_subparsers(dest="corpus_command", required=True)
    corpus_import = corpus_commands.add_parser("import", help="AgentDojo and BIPIA payloads as .eml files")
    corpus_import.set_defaults(handler=cmd_corpus)
    corpus_import.add_argument("--from", dest="source", default="../shared/corpora",
                               help="the corpora folder (default ../shared/corpora)")
    corpus_import.add_argument("--out", default="corpus/imported",
                               help="where the .eml files go (default corpus/imported)")

    prompts = command("prompts", cmd_prompts, data_dir=False)
    prompts.add_argument("paths", nargs="+", help="emails with X-Airlock-Expect: files, folders or .jsonl")
    prompts.add_argument("--variants", nargs="*", default=[], metavar="TOML",
                         help="files with a [reader] table each (redteam/prompt_variants/); the task itself "
                              "always runs first")
    prompts.add_argument("--model-url", help="the model endpoint (default $AIRLOCK_MODEL_URL)")
    prompts.add_argument("--task", help="task file (default tasks/order_status.toml)")
    prompts.add_argument("--rounds", type=int, default=1, help="passes per variant, interleaved (default 1)")
    prompts.add_argument("--report", help="write the JSON report here")

    k8s = command("k8s", cmd_k8s_class, data_dir=False)
    k8s_commands = k8s.add_subparsers(dest="k8s_command", required=True)
    k8s_class = k8s_commands.add_parser(
        "class", help="write one kustomize overlay per student, each its namespace and its own CURVE keys",
        description="write OUT/airlock-NAME-NN/ for each student (namespace, Pod Security restricted, keys as "
                    "Secrets); existing keys are kept. OUT holds secret keys: keep it out of any repository")
    k8s_class.set_defaults(handler=cmd_k8s_class)
    k8s_class.add_argument("--students", type=int, required=True, help="how many namespaces (1 to 99)")
    k8s_class.add_argument("--name", default="class", help="the class's name, in each namespace (default class)")
    k8s_class.add_argument("--out", default="airlock-class", help="the folder to write (default ./airlock-class)")

    swarm = command("swarm", cmd_swarm_up, data_dir=False)
    swarm_commands = swarm.add_subparsers(dest="swarm_command", required=True)
    for name, handler, text in (
            ("render", cmd_swarm_render, "make the keys in --keys if missing and write the stack file "
                                         "(generated from compose.yaml); runs no docker"),
            ("up", cmd_swarm_up, "render, turn each key file into a swarm secret, docker stack deploy "
                                 "--resolve-image never (build the images first)"),
            ("down", cmd_swarm_down, "docker stack rm (the secrets stay)")):
        sub = swarm_commands.add_parser(name, help=text, description=text)
        sub.set_defaults(handler=handler)
        sub.add_argument("--stack", default="airlock", help="the stack's name (default airlock)")
        if name != "down":
            sub.add_argument("--keys", required=True, help="the CURVE key folder (made if missing); keep it out "
                                                             "of any repository")
            sub.add_argument("--readers", type=int, default=1, help="reader and model replicas (default 1)")
            sub.add_argument("--model-cpus", type=float, help="each model replica's CPU limit, which its threads "
                                                              "follow (default none: every CPU of the node)")
            sub.add_argument("--subnets", default="10.231", help="first two octets of the networks' /24s "
                                                                 "(default 10.231: 10.231.0.0/24 ...)")
        if name == "render":
            sub.add_argument("--out", help="the stack file (default beside --keys: NAME.stack.yaml)")
        if name == "up":
            sub.add_argument("--build", action="store_true", help="build every image from this checkout first "
                                                                  "(default: only those the engine lacks)")

    demo = command("demo", cmd_demo_check, data_dir=False)
    demo_commands = demo.add_subparsers(dest="demo_command", required=True)
    demo_check = demo_commands.add_parser(
        "check", help="decode a guided scenario file as the page does and find each step's email and task",
        description="decode a guided scenario file (default $AIRLOCK_DASHBOARD_DEMO/scenario.toml, else the "
                    "repository's demo/scenario.toml) as the trainers' page does; exit 78 naming the step "
                    "that is wrong")
    demo_check.set_defaults(handler=cmd_demo_check)
    demo_check.add_argument("file", nargs="?", help="the scenario file")
    demo_check.add_argument("--emails", help="the folder of its emails (default: emails/ beside the file)")
    demo_check.add_argument("--tasks", help="the folder of task files its steps name (default: the shipped tasks/)")

    bench = command("bench", cmd_bench, data_dir=False)
    bench.add_argument("rest", nargs=argparse.REMAINDER,
                       help="--emails N --readers N --json FILE --model-url URL --latency-emails N "
                            "(`airlock bench --help` explains each)")
    return parser


COMMANDS = frozenset(LAB_COMMANDS) - {"lab"}  # `airlock lab ...` is cli/lab.py's


def main(argv: Sequence[str]) -> int:
    argv = list(argv)
    if argv[:1] == ["bench"]:  # the benchmark's options and help are its own (bench/__main__.py)
        return handled(argparse.Namespace(command="bench", rest=argv[1:], handler=cmd_bench))
    return handled(build_parser().parse_args(argv))
