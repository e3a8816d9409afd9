"""docs/RULES.md is generated from rules.toml, stays fresh, and every link in it resolves."""

from __future__ import annotations

import re
from types import MappingProxyType

import pytest

from conformance.catalogue import document
from conformance.catalogue.rules import PROFILES, Rule, all_rules


def test_docs_rules_md_is_fresh() -> None:
    assert document.TARGET.read_text(encoding="utf-8") == document.render_markdown(), \
        f"docs/RULES.md is stale: run `{document.REGENERATE}`"


def test_every_rule_and_every_cited_source_has_an_anchor_and_every_link_resolves() -> None:
    text = document.render_markdown()
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', text))
    rules = all_rules()
    assert {document.rule_anchor(r.id) for r in rules} <= anchors
    cited = {ref for r in rules for ref in (r.source, *r.seeds)}
    assert all(document.source_anchor(ref) in anchors for ref in cited), sorted(cited)
    links = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert links and links <= anchors, sorted(links - anchors)


def test_every_cited_seed_line_is_quoted() -> None:
    refs = document.cited_seed_refs(all_rules())
    assert len(refs) > 50
    for ref in refs:
        line = document.excerpt(ref)
        assert line.text.strip() and line.topic and ref.endswith(f"#L{line.line}")
    assert document.excerpt("seeds/002_f7c750939f6db173.txt#L4").text.endswith(
        "the server replies with a basic.cancel-ok .")  # a hard-wrapped sentence, joined
    with pytest.raises(KeyError, match="--seeds DIR"):
        document.excerpt("seeds/002_f7c750939f6db173.txt#L9999")


def test_catalogue_text_is_escaped() -> None:
    evil = Rule("ERR-01", "errors", "a *title* <b>", "reply-text \"<CONSTANT> - x\", [link](#x) and *stars*",
                "RULES.md §0", ("SRC",), (), MappingProxyType(dict.fromkeys(PROFILES, "required")))
    text = document.render_markdown((evil,))
    assert "&lt;CONSTANT&gt;" in text and "<CONSTANT>" not in text and "<b>" not in text
    assert r"\*stars\*" in text and r"\[link\](#x)" in text
    assert "Expected: `required` on every profile." in text


def test_wrapped_seed_sentences_are_joined_and_lists_are_not() -> None:
    lines = ["A sentence that is", "hard-wrapped over lines", ". Next one here", "", "1. a list item", "2. next"]
    assert document._sentences_from(lines, 1) == "A sentence that is hard-wrapped over lines ."
    assert document._sentences_from(lines, 5) == "1. a list item"
