"""The catalogue as a document: docs/RULES.md, generated from rules.toml (and the seed excerpts).

Responsibility: render the rule catalogue as Markdown (`render_markdown`), the file a user
reads (docs/RULES.md) and the report's catalogue page; name the anchor of every rule and of
every source it cites (`rule_anchor`, `source_anchor`); hold the seed excerpts (`excerpt`).

Rules:
- rules.toml stays the single source: this module only lays it out. docs/RULES.md is
  generated ("do not edit"); `python -m conformance.gate.document` rewrites it and
  `--check` exits 1 when it is stale (`make test` runs the check, a test compares too).
- Every rule has the anchor `#<ID>` (`<a id>`), every section of the starting catalogue a
  rule cites ("RULES.md §1") the anchor `#rules-md-1` listing the rules taken from it, and
  every seed line a rule cites ("seeds/<file>#L<n>") the anchor `#seed-<nnn>-L<n>` with that
  line quoted: the seed documents are not in the repository, their cited lines are.
- The cited lines live in `seeds.toml` (package data next to rules.toml), extracted from a
  directory of seed documents by `--seeds DIR`; a citation without its line is an error.
- Text from the catalogue is escaped for Markdown and HTML: it can hold `<CONSTANT>` or `*`.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from conformance.catalogue.rules import AREAS, PROFILES, REQUIRED, SERVER_SOURCE, Rule, all_rules

TARGET = Path(__file__).resolve().parents[2] / "docs" / "RULES.md"
SEEDS_FILE = "seeds.toml"
REGENERATE = "python -m conformance.gate.document"
_SEED_REF = re.compile(r"seeds/(?P<file>(?P<seed>\d{3})_[0-9a-f]+\.txt)#L(?P<line>\d+)")
_SECTION = re.compile(r"RULES\.md §(?P<section>\d+(?:\.\d+)?)")
# client rules also cite the 0-9-1 specification and RabbitMQ's guides (conformance.catalogue.rules)
_OTHER_SOURCE = re.compile(r"0-9-1 §(?P<spec>[\d.]+)|RabbitMQ docs: (?P<page>[a-z-]+)")
# Sections of the starting catalogue (the design card's RULES.md) that rules cite as their source.
SECTIONS = {
    "0": "Error-reporting conventions", "1": "Delivery tags and consumer acknowledgements",
    "2": "Requeue position, the redelivered flag and delivery counts", "3": "Prefetch / basic.qos",
    "4": "Publisher confirms", "5": "Consumer cancel notification",
    "6.1": "Consumer timeouts: the settings and the defaults",
    "6.2": "Consumer timeouts: 3.x to 4.2 behaviour, implemented in the channel",
    "6.4": "Consumer timeouts: 4.3.0+ behaviour, implemented in the queue",
    "7": "Channel and connection errors, framing, heartbeats",
}
_VALUES = (
    "`required`: the broker must behave as the text says; `not-applicable`: the behaviour does not "
    "exist on that profile (the tests are skipped with that verdict); `variant: …`: that version "
    "behaves differently, as described, and the tests check the variant (a broker doing it passes). "
    "A broker's bug is not a variant: it fails, and a baseline can accept it (README, \"Verdicts, "
    "variants and baselines\")."
)


@dataclass(frozen=True)
class SeedLine:
    ref: str  # seeds/<file>#L<n>
    file: str
    seed: str  # "002"
    line: int
    text: str
    topic: str  # what the seed document is about


def rule_anchor(rule_id: str) -> str:
    return rule_id


def source_anchor(ref: str) -> str | None:
    """The anchor of a cited source ("RULES.md §1", "seeds/...#L4", "0-9-1 §4.2.7", "RabbitMQ docs: page"),
    None for anything else."""
    section = _SECTION.fullmatch(ref)
    if section:
        return f"rules-md-{section['section'].replace('.', '-')}"
    seed = _SEED_REF.fullmatch(ref)
    if seed:
        return f"seed-{seed['seed']}-L{seed['line']}"
    other = _OTHER_SOURCE.fullmatch(ref)
    if other:
        return f"spec-{other['spec'].replace('.', '-')}" if other["spec"] else f"rabbitmq-docs-{other['page']}"
    if SERVER_SOURCE.fullmatch(ref):
        return "rabbitmq-server-" + re.sub(r"[^0-9a-z]+", "-", ref.lower().removeprefix("rabbitmq-server ")).strip("-")
    return None


@cache
def _seed_data() -> dict[str, Any]:
    return tomllib.loads(files("conformance.catalogue").joinpath(SEEDS_FILE).read_text(encoding="utf-8"))


def excerpt(ref: str) -> SeedLine:
    """The cited seed line; KeyError when seeds.toml does not hold it (regenerate with --seeds)."""
    found = _SEED_REF.fullmatch(ref)
    documents: dict[str, Any] = _seed_data().get("seed", {})
    document: dict[str, Any] = documents.get(found["file"], {}) if found else {}
    lines: dict[str, str] = document.get("lines", {})
    if not found or found["line"] not in lines:
        raise KeyError(f"no excerpt for {ref!r} in {SEEDS_FILE}: run `{REGENERATE} --seeds DIR`")
    return SeedLine(ref, found["file"], found["seed"], int(found["line"]), str(lines[found["line"]]),
                    str(document.get("topic", "")))


def cited_seed_refs(rules: Iterable[Rule]) -> list[str]:
    """Every seed line the catalogue cites (as a source or in `seeds`), in document order."""
    found = {m for r in rules for ref in (r.source, *r.seeds) if (m := _SEED_REF.fullmatch(ref))}
    return [m[0] for m in sorted(found, key=lambda m: (m["file"], int(m["line"])))]


def escape(text: str) -> str:
    """Catalogue text as literal Markdown (no HTML, no emphasis, no links)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\*_\[\]])", r"\\\1", text)


