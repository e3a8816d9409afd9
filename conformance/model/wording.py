"""The model's generic wordings: what a failure says when the model can only say *which* rule, not
*how* it was broken, and the narrower clauses it adds when it can tell more.

Rules:
- Each generic wording is written once, here, and used by the model and the machines that emit
  it; `generic_wordings()` gives, per rule, example texts in that wording alone.
- A baseline entry accepts a failure by a message pattern. A pattern that matches one of its
  rule's generic wordings would accept any failure of that rule, not the one its reason describes
  (`conformance.results.baseline` refuses such an entry on load).
"""

from __future__ import annotations

HEAD_OF_QUEUE = "not a message at the head of"  # RQ-01/RQ-02: any requeue-order failure
OVERTOOK = "a message never delivered before overtook"  # narrower: which requeue it overtook
MISSING_DELIVERY = "a delivery the rules require did not arrive"  # QOS-02..08, RQ-01..03: any starved consumer
MISSING_DELIVERY_RULES = "QOS-02..08, RQ-01..03"
SETTLED_DIFFERS = "what was settled or requeued differs"  # a queue count: any settlement rule of the machine


def head_of_queue(rule: str, queue: str) -> str:
    return f"{rule}: {HEAD_OF_QUEUE} {queue}"


def overtook(requeued_by: str) -> str:
    """The unexpected delivery was never delivered before, and every allowed one is a requeued
    message (requeued by `requeued_by`, when one method did)."""
    return f"{OVERTOOK} the ones {requeued_by} requeued" if requeued_by else f"{OVERTOOK} the requeued ones"


def missing_delivery() -> str:
    return (f"{MISSING_DELIVERY} ({MISSING_DELIVERY_RULES}: one of these, a consumer with room and a ready message "
            "received nothing, and the model cannot tell which limit or requeue kept it)")


def settled_differs(rules: str) -> str:
    return (f"({SETTLED_DIFFERS}: {rules}: one of these, the queue's count shows a settle or requeue went "
            "otherwise than the model's, not which one)")


ONE_OF = (MISSING_DELIVERY, SETTLED_DIFFERS)  # wordings that name a range of rules: "one of these"


def names_one_of(text: str) -> bool:
    """Whether `text` names its rules only as "one of these" (the model could not tell which)."""
    return any(phrase in text for phrase in ONE_OF)


def generic_wordings() -> dict[str, tuple[str, ...]]:
    """Per rule, texts in its generic wording alone (a queue named `q`, any machine's rules)."""
    found: dict[str, list[str]] = {}
    for rule in ("RQ-01", "RQ-02"):
        found.setdefault(rule, []).append(f"unexpected delivery ({head_of_queue(rule, 'q')})")
    for rule in ("QOS-02", "QOS-03", "QOS-04", "QOS-05", "QOS-06", "QOS-07", "QOS-08", "RQ-01", "RQ-02", "RQ-03"):
        found.setdefault(rule, []).append(f"after 2.0 s: {missing_delivery()}")
    for rule in ("ACK-05", "ACK-06", "ACK-07", "RQ-03"):
        found.setdefault(rule, []).append(
            "after 2.0 s: queue q holds 1 ready messages, the model 2: [b'm1', b'm2'] "
            + settled_differs("ACK-05/ACK-06/ACK-07 settlement, RQ-03 requeue on close"))
    return {rule: tuple(texts) for rule, texts in found.items()}
