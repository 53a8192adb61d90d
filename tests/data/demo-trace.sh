#!/bin/bash
# The two demos both trace fixtures were made from, run by an older airlock checked out at
# BASE with the python PY, into the folder OUT (its data dir OUT/data), the first demo's
# task FIRST_TASK (empty: the default task): every sample through the first task, then the
# approval demo (escalated, approved, a step replayed). Sourced by make-v1 and make-v2.
# usage: demo-trace.sh BASE PY OUT [FIRST_TASK]
set -u
BASE=$1 PY=$2 OUT=$3 FIRST_TASK=${4:-}
D=$OUT/data
export PYTHONPATH=$BASE
cd "$BASE"
$PY -m airlock up --data-dir $D ${FIRST_TASK:+--task $FIRST_TASK} > $OUT/up1.log 2>&1 &
UP=$!
sleep 6
$PY -m airlock inject --data-dir $D --wait samples/*.eml
kill -INT $UP; wait $UP
$PY -m airlock up --data-dir $D --task tasks/refund_with_approval.toml > $OUT/up2.log 2>&1 &
UP=$!
sleep 6
RESULT=$($PY -m airlock inject --data-dir $D --wait samples/refund_damaged.eml)
echo "$RESULT"
ID=$(echo "$RESULT" | grep -o '[0-9a-f]*-[0-9]*' | head -1)
$PY -m airlock pending --data-dir $D
$PY -m airlock approve $ID --as support-lead --by dana --data-dir $D
sleep 1
kill -INT $UP; wait $UP