def _link(ref: str) -> str:
    anchor = source_anchor(ref)
    return f"[{escape(ref)}](#{anchor})" if anchor else escape(ref)


def _expectations(rule: Rule) -> list[str]:
    if all(v == REQUIRED for v in rule.expect.values()):
        return ["Expected: `required` on every profile."]
    lines = ["Expected per profile:", ""]
    for profile in PROFILES:
        value = rule.expect[profile]
        shown = f"`variant`: {escape(value.removeprefix('variant:'))}" if value.startswith("variant:") else f"`{value}`"
        lines.append(f"- `{profile}`: {shown}")
    return lines


def _quote(text: str) -> list[str]:
    return [f"> {escape(line)}" if line.strip() else ">" for line in text.splitlines()]


def _clauses(rule: Rule) -> list[str]:
    """The behaviours the rule promises, one item each (`amqp-conformance rules` shows their tests)."""
    if not rule.clauses:
        return []
    return ["Clauses:", "", *(f"- `{c.id}` {escape(c.text)}"
                              + (f" *(untestable over the wire: {escape(c.untestable)})*" if c.untestable else "")
                              for c in rule.clauses), ""]


def _rule_entry(rule: Rule) -> list[str]:
    lines = [f'### <a id="{rule_anchor(rule.id)}"></a>{rule.id}: {escape(rule.title)}', "",
             f"Area `{rule.area}` · provenance {', '.join(rule.tags)} · source {_link(rule.source)}"
             + (f" · RabbitMQ extension `{rule.capability}`" if rule.capability else ""), ""]
    lines += [*_quote(rule.text), "", *_clauses(rule), *_expectations(rule), ""]
    if rule.seeds:
        cited = ", ".join(_link(ref) for ref in rule.seeds)
        lines += [f"Seed sentences covered: {cited}.", ""]
    return lines


def _sources(rules: tuple[Rule, ...]) -> list[str]:
    lines = ["## Sources", "",
             "A rule's source is a section of the starting catalogue (\"RULES.md §n\", the design card's "
             "catalogue that this file supersedes) or a sentence of a seed document (\"seeds/<file>#L<n>\", "
             "the RabbitMQ documentation pages the project was built from). The seed documents are not part "
             "of the repository; every line the catalogue cites is quoted here.", ""]
    for section, title in SECTIONS.items():
        taken = [r.id for r in rules if r.source == f"RULES.md §{section}"]
        if taken:
            anchor = source_anchor(f"RULES.md §{section}")
            lines += [f'### <a id="{anchor}"></a>RULES.md §{section}: {title}', "",
                      "Rules: " + ", ".join(f"[{i}](#{rule_anchor(i)})" for i in taken) + ".", ""]
    others = sorted({r.source for r in rules if _OTHER_SOURCE.fullmatch(r.source)})
    if others:
        lines += ["### Client rules: the 0-9-1 specification and RabbitMQ's guides", "",
                  "The client rules (area client) also cite a section of the AMQP 0-9-1 specification "
                  "(\"0-9-1 §n\") or a RabbitMQ guide (\"RabbitMQ docs: page\").", ""]
        for ref in others:
            taken = [r.id for r in rules if r.source == ref]
            lines += [f'<a id="{source_anchor(ref)}"></a>{escape(ref)}: '
                      + ", ".join(f"[{i}](#{rule_anchor(i)})" for i in taken) + ".", ""]
    settled = sorted({r.source for r in rules if SERVER_SOURCE.fullmatch(r.source)})
    if settled:
        lines += ["### Settled with RabbitMQ's source", "",
                  "Behaviours neither the starting catalogue nor a seed states, found where real client "
                  "programs broke, cite RabbitMQ's source at the tags named (\"rabbitmq-server v<x.y.z>: "
                  "deps/<path>\").", ""]
        for ref in settled:
            taken = [r.id for r in rules if r.source == ref]
            lines += [f'<a id="{source_anchor(ref)}"></a>{escape(ref)}: '
                      + ", ".join(f"[{i}](#{rule_anchor(i)})" for i in taken) + ".", ""]
    topic = None
    for ref in cited_seed_refs(rules):
        line = excerpt(ref)
        if line.topic != topic:
            topic = line.topic
            lines += [f"### Seed {line.seed}: {escape(line.file)}", "", escape(line.topic), ""]
        citing = [r.id for r in rules if ref == r.source or ref in r.seeds]
        lines += [f'<a id="{source_anchor(ref)}"></a>Line {line.line}, cited by '
                  + ", ".join(f"[{i}](#{rule_anchor(i)})" for i in citing) + ":", "", *_quote(line.text), ""]
    return lines


