#!/bin/sh
# The model service's entrypoint: llama.cpp's llama-server on the lab's GGUF, its arguments
# fixed here. Only three settings come from the environment, checked as numbers:
#   AIRLOCK_MODEL_THREADS  CPU threads (default: the CPUs this container may use, below)
#   AIRLOCK_MODEL_SLOTS    requests served at once (default 1: on 2 cores, 4 slots measured
#                          slower per email and no faster in total)
#   AIRLOCK_MODEL_CTX      context tokens per slot (default 2048: prompt, email and answer)
# Every LLAMA_ARG_* variable is dropped before the server starts (env -i): llama-server reads
# its options from those too, and some (LLAMA_ARG_TOOLS, LLAMA_ARG_AGENT) would give the one
# service the reader can reach file and shell tools. The build leaves subprocesses out
# (LLAMA_SUBPROCESS=OFF) as well, and `airlock verify` checks that /tools answers 403.
set -eu

# The CPUs this container may use: its affinity mask (nproc, what --cpuset-cpus sets),
# capped by its CPU quota (cgroup v2 cpu.max, or v1's cfs quota: what --cpus sets), rounded
# up. More threads than CPUs makes llama.cpp's spinning threads fight for them.
cgroup=${AIRLOCK_CGROUP_ROOT:-/sys/fs/cgroup}
cpus() {
  n=$(nproc)
  quota=; period=
  if [ -r "$cgroup/cpu.max" ]; then
    read -r quota period < "$cgroup/cpu.max" || true
  elif [ -r "$cgroup/cpu/cpu.cfs_quota_us" ] && [ -r "$cgroup/cpu/cpu.cfs_period_us" ]; then
    quota=$(cat "$cgroup/cpu/cpu.cfs_quota_us"); period=$(cat "$cgroup/cpu/cpu.cfs_period_us")
  fi
  case "$quota:$period" in
    max:* | -1:* | :* | *:) ;;
    *[!0-9:]*) ;;
    *) if [ "$period" -gt 0 ]; then
         limit=$(( (quota + period - 1) / period ))
         [ "$limit" -ge 1 ] && [ "$limit" -lt "$n" ] && n=$limit
       fi ;;
  esac
  echo "$n"
}

number() {  # number NAME VALUE: VALUE if it is a whole number from 1 to 4096, else stop
  case "$2" in
    '' | *[!0-9]* | 0*) echo "model: $1 must be a whole number from 1, not '$2'" >&2; exit 64 ;;
  esac
  [ "$2" -le 4096 ] || { echo "model: $1 must be at most 4096, not $2" >&2; exit 64; }
  echo "$2"
}

threads=$(number AIRLOCK_MODEL_THREADS "${AIRLOCK_MODEL_THREADS:-$(cpus)}")
slots=$(number AIRLOCK_MODEL_SLOTS "${AIRLOCK_MODEL_SLOTS:-1}")
ctx=$(number AIRLOCK_MODEL_CTX "${AIRLOCK_MODEL_CTX:-2048}")

if [ "${1:-}" = "--print-threads" ]; then echo "$threads"; exit 0; fi

echo "model: llama-server, $threads threads, $slots slot(s) of $ctx tokens" >&2
# --ctx-size is the total over the slots. --cache-ram 0: the server-side prompt cache made
# new emails slower (measured, docs/model.md). --no-slots: /slots would show one request's prompt, another
# email, to whoever asks. --no-webui: an API, not a chat page.
exec env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp \
  "${AIRLOCK_LLAMA_SERVER:-/opt/llama/llama-server}" \
  --model "${AIRLOCK_MODEL_FILE:-/models/smollm2.gguf}" --alias smollm2 \
  --host 0.0.0.0 --port 8080 \
  --threads "$threads" --threads-batch "$threads" \
  --parallel "$slots" --ctx-size "$((ctx * slots))" \
  --cache-ram 0 --no-slots --no-webui
