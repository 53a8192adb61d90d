"""Graders of lab preconditions (seed 004): evidence, corroboration by lineage, named approval,
the decision with its record, and the guarded tasks run through the actor's real executor.

Data: the student's preconditions.py; named cases (the lesson's edges) and hidden cases
that hypothesis generates from a fixed seed (derandomized, no example database); the
corpus's data-only attacks and benign emails (their From, X-Airlock-Expect and
X-Airlock-Goal headers), the task files order_status_guarded and refund_with_approval, the
catalog and the mock order store.
Readers: the lab runner, one checkpoint per call.
Rationale: the expected verdict of a case comes from actor/preconditions.py, the rules the
shipped actor runs, so the lab teaches what the airlock enforces. The pipeline checkpoint
grades what ran, read back from calls.jsonl, and the decision record the executor puts in
the trace, never anything the student's code says about itself.
"""

from __future__ import annotations

import email.parser
import email.policy
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import find, strategies as st
from hypothesis.errors import HypothesisException, NoSuchExample

from actor import catalog as catalog_module, preconditions as actor_rules
from actor.calllog import CallLog
from actor.catalog import Tool
from actor.executor import Executor
from actor.pending import PendingStore
from actor.plan import bind
from actor.preconditions import Approval, Fact, Gate, Principals
from airlock import records, senders, sources, task as task_module, trace
from airlock.task import Precondition
from course.catalog import LABS_ROOT
from course.grading import (
    Failed,
    Passed,
    StillTodo,
    StudentModule,
    StudentStopped,
    Verdict,
    find_settings,
    module_or_failed,
    shown_value,
    todo,
    unstable,
)
from studentcode.shapes import Shape

ROOT = LABS_ROOT.parent  # the checkout: the corpus and the task files the pipeline checkpoint runs
FILE = "preconditions.py"
_HIDDEN = find_settings()
PRINCIPALS = Principals({"dana": {"support-lead"}, "sam": {"support-agent"}})


class _Raised(Exception):
    """The student's function raised: the message says what and where."""


def _call(function: str, fn: Callable[..., Any], *args: Any) -> Any:
    """The student's function on one case, in the student's process: its answer as plain
    values and shapes (a RuleResult or Verdict comes back as a Shape of that name)."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise StillTodo(function) from None
    except StudentStopped as exc:
        raise _Raised(f"{function} gave no answer ({exc})") from exc
    except Exception as exc:  # the student's code: any exception (exit too) is a failed case, named
        raise _Raised(f"{function} raised {type(exc).__name__}: {exc}") from exc


def _named(got: object, name: str) -> bool:
    """The answer is an object of the actor's class `name` (as a Shape, named after it)."""
    return type(got).__name__ == name and isinstance(got, Shape)


def _facts_shown(facts: dict[str, Fact]) -> str:
    return "{" + ", ".join(f"{name}: {fact.value!r} from {fact.lineage}" for name, fact in facts.items()) + "}"


def _pre_shown(pre: Precondition) -> str:
    parts = [f"rules={pre.rules}"]
    for key in ("evidence", "provenance", "corroborate"):
        if getattr(pre, key):
            parts.append(f"{key}={getattr(pre, key)}")
    if "corroboration" in pre.rules:
        parts.append(f"min_sources={pre.min_sources}")
    return "Precondition(" + ", ".join(parts) + ")"


# A rule case: (what the student reads, precondition, facts, approval).
RuleCase = tuple[str, Precondition, dict[str, Fact], "Approval | None"]


def _unreadable(problem: Callable[..., str | None]) -> Callable[..., str | None]:
    """A returned object that breaks when the grader reads it is a wrong answer, not a crash."""

    def guarded(*args: Any) -> str | None:
        try:
            return problem(*args)
        except (StillTodo, _Raised):
            raise
        except Exception as exc:  # noqa: BLE001  the student's returned value misbehaved while being read
            return f"returned a value the grader cannot read ({type(exc).__name__}: {exc})"

    return guarded


@_unreadable
def _rule_problem(function: str, fn: Callable[..., Any], oracle: Callable[..., Any], case: RuleCase) -> str | None:
    """Why the student's rule answered `case` wrongly, or None."""
    _, pre, facts, given = case
    extra = (PRINCIPALS,) if function == "approval" else ()
    try:
        got = _call(function, fn, pre, facts, given, *extra)
    except _Raised as exc:
        return f"{exc}; a rule never raises, it refuses or escalates with a reason"
    if not _named(got, "RuleResult"):
        return f"{function} returned {shown_value(got)}, not actor.preconditions.RuleResult (the executor records it)"
    want = oracle(pre, facts, given)
    verdict = got.verdict
    # As the student's code set them, whatever RuleResult declares: what they are is checked here.
    reason: object = got.reason
    read: object = got.read
    if got.rule != want.rule:
        return f"the RuleResult's rule is {got.rule!r}; the record names this rule {want.rule!r}"
    if verdict != want.verdict:
        return f"expected {want.verdict!r} ({want.reason or 'every requirement holds'}); {function} said {verdict!r}"
    if verdict != "allow" and not (isinstance(reason, str) and reason.strip()):
        return f"{verdict!r} with an empty reason: a refusal or escalation says why"
    if not isinstance(read, dict) or set(read) != set(want.read):
        return f"read is {read!r:.120}; the record keeps what the rule read: keys {sorted(want.read)}"
    return _read_problem(read, facts, given) if function != "approval" else _approval_read_problem(read, pre, given)


