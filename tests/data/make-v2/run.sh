#!/bin/bash
# How tests/data/trace-v2.jsonl was made: the version before the trace's `step` line (main at
# f94f120, three lines a plan step: authorization, call, observation; exported to
# /tmp/step-base) runs two demos: the guarded task on every sample (steps run, refused by
# a precondition), then the approval demo (escalated, approved, a step replayed).
# steps.py then writes, through that version's broker.tracing, the step shapes a demo does
# not (a tool error, a lab's student code, an actor that names no plan), appended.
# Kept to show where the fixture came from; not run by tests.
set -u
export PYTHONPATH=/tmp/step-base
PY=/work/wt/step/.venv/bin/python
D=/tmp/step-fixture/data
rm -rf /tmp/step-fixture && mkdir -p /tmp/step-fixture
cd /tmp/step-base
$PY -m airlock up --data-dir $D --task tasks/order_status_guarded.toml > /tmp/step-fixture/up1.log 2>&1 &
UP=$!
sleep 6
$PY -m airlock inject --data-dir $D --wait samples/*.eml
kill -INT $UP; wait $UP
$PY -m airlock up --data-dir $D --task tasks/refund_with_approval.toml > /tmp/step-fixture/up2.log 2>&1 &
UP=$!
sleep 6
OUT=$($PY -m airlock inject --data-dir $D --wait samples/refund_damaged.eml)
echo "$OUT"
ID=$(echo "$OUT" | grep -o '[0-9a-f]*-[0-9]*' | head -1)
$PY -m airlock pending --data-dir $D
$PY -m airlock approve $ID --as support-lead --by dana --data-dir $D
sleep 1
kill -INT $UP; wait $UP
$PY /work/wt/step/tests/data/make-v2/steps.py >> $D/trace.jsonl
cp $D/trace.jsonl /work/wt/step/tests/data/trace-v2.jsonl
