"""Render the dead-letter report: terminal tables, CSV/JSON files, and a PNG chart.

Pure Python on the small collected results of `dlq_report.build` (no Spark).  Called by `dlq.py`.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
from pathlib import Path

TABLES = ("over_time", "totals", "top_poison")


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _json_value(value):
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    return value


def table_text(rows: list[dict], max_width: int = 40) -> str:
    """A fixed-width table; long cells (body previews) are cut."""
    if not rows:
        return "(no rows)"
    cols = list(rows[0])
    cells = [[_cell(r.get(c))[:max_width] for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    line = "  ".join(c.ljust(w) for c, w in zip(cols, widths))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join([line, sep, *body])


def render_tables(report: dict) -> str:
    titles = {"over_time": "Dead letters over time", "totals": "Reason x queue totals",
              "top_poison": "Top poison messages"}
    return "\n\n".join(f"{titles[name]}\n{table_text(report[name])}" for name in TABLES) + "\n"


def render_json(report: dict) -> str:
    return json.dumps({name: [{k: _json_value(v) for k, v in row.items()} for row in report[name]]
                       for name in TABLES}, indent=2, sort_keys=False) + "\n"


def write_csv(rows: list[dict], fh) -> None:
    writer = csv.writer(fh)
    if rows:
        writer.writerow(list(rows[0]))
    for r in rows:
        writer.writerow([_cell(v) for v in r.values()])


def write_files(report: dict, out: Path, fmt: str) -> list[Path]:
    """One CSV or JSON file per table under `out`; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in TABLES:
        rows = report[name]
        if fmt == "json":
            path = out / f"{name}.json"
            path.write_text(json.dumps([{k: _json_value(v) for k, v in r.items()} for r in rows], indent=2))
        else:
            path = out / f"{name}.csv"
            with open(path, "w", newline="") as fh:
                write_csv(rows, fh)
        written.append(path)
    return written


def write_chart(over_time: list[dict], path: Path) -> Path | None:
    """Stacked bars: dead letters per bucket, one colour per reason.  None if nothing to plot."""
    if not over_time:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buckets = sorted({r["bucket_start"] for r in over_time})
    reasons = sorted({r["reason"] or "unknown" for r in over_time})
    series = {reason: [0] * len(buckets) for reason in reasons}
    index = {b: i for i, b in enumerate(buckets)}
    for r in over_time:
        series[r["reason"] or "unknown"][index[r["bucket_start"]]] += r["dead_letters"]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    labels = [_cell(b) for b in buckets]
    bottom = [0] * len(buckets)
    for reason in reasons:
        ax.bar(labels, series[reason], bottom=bottom, label=reason)
        bottom = [a + b for a, b in zip(bottom, series[reason])]
    ax.set_ylabel("dead letters")
    ax.set_title("Dead letters over time by reason")
    ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


_TITLES = {"over_time": "Dead letters over time", "totals": "Reason x queue totals",
           "top_poison": "Top poison messages"}


def write_html(report: dict, path: Path, chart: Path | None = None) -> Path:
    """One self-contained page: the chart (embedded PNG) and the three tables."""
    import base64
    import html

    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>Dead-letter report</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;"
             "margin-bottom:2em}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;"
             "font-size:13px}th{background:#f4f4f4}</style></head><body><h1>Dead-letter report</h1>"]
    if chart is not None and chart.exists():
        data = base64.b64encode(chart.read_bytes()).decode("ascii")
        parts.append(f"<img alt='dead letters over time by reason' src='data:image/png;base64,{data}'>")
    for name in TABLES:
        rows = report[name]
        parts.append(f"<h2>{html.escape(_TITLES.get(name, name))}</h2>")
        if not rows:
            parts.append("<p>(no rows)</p>")
            continue
        cols = list(rows[0])
        parts.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>")
        for r in rows:
            parts.append("<tr>" + "".join(f"<td>{html.escape(_cell(r.get(c)))}</td>" for c in cols)
                         + "</tr>")
        parts.append("</table>")
    parts.append("</body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
