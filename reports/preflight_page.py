"""The pre-flight's output: DIR/preflight.json and DIR/preflight.html (the report's style, Jinja2).

Responsibility: write the document `conformance.preflight.judging.document` builds and a page
that shows each finding (kind, rule, what, counts, source and target behaviour, the live replay's
verdict) with the frame window of its example, linking each rule to its catalogue entry.

Rules: pages work from file:// (the report's CSS is copied next to the page); everything is
escaped by Jinja2's autoescape, as in `reports.render`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from reports.render import STATIC, environment

PAGE = "preflight.html"
DOCUMENT = "preflight.json"


def frame_line(row: dict[str, Any]) -> dict[str, Any]:
    """One frame of an example's window, as the page shows it."""
    what = row.get("method") or row.get("frame_type") or "?"
    fields = []
    for name in ("queue", "exchange_type", "arguments", "delivery_tag", "requeue", "global_qos", "prefetch_count",
                 "reply_code", "reply_text"):
        value = row.get(name)
        if value not in (None, "", "{}"):
            fields.append(f"{name}={value}")
    return {"seq": row.get("seq"), "channel": row.get("channel"), "direction": row.get("direction"), "what": what,
            "fields": " ".join(fields)}


def write(out: Path, doc: dict[str, Any]) -> Path:
    """Write preflight.json and preflight.html under `out`; return the page's path."""
    out.mkdir(parents=True, exist_ok=True)
    (out / DOCUMENT).write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
    shutil.copytree(STATIC, out / "static", dirs_exist_ok=True)
    counts = {kind: sum(f["kind"] == kind for f in doc["findings"]) for kind in ("breaks", "differs", "deprecated")}
    page = environment().get_template("preflight.html.j2").render(doc=doc, counts=counts, root="")
    path = out / PAGE
    path.write_text(page, encoding="utf-8")
    return path
