"""``compare`` in the terminal: the methods table and what its CI means, the pairs (sealed
difference, exact test, Holm, verdict; with ``--plan`` the runs each would need), the
unfinished runs, the per-task matrix and the best-gate-so-far curves drawn in characters.
Curves on a common axis live here too, so the PNG and HTML views draw exactly what the
terminal draws."""

from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from rsiframe.study.compare import SPLITS, Comparison, Method, RunData
from rsiframe.study.compare_stats import Pair
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


def method_label(m: Method) -> str:
    """A method's name, marked when unfinished runs were taken in."""
    k = len(m.unfinished())
    return m.name + (f" (! {k} unfinished)" if k else "")


def methods_table(report: Comparison) -> Table:
    n_runs = sum(len(m.runs) for m in report.methods)
    left = (
        ""
        if report.included_unfinished or not report.unfinished
        else (f", {len(report.unfinished)} unfinished left out")
    )
    table = Table(
        title=f"compare: {len(report.methods)} methods, {n_runs} runs, every run verified{left}",
        title_justify="left",
    )
    for col in ("method", "mutate", "runs", *SPLITS):
        table.add_column(col, overflow="fold")
    for col in ("evals", "task runs", "model calls", "tokens", "cost", "wall"):
        table.add_column(col, justify="right")
    marked = {rid for r in report.refused for rid in r["runs"]}
    for i, m in enumerate(report.methods):
        name = Text(m.name, style=COLOURS[i % len(COLOURS)])
        if any(r.run_id in marked for r in m.runs):
            name.append(" (forced)", style="bold red")
        if m.unfinished():
            name.append(f" (! {len(m.unfinished())} unfinished)", style="bold red")
        table.add_row(
            name,
            m.mutator,
            str(len(m.runs)),
            *(fmt_estimate(m.scores[s]) for s in SPLITS),
            f"{m.usage('evaluations'):.0f}",
            f"{m.usage('task_runs'):.0f}",
            model_calls_cell(m),
            f"{m.usage('tokens'):.0f}",
            f"{m.usage('cost'):.4g}",
            f"{m.usage('wall_s'):.0f} s",
        )
    return table


def model_calls_cell(m: Method) -> str:
    """A method's model calls per run (mean), those answered from the ledger apart:
    ``6, 3 from cache``."""
    calls, cached = m.usage("model_calls"), m.usage("model_cached")
    return f"{calls:.4g}" + (f", {cached:.4g} from cache" if cached else "")


PAIR_COLUMNS = (
    "A",
    "B",
    "A - B sealed [95 % CI]",
    "p",
    "p Holm",
    "verdict",
    "equivalence",
    "test",
)


def pair_cells(p: Pair) -> list[str]:
    """One pair as the table shows it: no p-value when the data cannot decide."""
    d = p.diff
    diff = "—" if d is None else f"{d.mean:+.3f} [{d.lo:+.3f}, {d.hi:+.3f}]"
    shown = p.test is not None and p.verdict != "cannot_tell"
    pv = f"{p.test.p:.3g}" if shown and p.test is not None else "—"
    ph = f"{p.p_holm:.3g}" if shown and p.p_holm is not None else "—"
    within = "—" if p.equivalence is None else f"within ±{p.equivalence:.3f}"
    if p.equivalence is None and p.verdict in ("cannot_tell", "not_significant"):
        within = "none (CI width 0)"
    return [p.a, p.b, diff, pv, ph, p.reads(), within, p.design]


def pairs_table(report: Comparison) -> Table:
    table = Table(title="pairs on sealed", title_justify="left")
    for col in PAIR_COLUMNS:
        table.add_column(col, overflow="fold")
    for p in report.pairs:
        table.add_row(*(Text(c) for c in pair_cells(p)))  # names may hold [brackets]
    return table


def unfinished_lines(report: Comparison) -> list[str]:
    """One line per unfinished run: left out (default) or taken in."""
    what = "taken in, marked !" if report.included_unfinished else "left out"
    return [
        f"{what}: {r.path} ({r.name}, random_seed {r.random_seed}): {r.unfinished}"
        for r in report.unfinished
    ]


def plan_lines(report: Comparison) -> list[str]:
    return [f"plan: {p.a} vs {p.b}: {p.plan.line}" for p in report.pairs if p.plan.line]


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
    wide = Console(file=out.file, width=need, soft_wrap=False, no_color=out.no_color)
    wide.print(table)


def print_report(report: Comparison, out: Console, *, plan: bool = False) -> None:
    _print_wide(out, methods_table(report))
    for line in report.method_notes():
        style = "bold" if line.startswith("warning") else ""
        out.print(line, highlight=False, markup=False, style=style)
    for line in unfinished_lines(report):
        out.print(line, highlight=False, markup=False, style="yellow")
    for r in report.refused:
        out.print(
            f"[bold red]forced:[/] {len(r['runs'])} run(s) have a different {r['what']} "
            f"({r['differs']}); shown anyway",
            highlight=False,
        )
    if report.pairs:
        _print_wide(out, pairs_table(report))
        for line in report.pair_notes():
            out.print(line, highlight=False, markup=False)
    if plan:
        for line in plan_lines(report) or ["plan: no pair to plan for"]:
            out.print(line, highlight=False, markup=False)
    _print_wide(out, matrix_table(report))
    for axis in axes(report):
        out.print(ascii_plot(report, axis))
    if not has_cost(report):
        out.print("(no run spent any cost: no curve against cost)", highlight=False)
