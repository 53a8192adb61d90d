#!/bin/bash
# How tests/data/trace-v1.jsonl and calls-v1.jsonl were made: the previous version (main at
# 48c6ed5, before the records were typed, checked out at /tmp/typedtrace-base) runs the
# README's two demos; more_events.py then drives that version's Router for the rarer events,
# its output appended to the trace. Kept to show where the fixture came from; not run by tests.
set -u
export PYTHONPATH=/tmp/typedtrace-base
PY=/work/wt/typedtrace/.venv/bin/python
D=/tmp/typedtrace-fixture/data
rm -rf $D
cd /tmp/typedtrace-base
$PY -m airlock up --data-dir $D > /tmp/typedtrace-fixture/up1.log 2>&1 &
UP=$!
sleep 6
$PY -m airlock inject --data-dir $D --wait samples/*.eml
kill -INT $UP; wait $UP
$PY -m airlock up --data-dir $D --task tasks/refund_with_approval.toml > /tmp/typedtrace-fixture/up2.log 2>&1 &
UP=$!
sleep 6
OUT=$($PY -m airlock inject --data-dir $D --wait samples/refund_damaged.eml)
echo "$OUT"
ID=$(echo "$OUT" | grep -o '[0-9a-f]*-[0-9]*' | head -1)
$PY -m airlock pending --data-dir $D
$PY -m airlock approve $ID --as support-lead --by dana --data-dir $D
sleep 1
kill -INT $UP; wait $UP
