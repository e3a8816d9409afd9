"""Exchange routing: direct, fanout, topic and headers matching (pure functions).

Rules: topic words are separated by '.', '*' matches exactly one word, '#' zero or more
(0-9-1 §3.1.3.3); headers bindings use `x-match` all (default) / any, and the RabbitMQ
variants all-with-x / any-with-x, which also compare `x-` keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

EXCHANGE_TYPES = frozenset({"direct", "fanout", "topic", "headers"})


@lru_cache(maxsize=4096)
def _topic_words(text: str) -> tuple[str, ...]:
    return tuple(text.split("."))


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


def binding_matches(kind: str, binding_key: str, binding_args: Mapping[str, Any],
                    routing_key: str, headers: Mapping[str, Any] | None) -> bool:
    if kind == "fanout":
        return True
    if kind == "direct":
        return binding_key == routing_key
    if kind == "topic":
        return topic_matches(binding_key, routing_key)
    if kind == "headers":
        return headers_match(binding_args, headers)
    return False
