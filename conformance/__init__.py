"""conformance package (see docs/design.md)."""

from pathlib import Path

SUITE_DIR = Path(__file__).parent / "suite"  # the shipped suite (`pytest --pyargs conformance.suite`)