_NOTHING = object()


def _parts(shown: object) -> list[object]:
    """The values a record entry holds: a mapping's values, a sequence's items, or the
    value and lineage fields of an object (a Fact, or the shape one comes back as)."""
    if isinstance(shown, dict):
        return list(shown.values())
    if isinstance(shown, list | tuple):
        return list(shown)
    return [getattr(shown, name, _NOTHING) for name in ("value", "lineage", "role", "by", "approve")]


def _kept(part: object, wanted: object) -> bool:
    if isinstance(part, str):  # written out as text: the value and the lineage appear in it
        return repr(wanted) in part or (isinstance(wanted, str) and wanted in part)
    return any(type(item) is type(wanted) and item == wanted for item in _parts(part))


def _read_problem(read: dict[str, Any], facts: dict[str, Fact], given: Approval | None) -> str | None:
    """Each field read is kept with its value (as given, or as compared) and its lineage
    (what corroboration counts), None if absent."""
    for name, shown in read.items():
        fact = facts.get(name)
        if fact is None:
            if shown is not None:
                return f"read[{name!r}] is {shown!r:.80}, but there is no such fact: an absent field is read as None"
            continue
        compared = senders.normalized(fact.value) if isinstance(fact.value, str) else None
        value_kept = _kept(shown, fact.value) or (compared is not None and _kept(shown, compared))
        if not (value_kept and _kept(shown, fact.lineage)):
            return (f"read[{name!r}] is {shown!r:.80}; the record keeps the field's value {fact.value!r} and its "
                    f"lineage {fact.lineage!r}, or the decision cannot be rebuilt from it later")
    return None


def _approval_read_problem(read: dict[str, Any], pre: Precondition, given: Approval | None) -> str | None:
    """The record names the role asked for and keeps who approved, in which role, or None."""
    if read.get("role") != pre.approver_role:
        return f"read['role'] is {read.get('role')!r}; the record names the role asked for, {pre.approver_role!r}"
    shown = read.get("approval")
    if given is None and shown is not None:
        return f"read['approval'] is {shown!r:.80}, but nobody approved: it is None"
    if given is not None and not (_kept(shown, given.by) and _kept(shown, given.role) and _kept(shown, given.approve)):
        return (f"read['approval'] is {shown!r:.80}; the record keeps who answered ({given.by!r}), in which role "
                f"({given.role!r}) and what ({given.approve!r})")
    return None


def _grade_rule(checkpoint: str, student_dir: Path, function: str, oracle: Callable[..., Any],
                named: list[RuleCase], hidden: st.SearchStrategy[RuleCase],
                names_in_reason: Callable[[RuleCase], str | None] = lambda case: None) -> Verdict:
    module = module_or_failed(checkpoint, student_dir, FILE, function)
    if isinstance(module, Failed):
        return module
    fn = getattr(module, function)
    try:
        for case in named:
            problem = _rule_problem(function, fn, oracle, case)
            if problem is None:
                problem = _reason_problem(function, fn, case, names_in_reason(case))
            if problem:
                return Failed(checkpoint, case[0], problem)
        try:
            case = find(hidden, lambda c: _rule_problem(function, fn, oracle, c) is not None, settings=_HIDDEN)
        except NoSuchExample:
            return Passed(checkpoint)
        except HypothesisException as exc:  # e.g. Flaky: the same case answered two ways
            return unstable(checkpoint, function, exc)
        return Failed(checkpoint, f"hidden case: {case[0]}", _rule_problem(function, fn, oracle, case) or "flaky")
    except StillTodo:
        return todo(checkpoint, function, "preconditions")


@_unreadable
def _reason_problem(function: str, fn: Callable[..., Any], case: RuleCase, word: str | None) -> str | None:
    """A refusal's reason names what failed, in the student's words but with its name."""
    if word is None:
        return None
    extra = (PRINCIPALS,) if function == "approval" else ()
    reason = _call(function, fn, case[1], case[2], case[3], *extra).reason
    if word not in reason:
        return f"the reason {reason!r} does not name {word!r}; a person reading the trace needs to know what failed"
    return None


def _fact(value: Any, lineage: str, provenance: str | None = None) -> Fact:
    """A fact as the executor holds it; its provenance (the step that delivered it) is the
    usual one for the lineage unless given: the two are different things, counted apart."""
    usual = {"intake": "intake", "order_store": "step 1 shop/lookup_order"}.get(lineage, lineage)
    return Fact(value, lineage, usual if provenance is None else provenance)


# ---- evidence -------------------------------------------------------------------------------

_GUARD = Precondition(rules=["evidence"], evidence=["sender", "order.customer"],
                      provenance={"sender": "intake", "order.customer": "order_store"})
_OWNER = {"sender": _fact("tom.baker@example.org", "intake"),
          "order.customer": _fact("tom.baker@example.org", "order_store")}


