"""The fast mutation subset (issue 6): one fault per area, each killed by its own area."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance import mutation
from reference_broker.faults import BY_NAME


def test_fast_subset_has_one_fault_per_area() -> None:
    areas = [BY_NAME[name].area for name in mutation.FAST_SUBSET]
    assert sorted(areas) == sorted(set(areas)) and len(areas) == 8


@pytest.mark.timeout(600)
def test_fast_mutation_subset_is_fully_killed(tmp_path: Path) -> None:
    code = mutation.main(["--fast", "--jobs", "2", "--no-machines", "--out", str(tmp_path)])
    summary = json.loads((tmp_path / "mutation.json").read_text())
    survivors = [f["fault"] for f in summary["faults"] if not f["killed"]]
    assert code == 0 and not survivors, f"surviving faults: {survivors}"
    assert all(f["own_area_killers"] for f in summary["faults"]), "a fault killed only outside its area"
    assert (tmp_path / "tests").is_dir()  # the runs were written in the results format


def test_mutation_usage_errors() -> None:
    assert mutation.main(["--faults", "no_such_fault"]) == 4
    assert mutation.main(["--bogus-option"]) == 4
