"""The trace audit as it was before the model judged traffic: the plain hand-written checkers.

Responsibility: load `reports/audit_state.py`, `reports/audit.py` and `reports/audit_arrow.py`
as they were at `LEGACY_REV` (the last commit before the model-based audit) straight
from git, under the private package name `_legacy_audit`, so that `bench/pipeline.py` can time
today's audit against them in the same run on the same lake. Nothing else imports them: the
rules live once, in `conformance/model`; this is the benchmark's peer, like pamqp is the codec's.
"""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path
from typing import Any

LEGACY_REV = "5bff7d71250f812aeab27a971a4c2233fb53bb93"  # main before 9dedb19 (audit: the model judges traffic)
PACKAGE = "_legacy_audit"
_MODULES = ("audit_state", "audit", "audit_arrow")  # in import order
_ROOT = Path(__file__).resolve().parent.parent
MOVED = {"conformance.plugin.results": "conformance.results.records"}  # where a name LEGACY_REV imports lives now


def load(rev: str = LEGACY_REV) -> Any:
    """The legacy `audit_arrow` module (its `audit_lake(root)` is the single-process audit)."""
    if f"{PACKAGE}.audit_arrow" in sys.modules:
        return sys.modules[f"{PACKAGE}.audit_arrow"]
    package = types.ModuleType(PACKAGE)
    package.__path__ = []
    sys.modules[PACKAGE] = package
    for name in _MODULES:
        source = subprocess.run(["git", "-C", str(_ROOT), "show", f"{rev}:reports/{name}.py"], capture_output=True,
                                text=True, check=True, timeout=60).stdout
        for other in _MODULES:
            source = source.replace(f"from reports.{other} import", f"from {PACKAGE}.{other} import")
        for old, new in MOVED.items():  # modules the redesign moved since
            source = source.replace(f"from {old} import", f"from {new} import")
        module = types.ModuleType(f"{PACKAGE}.{name}")
        module.__file__ = f"<{rev[:8]}:reports/{name}.py>"
        sys.modules[module.__name__] = module
        exec(compile(source, module.__file__, "exec"), module.__dict__)
        setattr(package, name, module)
    return sys.modules[f"{PACKAGE}.audit_arrow"]
