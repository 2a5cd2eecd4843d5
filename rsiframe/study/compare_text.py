"""``compare`` in the terminal: the methods table, P(A > B), the per-task matrix and the
best-gate-so-far curves drawn in characters. Curves on a common axis live here too, so the
PNG and HTML views draw exactly what the terminal draws."""

from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from rsiframe.study.compare import SPLITS, Comparison, Method, RunData
from rsiframe.study.stats import Estimate, mean

COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red", "white", "bright_cyan")
MARKERS = "*o+x#@%&"
MATRIX_SPLITS = ("gate", "sealed")


# -- curves --------------------------------------------------------------------------------


def _value_at(run: RunData, x: float, axis: str) -> float | None:
    best = None
    for p in run.curve:
        if p.x(axis) <= x:
            best = p.best_gate
    return best


def method_curve(m: Method, axis: str) -> list[tuple[float, float]]:
    """Mean over the method's runs of the best admitted gate score so far, as steps on the
    union of the runs' x values (``axis``: evaluations, task_runs or cost); a run that has
    ended keeps its last value."""
    xs = sorted({p.x(axis) for r in m.runs for p in r.curve})
    points = []
    for x in xs:
        ys = [_value_at(r, x, axis) for r in m.runs if r.curve]
        if ys and all(y is not None for y in ys):
            points.append((x, mean([y for y in ys if y is not None])))
    return points


def has_cost(report: Comparison) -> bool:
    return any(p.cost > 0 for m in report.methods for r in m.runs for p in r.curve)


def axes(report: Comparison) -> tuple[str, ...]:
    """The x axes worth a curve: evaluations, task runs (when counted), cost (when spent)."""
    runs = any(p.task_runs > 0 for m in report.methods for r in m.runs for p in r.curve)
    return ("evaluations",) + ("task_runs",) * runs + ("cost",) * has_cost(report)


def _step(points: list[tuple[float, float]], x: float) -> float | None:
    y = None
    for px, py in points:
        if px <= x:
            y = py
    return y


def ascii_plot(report: Comparison, axis: str, width: int = 64, height: int = 12) -> Text:
    """The methods' curves on one character grid (one marker and colour per method)."""
    curves = [(i, method_curve(m, axis)) for i, m in enumerate(report.methods)]
    curves = [(i, c) for i, c in curves if c]
    text = Text()
    if not curves:
        return text.append("(no admitted gate scores to plot)\n")
    x0 = min(c[0][0] for _, c in curves)
    x1 = max(c[-1][0] for _, c in curves)
    y0 = min(y for _, c in curves for _, y in c)
    y1 = max(y for _, c in curves for _, y in c)
    if y1 == y0:
        y0, y1 = y0 - 0.05, y1 + 0.05
    grid: list[list[tuple[str, str]]] = [[(" ", "")] * width for _ in range(height)]
    for i, c in curves:
        for col in range(width):
            x = x0 + (x1 - x0) * col / max(1, width - 1)
            y = _step(c, x)
            if y is None:
                continue
            row = round((y1 - y) / (y1 - y0) * (height - 1))
            grid[row][col] = (MARKERS[i % len(MARKERS)], COLOURS[i % len(COLOURS)])
    for r, line in enumerate(grid):
        label = f"{y1:5.2f} " if r == 0 else f"{y0:5.2f} " if r == height - 1 else " " * 6
        text.append(label + "|")
        for ch, style in line:
            text.append(ch, style=style)
        text.append("\n")
    fmt = "{:.4g}" if axis == "cost" else "{:.0f}"
    left, right = fmt.format(x0), fmt.format(x1)
    text.append("      +" + "-" * width + "\n")
    text.append("       " + left + " " * max(1, width - len(left) - len(right)) + right + "\n")
    label = axis.replace("_", " ")
    text.append(f"       best admitted gate so far (mean over runs) vs {label}\n")
    for k, (i, c) in enumerate(curves):
        m = report.methods[i]
        text.append(f"       {MARKERS[i % len(MARKERS)]} ", style=COLOURS[i % len(COLOURS)])
        same = next((MARKERS[j % len(MARKERS)] for j, d in curves[:k] if d == c), None)
        text.append(f"{m.name}" + (f" (same curve as {same})" if same else "") + "\n")
    return text


# -- tables --------------------------------------------------------------------------------