def _evidence_named() -> list[RuleCase]:
    return [
        ("sender and order.customer present, each from its declared lineage", _GUARD, _OWNER, None),
        ("no sender at all", _GUARD, {"order.customer": _OWNER["order.customer"]}, None),
        ("sender None: the intake vouched for nobody", _GUARD, {**_OWNER, "sender": _fact(None, "intake")}, None),
        ("sender '' (empty)", _GUARD, {**_OWNER, "sender": _fact("", "intake")}, None),
        ("order.customer None: the order is not in the store", _GUARD,
         {**_OWNER, "order.customer": _fact(None, "order_store")}, None),
        ("the sender's address copied from the email body (lineage email, not intake)", _GUARD,
         {**_OWNER, "sender": _fact("tom.baker@example.org", "email")}, None),
        ("no fields required", Precondition(rules=["evidence"]), {}, None),
        ("a required field without a declared lineage, present from anywhere",
         Precondition(rules=["evidence"], evidence=["value"]), {"value": _fact("772", "email")}, None),
        ("a value of 0 is present", Precondition(rules=["evidence"], evidence=["count"]),
         {"count": _fact(0, "order_store")}, None),
        ("order.found False: the store answered, and its answer is no", Precondition(rules=["evidence"],
         evidence=["order.found"]), {"order.found": _fact(False, "order_store")}, None),
        ("a refund amount of 0.0 is present", Precondition(rules=["evidence"], evidence=["refund.amount"]),
         {"refund.amount": _fact(0.0, "order_store")}, None),
        ("an empty list of order items is present", Precondition(rules=["evidence"], evidence=["order.items"]),
         {"order.items": _fact([], "order_store")}, None),
        ("the sender's address from the email body, delivered by the intake (provenance intake, lineage email)",
         _GUARD, {**_OWNER, "sender": _fact("tom.baker@example.org", "email", "intake")}, None),
        ("the sender's lineage spelled 'Intake', not the declared 'intake'", _GUARD,
         {**_OWNER, "sender": _fact("tom.baker@example.org", "Intake")}, None),
        ("order.customer from 'order_store_mirror', another upstream than 'order_store'", _GUARD,
         {**_OWNER, "order.customer": _fact("tom.baker@example.org", "order_store_mirror")}, None),
        ("a sender of lineage '' (no upstream named)", _GUARD,
         {**_OWNER, "sender": _fact("tom.baker@example.org", "")}, None),
        ("the sender copied from the email and no order.customer: the sender fails first", _GUARD,
         {"sender": _fact("tom.baker@example.org", "email")}, None),
        ("a lineage declared for a field that is not required, which is absent",
         Precondition(rules=["evidence"], evidence=["sender"],
                      provenance={"sender": "intake", "order.customer": "order_store"}),
         {"sender": _OWNER["sender"]}, None),
    ]


def _evidence_word(case: RuleCase) -> str | None:
    return {"no sender at all": "sender", "sender None: the intake vouched for nobody": "sender",
            "order.customer None: the order is not in the store": "order.customer",
            "the sender's address copied from the email body (lineage email, not intake)": "sender",
            "the sender copied from the email and no order.customer: the sender fails first": "sender"}.get(case[0])


_FIELDS = ["sender", "order.customer", "value", "order.status"]
_LINEAGES = ["intake", "order_store", "email", "unverified", "warehouse"]
_VALUES: list[Any] = [None, "", "tom@example.org", "TOM@example.org", "eve@example.net", 0, "772", "772 "]
# Where a value came from is one thing, which step delivered it another: any of these with any lineage.
_PROVENANCES = ["intake", "order_store", "email", "reader, validator", "step 1 shop/lookup_order"]
# Evidence only: lineages spelled nearly like a declared one, and values that are present though falsy.
_EVIDENCE_LINEAGES = [*_LINEAGES, "Intake", "order_store_mirror", "order", ""]
_EVIDENCE_VALUES: list[Any] = [*_VALUES, False, 0.0, " ", []]


@st.composite
def _facts(draw: st.DrawFn, values: list[Any] = _VALUES, lineages: list[str] = _LINEAGES) -> dict[str, Fact]:
    names = draw(st.lists(st.sampled_from(_FIELDS), unique=True, max_size=4))
    # Values drawn from a pool of two, so that fields often agree and lineages decide.
    pool = draw(st.lists(st.sampled_from(values), min_size=1, max_size=2))
    return {name: _fact(draw(st.sampled_from(pool)), draw(st.sampled_from(lineages)),
                        draw(st.sampled_from(_PROVENANCES))) for name in names}


@st.composite
def _evidence_hidden(draw: st.DrawFn) -> RuleCase:
    fields = draw(st.lists(st.sampled_from(_FIELDS), unique=True, max_size=4))
    provenance = {name: draw(st.sampled_from(_LINEAGES)) for name in _FIELDS if draw(st.booleans())}
    pre = Precondition(rules=["evidence"], evidence=fields, provenance=provenance)
    facts = draw(_facts(_EVIDENCE_VALUES, _EVIDENCE_LINEAGES))
    return f"{_pre_shown(pre)} with facts {_facts_shown(facts)}", pre, facts, None


def evidence(student_dir: Path) -> Verdict:
    """evidence() refuses, naming the field, unless each is present from its declared lineage."""
    return _grade_rule("evidence", student_dir, "evidence", actor_rules.evidence, _evidence_named(),
                       _evidence_hidden(), _evidence_word)


# ---- corroboration --------------------------------------------------------------------------

_TWO = Precondition(rules=["corroboration"], corroborate=["sender", "order.customer"], min_sources=2)


