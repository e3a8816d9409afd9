"""The generated module is up to date with codec/spec.py."""

from __future__ import annotations

from codec import generate


def test_generated_module_is_fresh() -> None:
    assert generate.TARGET.read_text() == generate.render(), "run `make generate`"
