"""The conformance suite shipped with the package (`pytest --pyargs conformance.suite`)."""

from pathlib import Path

SUITE_DIR = Path(__file__).parent
