"""Profiles: a base (the spec or a RabbitMQ version) plus the capabilities a broker claims.

Responsibility: turn the `--profile` choice and a broker's `connection.start` server-properties
into a `Profile` that says, per rule, what the broker is judged by (docs/design.md decisions 4, 11).

Rules:
- The base: `auto` reads product and version (RabbitMQ ≥4.3 → rabbitmq-4.3, ≥4.0 → rabbitmq-4.0,
  ≥3.12 → rabbitmq-3.12, else rabbitmq-3.10; the reference broker says which RabbitMQ it
  emulates); any other product gets the spec base `amqp-0-9-1`. `rabbitmq-compatible[:VERSION]`
  is a RabbitMQ base for a broker that promises RabbitMQ compatibility wholesale.
- A version with no profile of its own (older than the oldest, between two, newer than the
  newest) is judged by the newest profile not newer than it (the oldest for an older one), and
  `range_note` says so for the console, the run record and the report (`version_fit`, pure). What
  that version lacks is known only for the queue types (`QUEUE_TYPE_SINCE`, from RabbitMQ's
  release notes): `lacks()` gives the reason their checks are not-applicable. Anything else that
  changed between the version and its profile is not known to the profile; the note says whose
  rules judge it.
- The claims: what server-properties.capabilities advertises as true, plus what the user
  declares (`--capability`). A RabbitMQ base claims every capability.
- A rule of a RabbitMQ extension (its catalogue `capability`) that the broker claims is judged
  by the extension's semantics in `extension_profile` (the newest RabbitMQ profile unless the
  user names another). One it does not claim is `not-claimed` where the spec has no such
  behaviour; that is not the same as `not-applicable` (the profile's version has no such rule).
- A test runs under `for_rules(ids)`: the view whose `name` is the profile the test's rules are
  judged by, so the model and the suite read one name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from conformance.catalogue.rules import (
    ADVERTISED_CAPABILITIES,
    CAPABILITIES,
    NOT_APPLICABLE,
    PROFILES,
    all_rules,
    rule,
)

AUTO = "auto"
SPEC = "amqp-0-9-1"
NEWEST = PROFILES[0]  # rabbitmq-4.3
COMPATIBLE = "rabbitmq-compatible"
NOT_CLAIMED = "not-claimed"


class ProfileError(ValueError):
    """A profile, capability or extension profile the catalogue does not know."""


def version_numbers(text: str) -> tuple[int, ...]:
    """The numbers of a version ("4.3.6" -> (4, 3, 6); at most three)."""
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


# Queue types younger than RabbitMQ versions still in use, with the release that brought each
# (RabbitMQ 3.8.0 and 3.9.0 release notes): a broker of an older version has none, so a check of
# one is not-applicable there, not failed.
QUEUE_TYPE_SINCE: Mapping[str, str] = MappingProxyType({"quorum": "3.8", "stream": "3.9"})


def version_fit(version: str) -> tuple[str, str | None]:
    """The rabbitmq-* profile that judges a RabbitMQ `version` ("4.3.6", "3.10", ...), and the note
    a person needs when it is not that version's own profile: the newest profile not newer than the
    version judges it (a profile's rules hold until a newer profile changes them), the oldest
    profile a version older than every profile."""
    number = version_numbers(version)
    if not number:
        raise ProfileError(f"{version!r} is not a RabbitMQ version")
    ours = PROFILES[:-1]  # newest first
    for profile in ours:
        own = version_numbers(profile.removeprefix("rabbitmq-"))
        if number >= own:
            if number[: len(own)] == own:
                return profile, None
            if profile == ours[0]:
                return profile, f"judged by {profile}, the newest profile; RabbitMQ {version} is newer"
            return profile, f"judged by {profile}, the nearest older profile; RabbitMQ {version} has no profile of its own"
    return ours[-1], f"judged by {ours[-1]}, the oldest profile; RabbitMQ {version} predates it"


def rabbitmq_profile(version: str) -> str:
    """The rabbitmq-* profile that judges a RabbitMQ `version` (see `version_fit`)."""
    return version_fit(version)[0]


def rabbitmq_version(server_properties: Mapping[str, Any]) -> str | None:
    """The RabbitMQ version a broker stands for: the one it emulates, else its own when it is
    RabbitMQ (None for any other product, or a RabbitMQ that does not say)."""
    emulates = str(server_properties.get("emulates", ""))
    if emulates.startswith("RabbitMQ "):
        return emulates.removeprefix("RabbitMQ ").strip()
    if str(server_properties.get("product", "")).lower() == "rabbitmq":
        return str(server_properties.get("version", "")).strip() or None
    return None


def detect(server_properties: Mapping[str, Any]) -> str:
    """The base profile for a broker's `connection.start` server-properties."""
    version = rabbitmq_version(server_properties)
    if version is not None:
        return rabbitmq_profile(version)
    if str(server_properties.get("product", "")).lower() == "rabbitmq":
        return PROFILES[-2]  # a RabbitMQ that does not say its version: the oldest profile
    return SPEC


def advertised(server_properties: Mapping[str, Any]) -> frozenset[str]:
    """The capabilities server-properties.capabilities sets to true (any name, known or not)."""
    caps = server_properties.get("capabilities")
    if not isinstance(caps, Mapping):
        return frozenset()
    return frozenset(str(name) for name, value in caps.items() if value is True)


def check_choice(choice: str, declared: Iterable[str] = (), extension_profile: str = NEWEST) -> None:
    """Raise `ProfileError` (one clear line) for an unknown profile, capability or extension profile."""
    if choice != AUTO and choice not in PROFILES and not choice.startswith(COMPATIBLE):
        raise ProfileError(f"--profile {choice!r}: unknown profile (one of: {', '.join(choices())})")
    if choice.startswith(COMPATIBLE):
        _compatible_base(choice)
    unknown = sorted(set(declared) - set(CAPABILITIES))
    if unknown:
        raise ProfileError(f"--capability {', '.join(unknown)}: unknown capability (one of: {', '.join(CAPABILITIES)})")
    if extension_profile not in PROFILES[:-1]:
        raise ProfileError(f"--extension-profile {extension_profile!r}: not a RabbitMQ profile "
                           f"(one of: {', '.join(PROFILES[:-1])})")


def choices() -> list[str]:
    return [AUTO, *PROFILES, COMPATIBLE, f"{COMPATIBLE}:VERSION"]


def _compatible_base(choice: str) -> str:
    if choice == COMPATIBLE:
        return NEWEST
    prefix, _, version = choice.partition(":")
    if prefix != COMPATIBLE or not version or not version_numbers(version):
        raise ProfileError(f"--profile {choice!r}: write {COMPATIBLE} or {COMPATIBLE}:VERSION (e.g. {COMPATIBLE}:4.0)")
    return rabbitmq_profile(version)


def resolve(choice: str, server_properties: Mapping[str, Any], declared: Iterable[str] = (),
            extension_profile: str = NEWEST) -> Profile:
    """The profile for a `--profile` choice, the broker's server-properties and declared capabilities."""
    check_choice(choice, declared, extension_profile)
    if choice == AUTO:
        base = detect(server_properties)
    elif choice.startswith(COMPATIBLE):
        base = _compatible_base(choice)
    else:
        base = choice
    return Profile(base, dict(server_properties), label=choice, declared=frozenset(declared),
                   extension_profile=extension_profile)


@dataclass(frozen=True)
class Profile:
    """A base profile, the broker's claims, and (in a test) the profile that test is judged by."""

    base: str
    server_properties: dict[str, Any] = field(default_factory=dict)
    label: str = ""  # the user's choice: auto, a profile, rabbitmq-compatible[:VERSION]
    declared: frozenset[str] = frozenset()
    extension_profile: str = NEWEST
    judging: str | None = None  # set by `for_rules`: the profile of the running test's rules

    def __post_init__(self) -> None:
        if self.base not in PROFILES:
            raise ProfileError(f"unknown profile {self.base!r} (one of: {', '.join(choices())})")

    @property
    def name(self) -> str:
        """The profile the current rules are judged by (the base outside a test)."""
        return self.judging or self.base

    @property
    def rabbitmq(self) -> bool:
        """True when the base is a RabbitMQ version (every RabbitMQ extension is claimed)."""
        return self.base.startswith("rabbitmq-")

    @property
    def claims(self) -> frozenset[str]:
        """The capabilities the broker claims: advertised as true, plus declared by the user."""
        return (advertised(self.server_properties) | self.declared) & frozenset(CAPABILITIES)

    def supports(self, capability: str) -> bool:
        """Whether rules of `capability` apply: always on a RabbitMQ base, else when claimed."""
        if capability not in CAPABILITIES:
            raise ProfileError(f"unknown capability {capability!r}")
        return self.rabbitmq or capability in self.claims

    def expect(self, rule_id: str) -> str:
        """required, not-applicable, not-claimed or variant:<what differs> for this broker."""
        entry = rule(rule_id)
        if self.rabbitmq or entry.capability is None:
            return entry.expect[self.base]
        if entry.capability in self.claims:
            return entry.expect[self.extension_profile]
        plain = entry.expect[SPEC]
        return NOT_CLAIMED if plain == NOT_APPLICABLE else plain

    def judging_profile(self, rule_id: str) -> str:
        """The profile whose expectation judges `rule_id`: the extension profile for a RabbitMQ
        extension the broker claims on a non-RabbitMQ base, else the base."""
        capability = rule(rule_id).capability
        if not self.rabbitmq and capability is not None and capability in self.claims:
            return self.extension_profile
        return self.base

    @property
    def version(self) -> str | None:
        """The RabbitMQ version this broker stands for: rabbitmq-compatible:VERSION's, else the one its
        server-properties report (`rabbitmq_version`); None when neither says."""
        if self.label.startswith(f"{COMPATIBLE}:"):
            return self.label.partition(":")[2]
        return rabbitmq_version(self.server_properties)

    @property
    def range_note(self) -> str | None:
        """When the base was picked from a version that has no profile of its own (auto, or
        rabbitmq-compatible:VERSION): which profile judges it, and why (`version_fit`)."""
        version = self.version
        picked = self.label == AUTO or self.label.startswith(f"{COMPATIBLE}:")
        if not (picked and self.rabbitmq and version and version_numbers(version)):
            return None
        return version_fit(version)[1]

    def lacks(self, queue_type: str) -> str | None:
        """Why this broker has no `queue_type` queues ("RabbitMQ 3.8.9 has no stream queues: they
        came in 3.9"): its version predates them. None when it has them or its version is unknown."""
        since, version = QUEUE_TYPE_SINCE.get(queue_type), self.version
        if since is None or not version or not version_numbers(version) or version_numbers(version) >= version_numbers(since):
            return None
        return f"RabbitMQ {version} has no {queue_type} queues: they came in {since}"

    def for_rules(self, rule_ids: Iterable[str]) -> Profile:
        """The view a test of `rule_ids` runs under: the extension profile when it judges a claimed
        extension rule on a spec base, else the base."""
        if self.rabbitmq:
            return self
        claimed = any((c := rule(r).capability) is not None and c in self.claims for r in rule_ids)
        return replace(self, judging=self.extension_profile if claimed else None)

    def at_least(self, version: str) -> bool:
        """True when `name` is a rabbitmq-X profile at or above `version` ("4.3", "3.12", ...)."""
        if not self.name.startswith("rabbitmq-"):
            return False
        return version_numbers(self.name.removeprefix("rabbitmq-")) >= version_numbers(version)

    @property
    def capabilities(self) -> dict[str, Any]:
        caps = self.server_properties.get("capabilities")
        return dict(caps) if isinstance(caps, Mapping) else {}

    def has_capability(self, name: str) -> bool:
        return self.capabilities.get(name) is True

    @property
    def display(self) -> str:
        """A one-word name for consoles and results: the base, with its claims on a spec base."""
        if self.label.startswith(COMPATIBLE):
            return f"{COMPATIBLE}:{self.base.removeprefix('rabbitmq-')}"
        if self.rabbitmq or not self.claims:
            return self.base
        return f"{self.base}+{len(self.claims)} capabilities"

    def explain(self) -> list[str]:
        """Why this profile: the base and its reason, then per capability the rules it brings in."""
        product = " ".join(str(self.server_properties.get(k, "")) for k in ("product", "version")).strip()
        reason = {AUTO: f"detected from server-properties ({product or 'no product'})",
                  "": "given"}.get(self.label, f"chosen with --profile {self.label}")
        lines = [f"base {self.base}: {reason}", *self._version_lines()]
        if self.rabbitmq:
            lines.append("capabilities: every RabbitMQ extension of that version is judged")
            return lines
        ads, declared = advertised(self.server_properties), self.declared
        lines.append(f"advertised: {', '.join(sorted(ads)) or 'none'}"
                     + (f"; declared: {', '.join(sorted(declared))}" if declared else ""))
        for capability in CAPABILITIES:
            ids = [r.id for r in all_rules() if r.capability == capability]
            if not ids:
                continue
            if capability in self.claims:
                lines.append(f"+ {capability}: {', '.join(ids)} judged as {self.extension_profile}")
            else:
                lines.append(f"- {capability} not claimed: {', '.join(ids)}")
        ruled = {r.capability for r in all_rules()}
        unruled = sorted(ads - ruled)
        if unruled:
            known = set(ADVERTISED_CAPABILITIES)
            lines.append("advertised, no rule in the catalogue yet: "
                         + ", ".join(c if c in known else f"{c} (unknown)" for c in unruled))
        return lines

    def _version_lines(self) -> list[str]:
        """explain()'s lines on the version: the range note, and the queue types it predates."""
        lines = [self.range_note] if self.range_note else []
        lacking = [f"{kind} queues (they came in {since})" for kind, since in QUEUE_TYPE_SINCE.items()
                   if self.lacks(kind)]
        if lacking:
            lines.append(f"RabbitMQ {self.version} predates {', '.join(lacking)}: their tests are not-applicable")
        return lines
