"""Direct, fanout and topic exchanges (ROUTE-03, ROUTE-04, ROUTE-05), judged by where messages go.

Each test binds its queues, publishes one message per routing key (the body is the key) and
reads back what every queue received. The topic matrix is RabbitMQ's, measured live on 3.10.8,
4.0.5 and 4.3.6 (the same on the three): a failure lists, per pattern, the keys it should and
did receive.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conformance.drivers.raw import RawClient
from conformance.plugin.session import Names, Target
from conformance.suite.steps.routing import assert_reached, topology

Connect = Callable[..., RawClient]


@pytest.mark.rules("ROUTE-03")
def test_direct_routes_on_the_whole_key(connect: Connect, names: Names, target: Target) -> None:
    t = topology(connect, names, target)
    t.exchange("x", "direct")
    for label, key in (("a", "a"), ("ab", "a.b"), ("empty", ""), ("upper", "A")):
        t.queue(label)
        t.bind(label, "x", key)
    t.queue("twice")
    t.bind("twice", "x", "a")
    t.bind("twice", "x", "A")
    for key in ("a", "a.b", "", "A", "b", "a.*", "#"):
        t.publish("x", key, key or "<empty>")
    want = {"a": ["a"], "ab": ["a.b"], "empty": ["<empty>"], "upper": ["A"], "twice": ["a", "A"]}
    assert_reached(t.reached(), want, "ROUTE-03", "publishes to a direct exchange (body = routing key)")


@pytest.mark.rules("ROUTE-04")
def test_fanout_routes_to_every_bound_queue(connect: Connect, names: Names, target: Target) -> None:
    t = topology(connect, names, target)
    t.exchange("x", "fanout")
    for label, key in (("keyless", ""), ("keyed", "some.key"), ("pattern", "#")):
        t.queue(label)
        t.bind(label, "x", key)
    t.queue("unbound")
    for key in ("", "some.key", "other"):
        t.publish("x", key, key or "<empty>")
    every = ["<empty>", "some.key", "other"]
    assert_reached(t.reached(), {"keyless": every, "keyed": every, "pattern": every, "unbound": []},
                   "ROUTE-04", "publishes to a fanout exchange (body = routing key)")


KEYS = ("", "a", "b", "a.b", "a.b.c", "a..b", "a.x.b", ".", "a.", "ab", "x.a.b")
EVERY = set(KEYS)
# pattern -> the keys it matches (RabbitMQ 3.10.8, 4.0.5, 4.3.6 live)
TOPIC: dict[str, set[str]] = {
    "*": {"a", "b", "ab"},
    "#": EVERY,
    "": {""},
    "a.*": {"a.b", "a."},
    "a.#": {"a", "a.b", "a.b.c", "a..b", "a.x.b", "a."},
    "#.b": {"b", "a.b", "a..b", "a.x.b", "x.a.b"},
    "*.#": EVERY - {""},
    "a.*.b": {"a..b", "a.x.b"},
    "a..b": {"a..b"},
    "#.#": EVERY,
    "a.#.#.b": {"a.b", "a..b", "a.x.b"},
    "*.*": {"a.b", ".", "a."},
    ".": {"."},
    "*.": {".", "a."},
}
# what the plain 0-9-1 profile pins (ROUTE-05's variant): no empty key, no empty word
PLAIN_KEYS = ("a", "b", "a.b", "a.b.c", "a.x.b", "ab", "x.a.b")
PLAIN_PATTERNS = ("*", "#", "a.*", "a.#", "#.b", "*.#", "a.*.b", "a.#.#.b", "*.*")


@pytest.mark.rules("ROUTE-05")
def test_topic_words_star_and_hash(connect: Connect, names: Names, target: Target) -> None:
    plain = target.profile.expect("ROUTE-05") != "required"
    keys = PLAIN_KEYS if plain else KEYS
    patterns = PLAIN_PATTERNS if plain else tuple(TOPIC)
    t = topology(connect, names, target)
    t.exchange("x", "topic")
    for pattern in patterns:
        t.queue(f"pattern {pattern!r}")
        t.bind(f"pattern {pattern!r}", "x", pattern)
    for key in keys:
        t.publish("x", key, key or "<empty>")
    want = {f"pattern {p!r}": sorted(k or "<empty>" for k in TOPIC[p] if k in keys) for p in patterns}
    assert_reached(t.reached(), want, "ROUTE-05", "publishes to a topic exchange (body = routing key)")
