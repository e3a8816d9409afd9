"""The reference broker's matching functions (core/routing.py) and the routing faults' substitutes.

The wire behaviour is the routing area's (conformance/suite/routing); these pin the pure pieces
where RabbitMQ's choice is easy to get wrong: the empty topic key, x-match validation texts, and
that each routing fault changes exactly what its rule judges.
"""

from __future__ import annotations

from typing import Any

import pytest

from reference_broker.core.routing import binding_matches, headers_match, topic_matches, x_match_error
from reference_broker.core.rules import Rules
from reference_broker.faults import rules_with


@pytest.mark.parametrize(("pattern", "key", "matches"), [
    ("*", "", False), ("#", "", True), ("", "", True), ("*.#", "", False), ("*", "a", True),
    ("a.*", "a.", True), ("*.", ".", True), ("a.#", "a", True), ("#.b", "b", True), ("a.#.#.b", "a.b", True),
    ("a.*.b", "a..b", True), ("*.*", "a", False), ("", "a", False),
])
def test_topic_words_as_rabbitmq_splits_them(pattern: str, key: str, matches: bool) -> None:
    assert topic_matches(pattern, key) is matches


def test_headers_void_binding_value_matches_presence() -> None:
    assert headers_match({"a": None}, {"a": 2}) and not headers_match({"a": None}, {"b": 2})
    assert not headers_match({"a": 1}, {"a": None})
    assert headers_match({"x-match": "all", "x-k": "v"}, None) and not headers_match({"x-match": "any", "x-k": "v"}, None)
    assert headers_match({"x-match": "any-with-x", "x-k": "v", "a": 9}, {"x-k": "v"})


def test_x_match_is_validated_with_rabbitmqs_texts() -> None:
    assert all(x_match_error({"x-match": mode}) is None for mode in ("all", "any", "all-with-x", "any-with-x"))
    assert x_match_error({"a": 1}) is None
    assert x_match_error({"x-match": "foo"}) == ('Invalid x-match field value <<"foo">>; '
                                                 "expected all, any, all-with-x, or any-with-x")
    assert (x_match_error({"x-match": 1}) or "").startswith("Invalid x-match field type ")


def test_each_routing_fault_changes_what_its_rule_judges() -> None:
    one_word = rules_with(frozenset({"topic_hash_one_word"}))
    assert one_word.topic_match("a.#", "a.b") and not one_word.topic_match("a.#", "a.b.c")
    as_all = rules_with(frozenset({"headers_any_as_all"}))
    assert not as_all.headers_match({"x-match": "any", "a": 1, "b": 2}, {"a": 1})
    assert binding_matches("headers", "", {"x-match": "any", "a": 1, "b": 2}, "", {"a": 1})
    queues: list[Any] = [object()] * 2  # one queue reached twice
    assert len(rules_with(frozenset({"copy_per_binding"})).one_copy(queues)) == 2 and len(Rules().one_copy(queues)) == 1
