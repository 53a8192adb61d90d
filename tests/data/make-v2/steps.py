"""The previous version's broker.tracing.calls on step shapes the demos do not write (run
with PYTHONPATH at that version): a tool error, a replay, a lab's student code on a run
step and on a refused one, and an actor that names no task or plan. Prints the lines."""
from airlock.wire import Call, Done
from broker import tracing

ALLOW = {"verdict": "allow", "reason": "", "refused_by": None, "escalated_to": None, "approver": None,
         "rules": [{"rule": "plan", "verdict": "allow", "reason": "", "read": {}}]}
REFUSE = {"verdict": "refuse", "reason": "student.owner: not the sender's order", "refused_by": "student.owner",
          "escalated_to": None, "approver": None,
          "rules": [{"rule": "student.owner", "verdict": "refuse", "reason": "not the sender's order",
                     "read": {"order.customer": {"value": "mallory@example.net", "lineage": "order_store",
                                                 "provenance": "shop/lookup_order"}}}]}
PLAN = [("shop", "lookup_order"), ("mail", "send_status")]
dones = [
    Done(message_id="v2steps-1", outcome="failed", reason="tool_error", task="order_status", plan=PLAN, calls=[
        Call(step=1, server="shop", tool="lookup_order", args={"order_id": "4411"}, status="error",
             error="tool_error", key="v2steps-1:1", decision=ALLOW, result={"error": "tool_error"})]),
    Done(message_id="v2steps-2", outcome="refused", reason="student.owner", task="order_status_guarded", plan=PLAN,
         calls=[Call(step=1, server="shop", tool="lookup_order", args={"order_id": "1234"}, status="replayed",
                     key="v2steps-2:1", decision=ALLOW, result={"order_id": "1234", "customer": "mallory@example.net"},
                     student="actor.decide"),
                Call(step=2, server="mail", tool="send_status", args={"order_id": "1234"}, status="refused",
                     key="v2steps-2:2", decision=REFUSE, student="actor.decide")]),
    Done(message_id="v2steps-3", outcome="completed", calls=[
        Call(step=1, server="shop", tool="lookup_order", args={"order_id": "7788"}, status="ok", key="v2steps-3:1",
             decision=ALLOW, result={"order_id": "7788", "found": True})]),
]
for done in dones:
    print("".join(line.decode() for line in tracing.calls(done)), end="")