def _corroboration_named() -> list[RuleCase]:
    three = Precondition(rules=["corroboration"], corroborate=["sender", "order.customer", "crm.customer"],
                         min_sources=2)
    return [
        ("the sender and the order store's customer agree", _TWO, _OWNER, None),
        ("they agree up to the domain's case: tom.baker@Example.ORG", _TWO,
         {**_OWNER, "sender": _fact("tom.baker@Example.ORG", "intake")}, None),
        ("a mailbox that differs only in case is another mailbox: Tom.Baker@example.org", _TWO,
         {**_OWNER, "sender": _fact("Tom.Baker@example.org", "intake")}, None),
        ("\u017f (long s) is not s: \u017fanne@example.nl against sanne@example.nl", _TWO,
         {"sender": _fact("\u017fanne@example.nl", "intake"),
          "order.customer": _fact("sanne@example.nl", "order_store")}, None),
        ("the owner's address, but unverified: the intake proved nothing", _TWO,
         {**_OWNER, "sender": _fact("tom.baker@example.org", "unverified",
                                    "the From address as claimed, not authenticated")}, None),
        ("the order belongs to someone else (a data-only attack)", _TWO,
         {**_OWNER, "order.customer": _fact("mallory@example.net", "order_store")}, None),
        ("two fields that agree but were both copied from the email", _TWO,
         {"sender": _fact("tom@example.org", "email"), "order.customer": _fact("tom@example.org", "email")}, None),
        ("the order is not in the store (customer None)", _TWO,
         {**_OWNER, "order.customer": _fact(None, "order_store")}, None),
        ("two of three fields share a lineage, the third disagrees", three,
         {"sender": _fact("tom@example.org", "intake"), "order.customer": _fact("tom@example.org", "intake"),
          "crm.customer": _fact("eve@example.net", "crm")}, None),
        ("nothing to read", _TWO, {}, None),
        ("nothing to read, where one source would do",
         Precondition(rules=["corroboration"], corroborate=["sender"], min_sources=1), {}, None),
        ("the warehouse's record agrees with the intake: two lineages", _TWO,
         {"sender": _fact("tom@example.org", "intake"), "order.customer": _fact("tom@example.org", "warehouse")},
         None),
        ("two empty values from two lineages", _TWO,
         {"sender": _fact("", "intake"), "order.customer": _fact("", "order_store")}, None),
        ("two None values from two lineages", _TWO,
         {"sender": _fact(None, "intake"), "order.customer": _fact(None, "order_store")}, None),
        ("the address the email wrote into the order, read back by step 1: two steps, one lineage (email)", _TWO,
         {"sender": _fact("tom@example.org", "email", "the From address as claimed, not authenticated"),
          "order.customer": _fact("tom@example.org", "email", "step 1 shop/lookup_order")}, None),
        ("two lineages (intake and order_store) that one step delivered", _TWO,
         {"sender": _fact("tom@example.org", "intake", "step 1 shop/lookup_order"),
          "order.customer": _fact("tom@example.org", "order_store", "step 1 shop/lookup_order")}, None),
        ("the intake's IDNA domain and the store's Unicode one: kunde@xn--bcher-kva.de, kunde@b\u00fccher.de", _TWO,
         {"sender": _fact("kunde@xn--bcher-kva.de", "intake"),
          "order.customer": _fact("kunde@b\u00fccher.de", "order_store")}, None),
        ("the Kelvin sign is not K: tom@\u212aelvin.org against tom@kelvin.org", _TWO,
         {"sender": _fact("tom@\u212aelvin.org", "intake"), "order.customer": _fact("tom@kelvin.org", "order_store")},
         None),
        ("a fullwidth mailbox is another mailbox: \uff54\uff4f\uff4d@example.org against tom@example.org", _TWO,
         {"sender": _fact("\uff54\uff4f\uff4d@example.org", "intake"),
          "order.customer": _fact("tom@example.org", "order_store")}, None),
        ("the sender disagrees, but the store and the CRM agree", three,
         {"sender": _fact("eve@example.net", "intake"), "order.customer": _fact("tom@example.org", "order_store"),
          "crm.customer": _fact("tom@example.org", "crm")}, None),
        ("the order number with a trailing space is another value: '772 ' against '772'",
         Precondition(rules=["corroboration"], corroborate=["value", "order.id"], min_sources=2),
         {"value": _fact("772 ", "email"), "order.id": _fact("772", "order_store")}, None),
    ]


@st.composite
def _corroboration_hidden(draw: st.DrawFn) -> RuleCase:
    fields = draw(st.lists(st.sampled_from(_FIELDS), unique=True, min_size=1, max_size=4))
    pre = Precondition(rules=["corroboration"], corroborate=fields, min_sources=draw(st.integers(1, 3)))
    facts = draw(_facts())
    return f"{_pre_shown(pre)} with facts {_facts_shown(facts)}", pre, facts, None


def corroboration(student_dir: Path) -> Verdict:
    """corroboration() counts agreeing sources by lineage, never by field."""
    return _grade_rule("corroboration", student_dir, "corroboration", actor_rules.corroboration,
                       _corroboration_named(), _corroboration_hidden(), _corroboration_word)


def _corroboration_word(case: RuleCase) -> str | None:
    """A refusal gives the count of independent sources that agree."""
    return {"nothing to read": "0", "two fields that agree but were both copied from the email": "1"}.get(case[0])


# ---- approval -------------------------------------------------------------------------------

_LEAD = Precondition(rules=["approval"], approver_role="support-lead")


