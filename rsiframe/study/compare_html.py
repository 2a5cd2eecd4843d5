"""``compare --png DIR`` and ``--html FILE``: the best-gate-so-far plots with matplotlib, and
one self-contained HTML file (tables plus the plots as data URIs: no server, no internet)."""

from __future__ import annotations

import base64
import html
import io
import time
from pathlib import Path
from typing import Any

from rsiframe.study.compare import SPLITS, Comparison, RunData
from rsiframe.study.compare_text import (
    PAIR_COLUMNS,
    axes,
    fmt_estimate,
    method_curve,
    method_label,
    model_calls_cell,
    pair_cells,
    task_matrix,
    unfinished_lines,
)

RUN_USAGE = ("evals", "task runs", "records", "path")
LINESTYLES = ("-", "--", ":", "-.")  # methods with identical curves stay visible
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def look(i: int) -> tuple[str, str]:
    """The ``i``-th method's colour and line style: no two methods of the first 32 share both
    (the style shifts each time the colours come round, so the 9th is not the 1st again)."""
    return PALETTE[i % len(PALETTE)], LINESTYLES[(i + i // len(PALETTE)) % len(LINESTYLES)]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def plain(text: str) -> str:
    """``text`` drawn as it is: matplotlib reads a pair of ``$`` as mathtext (a run named
    ``x[$\\foo$]`` would fail the whole plot), so every ``$`` is escaped."""
    return text.replace("$", r"\$")


def _run_steps(run: RunData, axis: str) -> tuple[list[float], list[float]]:
    xs = [p.x(axis) for p in run.curve]
    return xs, [p.best_gate for p in run.curve]


def plot_png(report: Comparison, axis: str) -> bytes:
    """Best admitted gate so far against ``axis`` (evaluations, task_runs or cost): each run
    thin, the mean over a method's runs thick."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=120)
    for i, m in enumerate(report.methods):
        colour, style = look(i)
        for r in m.runs:
            xs, ys = _run_steps(r, axis)
            if xs:
                ax.step(xs, ys, where="post", color=colour, alpha=0.18, linewidth=0.8)
        curve = method_curve(m, axis)
        if curve:
            cx, cy = zip(*curve, strict=True)
            label = plain(f"{m.name} (n={len(m.runs)})")
            ax.step(cx, cy, where="post", color=colour, linewidth=2.0, linestyle=style, label=label)
    ax.set_xlabel(plain({"cost": "cost (USD)", "task_runs": "task runs"}.get(axis, axis)))
    ax.set_ylabel(plain("best admitted gate score so far"))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def pngs(report: Comparison) -> dict[str, bytes]:
    return {f"best-gate-vs-{a.replace('_', '-')}.png": plot_png(report, a) for a in axes(report)}


def write_pngs(report: Comparison, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in pngs(report).items():
        (folder / name).write_bytes(data)
        written.append(folder / name)
    return written


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    trs = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def _notes(lines: list[str]) -> str:
    return "".join(f"<p class='note'>{html.escape(line)}</p>" for line in lines)


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.note { color: #666; font-size: 13px; } .forced { color: #b00; font-weight: bold; }
"""


def render_html(report: Comparison) -> str:
    methods = [
        [
            method_label(m),
            m.mutator,
            str(len(m.runs)),
            *(fmt_estimate(m.scores[s]) for s in SPLITS),
            f"{m.usage('evaluations'):.0f}",
            f"{m.usage('task_runs'):.0f}",
            model_calls_cell(m),
            f"{m.usage('tokens'):.0f}",
            f"{m.usage('cost'):.4g}",
            f"{m.usage('wall_s'):.0f} s",
        ]
        for m in report.methods
    ]
    pairs = [pair_cells(p) for p in report.pairs]
    runs = [
        [
            m.name,
            r.run_id,
            str(r.random_seed),
            r.state,
            r.champion or "—",
            *("—" if r.scores[s] is None else f"{r.scores[s]:.3f}" for s in SPLITS),
            str(r.evaluations),
            str(r.task_runs),
            str(r.records),
            str(r.path),
        ]
        for m in report.methods
        for r in m.runs
    ]
    plots = "".join(
        f"<h2>{html.escape(name.removesuffix('.png'))}</h2>"
        f'<img alt="{html.escape(name)}" src="data:image/png;base64,'
        f'{base64.b64encode(data).decode()}">'
        for name, data in pngs(report).items()
    )
    forced = "".join(
        f'<p class="forced">forced: {len(r["runs"])} run(s) have a different '
        f"{html.escape(r['what'])} ({html.escape(r['differs'])}); shown anyway</p>"
        for r in report.refused
    )
    n_runs = sum(len(m.runs) for m in report.methods)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<title>rsiframe compare</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>rsiframe compare: {len(report.methods)} methods, {n_runs} runs</h1>",
        f"<p class='note'>Every run passed verify; scores are the champions' verified records."
        f" Mean over runs; {html.escape(report.method_notes()[0])}."
        f" Made {html.escape(time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()))}.</p>",
        forced,
        _table(
            [
                *("method", "mutate", "runs", *SPLITS, "evals", "task runs"),
                *("model calls", "tokens", "cost", "wall"),
            ],
            methods,
        ),
        _notes(report.method_notes()[1:] + unfinished_lines(report)),
        "<h2>pairs on sealed</h2>",
        _table(list(PAIR_COLUMNS), pairs),
        _notes(report.pair_notes()),
        plots,
        "<h2>per task: seed → champion (mean over runs)</h2>",
        _table(["split", "task", *(m.name for m in report.methods)], task_matrix(report, SPLITS)),
        "<h2>runs</h2>",
        _table(
            ["method", "run", "seed", "state", "champion", *SPLITS, *RUN_USAGE],
            runs,
        ),
        "</body></html>\n",
    ]
    return "".join(parts)


def write_html(report: Comparison, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(report))
    return path


def write_outputs(report: Comparison, *, html: Path | None, png: Path | None) -> list[Path]:
    """The PNG plots and the HTML file, when asked for (matplotlib is imported only then)."""
    if html is None and png is None:
        return []
    written = []
    if png is not None:
        written += write_pngs(report, png)
    if html is not None:
        written.append(write_html(report, html))
    return written
