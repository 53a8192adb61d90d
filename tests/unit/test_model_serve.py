"""The model image's entrypoint (model/serve.sh), run here with a stand-in for llama-server:
threads follow the container's CPUs, settings are checked, the server's own environment
options never reach it, and its arguments keep the closed endpoints closed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVE = ROOT / "model" / "serve.sh"
CPUS = len(os.sched_getaffinity(0))


def serve(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(SERVE), *args], env={"PATH": os.environ["PATH"], **env},
                          capture_output=True, text=True, timeout=30)


def cgroup(tmp_path: Path, files: dict[str, str]) -> dict[str, str]:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text + "\n")
    return {"AIRLOCK_CGROUP_ROOT": str(tmp_path)}


@pytest.mark.parametrize(("files", "threads"), [
    ({}, CPUS),  # no cgroup files: the affinity mask alone
    ({"cpu.max": "max 100000"}, CPUS),  # v2, no quota
    ({"cpu.max": "100000 100000"}, 1),  # --cpus 1
    ({"cpu.max": "50000 100000"}, 1),  # --cpus 0.5: rounded up, never 0
    ({"cpu.max": "150000 100000"}, min(2, CPUS)),  # --cpus 1.5: 2, unless fewer CPUs are allowed
    ({"cpu.max": "6400000 100000"}, CPUS),  # a quota above the mask: the mask
    ({"cpu/cpu.cfs_quota_us": "100000", "cpu/cpu.cfs_period_us": "100000"}, 1),  # cgroup v1
    ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, CPUS),  # v1, no quota
    ({"cpu.max": "garbage here"}, CPUS),  # unreadable: the mask, not a crash
])
def test_threads_follow_the_cpus_the_container_may_use(tmp_path: Path, files: dict, threads: int) -> None:
    done = serve(cgroup(tmp_path, files), "--print-threads")
    assert (done.returncode, done.stdout) == (0, f"{threads}\n"), done.stderr


@pytest.mark.parametrize("name", ["AIRLOCK_MODEL_THREADS", "AIRLOCK_MODEL_SLOTS", "AIRLOCK_MODEL_CTX"])
@pytest.mark.parametrize("value", ["0", "-1", "2x", "1.5", "01", "4097", "$(id)"])
def test_a_setting_that_is_not_a_whole_number_stops_the_start(name: str, value: str) -> None:
    done = serve({name: value}, "--print-threads")
    assert done.returncode == 64 and name in done.stderr and done.stdout == ""


def test_the_server_gets_fixed_arguments_and_none_of_its_environment_options(tmp_path: Path) -> None:
    """llama-server reads LLAMA_ARG_* too (LLAMA_ARG_TOOLS would give it shell and file
    tools): none reaches it. A stand-in prints what it was started with."""
    stand_in = tmp_path / "llama-server"
    stand_in.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\necho ---\nenv\n')
    stand_in.chmod(0o755)
    done = serve({"AIRLOCK_LLAMA_SERVER": str(stand_in), "AIRLOCK_MODEL_THREADS": "3", "AIRLOCK_MODEL_SLOTS": "2",
                  "LLAMA_ARG_TOOLS": "all", "LLAMA_ARG_AGENT": "1", "LLAMA_ARG_ENDPOINT_SLOTS": "1",
                  "AIRLOCK_CGROUP_ROOT": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    args, environment = done.stdout.split("---\n")
    assert "LLAMA_ARG" not in environment and "AIRLOCK" not in environment
    args_list = args.split()
    assert " ".join(args_list) == (
        "--model /models/smollm2.gguf --alias smollm2 --host 0.0.0.0 --port 8080 --threads 3 --threads-batch 3 "
        "--parallel 2 --ctx-size 4096 --cache-ram 0 --no-slots --no-webui")
    assert "model: llama-server, 3 threads, 2 slot(s) of 2048 tokens" in done.stderr
