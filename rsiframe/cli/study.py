"""Commands across runs: ``compare``, ``ablate``, ``fidelity``, ``replay``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from rsiframe.cli.common import (
    EXIT_INTERRUPTED,
    friendly,
    method_option,
    print_json,
    sigterm_as_interrupt,
    stderr,
    stdout,
)
from rsiframe.errors import EXIT_FAILED


@click.command()
@click.argument("recipe", type=click.Path(path_type=Path), required=False)
@click.option("--slot", help="the slot whose operator varies, e.g. select")
@click.option("--operators", "operators_", metavar="A,B,C", help="operators for the slot")
@click.option(
    "--grid",
    "grid_file",
    type=click.Path(path_type=Path),
    help="a grid file: named cells, each with its own --set items (and method), instead of "
    "--slot/--operators",
)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="override one key")
@method_option
@click.option(
    "--repeats", type=click.IntRange(min=1), help="seeds per cell (default: the grid file's, or 3)"
)
@click.option("--out", type=click.Path(path_type=Path), help="grid folder")
@click.option(
    "--resume", "resume_dir", type=click.Path(path_type=Path), help="finish the grid in DIR"
)
@click.option("--quiet", "-q", is_flag=True, help="no line per run")
@click.option("--json", "as_json", is_flag=True, help="end with the compare report as JSON")
@friendly
def ablate(
    recipe: Path | None,
    slot: str | None,
    operators_: str | None,
    grid_file: Path | None,
    sets: tuple[str, ...],
    method: str | None,
    repeats: int | None,
    out: Path | None,
    resume_dir: Path | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """Run RECIPE once per cell and repeat (repeat r: random_seed r): the cells are the
    operators of --slot, or the named cells of a --grid file, each with its own --set
    items and maybe its own method:

    \b
      set: [budget.max_generations=4]         # every cell
      cells:
        - {name: two-knobs, set: [slots.mutate.config.max_changes=2]}
        - {name: round-robin, set: [slots.mutate.config.order=round_robin]}

    Budgets are identical (the recipe's); the grid resumes as a whole with --resume DIR
    and ends with the compare table of its runs.
    """
    from rsiframe.study import ablate as ablate_mod

    sigterm_as_interrupt()
    grid = _grid(recipe, slot, operators_, grid_file, list(sets), method, repeats, out, resume_dir)
    click.echo(str(grid.root))
    sys.stdout.flush()
    err = stderr()

    def on_start(cell: Any, i: int, n: int) -> None:
        if not quiet:
            err.print(f"[{i + 1}/{n}] {cell.label} ...", highlight=False)

    warned: set[tuple[str, str]] = set()

    def on_warnings(cell: Any, lines: list[str]) -> None:
        for line in lines:  # once per cell (its repeats say the same); in each run's status
            if (cell.name, line) not in warned:
                warned.add((cell.name, line))
                click.echo(f"rsiframe: warning: {cell.name}: {line}", err=True)

    def on_done(r: Any) -> None:
        if not quiet and r.reason != "already ended":
            err.print(f"    {r.cell.label}: {r.state} in {r.seconds:.0f} s", highlight=False)

    try:
        ablate_mod.run_grid(grid, on_start=on_start, on_done=on_done, on_warnings=on_warnings)
    except KeyboardInterrupt:
        click.echo(
            f"rsiframe: interrupted; continue with: rsiframe ablate --resume {grid.root}", err=True
        )
        sys.exit(EXIT_INTERRUPTED)
    _show_comparison([grid.root], by="recipe", force=False, as_json=as_json)


def _grid(
    recipe: Path | None,
    slot: str | None,
    operators_: str | None,
    grid_file: Path | None,
    sets: list[str],
    method: str | None,
    repeats: int | None,
    out: Path | None,
    resume_dir: Path | None,
) -> Any:
    """The grid ``ablate`` drives: reopened, from a grid file, or one operator per cell."""
    from rsiframe.errors import RecipeError
    from rsiframe.study import ablate as ablate_mod

    if resume_dir is not None:
        if recipe is not None or slot or operators_ or grid_file or method:
            raise RecipeError(
                "--resume DIR takes no RECIPE, --slot, --operators, --grid or --method"
            )
        return ablate_mod.open_grid(resume_dir)
    if grid_file is not None:
        if slot or operators_:
            raise RecipeError("--grid FILE takes no --slot or --operators (its cells say)")
        return ablate_mod.plan_grid_file(grid_file, recipe, sets, repeats, out, method)
    if recipe is None or not slot or not operators_:
        raise RecipeError(
            "ablate needs RECIPE with --slot and --operators, or --grid FILE (or --resume DIR)"
        )
    return ablate_mod.plan_grid(
        recipe, slot, operators_.split(","), sets, repeats or 3, out, method
    )


def _show_comparison(
    paths: list[Path],
    *,
    by: str,
    force: bool,
    as_json: bool,
    html: Path | None = None,
    png: Path | None = None,
    plan: bool = False,
    include_unfinished: bool = False,
) -> None:
    from rsiframe.study.compare import compare as compare_runs
    from rsiframe.study.compare_html import write_outputs
    from rsiframe.study.compare_report import report_json
    from rsiframe.study.compare_text import print_report

    report = compare_runs(paths, by=by, force=force, include_unfinished=include_unfinished)
    written = write_outputs(report, html=html, png=png)
    if as_json:
        print_json(report_json(report))
    else:
        print_report(report, stdout(), plan=plan)
    for path in written:
        click.echo(f"wrote {path}", err=True)


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--by",
    type=click.Choice(["recipe", "run"]),
    default="recipe",
    show_default=True,
    help="recipe: runs that differ only by name and random_seed form one method",
)
@click.option("--force", is_flag=True, help="compare across task sets or evaluators (marked)")
@click.option("--include-unfinished", is_flag=True, help="take in unfinished runs, marked")
@click.option("--plan", is_flag=True, help="per pair: runs per method needed to tell")
@click.option("--html", "html", type=click.Path(path_type=Path), help="write one HTML file")
@click.option("--png", "png", type=click.Path(path_type=Path), help="write the plots into DIR")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def compare(
    paths: tuple[Path, ...],
    by: str,
    force: bool,
    include_unfinished: bool,
    plan: bool,
    html: Path | None,
    png: Path | None,
    as_json: bool,
) -> None:
    """Compare methods across runs: PATHS are run folders or folders holding runs.

    One row per method (each champion's train, gate, sealed: mean, 95 % CI over seeds and
    tasks), with evaluations, task runs, tokens, cost, wall time; per pair the sealed
    difference, an exact test (Holm) and its verdict; the per-task matrix; the curves.
    Every run is verified first; unfinished runs are left out and listed.
    """
    _show_comparison(
        list(paths),
        by=by,
        force=force,
        as_json=as_json,
        html=html,
        png=png,
        plan=plan,
        include_unfinished=include_unfinished,
    )


@click.command()
@click.argument("recipe", type=click.Path(path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="override one key")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), help="folder for the framework's runs")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def fidelity(
    recipe: Path, sets: tuple[str, ...], repeats: int, out: Path | None, as_json: bool
) -> None:
    """Does rsiframe change a system's scores? Evaluate RECIPE's seed on the gate tasks
    twice directly (the evaluator's own trial runner, no archive, operators or signing)
    and once as generation 0 of a real run; compare per task.

    Passes when framework-vs-direct disagreement is not significantly higher than
    direct-vs-direct disagreement (exact McNemar, alpha 0.05); on a deterministic task set
    every task must agree. Exit 0 when it passes, 1 when it does not.
    """
    from rsiframe.study.fidelity import fidelity as run_fidelity
    from rsiframe.study.fidelity import print_fidelity

    err = stderr()

    def on_step(r: int, which: str) -> None:
        if not as_json:
            err.print(f"repeat {r}: {which.replace('_', '-')} ...", highlight=False)

    report = run_fidelity(recipe, list(sets), repeats=repeats, out=out, on_step=on_step)
    v = report.verdict
    if as_json:
        print_json(report.model_dump(mode="json"))
    else:
        print_fidelity(report, stdout())
    if not v.passed:
        click.echo(f"rsiframe: fidelity failed: {v.reason}", err=True)
        sys.exit(EXIT_FAILED)


@click.command("replay")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--out", type=click.Path(path_type=Path), required=True, help="the replay's run folder"
)
@click.option("--json", "as_json", is_flag=True, help="the comparison as JSON")
@friendly
def replay(run_dir: Path, out: Path, as_json: bool) -> None:
    """Run RUN_DIR's recipe again into OUT with every model call answered from
    RUN_DIR's archive and no endpoint configured (a request it never made is refused),
    then compare the candidates: same ids, parents, trees and states. One line says
    which; exit 0 when the same, 1 when they differ."""
    from rsiframe.study.replay import replay as replay_run

    report = replay_run(run_dir, out, say=lambda m: click.echo(f"rsiframe: {m}", err=True))
    if as_json:
        print_json(report.model_dump(mode="json"))
    click.echo(report.verdict(), err=as_json)
    if not report.same:
        sys.exit(1)
