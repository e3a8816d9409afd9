"""What the topology machine (conformance/suite/steps/machine_topology.py) draws: names, routing
keys and patterns, headers and binding arguments, exchange and queue declarations.

Keys, patterns, headers and binding arguments come from short lists that put the rules at their
edges (`*` and `#` meeting zero, one and two words; x-match all/any and `-with-x` meeting a full, a
partial and no match), so a few hundred examples reach them; `fill` makes a key from a pattern.
"""

from __future__ import annotations

from hypothesis import strategies as st

from conformance.model.topology import Exchange, Queue

NAMES = 4  # logical exchanges x0..x3 and queues q0..q3
# keys and patterns from short lists where `*` and `#` meet zero, one and two words (ROUTE-05's edges)
WORDS = st.sampled_from(["", "a", "b", "a.b", "b.a", "a.a", "a.b.b"])
PATTERNS = st.sampled_from(["", "a", "b", "*", "#", "a.*", "a.#", "#.b", "*.b", "a.#.b", "#.*", "*.*", "#.#"])
# headers and binding arguments from short lists where x-match all/any (and -with-x) meet a full, a
# partial and no match, and `x-` keys are counted or not (ROUTE-06/07's edges)
HEADERS = st.sampled_from([{}, {"h1": "1"}, {"h2": "2"}, {"h1": "1", "h2": "2"}, {"h1": "2"}, {"x-h": "1"},
                           {"h1": "1", "x-h": "1"}])
BINDING_HEADERS = st.sampled_from([
    {}, {"h1": "1"}, {"x-match": "any", "h1": "1", "h2": "2"}, {"x-match": "all", "h1": "1", "h2": "2"},
    {"x-match": "any", "h1": "1", "x-h": "1"}, {"x-match": "all-with-x", "h1": "1", "x-h": "1"},
    {"x-match": "any-with-x", "h2": "2", "x-h": "1"}, {"h1": "1", "x-h": "2"}])
KINDS = st.sampled_from(["direct", "fanout", "topic", "headers"])
EXCHANGES = st.builds(Exchange, KINDS, st.booleans(), st.booleans(),
                      st.none() | st.integers(0, NAMES - 1).map(lambda n: f"x{n}"))
QUEUES = st.builds(lambda exclusive, auto_delete, durable: Queue(exclusive, auto_delete, durable and not exclusive),
                   st.booleans(), st.booleans(), st.booleans())


def fill(pattern: str, choices: list[int]) -> str:
    """A routing key made from a topic pattern: each `*` one word, each `#` zero to two words."""
    words: list[str] = []
    for n, word in enumerate(pattern.split(".") if pattern else []):
        choice = choices[n % len(choices)]
        if word == "*":
            words.append("ab"[choice % 2])
        elif word == "#":
            words += ["a", "b"][:choice]
        else:
            words.append(word)
    return ".".join(words)
