"""`make test` and `make test-end-to-end` split the project's tests between them, none twice.

`make test` runs a bare pytest, which leaves out the markers of tests/conftest.py's NOT_BY_DEFAULT;
`make test-end-to-end` selects three of them (spark, browser, end_to_end) and must leave out every
other one, which has a step of its own (gate, cluster, grid, the RabbitMQ nodes, `slow`). Read off
the Makefile, so that a marker added to NOT_BY_DEFAULT is not run by the end-to-end step by accident.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import NOT_BY_DEFAULT

ROOT = Path(__file__).resolve().parents[1]
END_TO_END = {"spark", "browser", "end_to_end"}


def _expression() -> str:
    (line,) = [line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith("END_TO_END :=")]
    return line.split(":=", 1)[1].strip()


def test_the_end_to_end_step_selects_its_markers_and_leaves_every_other_step_s() -> None:
    match = re.fullmatch(r"\(([\w ]+)\) and not \(([\w ]+)\)", _expression())
    assert match, f"END_TO_END in the Makefile is not '(a or b) and not (c or d)': {_expression()!r}"
    chosen, left = ({name for name in group.split(" or ")} for group in match.groups())
    assert chosen == END_TO_END and set(NOT_BY_DEFAULT) >= END_TO_END  # and so out of `make test`
    assert left == set(NOT_BY_DEFAULT) - END_TO_END, (
        f"markers not by default but neither left out of nor chosen by test-end-to-end: "
        f"{sorted(set(NOT_BY_DEFAULT) - END_TO_END - left)}; left out but not by default: {sorted(left - set(NOT_BY_DEFAULT))}")

