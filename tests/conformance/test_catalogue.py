"""Tests of the rule catalogue (conformance/catalogue/rules.py over conformance/catalogue/rules.toml).

The starting catalogue's IDs and the seed file names are hard-coded; the cited seed lines are
the ones kept in the repository (conformance/catalogue/seeds.toml, quoted in docs/RULES.md).
"""

from __future__ import annotations

import re
from importlib.resources import files

import pytest

from conformance.catalogue.document import SECTIONS, excerpt
from conformance.catalogue.rules import (
    AREAS,
    BROKER_AREAS,
    CLAUSED_AREAS,
    NOT_APPLICABLE,
    PROFILES,
    REQUIRED,
    VARIANT,
    CatalogueError,
    Rule,
    all_rules,
    areas,
    clause,
    expectation,
    parse_catalogue,
    rule,
)

EXPECTED_RULES_MD_IDS: tuple[str, ...] = (
    *(f"ERR-{n:02d}" for n in range(1, 5)),
    *(f"ACK-{n:02d}" for n in range(1, 11)),
    *(f"RQ-{n:02d}" for n in range(1, 8)),
    *(f"QOS-{n:02d}" for n in range(1, 12)),
    *(f"PC-{n:02d}" for n in range(1, 14)),
    *(f"CCN-{n:02d}" for n in range(1, 8)),
    *(f"TMO-{n:02d}" for n in range(1, 5)),
    *(f"TMO-3x-{n}" for n in range(1, 5)),
    *(f"TMO-4.3-{n}" for n in range(1, 8)),
    *(f"FRM-{n:02d}" for n in range(1, 4)),
    "NET-01",
    "HB-01",
)

SEED_FILES: tuple[str, ...] = (
    "000_9979959f6abe9980.txt",
    "001_3d404c180dd93a31.txt",
    "002_f7c750939f6db173.txt",
    "003_f48889facf2c0972.txt",
    "004_002cbe75bc0b6b9a.txt",
)

_HEADING = re.compile(r"^\*\*(?:RULE )?([A-Z]+(?:-[0-9A-Za-z.]+)+):\s*(.*?)\.?\*\*")
_SECTION = re.compile(r"^##+ (\d+(?:\.\d+)?)\.? ")
_SEED_REF = re.compile(r"seeds/([^#]+)#L(\d+)")


def seed_refs(r: Rule) -> list[str]:
    """Every seed sentence reference of a rule: its own source (S-entries) and its `seeds`."""
    own = [r.source] if r.source.startswith("seeds/") else []
    return [*own, *r.seeds]


def test_catalogue_has_every_rules_md_id() -> None:
    ids = {r.id for r in all_rules()}
    assert [i for i in EXPECTED_RULES_MD_IDS if i not in ids] == []


def test_a_starting_rules_source_is_a_known_section_of_the_starting_catalogue() -> None:
    """Every rule of the starting catalogue cites one of its sections; a rule that cites one (the
    client rules do too) names a section listed with its title in docs/RULES.md (`document.SECTIONS`)."""
    for r in all_rules():
        m = re.fullmatch(r"RULES\.md §(\d+(?:\.\d+)?)", r.source)
        assert m is not None or r.id not in EXPECTED_RULES_MD_IDS, (r.id, r.source)
        if m:
            assert m.group(1) in SECTIONS or m.group(1).split(".")[0] in SECTIONS, (r.id, r.source)


def test_catalogue_ids_unique_and_only_rules_md_seed_or_source_settled_entries() -> None:
    """Beyond RULES.md and the seeds, a rule is one settled with RabbitMQ's source (MSG-01...)."""
    ids = [r.id for r in all_rules()]
    assert len(ids) == len(set(ids))
    extra = set(ids) - set(EXPECTED_RULES_MD_IDS)
    odd = [i for i in extra if not re.fullmatch(r"S\d{3}-\d{2}|CL-[A-Z]+-\d{2}", i)
           and not rule(i).source.startswith("rabbitmq-server v")]
    assert odd == []


def test_catalogue_seed_references_name_known_files_and_positive_lines() -> None:
    for r in all_rules():
        for ref in seed_refs(r):
            m = _SEED_REF.fullmatch(ref)
            assert m, (r.id, ref)
            assert m.group(1) in SEED_FILES, (r.id, ref)
            assert int(m.group(2)) > 0, (r.id, ref)


def test_catalogue_seed_entries_are_numbered_per_seed_file() -> None:
    for r in all_rules():
        if r.id.startswith("S"):
            seed = r.id[1:4]
            assert r.source.startswith(f"seeds/{seed}_"), r.id
            assert r.tags == ("DOC",), r.id


def test_catalogue_every_seed_file_contributes_sentences() -> None:
    for seed_file in SEED_FILES:
        sentences = [
            ref for r in all_rules() for ref in seed_refs(r) if ref.startswith(f"seeds/{seed_file}#")
        ]
        assert len(sentences) > 0, seed_file


def test_catalogue_seed_entries_quote_their_seed_sentence() -> None:
    """A seed entry's text is its cited line, verbatim (spaces aside), as kept in seeds.toml."""

    def squash(text: str) -> str:
        return re.sub(r"\s+", "", text)

    for r in all_rules():
        for ref in seed_refs(r):
            line = excerpt(ref).text
            assert line.strip(), (r.id, ref)
            if ref == r.source:  # verbatim, starting on the referenced line
                assert squash(r.text)[:60] in squash(line), (r.id, ref)