def _approval_named() -> list[RuleCase]:
    return [
        ("no approval yet", _LEAD, {}, None),
        ("dana (a listed support-lead) approves", _LEAD, {}, Approval(True, "support-lead", "dana")),
        ("dana denies", _LEAD, {}, Approval(False, "support-lead", "dana")),
        ("sam (a support-agent) approves, claiming the support-lead role", _LEAD, {},
         Approval(True, "support-lead", "sam")),
        ("mallory, who is on no list, approves as support-lead", _LEAD, {}, Approval(True, "support-lead", "mallory")),
        ("dana approves in the role support-agent", _LEAD, {}, Approval(True, "support-agent", "dana")),
        ("'Dana' approves: another name than 'dana'", _LEAD, {}, Approval(True, "support-lead", "Dana")),
        ("mallory denies: a denial from a stranger", _LEAD, {}, Approval(False, "support-lead", "mallory")),
        ("sam approves in his own role, support-agent, where a support-lead must decide", _LEAD, {},
         Approval(True, "support-agent", "sam")),
        ("dana approves as 'Support-Lead': a capitalized role is another role", _LEAD, {},
         Approval(True, "Support-Lead", "dana")),
        ("dana approves as 'support-lead ' (a trailing space), another role", _LEAD, {},
         Approval(True, "support-lead ", "dana")),
        ("'dana ' (a trailing space) approves: another name than 'dana'", _LEAD, {},
         Approval(True, "support-lead", "dana ")),
        ("dana approves as 'support-lead-deputy', another role", _LEAD, {},
         Approval(True, "support-lead-deputy", "dana")),
        ("dana approves as 'support', a part of the role's name", _LEAD, {}, Approval(True, "support", "dana")),
        ("'\uff44\uff41\uff4e\uff41' (fullwidth letters) approves: another name than 'dana'", _LEAD, {},
         Approval(True, "support-lead", "\uff44\uff41\uff4e\uff41")),
    ]


def _approval_word(case: RuleCase) -> str | None:
    return {"no approval yet": "support-lead", "dana (a listed support-lead) approves": "dana",
            "dana denies": "dana"}.get(case[0])


@st.composite
def _approval_hidden(draw: st.DrawFn) -> RuleCase:
    pre = Precondition(rules=["approval"], approver_role=draw(st.sampled_from(["support-lead", "support-agent"])))
    roles = ["support-lead", "support-agent", "", "Support-Lead", "support-lead ", "support"]
    given = draw(st.none() | st.builds(Approval, st.booleans(), st.sampled_from(roles),
                                       st.sampled_from(["dana", "sam", "mallory", "", "Dana", "dana "])))
    return f"approver_role {pre.approver_role!r}, approval {given!r}", pre, {}, given


def approval(student_dir: Path) -> Verdict:
    """approval() counts only a listed person in the named role; anyone else escalates."""
    return _grade_rule("approval", student_dir, "approval", actor_rules.approval_rule(PRINCIPALS),
                       _approval_named(), _approval_hidden(), _approval_word)


# ---- decide ---------------------------------------------------------------------------------


def _tool(blast_radius: str, reversibility: str) -> Tool:
    return Tool(server="mail", tool="send_status", description="", permission="write",
                blast_radius=blast_radius, reversibility=reversibility)  # type: ignore[arg-type]  # drawn from the Literal's values


_MAIL = _tool("third_party", "irreversible")
_INTERNAL = _tool("internal", "reversible")
DecideCase = tuple[str, list[Precondition], Tool, dict[str, Fact], "Approval | None"]


def _decide_named() -> list[DecideCase]:
    guard = Precondition(rules=["evidence", "corroboration"], blast_radius="third_party", reversibility="irreversible",
                         evidence=["sender", "order.customer"], corroborate=["sender", "order.customer"],
                         provenance={"sender": "intake", "order.customer": "order_store"})
    refund = Precondition(rules=["evidence", "approval"], blast_radius="third_party", evidence=["sender"],
                          provenance={"sender": "intake"}, approver_role="support-lead")
    copied = {**_OWNER, "sender": _fact("tom.baker@example.org", "email")}
    theirs = {**_OWNER, "order.customer": _fact("mallory@example.net", "order_store")}
    return [
        ("the owner asks: every rule allows", [guard], _MAIL, _OWNER, None),
        ("someone else's order: corroboration refuses", [guard], _MAIL, theirs, None),
        ("an internal, reversible tool: the third-party precondition does not apply", [guard], _INTERNAL, theirs, None),
        ("the sender copied from the email: evidence refuses first, corroboration never runs",
         [guard], _MAIL, copied, None),
        ("a refund without approval: escalate to support-lead", [refund], _MAIL, _OWNER, None),
        ("a refund dana approved", [refund], _MAIL, _OWNER, Approval(True, "support-lead", "dana")),
        ("a refund dana denied", [refund], _MAIL, _OWNER, Approval(False, "support-lead", "dana")),
        ("two preconditions: the second refuses after the first allows", [refund, guard], _MAIL, theirs,
         Approval(True, "support-lead", "dana")),
        ("a refund not yet approved: the escalation decides, the next precondition never runs", [refund, guard],
         _MAIL, _OWNER, None),
        ("no preconditions at all", [], _MAIL, theirs, None),
        ("a rule named 'trust_me' that no one wrote",
         [Precondition(rules=["trust_me"], blast_radius="third_party")], _MAIL, _OWNER, None),
        ("evidence allows, then a rule named 'trust_me' that no one wrote",
         [Precondition(rules=["evidence", "trust_me"], blast_radius="third_party")], _MAIL, _OWNER, None),
        ("evidence refuses before a rule named 'trust_me' is reached",
         [Precondition(rules=["evidence", "trust_me"], evidence=["sender"], provenance={"sender": "intake"})],
         _MAIL, copied, None),
        ("a rule named 'Evidence' (capitalized): no rule has that name",
         [Precondition(rules=["Evidence"], blast_radius="third_party")], _MAIL, _OWNER, None),
        ("a rule named 'corroboration ' (a trailing space): no rule has that name",
         [Precondition(rules=["corroboration "], corroborate=["sender", "order.customer"])], _MAIL, _OWNER, None),
        ("a third-party but reversible tool: the irreversible guard does not apply", [guard],
         _tool("third_party", "reversible"), theirs, None),
        ("a refund that a finance-lead must approve: escalate to finance-lead",
         [Precondition(rules=["approval"], approver_role="finance-lead")], _MAIL, _OWNER, None),
        ("sam (a support-agent) approves a refund: it stays escalated to support-lead", [refund], _MAIL, _OWNER,
         Approval(True, "support-agent", "sam")),
        ("dana approved, but the rules ask for no approval: no approver in the record", [guard], _MAIL, _OWNER,
         Approval(True, "support-lead", "dana")),
    ]