def fmt_estimate(e: Estimate | None) -> str:
    if e is None:
        return "—"
    return f"{e.mean:.3f} [{e.lo:.3f}, {e.hi:.3f}]"


def methods_table(report: Comparison) -> Table:
    n_runs = sum(len(m.runs) for m in report.methods)
    table = Table(
        title=f"compare: {len(report.methods)} methods, {n_runs} runs, every run verified",
        title_justify="left",
    )
    for col in ("method", "runs", *SPLITS):
        table.add_column(col, overflow="fold")
    for col in ("evals", "task runs", "tokens", "cost", "wall"):
        table.add_column(col, justify="right")
    marked = {rid for r in report.refused for rid in r["runs"]}
    for i, m in enumerate(report.methods):
        name = Text(m.name, style=COLOURS[i % len(COLOURS)])
        if any(r.run_id in marked for r in m.runs):
            name.append(" (forced)", style="bold red")
        over = "" if m.over == "runs" else " *"
        table.add_row(
            name,
            f"{len(m.runs)}{over}",
            *(fmt_estimate(m.scores[s]) for s in SPLITS),
            f"{m.usage('evaluations'):.0f}",
            f"{m.usage('task_runs'):.0f}",
            f"{m.usage('tokens'):.0f}",
            f"{m.usage('cost'):.4g}",
            f"{m.usage('wall_s'):.0f} s",
        )
    return table


def pairs_table(report: Comparison) -> Table:
    table = Table(title="P(A > B) on sealed (bootstrap)", title_justify="left")
    for col in ("A", "B", "P(A > B)", "over"):
        table.add_column(col)
    for p in report.pairs:
        prob = "—" if p.p_a_beats_b_sealed is None else f"{p.p_a_beats_b_sealed:.3f}"
        table.add_row(p.a, p.b, prob, p.over)
    return table


def task_matrix(report: Comparison, splits: tuple[str, ...] = MATRIX_SPLITS) -> list[list[str]]:
    """Rows ``[split, task, cell per method]``; a cell is 'seed→champion' (means over runs)."""
    tasks = sorted(
        {
            (s, t)
            for m in report.methods
            for r in m.runs
            for s in splits
            for t in r.seed_rewards.get(s, {})
        },
        key=lambda st: (SPLITS.index(st[0]), st[1]),
    )
    rows = []
    for split, task in tasks:
        row = [split, task]
        for m in report.methods:
            seed = [v for r in m.runs if (v := r.seed_rewards.get(split, {}).get(task)) is not None]
            champ = [v for r in m.runs if (v := r.rewards.get(split, {}).get(task)) is not None]
            s = f"{mean(seed):.2f}" if seed else "—"
            c = f"{mean(champ):.2f}" if champ else "—"
            row.append(f"{s}→{c}")
        rows.append(row)
    return rows


def matrix_table(report: Comparison) -> Table:
    table = Table(title="per task: seed → champion (mean over runs)", title_justify="left")
    table.add_column("split")
    table.add_column("task")
    for i, m in enumerate(report.methods):
        table.add_column(Text(m.name, style=COLOURS[i % len(COLOURS)]), justify="right")
    for row in task_matrix(report):
        table.add_row(*row)
    return table


def _print_wide(out: Console, table: Table) -> None:
    """A table at its natural width when the output is not a terminal (a file, a pipe)."""
    need = Measurement.get(out, out.options.update(max_width=1000), table).maximum
    if out.is_terminal or need <= out.width:
        out.print(table)
        return
    wide = Console(file=out.file, width=need, soft_wrap=False, color_system=out.color_system)
    wide.print(table)


def print_report(report: Comparison, out: Console) -> None:
    _print_wide(out, methods_table(report))
    if any(m.over == "tasks" for m in report.methods):
        out.print("* one run: the CI is over the champion's tasks, not over runs", highlight=False)
    for r in report.refused:
        out.print(
            f"[bold red]forced:[/] {len(r['runs'])} run(s) have a different {r['what']} "
            f"({r['differs']}); shown anyway",
            highlight=False,
        )
    if report.pairs:
        _print_wide(out, pairs_table(report))
    _print_wide(out, matrix_table(report))
    for axis in axes(report):
        out.print(ascii_plot(report, axis))
    if not has_cost(report):
        out.print("(no run spent any cost: no curve against cost)", highlight=False)
