#!/bin/bash
# How tests/data/trace-v2.jsonl was made: the version before the trace's `step` line (main at
# f94f120, three lines a plan step: authorization, call, observation; exported to
# /tmp/step-base) runs two demos: the guarded task on every sample (steps run, refused by
# a precondition), then the approval demo (escalated, approved, a step replayed).
# steps.py then writes, through that version's broker.tracing, the step shapes a demo does
# not (a tool error, a lab's student code, an actor that names no plan), appended.
# Kept to show where the fixture came from; not run by tests.
# The demos themselves, as run then, are in ../demo-trace.sh.
set -u
PY=/work/wt/step/.venv/bin/python
D=/tmp/step-fixture/data
rm -rf /tmp/step-fixture && mkdir -p /tmp/step-fixture
"$(dirname "$0")"/../demo-trace.sh /tmp/step-base $PY /tmp/step-fixture tasks/order_status_guarded.toml
$PY /work/wt/step/tests/data/make-v2/steps.py >> $D/trace.jsonl
cp $D/trace.jsonl /work/wt/step/tests/data/trace-v2.jsonl
