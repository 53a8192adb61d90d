"""The root Dockerfile read as stages, for the tests that check what each image holds.

A stage starts at `FROM parent AS name`; an image (a build target) holds what its own stage
and every stage it is built FROM copy from the build context, plus what `COPY --from=stage`
takes out of other stages (a virtualenv, a model file), which are followed too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "compose.yaml"


@dataclass
class Stage:
    name: str
    parent: str  # another stage's name, or the base image as written (${AIRLOCK_BASE})
    instructions: list[str] = field(default_factory=list)  # without comments, continuations joined

    def copies(self) -> list[str]:
        """Sources this stage copies from the build context."""
        return [m.group(1) for line in self.instructions if (m := re.match(r"COPY (?!--from=)(\S+)", line))]

    def copies_from(self) -> list[str]:
        """Stages this stage copies something out of."""
        return [m.group(1) for line in self.instructions if (m := re.match(r"COPY --from=(\S+)", line))]

    def text(self) -> str:
        return "\n".join(self.instructions)


def instructions(text: str) -> list[str]:
    """The Dockerfile's instructions, one string each: comments dropped, `\\` lines joined."""
    joined = re.sub(r"\\\n(\s*#.*\n)*", " ", "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#")))
    return [line.strip() for line in joined.splitlines() if line.strip()]


def stages() -> dict[str, Stage]:
    """The Dockerfile's stages by name, in order."""
    found: dict[str, Stage] = {}
    current = None
    for line in instructions(DOCKERFILE.read_text()):
        if m := re.fullmatch(r"FROM (\S+) AS (\S+)", line, flags=re.IGNORECASE):
            current = found[m.group(2)] = Stage(m.group(2), m.group(1))
        elif line.startswith("FROM "):
            raise AssertionError(f"a stage without a name: {line}")
        elif current is not None:
            current.instructions.append(line)
    return found


def chain(target: str, found: dict[str, Stage] | None = None) -> list[Stage]:
    """The stages an image is built FROM, its base's first and its own last."""
    found = stages() if found is None else found
    built = [found[target]]
    while built[0].parent in found:
        built.insert(0, found[built[0].parent])
    return built


def holds(target: str, found: dict[str, Stage] | None = None) -> list[str]:
    """Every build-context source that reaches the image, through FROM or COPY --from."""
    found = stages() if found is None else found
    sources: list[str] = []
    for stage in chain(target, found):
        sources += stage.copies()
        for other in stage.copies_from():
            sources += holds(other, found)
    return sources


def last(target: str, instruction: str, found: dict[str, Stage] | None = None) -> str | None:
    """The argument of the image's last INSTRUCTION (USER, WORKDIR, ...), as built."""
    values = [line.split(None, 1)[1] for stage in chain(target, found) for line in stage.instructions
              if line.split(None, 1)[0] == instruction]
    return values[-1] if values else None


def environment(target: str, found: dict[str, Stage] | None = None) -> str:
    """The image's ENV instructions, as one string."""
    return " ".join(line for stage in chain(target, found) for line in stage.instructions if line.startswith("ENV "))


def compose_targets() -> dict[str, str]:
    """compose.yaml's service -> the Dockerfile target its `build:` names (every service has one).
    Read as YAML, so a service built from another's block (a merge key) is read as compose reads it."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    found = {}
    for name, service in services.items():
        build = service.get("build")
        assert isinstance(build, dict), f"compose.yaml's {name} has no build: {{...}}"
        assert build.get("target"), f"compose.yaml's {name} builds no target: {build}"
        found[name] = str(build["target"])
    return found