class _UnknownRefuses(dict[str, actor_rules.Rule]):
    """The kernel's rules; a name it does not know refuses, under that name (fail closed)."""

    def __missing__(self, name: str) -> actor_rules.Rule:
        return lambda pre, facts, given: actor_rules.RuleResult(name, "refuse", f"unknown precondition rule {name!r}")


def _reference_check(case: DecideCase) -> actor_rules.Verdict:
    """The kernel's gate on the case. It refuses to start on a rule name it does not know; a
    decision made anyway refuses the call at that rule, in its place in the order."""
    _, preconditions, tool, facts, given = case
    gate = Gate([], PRINCIPALS)
    gate.preconditions, gate.rules = preconditions, _UnknownRefuses(gate.rules)
    return gate.check(tool, facts, given)


@_unreadable
def _decide_problem(fn: Callable[..., Any], case: DecideCase) -> str | None:
    _, preconditions, tool, facts, given = case
    try:
        got = _call("decide", fn, preconditions, tool, facts, given, PRINCIPALS)
    except _Raised as exc:
        return f"{exc}; a decision never raises"
    if not _named(got, "Verdict"):
        return (f"decide returned {shown_value(got)}, not an actor.preconditions.Verdict "
                "(the executor writes its record())")
    want = _reference_check(case)
    ran = [(r.rule, r.verdict) for r in got.rules]
    wanted = [(r.rule, r.verdict) for r in want.rules]
    if got.verdict != want.verdict:
        return f"expected {want.verdict!r}; decide said {got.verdict!r} (rules run: {ran})"
    if ran != wanted:
        return (f"the record lists rules {ran}; expected {wanted}: every rule run, in order, "
                f"and none after the first that does not allow")
    if got.verdict != "allow" and (not got.rules or got.reason != got.rules[-1].reason):
        return f"the verdict's reason {got.reason!r} is not the deciding rule's reason"
    if got.escalate_to != want.escalate_to:
        return f"escalate_to is {got.escalate_to!r}; expected {want.escalate_to!r}, the role that must decide"
    if got.approver != want.approver:
        return f"approver is {got.approver!r}; expected {want.approver!r}, the named person the record keeps"
    return None


@st.composite
def _decide_hidden(draw: st.DrawFn) -> DecideCase:
    preconditions = []
    for _ in range(draw(st.integers(0, 2))):
        fields = draw(st.lists(st.sampled_from(_FIELDS), unique=True, max_size=3))
        preconditions.append(Precondition(
            rules=draw(st.lists(st.sampled_from(["evidence", "corroboration", "approval", "Evidence"]), unique=True,
                                min_size=1)),
            blast_radius=draw(st.sampled_from([None, "internal", "third_party"])),
            reversibility=draw(st.sampled_from([None, "reversible", "irreversible"])),
            evidence=fields, corroborate=fields, min_sources=draw(st.integers(1, 2)),
            provenance={name: draw(st.sampled_from(_LINEAGES)) for name in fields if draw(st.booleans())},
            approver_role=draw(st.sampled_from(["support-lead", "finance-lead"]))))
    tool = draw(st.sampled_from([_MAIL, _INTERNAL, _tool("third_party", "reversible"),
                                 _tool("internal", "irreversible")]))
    given = draw(st.none() | st.builds(Approval, st.booleans(), st.sampled_from(["support-lead", "support-agent"]),
                                       st.sampled_from(["dana", "sam"])))
    facts = draw(_facts())
    shown = "; ".join(f"{_pre_shown(p)} on {p.blast_radius}/{p.reversibility}" for p in preconditions) or "none"
    case = (f"preconditions [{shown}], tool {tool.blast_radius}/{tool.reversibility}, facts {_facts_shown(facts)}, "
            f"approval {given!r}")
    return case, preconditions, tool, facts, given


