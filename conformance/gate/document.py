"""`python -m conformance.gate.document [--check | --seeds DIR]`: write docs/RULES.md from the
catalogue (conformance.catalogue.document renders it), or check that it is current (`make test`).
"""

from __future__ import annotations

import sys
from importlib.resources import files
from pathlib import Path

from conformance.catalogue.document import (
    REGENERATE,
    SEEDS_FILE,
    TARGET,
    _seed_data,
    extract_seeds,
    render_markdown,
)
from conformance.results.verdicts import EXIT_FAILED, EXIT_OK, EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--seeds"] and len(args) == 2:
        path = Path(str(files("conformance.catalogue").joinpath(SEEDS_FILE)))
        path.write_text(extract_seeds(Path(args[1])), encoding="utf-8")
        _seed_data.cache_clear()
        print(f"wrote {path}")
        args = []
    text = render_markdown()
    if args == ["--check"]:
        if not TARGET.exists() or TARGET.read_text(encoding="utf-8") != text:
            print(f"{TARGET} is stale: run {REGENERATE}", file=sys.stderr)
            return EXIT_FAILED
        return EXIT_OK
    if args:
        print(f"usage: {REGENERATE} [--check | --seeds DIR]", file=sys.stderr)
        return EXIT_USAGE
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
