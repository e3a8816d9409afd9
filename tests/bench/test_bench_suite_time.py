"""`bench/suite_time.py`'s deviation ratios: the lines it prints from the deviation matrix's rows (the
shape only: timings are never asserted), its option check, and one real deviation end to end."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

import pytest

from bench import suite_time

ROWS: list[dict[str, object]] = [
    {"deviation": "confirm_dropped", "area": "confirms", "seconds": 19.0, "clean_seconds": 11.5, "ratio": 1.65},
    {"deviation": "prefetch_plus_one", "area": "qos", "seconds": 9.8, "clean_seconds": 9.5, "ratio": 1.03},
]


def test_each_deviation_is_printed_with_its_ratio_and_the_count_within_the_goal() -> None:
    with redirect_stdout(io.StringIO()) as out:
        suite_time.print_deviation_ratios(ROWS, 0)
    lines = out.getvalue().splitlines()
    assert lines[0] == "deviation confirm_dropped (confirms): 19.0 s against a clean 11.5 s, 1.65x"
    assert lines[-1] == "deviations: 1 of 2 within 1.5x of the clean run"


def test_a_matrix_that_did_not_kill_says_so() -> None:
    with redirect_stdout(io.StringIO()) as out:
        suite_time.print_deviation_ratios(ROWS[1:], 1)
    assert out.getvalue().splitlines()[-1] == ("deviations: 1 of 1 within 1.5x of the clean run; the matrix exited 1 "
                                               "(a deviation not killed as its own rule)")


def test_nothing_to_run_is_an_option_error() -> None:
    with redirect_stderr(io.StringIO()) as err, pytest.raises(SystemExit) as ended:
        suite_time.main(["--no-embedded"])
    assert ended.value.code == 2 and "--no-embedded needs --broker-url (or --deviations alone)" in err.getvalue()


@pytest.mark.end_to_end
def test_one_deviation_alone_gives_its_ratio() -> None:
    """`--no-embedded --deviations prefetch_plus_one`: no suite timing, the qos area through the proxy
    clean and deviating, one ratio line, exit 0 (the deviation killed as its own rule)."""
    with redirect_stdout(io.StringIO()) as out:
        assert suite_time.main(["--no-embedded", "--deviations", "prefetch_plus_one"]) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("deviation prefetch_plus_one (qos): ") and lines[0].endswith("x")
    assert lines[1] in ("deviations: 1 of 1 within 1.5x of the clean run", "deviations: 0 of 1 within 1.5x of the clean run")
    assert lines[-1] == "{}"