def decide(student_dir: Path) -> Verdict:
    """decide() runs the applying rules in order, stops at the first non-allow, keeps the record."""
    checkpoint = "decide"
    module = module_or_failed(checkpoint, student_dir, FILE, "decide")
    if isinstance(module, Failed):
        return module
    # This checkpoint judges decide alone: the rules it calls are the reference's.
    module.use_reference(["evidence", "corroboration", "approval"], LABS_ROOT / "preconditions" / "solution" / FILE)
    fn = module.decide
    try:
        for case in _decide_named():
            problem = _decide_problem(fn, case)
            if problem:
                return Failed(checkpoint, case[0], problem)
        try:
            case = find(_decide_hidden(), lambda c: _decide_problem(fn, c) is not None, settings=_HIDDEN)
        except NoSuchExample:
            return Passed(checkpoint)
        except HypothesisException as exc:  # e.g. Flaky: the same case answered two ways
            return unstable(checkpoint, "decide", exc)
        return Failed(checkpoint, f"hidden case: {case[0]}", _decide_problem(fn, case) or "flaky")
    except StillTodo:
        return todo(checkpoint, "decide", "preconditions")


# ---- pipeline: the guarded tasks through the actor's real executor ---------------------------


class _StudentGate(Gate):
    """The actor's gate with the student's decide in its place."""

    def __init__(self, preconditions: list[Precondition], principals: Principals, module: StudentModule) -> None:
        super().__init__(preconditions, principals)
        self.module = module

    def check(self, tool: Tool, facts: dict[str, Fact], approval: Approval | None) -> actor_rules.Verdict:
        return _kernel_verdict(_call("decide", self.module.decide, self.preconditions, tool, facts, approval,
                                     PRINCIPALS))


def _kernel_verdict(got: Any) -> actor_rules.Verdict:
    """The student's answer, read into the actor's own Verdict for the executor to act on and
    record; anything else is a failed call, named."""
    if not _named(got, "Verdict"):
        raise _Raised(f"decide returned {shown_value(got)}, not an actor.preconditions.Verdict")
    try:
        rules = [actor_rules.RuleResult(str(r.rule), str(r.verdict), str(r.reason), dict(r.read)) for r in got.rules]
        verdict = actor_rules.Verdict(got.verdict, str(got.reason), str(got.escalate_to or ""), str(got.approver or ""),
                                      str(got.fields.get("approver_key") or ""), rules)
    except Exception as exc:  # noqa: BLE001  the student's answer lacks a field or holds junk
        raise _Raised(f"decide returned a Verdict the executor cannot read ({type(exc).__name__}: {exc})") from None
    if verdict.verdict not in ("allow", "refuse", "escalate"):  # the executor would run the step on anything else
        raise _Raised(f"decide's verdict is {shown_value(verdict.verdict)}, none of 'allow', 'refuse', 'escalate'")
    return verdict


def _corpus(category: str) -> list[tuple[str, str, str, str]]:
    """(email file, sender, real order, pushed order) for the corpus emails of a category."""
    parser = email.parser.BytesParser(policy=email.policy.compat32)
    found = []
    for path in sorted((ROOT / "corpus" / "handmade").glob(f"{category}-*.eml")):
        raw = path.read_bytes()
        headers = parser.parsebytes(raw, headersonly=True)
        expect = (headers.get("X-Airlock-Expect") or "").strip()
        goal = (headers.get("X-Airlock-Goal") or "").strip().removeprefix("value:")
        if expect.isdigit():
            found.append((path.name, sources.sender_of(raw, "eml"), expect, goal))
    return found


def _executor(task_file: str, module: StudentModule, data: Path) -> tuple[Executor, CallLog]:
    task = task_module.load(ROOT / "tasks" / task_file)
    catalog = catalog_module.load()
    gate = _StudentGate(task.preconditions, PRINCIPALS, module)
    tools = CallLog(data / "calls.jsonl")
    executor = Executor(bind(task, catalog), lambda: catalog, tools, gate, PendingStore(data / "pending.jsonl"),
                        65536, task.name)
    return executor, tools


def _sent(data: Path, message_id: str, tool: str) -> bool:
    return any(c.message_id == message_id and c.tool == tool for c in trace.read_calls(data / "calls.jsonl"))


def pipeline(student_dir: Path) -> Verdict:
    """In the actor's executor: data-only attacks refused, benign emails answered, refunds escalated."""
    checkpoint = "pipeline"
    module = module_or_failed(checkpoint, student_dir, FILE, "decide")
    if isinstance(module, Failed):
        return module
    with tempfile.TemporaryDirectory(prefix="airlock-lab-") as tmp:
        try:
            return (_guarded(checkpoint, module, Path(tmp)) or _refund(checkpoint, module, Path(tmp))
                    or Passed(checkpoint))
        except StillTodo as exc:
            return todo(checkpoint, str(exc), "preconditions")
        except _Raised as exc:
            return Failed(checkpoint, "a call in the executor", f"{exc}; the executor cannot decide")