def render_markdown(rules: tuple[Rule, ...] | None = None) -> str:
    """docs/RULES.md for `rules` (the whole catalogue by default)."""
    rules = all_rules() if rules is None else rules
    used = [a for a in AREAS if any(r.area == a for r in rules)]
    lines = [f"<!-- generated from conformance/catalogue/rules.toml by `{REGENERATE}`; do not edit -->", "",
             "# The rule catalogue", "",
             f"{len(rules)} rules in {len(used)} areas. Every verdict of amqp-conformance names a rule of this "
             "catalogue; the report's rule pages link to the entries here. Profiles: "
             + ", ".join(f"`{p}`" for p in PROFILES) + ".", "", _VALUES, "",
             "Provenance: SRC read in RabbitMQ's source, LIVE observed on a running RabbitMQ, DOC official "
             "documentation, TEST asserted by an upstream test suite, INF inferred (a hypothesis).", ""]
    lines += ["Areas: " + " · ".join(f"[{a}](#area-{a}) ({sum(r.area == a for r in rules)})" for a in used), ""]
    for area in used:
        lines += [f'## <a id="area-{area}"></a>{area}', ""]
        for rule in (r for r in rules if r.area == area):
            lines += _rule_entry(rule)
    lines += _sources(rules)
    return "\n".join(lines).rstrip("\n") + "\n"


def extract_seeds(directory: Path, rules: tuple[Rule, ...] | None = None) -> str:
    """seeds.toml text: the topic of each cited seed document and its cited lines, from `directory`."""
    rules = all_rules() if rules is None else rules
    topics = _topics(directory / "README.md")
    by_file: dict[str, dict[int, str]] = {}
    for ref in cited_seed_refs(rules):
        found = _SEED_REF.fullmatch(ref)
        assert found is not None
        text = (directory / found["file"]).read_text(encoding="utf-8").splitlines()
        by_file.setdefault(found["file"], {})[int(found["line"])] = _sentences_from(text, int(found["line"]))
    out = [f"# The seed lines rules.toml cites, extracted by `{REGENERATE} --seeds DIR`; do not edit.", ""]
    for name, lines in by_file.items():
        out += [f'[seed."{name}"]', f"topic = {_toml(topics.get(name, ''))}", f'[seed."{name}".lines]']
        out += [f'"{n}" = {_toml(lines[n])}' for n in sorted(lines)] + [""]
    return "\n".join(out)


_LIST_ITEM = re.compile(r"^\s*(?:\d+\.|[•*|-])\s")
_TERMINATOR = re.compile(r"(?<!e\.g)(?<!i\.e)[.!?](?=\s|$)")  # a sentence ends, not "e.g."


def _sentences_from(lines: list[str], number: int) -> str:
    """Line `number` (1-based), continued while a hard-wrapped sentence started on it goes on."""
    text = lines[number - 1].strip()
    if _LIST_ITEM.match(text) or re.search(r"[.!?:]$", text):
        return text
    for following in lines[number : number + 12]:
        following = following.strip()
        if not following or _LIST_ITEM.match(following):
            break
        end = _TERMINATOR.search(following)
        text = f"{text} {following[: end.end()] if end else following}"
        if end:
            break
    return text


def _topics(readme: Path) -> dict[str, str]:
    rows = re.findall(r"^\| (\d{3}_[0-9a-f]+\.txt) \| (.+?) \|$", readme.read_text(encoding="utf-8"), re.M)
    return dict(rows)


def _toml(text: str) -> str:
    import json

    return json.dumps(text, ensure_ascii=False)
