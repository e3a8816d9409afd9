"""`bench/codec.py --quick` runs to completion and ends with its JSON line of ratios."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "codec.py"
KEYS = {"decode_x_pamqp", "encode_x_pamqp", "table_decode_x_pamqp", "table_encode_x_pamqp",
        "decode_x_pika", "encode_x_pika"}  # fmt: skip


def test_quick_run_ends_with_ratio_json() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr
    ratios = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(ratios) == KEYS
    for key, value in ratios.items():  # only the shape: timings are never asserted
        assert isinstance(value, float) and value > 0, (key, value)
