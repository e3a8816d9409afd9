"""Exchange routing: direct, fanout, topic and headers matching (pure functions).

Rules: direct compares the whole key (ROUTE-03), fanout matches every binding (ROUTE-04);
topic words are separated by '.', '*' matches exactly one word, '#' zero or more, a word may be
empty and the empty key has no words (ROUTE-05, RabbitMQ's split_topic_key); headers bindings
use `x-match` all (default) / any, a void binding value matching presence, `x-` keys left out
(ROUTE-06), and the RabbitMQ variants all-with-x / any-with-x, which compare them (ROUTE-07);
any other x-match is refused at bind time (ROUTE-08, `x_match_error`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

EXCHANGE_TYPES = frozenset({"direct", "fanout", "topic", "headers"})


@lru_cache(maxsize=4096)
def _topic_words(text: str) -> tuple[str, ...]:
    return tuple(text.split(".")) if text else ()  # "" has no words, "a." has "a" and ""


def topic_matches(pattern: str, routing_key: str) -> bool:
    return _match(_topic_words(pattern), _topic_words(routing_key))


@lru_cache(maxsize=65536)
def _match(pattern: tuple[str, ...], words: tuple[str, ...]) -> bool:
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(_match(rest, words[i:]) for i in range(len(words) + 1))
    if not words:
        return False
    if head == "*" or head == words[0]:
        return _match(rest, words[1:])
    return False


def headers_match(binding_args: Mapping[str, Any], headers: Mapping[str, Any] | None) -> bool:
    mode = str(binding_args.get("x-match", "all"))
    with_x = mode.endswith("-with-x")
    wanted = {k: v for k, v in binding_args.items() if k != "x-match" and (with_x or not k.startswith("x-"))}
    headers = headers or {}

    def one(key: str, value: Any) -> bool:
        if key not in headers:
            return False
        return value is None or headers[key] == value  # a void binding value matches presence

    if mode.startswith("any"):
        return any(one(k, v) for k, v in wanted.items())
    return all(one(k, v) for k, v in wanted.items())


X_MATCH_MODES = ("all", "any", "all-with-x", "any-with-x")
# RabbitMQ's names of field-value types, for the text of a non-longstr x-match (ROUTE-08)
_TYPE_NAMES: tuple[tuple[type, str], ...] = ((bool, "bool"), (int, "long"), (float, "double"),
                                             (bytes, "binary"), (dict, "table"), (list, "array"))


def x_match_error(binding_args: Mapping[str, Any]) -> str | None:
    """Why a headers binding's x-match is refused (validate_binding), None when it is valid."""
    if "x-match" not in binding_args:
        return None
    value = binding_args["x-match"]
    if isinstance(value, str):
        if value in X_MATCH_MODES:
            return None
        return f'Invalid x-match field value <<"{value}">>; expected all, any, all-with-x, or any-with-x'
    kind = next((name for t, name in _TYPE_NAMES if isinstance(value, t)), "void")
    return f"Invalid x-match field type {kind} (value {value}); expected longstr"


TopicMatch = Callable[[str, str], bool]
HeadersMatch = Callable[[Mapping[str, Any], Mapping[str, Any] | None], bool]


def binding_matches(kind: str, binding_key: str, binding_args: Mapping[str, Any],
                    routing_key: str, headers: Mapping[str, Any] | None, *,
                    topic: TopicMatch = topic_matches, header: HeadersMatch = headers_match) -> bool:
    """Whether a binding of an exchange of `kind` matches a message (`topic` and `header`: the
    broker's matching functions, a fault's substitutes)."""
    if kind == "fanout":
        return True
    if kind == "direct":
        return binding_key == routing_key
    if kind == "topic":
        return topic(binding_key, routing_key)
    if kind == "headers":
        return header(binding_args, headers)
    return False
