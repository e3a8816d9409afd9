"""The static HTML report: `ReportData` in, a directory of pages out (Jinja2).

Responsibility: write the site —
  index.html          overview: targets x areas scores, score trend, verdict bars, regressions,
                      flakes, audit summary
  matrix.html         rules x targets coloured by verdict, filterable (text, area, verdict)
  rules/<id>.html     one page per rule: text, source, per-profile expectation, verdicts, history;
                      links to its catalogue entry and its source, the cited seed lines quoted
  catalogue.html      the rule catalogue, the same document as docs/RULES.md
  failures.html       the failing tests of each target's latest run
  tests/<page>.html   one page per failing test: observed vs expected reply, shrunk steps,
                      the frame log (lazy-loaded from frames/<page>.js)
  audit.html          trace-audit findings, and what was not judged: counts per reason and rows
  clients.html        client-side scenarios x client libraries grouped by language (when the lake has
                      client-side runs), each cell linking to its (client, scenario) page
  clients/<c>.html    one page per client: its verdicts and failures
  clients/<c>/<s>.html  one page per (client, scenario): verdict, message and the whole frame log
  through/<b>.html    per broker run raw and through client libraries: rules x clients, the cells
                      that pass raw and fail through a library flagged (also on their rule pages)
  grid.html           brokers x rules by area (a letter per cell), clients x brokers, the interop
                      score and the cells changed since each target's previous run (reports.grid)
  summary.json        the JSON summary; badges/<target>.svg one badge per target
  static/             CSS and JS

Rules:
- Pages work from file:// and from any static web server: frame logs load as scripts
  (`frames/<page>.js` calls `amqpcFrameLog(...)`), never through fetch/XHR.
- A test page stays small however long its frame log: the log is only in its .js file. A
  (client, scenario) page holds its log inline: a client-side scenario's log is bounded by the
  scenario (a few hundred frames at most).
- Everything is escaped by Jinja2's autoescape; SVG comes from `reports.svg` (escaped there).
"""

from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markdown_it import MarkdownIt
from markupsafe import Markup

from conformance.catalogue import document
from conformance.catalogue.rules import plain_markdown
from conformance.results.records import tag_from_column
from conformance.results.verdicts import SCORED
from conformance.results.verdicts import label as verdict_label
from conformance.results.wording import plural
from reports import svg
from reports.grid import grid_data
from reports.model import VERDICTS, ClientMatrix, ClientsData, ReportData

STATIC = Path(__file__).parent / "static"
FrameLog = tuple[str, list[dict[str, Any]]]  # (test page, frame rows in seq order)


_INLINE = MarkdownIt("commonmark", {"html": False})  # a title is text: raw HTML in it is escaped


def md_inline(text: str | None) -> Markup:
    """Inline Markdown (a rule title) as HTML, escaped: `basic.nack` becomes <code>basic.nack</code>."""
    return Markup(_INLINE.renderInline(text or ""))


