"""Rule catalogue: the single source of truth for rule IDs, texts and per-profile expectations.

Responsibility: load ``rules.toml`` (package data next to this module) into frozen `Rule`
records and answer lookups: every rule (`all_rules`), one rule by id (`rule`), the areas
(`areas`) and what a rule expects on a profile (`expectation`).

Rules:
- The data lives only in ``rules.toml``; other code names rules by id and never copies their
  text or expectations. The ID scheme and what counts as a seed sentence are documented at the
  top of ``rules.toml``.
- Loading validates the whole file and raises `CatalogueError` naming the offending entry:
  unique, well-formed ids (client rules: area "client", ids CL-<TOPIC>-<nn>, sources
  "RULES.md §n", "0-9-1 §n" or "RabbitMQ docs: page"); known areas and provenance tags; well-formed sources and seed
  references; every profile of `PROFILES` present, no other, each with ``required``,
  ``not-applicable`` or ``variant:<description>``.
- A rule of a RabbitMQ extension names it in `capability` (one of `CAPABILITIES`); profiles
  (conformance.catalogue.profiles) use it to judge brokers by what they claim.
- A rule lists the behaviours its text promises as `clauses` (``[[rule.clauses]]``: a letter
  ``id`` a, b, c... in order, a ``text``, and ``untestable = "<reason>"`` when no wire test can
  observe it); a clause's full id is "<rule>.<letter>" (``PC-02.b``). Every broker rule of the
  `CLAUSED_AREAS` has clauses; a test names those it checks with ``@pytest.mark.clauses(...)``.
- The file is read once per process (cached); `Rule` objects are immutable.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from types import MappingProxyType
from typing import Any

RULES_FILE = "rules.toml"

PROFILES: tuple[str, ...] = ("rabbitmq-4.3", "rabbitmq-4.0", "rabbitmq-3.12", "rabbitmq-3.10", "amqp-0-9-1")
AREAS: tuple[str, ...] = ("errors", "ack", "requeue", "qos", "confirms", "cancel", "timeout", "framing",
                          "messages", "routing", "exchanges", "queues", "ttl", "deadletter", "limits",
                          "policies", "tx", "access", "alarms", "cluster", "client")
CLIENT_AREA = "client"  # rules for client libraries (conformance/client_judge), ids CL-<topic>-<nn>
BROKER_AREAS: tuple[str, ...] = tuple(a for a in AREAS if a != CLIENT_AREA)  # what the broker suite checks
TAGS: frozenset[str] = frozenset({"SRC", "TEST", "DOC", "INF", "LIVE"})

REQUIRED = "required"
NOT_APPLICABLE = "not-applicable"
VARIANT = "variant:"

# RabbitMQ extensions a rule can belong to (`capability` key). The first group are the names
# RabbitMQ advertises in server-properties.capabilities; the second are RabbitMQ features no
# capability announces, which a user declares (`--capability`). docs/design.md decision 11.
ADVERTISED_CAPABILITIES: tuple[str, ...] = (
    "publisher_confirms", "basic.nack", "consumer_cancel_notify", "per_consumer_qos", "connection.blocked",
    "consumer_priorities", "authentication_failure_close", "exchange_exchange_bindings", "direct_reply_to",
)
DECLARED_CAPABILITIES: tuple[str, ...] = ("quorum_queues", "consumer_timeout", "dead_lettering")
CAPABILITIES: tuple[str, ...] = ADVERTISED_CAPABILITIES + DECLARED_CAPABILITIES

# The areas whose every rule is split into clauses (issue 46: clause coverage), in `AREAS` order.
CLAUSED_AREAS: tuple[str, ...] = ("ack", "requeue", "qos", "confirms", "cancel", "timeout", "messages", "errors",
                                 "framing")

_KEYS = frozenset({"id", "area", "title", "text", "source", "tags", "seeds", "expect", "capability", "clauses"})
_CLAUSE_KEYS = frozenset({"id", "text", "untestable"})
_CLAUSE_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_RULES_MD_ID = re.compile(r"[A-Z]+(?:-[0-9A-Za-z.]+)+")  # ACK-01, TMO-3x-1, TMO-4.3-1
_SEED_ID = re.compile(r"S(\d{3})-\d{2}")  # S001-04: seed 001, sentence 04
_RULES_MD_SOURCE = re.compile(r"RULES\.md §\d+(?:\.\d+)?")
_CLIENT_ID = re.compile(r"CL-[A-Z]+-\d{2}")
_CLIENT_SOURCE = re.compile(r"RULES\.md §\d+(?:\.\d+)?|0-9-1 §\d+(?:\.\d+)*|RabbitMQ docs: [a-z-]+")
_SEED_REF = re.compile(r"seeds/(\d{3})_[0-9a-f]+\.txt#L[1-9]\d*")
# A rule RULES.md does not state, settled with RabbitMQ's source at the named tags:
# "rabbitmq-server v3.10.8, v4.3.0: deps/rabbit/src/rabbit_amqqueue.erl".
SERVER_SOURCE = re.compile(r"rabbitmq-server v\d+\.\d+\.\d+(?:, v\d+\.\d+\.\d+)*: deps/\S+(?:, deps/\S+)*")


class CatalogueError(ValueError):
    """rules.toml is malformed; the message names the entry and what is wrong."""


@dataclass(frozen=True, slots=True)
class Clause:
    """One behaviour a rule promises: `id` is "<rule>.<letter>" (``PC-02.b``)."""

    id: str
    text: str
    untestable: str | None = None  # why no wire test can observe it; None: a test must check it

    @property
    def rule_id(self) -> str:
        return self.id.rsplit(".", 1)[0]


@dataclass(frozen=True, slots=True)
class Rule:
    """One catalogue entry: a RULES.md rule or an uncovered seed sentence (``S<seed>-<nn>``)."""

    id: str
    area: str
    title: str
    text: str
    source: str  # "RULES.md §<n>", "seeds/<file>#L<line>" or "rabbitmq-server <tags>: <paths>"
    tags: tuple[str, ...]  # provenance: SRC, TEST, DOC, INF, LIVE
    seeds: tuple[str, ...]  # seed sentences this rule covers, "seeds/<file>#L<line>"
    expect: Mapping[str, str] = field(hash=False)  # profile -> required | not-applicable | variant:...
    capability: str | None = None  # the RabbitMQ extension the rule belongs to (CAPABILITIES)
    clauses: tuple[Clause, ...] = ()  # the behaviours `text` promises, in order

    @property
    def plain_title(self) -> str:
        """The title without its Markdown (titles mark code as `basic.nack`): for the console and plain text."""
        return plain_markdown(self.title)


def plain_markdown(text: str) -> str:
    """A catalogue title or short text as plain text: its inline code marks dropped."""
    return text.replace("`", "")


def parse_catalogue(toml_text: str) -> tuple[Rule, ...]:
    """Parse and validate catalogue TOML; raise `CatalogueError` on any defect."""
    try:
        data = tomllib.loads(toml_text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"{RULES_FILE}: not valid TOML: {exc}") from exc
    entries = data.get("rule")
    if not isinstance(entries, list) or not entries:
        raise CatalogueError(f"{RULES_FILE}: no [[rule]] tables")
    rules = tuple(_parse_rule(index, entry) for index, entry in enumerate(entries, start=1))
    seen: set[str] = set()
    for r in rules:
        if r.id in seen:
            raise CatalogueError(f"rule {r.id}: duplicate id")
        seen.add(r.id)
    return rules


@cache
def all_rules() -> tuple[Rule, ...]:
    """Every rule, in catalogue order (read from the package's rules.toml once)."""
    resource = files("conformance.catalogue").joinpath(RULES_FILE)
    return parse_catalogue(resource.read_text(encoding="utf-8"))


@cache
def _index() -> Mapping[str, Rule]:
    return MappingProxyType({r.id: r for r in all_rules()})


def rule(rule_id: str) -> Rule:
    """The rule with this id; KeyError naming the id if the catalogue has none."""
    try:
        return _index()[rule_id]
    except KeyError:
        raise KeyError(f"unknown rule id {rule_id!r}: not in the rule catalogue ({RULES_FILE})") from None


@cache
def areas() -> tuple[str, ...]:
    """The areas that have rules, in the canonical order of `AREAS`."""
    used = {r.area for r in all_rules()}
    return tuple(a for a in AREAS if a in used)


@cache
def _clause_index() -> Mapping[str, Clause]:
    return MappingProxyType({c.id: c for r in all_rules() for c in r.clauses})


def clause(clause_id: str) -> Clause:
    """The clause with this full id ("PC-02.b"); KeyError naming it if the catalogue has none."""
    try:
        return _clause_index()[clause_id]
    except KeyError:
        raise KeyError(f"unknown clause id {clause_id!r}: not in the rule catalogue ({RULES_FILE})") from None


def clause_problem(clause_id: str, rule_ids: Sequence[str], known: Mapping[str, Clause]) -> str | None:
    """What is wrong with a test naming `clause_id` while its `rules` marker names `rule_ids`, or None."""
    found = known.get(clause_id)
    if found is None:
        return f"unknown clause id {clause_id!r}: not in the rule catalogue (a clause id is <rule>.<letter>)"
    if found.rule_id not in rule_ids:
        return (f"clause {clause_id} belongs to rule {found.rule_id}, which the test's rules marker "
                f"({', '.join(rule_ids) or 'none'}) does not name")
    return None


def expectation(rule_id: str, profile: str) -> str:
    """What `rule_id` expects on `profile`: required, not-applicable or variant:<description>."""
    if profile not in PROFILES:
        raise KeyError(f"unknown profile {profile!r}; known profiles: {', '.join(PROFILES)}")
    return rule(rule_id).expect[profile]


def _parse_rule(index: int, entry: object) -> Rule:
    if not isinstance(entry, dict):
        raise CatalogueError(f"rule #{index}: not a table")
    rule_id = _text(entry, "id", f"rule #{index}")
    where = f"rule {rule_id}"
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        raise CatalogueError(f"{where}: unknown keys {unknown}")
    area = _text(entry, "area", where)
    if area not in AREAS:
        raise CatalogueError(f"{where}: unknown area {area!r}; known areas: {', '.join(AREAS)}")
    source = _text(entry, "source", where)
    if area == CLIENT_AREA or _CLIENT_ID.fullmatch(rule_id):
        _check_client_rule(rule_id, area, source, where)
    else:
        _check_id_and_source(rule_id, source, where)
    tags = _texts(entry, "tags", where)
    if not tags or not set(tags) <= TAGS:
        raise CatalogueError(f"{where}: tags must be a non-empty subset of {sorted(TAGS)}, got {list(tags)}")
    capability = entry.get("capability")
    if capability is not None and capability not in CAPABILITIES:
        raise CatalogueError(f"{where}: unknown capability {capability!r}; known: {', '.join(CAPABILITIES)}")
    seeds = _texts(entry, "seeds", where) if "seeds" in entry else ()
    for ref in seeds:
        if not _SEED_REF.fullmatch(ref):
            raise CatalogueError(f"{where}: seed reference {ref!r} is not 'seeds/<file>#L<line>'")
    return Rule(
        id=rule_id,
        area=area,
        title=_text(entry, "title", where),
        text=_text(entry, "text", where),
        source=source,
        tags=tags,
        seeds=seeds,
        expect=_parse_expect(entry.get("expect"), where),
        capability=capability,
        clauses=_parse_clauses(rule_id, entry.get("clauses", []), where),
    )


def _parse_clauses(rule_id: str, value: object, where: str) -> tuple[Clause, ...]:
    if not isinstance(value, list):
        raise CatalogueError(f"{where}: clauses must be an array of tables")
    if len(value) > len(_CLAUSE_LETTERS):
        raise CatalogueError(f"{where}: more than {len(_CLAUSE_LETTERS)} clauses; split the rule")
    clauses: list[Clause] = []
    for letter, entry in zip(_CLAUSE_LETTERS, value, strict=False):
        if not isinstance(entry, dict):
            raise CatalogueError(f"{where}: clause {letter}: not a table")
        unknown = sorted(set(entry) - _CLAUSE_KEYS)
        if unknown:
            raise CatalogueError(f"{where}: clause {letter}: unknown keys {unknown}")
        if entry.get("id") != letter:
            raise CatalogueError(f"{where}: clause ids are letters in order; clause {len(clauses) + 1} "
                                 f"must have id {letter!r}, got {entry.get('id')!r}")
        here = f"{where}: clause {letter}"
        untestable = _text(entry, "untestable", here) if "untestable" in entry else None
        clauses.append(Clause(f"{rule_id}.{letter}", " ".join(_text(entry, "text", here).split()), untestable))
    return tuple(clauses)


def _check_id_and_source(rule_id: str, source: str, where: str) -> None:
    seed_id = _SEED_ID.fullmatch(rule_id)
    if seed_id:
        ref = _SEED_REF.fullmatch(source)
        if not ref or ref.group(1) != seed_id.group(1):
            raise CatalogueError(f"{where}: source must be 'seeds/{seed_id.group(1)}_<hash>.txt#L<line>'")
    elif _RULES_MD_ID.fullmatch(rule_id):
        if not (_RULES_MD_SOURCE.fullmatch(source) or SERVER_SOURCE.fullmatch(source)):
            raise CatalogueError(f"{where}: source must be 'RULES.md §<section>' or "
                                 f"'rabbitmq-server v<x.y.z>[, v<x.y.z>]: deps/<path>', got {source!r}")
    else:
        raise CatalogueError(f"{where}: id is neither a RULES.md id nor 'S<seed>-<nn>'")


def _check_client_rule(rule_id: str, area: str, source: str, where: str) -> None:
    if area != CLIENT_AREA or not _CLIENT_ID.fullmatch(rule_id):
        raise CatalogueError(f"{where}: client rules have area {CLIENT_AREA!r} and ids 'CL-<TOPIC>-<nn>'")
    if not _CLIENT_SOURCE.fullmatch(source):
        raise CatalogueError(f"{where}: a client rule's source is 'RULES.md §<n>', '0-9-1 §<n>' or "
                             f"'RabbitMQ docs: <page>', got {source!r}")


def _parse_expect(value: object, where: str) -> Mapping[str, str]:
    if not isinstance(value, dict):
        raise CatalogueError(f"{where}: expect must be a table of profile = expectation")
    missing = [p for p in PROFILES if p not in value]
    extra = sorted(set(value) - set(PROFILES))
    if missing or extra:
        raise CatalogueError(
            f"{where}: expect must name exactly {list(PROFILES)}; missing {missing}, unknown {extra}"
        )
    for profile in PROFILES:
        if not _well_formed_expectation(value[profile]):
            raise CatalogueError(
                f"{where}: expect[{profile!r}] = {value[profile]!r}; "
                f"want {REQUIRED!r}, {NOT_APPLICABLE!r} or '{VARIANT}<description>'"
            )
    return MappingProxyType({profile: value[profile] for profile in PROFILES})


def _well_formed_expectation(value: object) -> bool:
    if not isinstance(value, str):
        return False
    if value in (REQUIRED, NOT_APPLICABLE):
        return True
    if not value.startswith(VARIANT):
        return False
    description = value[len(VARIANT) :]
    return bool(description) and description == description.strip() and "\n" not in description


def _text(entry: dict[Any, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise CatalogueError(f"{where}: {key!r} must be a non-empty string")
    return value.strip()


def _texts(entry: dict[Any, Any], key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise CatalogueError(f"{where}: {key!r} must be a list of non-empty strings")
    if len(set(value)) != len(value):
        raise CatalogueError(f"{where}: {key!r} has duplicates")
    return tuple(value)
