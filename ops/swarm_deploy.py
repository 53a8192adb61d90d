"""`airlock swarm up` and `down`: thin helpers over the docker CLI, no orchestrator.

    up      keys in DIR (made if missing), the stack file rendered beside them, each image
            the engine lacks built from this checkout, one swarm secret per key file that
            swarm does not hold yet (`docker secret create`), then
            `docker stack deploy --resolve-image never` (the images you built, never pulled)
    down    `docker stack rm`; the secrets stay (the same keys deploy again with the same
            names), removable by their label: docker secret rm $(docker secret ls -q
            --filter label=airlock.stack=NAME)

Every docker call goes through a `run(argv)` passed in, so tests see the command lines and
run no docker.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from airlock import keys
from airlock.errors import UsageError
from ops import swarm

Run = Callable[[Sequence[str]], str]  # runs one docker command line, returns its stdout
STACK_LABEL = "airlock.stack"  # on every secret up makes: what `down` tells the user to remove


def run_docker(argv: Sequence[str]) -> str:
    """The real runner: the docker CLI, its failure a UsageError with what docker said."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise UsageError("docker is not installed (or not on PATH)") from None
    if done.returncode != 0:
        raise UsageError(f"{' '.join(argv[:3])}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout


def stack_file(keys_folder: Path, stack: str) -> Path:
    """Where up writes the stack: beside the keys, out of the repository (it names secrets only)."""
    return keys_folder.parent / f"{stack}.stack.yaml"


def render(stack: str, keys_folder: Path, readers: int, out: Path, **shape: Any) -> str:
    """Make the keys if missing, write the stack file; returns what happened to the keys.
    `shape`: swarm.render's model_cpus and first_octets."""
    made = keys.ensure(keys_folder)
    swarm.write(out, swarm.render(stack, keys_folder, readers, **shape))
    return made


def create_secrets(stack: str, keys_folder: Path, run: Run) -> list[str]:
    """`docker secret create` for each key file whose secret swarm does not hold; returns them."""
    held = set(run(["docker", "secret", "ls", "--filter", f"label={STACK_LABEL}={stack}",
                    "--format", "{{.Name}}"]).split())
    created = []
    for service, named in swarm.key_secrets(stack, keys_folder).items():
        for secret, (path, relative) in named.items():
            if secret in held:
                continue
            run(["docker", "secret", "create", "--label", f"{STACK_LABEL}={stack}",
                 "--label", f"airlock.service={service}", "--label", f"airlock.key={relative.as_posix()}",
                 secret, str(path)])
            created.append(secret)
    return created


def build_missing(run: Run, env: Mapping[str, str] | None = None, rebuild: bool = False) -> list[str]:
    """`docker build` each image the stack runs that this engine does not hold (`rebuild`:
    every one, as the checkout is now; the layer cache keeps it quick), from this checkout,
    as compose.yaml builds it (its target and AIRLOCK_BASE); returns those built. Stack
    deploy neither builds nor, with --resolve-image never, pulls: an image already held is
    deployed as it was built, whatever the checkout says since."""
    held = set() if rebuild else set(
        run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}"]).split())
    source = swarm.read_compose(os.environ if env is None else env)["services"]
    built = []
    for name in swarm.SERVICES:
        image, build = source[name]["image"], source[name]["build"]
        if image in held or image in built:
            continue
        base = [arg for key, value in build.get("args", {}).items() for arg in ("--build-arg", f"{key}={value}")]
        run(["docker", "build", "--target", build["target"], *base, "-t", image, str(swarm.COMPOSE.parent)])
        built.append(image)
    return built


def up(stack: str, keys_folder: Path, readers: int, run: Run = run_docker, rebuild: bool = False,
       **shape: Any) -> tuple[str, list[str], Path]:
    """Keys, stack file, missing images (`rebuild`: all), secrets, deploy; returns (keys made
    or kept, secrets created, stack file)."""
    out = stack_file(keys_folder, stack)
    made = render(stack, keys_folder, readers, out, **shape)
    build_missing(run, rebuild=rebuild)
    created = create_secrets(stack, keys_folder, run)
    run(["docker", "stack", "deploy", "--resolve-image", "never", "-c", str(out), stack])
    return made, created, out


def down(stack: str, run: Run = run_docker) -> None:
    swarm.check_stack_name(stack)
    run(["docker", "stack", "rm", stack])
