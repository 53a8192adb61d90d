"""`airlock k8s class`: one Kubernetes namespace per student, from one command.

Writes, in the trainer's folder OUT (never the repository: it holds secret keys):

    OUT/kustomization.yaml            every student's overlay: `kubectl apply -k OUT`
    OUT/base/                         a copy of deploy/kubernetes/base (what the overlays use)
    OUT/airlock-<class>-NN/           one overlay per student:
        kustomization.yaml            namespace, the base, a Secret of CURVE keys per role
        namespace.yaml                the namespace, labelled Pod Security `restricted`
        keys/                         this student's keys (airlock/keys.py, 0700, files 0600)

Each student gets keys of their own, so no student's client is let in by another's broker.
Run again with more students, the existing keys are kept (their holders would lose them)
and the base is copied again. Reads nothing but the base; runs no kubectl.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from airlock import keys
from airlock.errors import UsageError

BASE = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes" / "base"
CLASS_NAME = re.compile(r"[a-z][a-z0-9-]{0,39}")  # fits a namespace (63) with "airlock-" and "-NN"
MAX_STUDENTS = 99  # the two-digit NN
SECRET_PREFIX = "airlock-keys-"  # the base's volumes name airlock-keys-<service>
# The services that run in the namespace; `inject` is the student's own client key, kept in
# keys/ for the host CLI (`kubectl port-forward svc/broker 7401`), never put in a Secret.
SERVICES = tuple(service for service in keys.SERVICE_KEYS if service != "inject")
# Pod Security admission: refuse (enforce), and also report (warn, audit), any pod that is not
# `restricted`, at the newest version of that profile the cluster knows.
NAMESPACE_LABELS = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}


def namespace(class_name: str, number: int) -> str:
    return f"airlock-{class_name}-{number:02d}"


def secret_key(relative: Path) -> str:
    """A Secret's key for a file of a service's key folder: a key cannot hold "/", so
    allow/intake/smtp.key becomes allow.intake.smtp.key (the broker's volume maps it back)."""
    return ".".join(relative.parts)


def secret_files(service_folder: Path) -> dict[str, Path]:
    """Secret key -> file, for every file of one service's key folder."""
    return {secret_key(p.relative_to(service_folder)): p
            for p in sorted(service_folder.rglob("*")) if p.is_file()}


def overlay_kustomization(name: str, keys_folder: Path, overlay: Path) -> str:
    lines = ["# Made by `airlock k8s class`: one student's namespace. Holds no key itself; keys/ does.",
             "apiVersion: kustomize.config.k8s.io/v1beta1", "kind: Kustomization", f"namespace: {name}",
             "resources:", "  - namespace.yaml", "  - ../base", "secretGenerator:"]
    for service in SERVICES:
        lines += [f"  - name: {SECRET_PREFIX}{service}", "    files:"]
        lines += [f"      - {key}={path.relative_to(overlay).as_posix()}"
                  for key, path in secret_files(keys_folder / "services" / service).items()]
    return "\n".join(lines) + "\n"


def namespace_manifest(name: str) -> str:
    labels = "".join(f"    {label}: {value}\n" for label, value in NAMESPACE_LABELS.items())
    return f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels:\n{labels}"


def make_class(out: Path, class_name: str, students: int, base: Path = BASE) -> list[tuple[str, str]]:
    """Write the class's overlays in `out`; returns (namespace, what happened to its keys)."""
    if not CLASS_NAME.fullmatch(class_name):
        raise UsageError(f"class name {class_name!r}: lower case letters, digits and -, starting with a letter, "
                         "at most 40")
    if not 1 <= students <= MAX_STUDENTS:
        raise UsageError(f"--students must be from 1 to {MAX_STUDENTS}")
    if not (base / "kustomization.yaml").is_file():
        raise UsageError(f"no Kubernetes base at {base}: run from a checkout of airlock")
    out.mkdir(parents=True, exist_ok=True)
    # A folder of secret keys: git must never take it, wherever the trainer puts it.
    (out / ".gitignore").write_text("# secret keys: never commit this folder\n*\n")
    shutil.rmtree(out / "base", ignore_errors=True)
    shutil.copytree(base, out / "base")
    made = []
    for number in range(1, students + 1):
        name = namespace(class_name, number)
        overlay = out / name
        overlay.mkdir(exist_ok=True)
        made.append((name, keys.ensure(overlay / "keys")))
        (overlay / "namespace.yaml").write_text(namespace_manifest(name))
        (overlay / "kustomization.yaml").write_text(overlay_kustomization(name, overlay / "keys", overlay))
    overlays = sorted(p.name for p in out.iterdir() if (p / "namespace.yaml").is_file())
    (out / "kustomization.yaml").write_text(
        "# Made by `airlock k8s class`: the whole class, `kubectl apply -k` this folder.\n"
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
        + "".join(f"  - {name}\n" for name in overlays))
    return made