def test_catalogue_every_rule_has_every_profile_well_formed() -> None:
    for r in all_rules():
        assert tuple(r.expect) == PROFILES, r.id
        for value in r.expect.values():
            assert value in (REQUIRED, NOT_APPLICABLE) or (
                value.startswith(VARIANT) and value[len(VARIANT) :]
            )


def test_catalogue_areas_are_known_and_all_used() -> None:
    assert areas() == AREAS
    assert {r.area for r in all_rules()} == set(AREAS)


def test_rule_unknown_id_raises_key_error() -> None:
    with pytest.raises(KeyError, match="NOPE"):
        rule("NOPE")


def test_expectation_version_differences() -> None:
    assert expectation("TMO-3x-2", "rabbitmq-4.3") == NOT_APPLICABLE
    assert expectation("TMO-3x-2", "rabbitmq-3.10") == REQUIRED
    assert expectation("TMO-4.3-3", "rabbitmq-3.10") == NOT_APPLICABLE
    assert expectation("QOS-03", "rabbitmq-3.10") == "variant:global=true is a channel-wide limit"
    assert expectation("CCN-05", "rabbitmq-3.10") == "variant:client cancel-ok is 503"
    assert expectation("FRM-02", "rabbitmq-4.3") == REQUIRED
    assert expectation("FRM-02", "rabbitmq-4.0") == "variant:4096"
    assert expectation("PC-01", "amqp-0-9-1") == NOT_APPLICABLE
    with pytest.raises(KeyError, match="rabbitmq-9"):
        expectation("ACK-01", "rabbitmq-9")


def test_rules_toml_is_package_data() -> None:
    assert files("conformance.catalogue").joinpath("rules.toml").is_file()


VALID_ENTRY = """
[[rule]]
id = "ACK-01"
area = "ack"
title = "t"
text = "x"
source = "RULES.md §1"
tags = ["SRC"]
seeds = ["seeds/001_3d404c180dd93a31.txt#L49"]
expect = { "rabbitmq-4.3" = "required", "rabbitmq-4.0" = "required", "rabbitmq-3.12" = "variant:v", "rabbitmq-3.10" = "required", "amqp-0-9-1" = "not-applicable" }
"""


def test_parse_catalogue_accepts_a_valid_entry() -> None:
    (r,) = parse_catalogue(VALID_ENTRY)
    assert r.id == "ACK-01" and r.seeds == ("seeds/001_3d404c180dd93a31.txt#L49",)
    assert r.expect["rabbitmq-3.12"] == "variant:v"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('area = "ack"', 'area = "acks"', "unknown area"),
        ('"rabbitmq-4.0" = "required", ', "", "missing"),
        (
            '"amqp-0-9-1" = "not-applicable"',
            '"amqp-0-9-1" = "not-applicable", "rabbitmq-5" = "required"',
            "unknown",
        ),
        ('"variant:v"', '"variant:"', "variant:<description>"),
        ('"variant:v"', '"maybe"', "variant:<description>"),
        ('tags = ["SRC"]', 'tags = ["GUESS"]', "tags"),
        ('source = "RULES.md §1"', 'source = "RULES.md"', "source"),
        ("#L49", "#L0", "seed reference"),
        ('id = "ACK-01"', 'id = "S001-01"', "source must be"),
        ('title = "t"', 'titel = "t"', "unknown keys"),
    ],
)
def test_parse_catalogue_rejects_malformed_entries(old: str, new: str, message: str) -> None:
    assert old in VALID_ENTRY
    with pytest.raises(CatalogueError, match=re.escape(message)):
        parse_catalogue(VALID_ENTRY.replace(old, new))


def test_parse_catalogue_rejects_duplicate_ids() -> None:
    with pytest.raises(CatalogueError, match="duplicate id"):
        parse_catalogue(VALID_ENTRY + VALID_ENTRY)


CLAUSES = """clauses = [
  { id = "a", text = "one promise" },
  { id = "b", text = "another", untestable = "why not" },
]
"""


def test_parse_catalogue_reads_clauses_with_full_ids() -> None:
    (r,) = parse_catalogue(VALID_ENTRY + CLAUSES)
    assert [(c.id, c.text, c.untestable, c.rule_id) for c in r.clauses] == [
        ("ACK-01.a", "one promise", None, "ACK-01"), ("ACK-01.b", "another", "why not", "ACK-01")]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('id = "b"', 'id = "c"', "clause ids are letters in order; clause 2 must have id 'b'"),
        ('id = "a"', 'id = "A"', "must have id 'a'"),
        ('"why not"', '" "', "clause b: 'untestable' must be a non-empty string"),
        ('text = "one promise"', 'text = ""', "clause a: 'text' must be a non-empty string"),
        ('text = "one promise"', 'txt = "one promise"', "clause a: unknown keys ['txt']"),
    ],
)
def test_parse_catalogue_rejects_malformed_clauses(old: str, new: str, message: str) -> None:
    assert old in CLAUSES
    with pytest.raises(CatalogueError, match=re.escape(message)):
        parse_catalogue(VALID_ENTRY + CLAUSES.replace(old, new))


def test_every_broker_rule_of_the_claused_areas_has_clauses() -> None:
    assert set(CLAUSED_AREAS) <= set(BROKER_AREAS)
    assert [r.id for r in all_rules() if r.area in CLAUSED_AREAS and not r.clauses] == []


def test_clause_lookup_by_full_id() -> None:
    first = next(r for r in all_rules() if r.clauses)
    assert clause(first.clauses[0].id) is first.clauses[0]
    with pytest.raises(KeyError, match=re.escape("unknown clause id 'ACK-01.zz'")):
        clause("ACK-01.zz")
