"""Small inline SVG pictures for the report: score trend, verdict bars, badges.

Responsibility: turn already-computed numbers into self-contained SVG text (no scripts, no
external fonts or libraries), so the report renders offline and in any browser.

Rules: every text is XML-escaped; colours per verdict come from `VERDICT_COLOURS` (the same
palette as the CSS); sizes are fixed, charts scale with their viewBox.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from xml.sax.saxutils import escape

VERDICT_COLOURS = {"passed": "#2e9d49", "failed": "#d23c3c", "non-strict": "#e39b25", "unimplemented": "#8a8fa3",
                   "needs-admin": "#b4b8c2", "needs-cluster": "#aab4c8", "unjudged": "#c7d2e6",
                   "not-applicable": "#c9cdd6", "not-claimed": "#e4d9b8", "broken": "#7b3fb5"}
SERIES_COLOURS = ("#2563eb", "#d9480f", "#0f9d58", "#9c27b0", "#00838f", "#b7950b", "#6d4c41", "#c2185b")


def trend_chart(series: Mapping[str, Sequence[tuple[int, float | None]]], *, width: int = 640,
                height: int = 220) -> str:
    """Score (0..1) per run ordinal, one line per target."""
    left, right, top, bottom = 36, 12, 12, 28
    longest = max((ordinal for points in series.values() for ordinal, _ in points), default=1)
    span_x = max(1, longest - 1)

    def x(ordinal: int) -> float:
        return left + (ordinal - 1) * (width - left - right) / span_x

    def y(score: float) -> float:
        return top + (1 - score) * (height - top - bottom)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" viewBox="0 0 {width} {height}" '
             f'aria-label="score per run and target">']
    for tick in (0.0, 0.5, 1.0):
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
                     f'stroke="#ddd"/><text x="{left - 4}" y="{y(tick) + 4:.1f}" text-anchor="end" '
                     f'font-size="10">{int(tick * 100)}%</text>')
    parts.append(f'<text x="{width - right}" y="{height - 6}" text-anchor="end" font-size="10">run →</text>')
    for index, (label, points) in enumerate(series.items()):
        colour = SERIES_COLOURS[index % len(SERIES_COLOURS)]
        coords = [(x(o), y(s)) for o, s in points if s is not None]
        if not coords:
            continue
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in coords)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}">'
                     f"<title>{escape(label)}</title></polyline>")
        parts.extend(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.5" fill="{colour}"/>' for px, py in coords[-1:])
    parts.append("</svg>")
    return "".join(parts)


def verdict_bar(counts: Mapping[str, int], *, width: int = 160, height: int = 14) -> str:
    """One stacked horizontal bar of verdict counts."""
    total = sum(counts.values()) or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="bar" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="verdicts">']
    offset = 0.0
    for verdict, colour in VERDICT_COLOURS.items():
        n = counts.get(verdict, 0)
        if not n:
            continue
        w = n * width / total
        parts.append(f'<rect x="{offset:.2f}" width="{w:.2f}" height="{height}" fill="{colour}">'
                     f"<title>{escape(verdict)}: {n}</title></rect>")
        offset += w
    parts.append("</svg>")
    return "".join(parts)


def badge(label: str, message: str, colour: str) -> str:
    """A shields-style flat badge."""
    def text_width(text: str) -> int:
        return 7 * len(text) + 10

    lw, mw = text_width(label), text_width(message)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{lw + mw}" height="20" role="img" '
            f'aria-label="{escape(label)}: {escape(message)}"><title>{escape(label)}: {escape(message)}</title>'
            f'<rect width="{lw}" height="20" fill="#555"/><rect x="{lw}" width="{mw}" height="20" fill="{colour}"/>'
            f'<g fill="#fff" font-family="Verdana,DejaVu Sans,sans-serif" font-size="11" text-anchor="middle">'
            f'<text x="{lw / 2:.1f}" y="14">{escape(label)}</text>'
            f'<text x="{lw + mw / 2:.1f}" y="14">{escape(message)}</text></g></svg>')


def score_colour(score: float | None) -> str:
    if score is None:
        return "#9f9f9f"
    if score >= 0.95:
        return "#2e9d49"
    if score >= 0.8:
        return "#97ca00"
    if score >= 0.6:
        return "#dfb317"
    return "#d23c3c"
