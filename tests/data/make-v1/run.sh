#!/bin/bash
# How tests/data/trace-v1.jsonl and calls-v1.jsonl were made: the previous version (main at
# 48c6ed5, before the records were typed, checked out at /tmp/typedtrace-base) runs the
# README's two demos; more_events.py then drives that version's Router for the rarer events,
# its output appended to the trace. Kept to show where the fixture came from; not run by tests.
# The demos themselves, as run then, are in ../demo-trace.sh.
set -u
mkdir -p /tmp/typedtrace-fixture && rm -rf /tmp/typedtrace-fixture/data
"$(dirname "$0")"/../demo-trace.sh /tmp/typedtrace-base /work/wt/typedtrace/.venv/bin/python /tmp/typedtrace-fixture