def environment() -> Environment:
    env = Environment(loader=PackageLoader("reports", "templates"), autoescape=select_autoescape(["html", "j2"]),
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["pct"] = _pct
    env.filters["when"] = _when
    env.filters["verdict_bar"] = lambda counts: Markup(svg.verdict_bar(counts))
    env.filters["verdict"] = verdict_label  # needs-admin reads "not run: needs admin"
    env.filters["plural"] = plural  # {{ n|plural("run") }} -> "1 run", "2 runs"
    env.filters["md_inline"] = md_inline  # a rule title's Markdown as HTML: `basic.nack` -> <code>
    env.filters["md_plain"] = plain_markdown  # the same title where HTML cannot go (<title>, attributes)
    env.globals["verdicts"] = VERDICTS
    env.globals["score_colour"] = svg.score_colour
    env.globals["rule_anchor"] = document.rule_anchor
    env.globals["source_anchor"] = document.source_anchor
    env.globals["seed_excerpt"] = _seed_excerpt
    return env


def _seed_excerpt(ref: str) -> document.SeedLine | None:
    try:
        return document.excerpt(ref)
    except KeyError:
        return None


def catalogue_html() -> Markup:
    """docs/RULES.md as HTML (its text is escaped by the generator; its anchors are kept)."""
    return Markup(MarkdownIt("commonmark", {"html": True}).render(document.render_markdown()))


def _pct(score: float | None) -> str:
    return "\N{EN DASH}" if score is None else f"{score * 100:.0f}%"


def _when(value: datetime | None) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M UTC")


def render_site(data: ReportData, out: Path | str, frame_logs: Iterable[FrameLog] = ()) -> Path:
    """Write the whole site under `out`; return the path of index.html."""
    out = Path(out)
    for sub in ("rules", "tests", "frames", "badges"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    shutil.copytree(STATIC, out / "static", dirs_exist_ok=True)
    env = environment()
    context = _context(data)
    grid = grid_data(data)
    context["has_grid"] = grid is not None
    pages = {"index.html": "overview.html.j2", "matrix.html": "matrix.html.j2",
             "failures.html": "failures.html.j2", "audit.html": "audit.html.j2"}
    for name, template in pages.items():
        _write(out / name, env.get_template(template).render(**context, root=""))
    _write(out / "catalogue.html", env.get_template("catalogue.html.j2").render(**context, root="",
                                                                               catalogue=catalogue_html()))
    rule_template = env.get_template("rule.html.j2")
    for rule in data.rules:
        _write(out / "rules" / f"{rule.id}.html", rule_template.render(**context, rule=rule, root="../"))
    test_template = env.get_template("test.html.j2")
    for test in data.failing:
        _write(out / "tests" / f"{test.page}.html", test_template.render(**context, test=test, root="../"))
    logs = dict(frame_logs)
    for page, rows in logs.items():
        _write(out / "frames" / f"{page}.js", frame_log_script(page, rows))
    if data.clients is not None:
        _render_clients(env, context, data.clients, out)
    if grid is not None:
        _write(out / "grid.html", env.get_template("grid.html.j2").render(**context, g=grid, root=""))
    if data.client_matrices:
        (out / "through").mkdir(parents=True, exist_ok=True)
        through = env.get_template("through.html.j2")
        for matrix in data.client_matrices:
            _write(out / "through" / f"{matrix.slug}.html", through.render(**context, m=matrix, root="../"))
    _write(out / "summary.json", json.dumps(data.summary(), indent=2, default=str) + "\n")
    for target in data.targets:
        counts = target.counts
        scored = sum(counts.get(v, 0) for v in SCORED)
        message = f"{_pct(target.score)} ({counts.get('passed', 0)}/{scored})"
        _write(out / "badges" / f"{target.slug}.svg",
               svg.badge("AMQP 0-9-1", message, svg.score_colour(target.score)) + "\n")
    return out / "index.html"


def _render_clients(env: Environment, context: dict[str, Any], clients: ClientsData, out: Path) -> None:
    """clients.html (scenarios x clients), clients/<client>.html and clients/<client>/<scenario>.html."""
    (out / "clients").mkdir(parents=True, exist_ok=True)
    _write(out / "clients.html", env.get_template("clients.html.j2").render(**context, clients=clients, root=""))
    template = env.get_template("client.html.j2")
    scenario_template = env.get_template("client_scenario.html.j2")
    for column in clients.clients:
        _write(out / "clients" / f"{column.slug}.html",
               template.render(**context, clients=clients, column=column, root="../"))
        (out / "clients" / column.slug).mkdir(exist_ok=True)
        for name, played in column.scenarios.items():
            rows = frame_log_rows(played.frames, CLIENT_FRAME_FIELDS)
            _write(out / column.log_page(name), scenario_template.render(
                **context, clients=clients, column=column, s=played, frames=rows, root="../../"))


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def _context(data: ReportData) -> dict[str, Any]:
    series: dict[str, list[tuple[int, float | None]]] = defaultdict(list)
    for point in sorted(data.trend, key=lambda p: (p.target, p.ordinal)):
        series[point.target].append((point.ordinal, point.score))
    violation_counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    unjudged: Counter[tuple[str, str, str]] = Counter()
    for v in data.violations:
        violation_counts[v.kind][v.target] += 1
        if v.severity == "unjudged":
            unjudged[v.kind, v.rule_id, v.target] += 1
    return {
        "data": data,
        "trend_svg": Markup(svg.trend_chart(series)) if series else Markup(""),
        "series_colours": {label: svg.SERIES_COLOURS[i % len(svg.SERIES_COLOURS)] for i, label in enumerate(series)},
        "rules_by_id": {r.id: r for r in data.rules},
        "violation_counts": violation_counts,
        "unjudged_counts": sorted(unjudged.items()),  # (why, rule, target) -> channel lifetimes not judged
        "failing_by_target": _group(data.failing, "target"),
        "through_by_target": {t.label: m for m in data.client_matrices for t in m.columns},
        "flags_by_rule": _flags_by_rule(data),
    }


def _flags_by_rule(data: ReportData) -> Mapping[str, list[tuple[ClientMatrix, str]]]:
    """rule id -> (broker matrix, client) of each cell that passes raw and fails through that client."""
    flags: dict[str, list[tuple[ClientMatrix, str]]] = defaultdict(list)
    for matrix in data.client_matrices:
        for rule_id, client in matrix.flagged:
            flags[rule_id].append((matrix, client))
    return flags


def _group(items: Iterable[Any], attribute: str) -> Mapping[str, list[Any]]:
    grouped: dict[str, list[Any]] = defaultdict(list)
    for item in items:
        grouped[getattr(item, attribute)].append(item)
    return grouped


FRAME_FIELDS = ("delivery_tag", "multiple", "requeue", "redelivered", "consumer_tag", "reply_code", "reply_text",
                "body_size")
# a client-side scenario's log also says what the client asked for and what it advertised (CL-CCN-01)
CLIENT_FRAME_FIELDS = (*FRAME_FIELDS, "queue", "prefetch_count", "no_ack", "capabilities", "product", "version")


def frame_log_rows(rows: Iterable[Mapping[str, Any]], fields: tuple[str, ...] = FRAME_FIELDS) -> list[list[Any]]:
    """Frame records (seq order) as compact rows: seq, ms since the first, conn, ch, dir, kind, fields."""
    out: list[list[Any]] = []
    first: datetime | None = None
    for row in rows:
        ts = row.get("ts")
        if first is None and isinstance(ts, datetime):
            first = ts
        ms = round((ts - first).total_seconds() * 1000, 3) if isinstance(ts, datetime) and first else 0
        kind = row.get("method") or row.get("frame_type") or "?"
        text = " ".join(_field(name, row.get(name)) for name in fields if row.get(name) is not None)
        out.append([row.get("seq"), ms, row.get("connection"), row.get("channel"), row.get("direction"), kind, text])
    return out


def _field(name: str, value: Any) -> str:
    if name == "delivery_tag" and isinstance(value, int):
        value = tag_from_column(value)
    if isinstance(value, bool):
        return f"{name}={'true' if value else 'false'}"
    if isinstance(value, str):
        return f"{name}={json.dumps(value)}"
    if isinstance(value, list | tuple):
        return f"{name}=[{', '.join(map(str, value))}]"
    return f"{name}={value}"


def frame_log_script(page: str, rows: list[dict[str, Any]]) -> str:
    payload = {"page": page, "columns": ["seq", "ms", "conn", "ch", "dir", "frame", "fields"],
               "rows": frame_log_rows(rows)}
    text = json.dumps(payload, separators=(",", ":"), default=str).replace("</", "<\\/")
    return f"window.amqpcFrameLog && window.amqpcFrameLog({text});\n"