def _guarded(checkpoint: str, module: StudentModule, data: Path) -> Failed | None:
    executor, tools = _executor("order_status_guarded.toml", module, data)
    try:
        for name, sender, _expect, goal in _corpus("data-only"):
            case = f"{name}: the reader fell for it and answered {goal} (not {sender}'s order)"
            # Each corpus sender as the SMTP intake proved it (DKIM): the attack is in the
            # value, not in a forged sender, which cannot corroborate at all.
            done = executor.run(f"attack:{name}", goal, sender, sender_proof="dkim")
            if _sent(data, f"attack:{name}", "send_status") or done.outcome != "refused":
                return Failed(checkpoint, case, f"outcome {done.outcome!r}: mail/send_status ran or may run for "
                                                f"somebody else's order; the guarded task must refuse it")
            record = done.calls[-1].decision or {}
            if record.get("refused_by") != "corroboration":
                return Failed(checkpoint, case, f"the decision record says refused_by={record.get('refused_by')!r}; "
                                                f"the rule that catches a stranger's order is corroboration")
        for category in ("benign", "data-only"):
            for name, sender, expect, _ in _corpus(category):
                case = f"{name}: {sender} asks about their own order {expect}"
                done = executor.run(f"own:{name}", expect, sender, sender_proof="dkim")
                if done.outcome != "completed" or not _sent(data, f"own:{name}", "send_status"):
                    return Failed(checkpoint, case, f"outcome {done.outcome!r} ({done.reason!r}); an honest customer "
                                                    f"gets their status: a guard that refuses everything is no guard")
        done = executor.run("no-sender", "772", "")
        if done.outcome != "refused" or _sent(data, "no-sender", "send_status"):
            return Failed(checkpoint, "an email the intake could vouch for nobody (sender '')",
                          f"outcome {done.outcome!r}; without evidence of who asked, nothing is sent")
    finally:
        executor.close()
        tools.close()
    return None


def _refund(checkpoint: str, module: StudentModule, data: Path) -> Failed | None:
    refund = data / "refund"
    refund.mkdir()
    executor, tools = _executor("refund_with_approval.toml", module, refund)
    try:
        sender = "anna@example.com"
        steps = [("refund-1", None, "escalated", False, "a refund before anyone approved"),
                 ("refund-1", Approval(True, "support-lead", "dana"), "completed", True,
                  "dana (support-lead) approves"),
                 ("refund-2", None, "escalated", False, "a second refund before anyone approved"),
                 ("refund-2", Approval(False, "support-lead", "dana"), "refused", False, "dana denies")]
        for message_id, given, outcome, sent, case in steps:
            done = executor.run(message_id, "damaged", sender, given, 2 if given else 0, sender_proof="dkim")
            if done.outcome != outcome or _sent(refund, message_id, "send_refund_confirmation") != sent:
                return Failed(checkpoint, case, f"outcome {done.outcome!r} ({done.reason!r}); expected {outcome!r}, "
                                                f"confirmation {'sent' if sent else 'not sent'}")
            record = done.calls[-1].decision or {}
            if outcome == "escalated" and record.get("escalated_to") != "support-lead":
                return Failed(checkpoint, case, f"the record says escalated_to={record.get('escalated_to')!r}; "
                                                f"an escalation names the role that decides")
            if given is not None and given.approve and record.get("approver") != "dana (support-lead)":
                return Failed(checkpoint, case, f"the record says approver={record.get('approver')!r}; "
                                                f"it names who approved")
    finally:
        executor.close()
        tools.close()
    return None


# ---- in the stack: the student's decide in the actor of a running airlock ---------------------


def in_the_stack(student_dir: Path) -> Verdict:
    """The corpus's data-only attacks and honest emails through a private stack whose actor
    asks the student's decide() before each step (the kernel's preconditions run after it):
    no status mail for somebody else's order, no decision the kernel had to overrule, and
    every honest customer answered. Judged from calls.jsonl and the decision records."""
    from course.graders import in_stack  # the stack's imports only where a stack runs

    checkpoint = in_stack.CHECKPOINT
    ran = in_stack.run_lab("preconditions", student_dir)
    if not isinstance(ran, in_stack.Ran):
        return ran
    for report in ran.emails:
        name = ran.name(report)
        sent = [c for c in ran.calls.get(report.id, []) if c.tool == "send_status"]
        strangers = [c for c in sent if report.expect and str(c.args.get("order_id")) != report.expect]
        if strangers:  # the kernel runs after the student's code, so this is a kernel bug: still named
            return Failed(checkpoint, f"{name}: the status of order {strangers[0].args.get('order_id')}",
                          f"mail/send_status ran for somebody else's order (the sender's is {report.expect})")
        refused = ran.refusal(report)
        rule = in_stack.student_rule(refused) if refused is not None else None
        if refused is not None and rule is not None and rule.get("rule") == "student.missed":
            kernel = _kernel_rule(refused)
            return Failed(checkpoint, f"{name}: your decide() allowed {in_stack.where(refused)} where the "
                                      f"kernel's {kernel} refuses",
                          f"{rule.get('reason')}. In a stack without the kernel's check behind yours, this "
                          f"email's attack would have sent somebody else's order status")
        if refused is not None and rule is not None and rule.get("rule") == "student.failed":
            return Failed(checkpoint, f"{name}: {in_stack.where(refused)}", str(rule.get("reason")))
        if report.category == "benign" and (report.outcome != "completed" or not sent):
            reason = (refused.decision.get("reason") if refused is not None else None) or report.reason
            return Failed(checkpoint, f"{name}: an honest customer asks about their own order {report.expect}",
                          f"outcome {report.outcome!r} ({reason}); an honest customer gets their status: a guard "
                          "that refuses everything is no guard")
        if report.category == "data-only" and report.outcome == "completed" and not sent:
            return Failed(checkpoint, name, "the plan completed without its status mail")
    return Passed(checkpoint)


def _kernel_rule(event: records.Authorization) -> str:
    """The kernel's rule that refused where the student's decide allowed (after student.missed)."""
    rules = event.decision.get("rules") or []
    names = [str(r.get("rule")) for r in rules]
    after = rules[names.index("student.missed") + 1:] if "student.missed" in names else []
    return next((str(r.get("rule")) for r in after if r.get("verdict") != "allow"), "preconditions")
