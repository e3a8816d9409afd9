"""conformance package (see DESIGN.md)."""

from pathlib import Path

SUITE_DIR = Path(__file__).parent / "suite"  # the shipped suite (`pytest --pyargs conformance.suite`)
