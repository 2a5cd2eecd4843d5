"""The ``rsiframe`` command line. Imports everything; nothing imports it.

Exit codes: 0 success, 1 a run or verification failed, 2 bad input, 130 interrupted.
A user's mistake is one line on stderr, never a traceback.
"""

from __future__ import annotations

import inspect
import json
import re
import signal
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rsiframe import __version__, doctor, replay
from rsiframe.errors import EXIT_BAD_INPUT, EXIT_FAILED, RsiError

F = TypeVar("F", bound=Callable[..., Any])
EXIT_INTERRUPTED = 130


def _stdout() -> Console:
    return Console(soft_wrap=False)


def _stderr() -> Console:
    return Console(stderr=True)


_KEY = re.compile(r"^([A-Za-z_][\w.\-]*): ")


def error_json(exc: RsiError) -> dict[str, Any]:
    """A user error for scripts: the message, the file it is about, the dotted key if any."""
    m = _KEY.match(exc.message)
    return {"error": exc.message, "file": exc.where, "key": m.group(1) if m else None}


def friendly(fn: F) -> F:
    """Render user errors as one line with their exit code (and, with ``--json``, as JSON
    on stdout: ``{"error", "file", "key"}``)."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RsiError as exc:
            if kwargs.get("as_json"):
                _print_json(error_json(exc))
            click.echo(f"rsiframe: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("rsiframe: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)

    return wrapper  # type: ignore[return-value]


def _sigterm_as_interrupt() -> None:
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


_unset_option = click.option(
    "--unset",
    "unsets",
    multiple=True,
    metavar="KEY",
    help="remove one recipe key, e.g. tasks.split.ratios (repeatable; same as KEY=null on a "
    "mapping)",
)


def _print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=False))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rsiframe")
def main() -> None:
    """Run and compare methods that evolve agent systems under a certified evaluator.

    A recipe (YAML) binds operators to lifecycle slots; every candidate is a git
    commit; every score is a signed record. Start with:

        rsiframe run recipes/quickstart.yaml
    """


# -- run / resume ---------------------------------------------------------------------


def _drive(engine: Any, quiet: bool, as_json: bool) -> None:
    from rsiframe.engine import RunFailure
    from rsiframe.loader import LoadedRun
    from rsiframe.progress import RichProgress
    from rsiframe.report import print_summary, status_of

    err = _stderr()
    budget = engine.recipe.budget
    progress = RichProgress(err, budget.max_generations, budget.max_candidates)
    if not quiet:
        engine.progress = progress
    interrupted = False
    # drive() records a failure in the archive; a RunFailure is then reported from the state,
    # a user error as one line (friendly), anything else as a traceback
    try:
        with progress if not quiet else _Null():
            engine.drive()
    except KeyboardInterrupt:
        interrupted = True
    except RunFailure:
        pass
    finally:
        engine.close()
    # the engine's own state is the fold of everything it read and wrote: no re-read
    report = status_of(LoadedRun(engine.paths, engine.state.verifier, [], engine.state, b""))
    report.head = engine.archive.head
    if as_json:
        _print_json(report.model_dump(mode="json"))
    else:
        print_summary(report, _stdout())
    if interrupted:
        click.echo(
            f"rsiframe: interrupted; continue with: rsiframe resume {engine.paths.root}", err=True
        )
        sys.exit(EXIT_INTERRUPTED)
    if report.state == "failed":
        click.echo(f"rsiframe: run failed: {report.reason}", err=True)
        sys.exit(EXIT_FAILED)


_RAY_ADDRESS = click.option(
    "--ray-address",
    metavar="ADDR",
    help='evaluate on a Ray cluster this session: "auto", host:port or ray://host:port '
    "(needs the cluster extra)",
)


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@main.command()
@click.argument("recipe", type=click.Path(path_type=Path))
@click.option(
    "--out", type=click.Path(path_type=Path), help="run folder (default archive/<name>-<UTC time>)"
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="override one recipe key, e.g. slots.select.config.size=4; a YAML mapping replaces "
    "the mapping at KEY (repeatable). The run's name then says what changed",
)
@_unset_option
@click.option("--quiet", "-q", is_flag=True, help="no live progress")
@click.option("--json", "as_json", is_flag=True, help="end with the status as JSON")
@_RAY_ADDRESS
@friendly
def run(
    recipe: Path,
    out: Path | None,
    sets: tuple[str, ...],
    unsets: tuple[str, ...],
    quiet: bool,
    as_json: bool,
    ray_address: str | None,
) -> None:
    """Start a run of RECIPE. Prints the run folder on the first line of stdout.

    Candidates in flight come from the recipe's `concurrency: {candidates: K, mode: M}`
    (e.g. --set concurrency.candidates=4). Mode generational (the default) gives the
    same candidates, scores and champion for every K; mode steady starts a new
    proposal whenever a slot frees and is NOT deterministic. Ctrl-C stops new work,
    waits up to $RSIFRAME_GRACE_S seconds (default 10) for work in flight, then kills
    its sandboxes; `resume` re-runs what was open.
    """
    from rsiframe.engine import Engine

    _sigterm_as_interrupt()
    engine = Engine.create(recipe, list(sets), out, ray_address, unsets=list(unsets))
    click.echo(str(engine.paths.root))
    sys.stdout.flush()
    _drive(engine, quiet, as_json)


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--retry-failed", is_flag=True, help="evaluate failed candidates again")
@click.option("--quiet", "-q", is_flag=True, help="no live progress")
@click.option("--json", "as_json", is_flag=True, help="end with the status as JSON")
@_RAY_ADDRESS
@friendly
def resume(
    run_dir: Path, retry_failed: bool, quiet: bool, as_json: bool, ray_address: str | None
) -> None:
    """Continue an interrupted run after re-verifying its archive and locks."""
    from rsiframe.engine import Engine

    _sigterm_as_interrupt()
    engine, notes = Engine.open(run_dir, retry_failed=retry_failed, ray_address=ray_address)
    click.echo(str(engine.paths.root))
    for note in notes:
        click.echo(f"rsiframe: {note}", err=True)
    if not engine.needs_work():
        click.echo(
            "rsiframe: the run has already ended; nothing to resume"
            + ("" if retry_failed else " (use --retry-failed to retry failed candidates)"),
            err=True,
        )
    _drive(engine, quiet, as_json)


# -- inspection ---------------------------------------------------------------------


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def status(run_dir: Path, as_json: bool) -> None:
    """Show a run's state, budget and every candidate with its verified scores."""
    from rsiframe.drift import operator_drift, task_drift
    from rsiframe.loader import load_run
    from rsiframe.report import candidate_table, print_summary, status_of
    from rsiframe.verify import lock_problems

    loaded = load_run(run_dir)
    report = status_of(loaded)
    report.notes += [f"lock: {p}" for p in lock_problems(loaded.paths, loaded.state)]
    report.notes += [f"lock: {p}" for p in operator_drift(loaded.paths)]
    report.notes += [f"lock: {p}" for p in task_drift(loaded.paths)[0]]
    if as_json:
        _print_json(report.model_dump(mode="json"))
        return
    out = _stdout()
    out.print(candidate_table(report))
    print_summary(report, out)


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--reproduce",
    is_flag=True,
    help="also re-evaluate the champion from a fresh export in a fresh sandbox on every "
    "split it was certified on (sealed included) and compare per-task rewards",
)
@click.option(
    "--tolerance",
    type=click.FloatRange(min=0.0),
    default=0.0,
    show_default=True,
    help="largest per-task reward deviation --reproduce accepts (0: exact, for deterministic "
    "tasks)",
)
@click.option(
    "--tasks",
    "tasks_root",
    type=click.Path(path_type=Path),
    help="the run's task set, if not at the path its lock names (checked against the lock)",
)
@click.option("--candidate", metavar="ID", help="reproduce this candidate instead of the champion")
@click.option(
    "--head",
    metavar="N:HASH",
    help="a chain head written down earlier (run and status print it): fail unless the "
    "archive still holds that event at that position (detects truncation)",
)
@click.option(
    "--rebuild", is_flag=True, help="with --reproduce: build D/T/H models again, not from cache"
)
@click.option(
    "--key",
    "key_file",
    type=click.Path(path_type=Path),
    help="the run's public key (PEM) obtained out of band: pubkey.pem must be this key",
)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def verify(
    run_dir: Path,
    reproduce: bool,
    tolerance: float,
    tasks_root: Path | None,
    candidate: str | None,
    rebuild: bool,
    key_file: Path | None,
    head: str | None,
    as_json: bool,
) -> None:
    """Check a run with only its folder and public key; no private key is needed.

    Checks, each reported by name: pubkey, chain (hash chain), signatures (every event),
    state, certificates (signed and bound to run, commit, tree, recipe, evaluator and
    task set), locks, operators (operator code on disk as locked), tasks (the task set on
    disk as locked; skipped when it is not there), commits (in repo.git with the recorded
    tree), admitted (verified records), evidence (trajectories and logs). --reproduce adds
    reproduce, --head adds head (a recorded chain head is still in the chain). Nothing is
    written into the run folder. Exit 0 when every check passes, 1 otherwise.
    """
    from rsiframe.errors import RunFolderError
    from rsiframe.verify import verify as verify_run

    key = None
    if key_file is not None:
        try:
            key = key_file.read_bytes()
        except OSError as exc:
            raise RunFolderError(f"--key: cannot read {key_file}: {exc.strerror}") from exc
    report = verify_run(
        run_dir,
        reproduce=reproduce,
        tolerance=tolerance,
        tasks_root=tasks_root,
        expected_key=key,
        candidate=candidate,
        head=head,
        rebuild=rebuild,
    )
    if as_json:
        _print_json(report.model_dump(mode="json"))
    else:
        out = _stdout()
        table = Table(title=f"verify {report.path}", title_justify="left")
        for col in ("check", "result", "detail"):
            table.add_column(col, overflow="fold")
        style = {"ok": "green", "failed": "bold red", "skipped": "yellow"}
        for c in report.checks:
            table.add_row(c.name, f"[{style[c.status]}]{c.status}[/]", escape(c.detail))
        out.print(table)
        out.print(f"keyid {report.keyid}", highlight=False)
        for p in report.problems:
            out.print(f"  - {p}", highlight=False, markup=False)
        for n in report.notes + (report.reproduce.notes if report.reproduce else []):
            out.print(f"note: {n}", highlight=False, markup=False)
        verdict = "OK" if report.ok else "FAILED"
        out.print(f"{verdict}: {report.records} signed records, {len(report.problems)} problems")
    if not report.ok:
        failed = [c.name for c in report.checks if c.status == "failed"]
        first = report.problems[0] if report.problems else "checks skipped"
        click.echo(
            f"rsiframe: verification failed ({', '.join(failed)}): {first}"
            + (f" (+{len(report.problems) - 1} more)" if len(report.problems) > 1 else ""),
            err=True,
        )
        sys.exit(EXIT_FAILED)


# -- comparing methods ----------------------------------------------------------------


@main.command()
@click.argument("recipe", type=click.Path(path_type=Path), required=False)
@click.option("--slot", help="the slot whose operator varies, e.g. select")
@click.option("--operators", "operators_", metavar="A,B,C", help="operators for the slot")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="override one key")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True)
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
    sets: tuple[str, ...],
    repeats: int,
    out: Path | None,
    resume_dir: Path | None,
    quiet: bool,
    as_json: bool,
) -> None:
    """Run RECIPE once per operator of --slot and repeat (repeat r: random_seed r).

    Budgets are identical (the recipe's); the grid resumes as a whole with --resume DIR
    and ends with the compare table of its runs.
    """
    from rsiframe import ablate as ablate_mod
    from rsiframe.errors import RecipeError

    _sigterm_as_interrupt()
    if resume_dir is not None:
        if recipe is not None or slot or operators_:
            raise RecipeError("--resume DIR takes no RECIPE, --slot or --operators")
        grid = ablate_mod.open_grid(resume_dir)
    else:
        if recipe is None or not slot or not operators_:
            raise RecipeError("ablate needs RECIPE, --slot and --operators (or --resume DIR)")
        grid = ablate_mod.plan_grid(recipe, slot, operators_.split(","), list(sets), repeats, out)
    click.echo(str(grid.root))
    sys.stdout.flush()
    err = _stderr()

    def on_start(cell: Any, i: int, n: int) -> None:
        if not quiet:
            err.print(f"[{i + 1}/{n}] {cell.label} ...", highlight=False)

    def on_done(r: Any) -> None:
        if not quiet and r.reason != "already ended":
            err.print(f"    {r.cell.label}: {r.state} in {r.seconds:.0f} s", highlight=False)

    try:
        ablate_mod.run_grid(grid, on_start=on_start, on_done=on_done)
    except KeyboardInterrupt:
        click.echo(
            f"rsiframe: interrupted; continue with: rsiframe ablate --resume {grid.root}", err=True
        )
        sys.exit(EXIT_INTERRUPTED)
    _show_comparison([grid.root], by="recipe", force=False, as_json=as_json)


def _show_comparison(
    paths: list[Path],
    *,
    by: str,
    force: bool,
    as_json: bool,
    html: Path | None = None,
    png: Path | None = None,
) -> None:
    from rsiframe.compare import compare as compare_runs
    from rsiframe.compare_view import print_report, write_outputs

    report = compare_runs(paths, by=by, force=force)
    written = write_outputs(report, html=html, png=png)
    if as_json:
        _print_json(report.to_json())
    else:
        print_report(report, _stdout())
    for path in written:
        click.echo(f"wrote {path}", err=True)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--by",
    type=click.Choice(["recipe", "run"]),
    default="recipe",
    show_default=True,
    help="recipe: runs that differ only by name and random_seed form one method",
)
@click.option("--force", is_flag=True, help="compare across task sets or evaluators (marked)")
@click.option("--html", "html", type=click.Path(path_type=Path), help="write one HTML file")
@click.option("--png", "png", type=click.Path(path_type=Path), help="write the plots into DIR")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def compare(
    paths: tuple[Path, ...],
    by: str,
    force: bool,
    html: Path | None,
    png: Path | None,
    as_json: bool,
) -> None:
    """Compare methods across runs: PATHS are run folders or folders holding runs.

    One row per method (train, gate, sealed of each run's champion: mean and 95 %
    bootstrap CI), with evaluations, task runs, model tokens, cost and wall time; P(A > B)
    on sealed for each pair; the per-task matrix; best-gate-so-far curves. Every run is
    verified first; a run that fails verify is refused.
    """
    _show_comparison(list(paths), by=by, force=force, as_json=as_json, html=html, png=png)


@main.command()
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
    from rsiframe.fidelity import fidelity as run_fidelity
    from rsiframe.fidelity import print_fidelity

    err = _stderr()

    def on_step(r: int, which: str) -> None:
        if not as_json:
            err.print(f"repeat {r}: {which.replace('_', '-')} ...", highlight=False)

    report = run_fidelity(recipe, list(sets), repeats=repeats, out=out, on_step=on_step)
    v = report.verdict
    if as_json:
        _print_json(report.model_dump(mode="json"))
    else:
        print_fidelity(report, _stdout())
    if not v.passed:
        click.echo(f"rsiframe: fidelity failed: {v.reason}", err=True)
        sys.exit(EXIT_FAILED)


# -- self-test -----------------------------------------------------------------------


@main.group()
def selftest() -> None:
    """Self-tests of rsiframe's own guarantees."""


@selftest.command("integrity")
@click.option(
    "--trials",
    "-n",
    type=click.IntRange(min=1),
    default=None,
    help="independent trials per scenario (default 2: a few minutes on 2 cores)",
)
@click.option(
    "--scenario",
    "scenarios",
    multiple=True,
    metavar="NAME",
    help="run only this scenario (repeatable); --list shows them",
)
@click.option("--seed", type=int, default=None, help="seed of the trials (default: random)")
@click.option(
    "--sandbox",
    type=click.Choice(["auto", "bwrap", "process", "docker"]),
    default="auto",
    show_default=True,
    help="the experiment's evaluation sandbox (process: see what the fallback lets through; "
    "docker: containers of the local base image)",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "harbor"]),
    default="local",
    show_default=True,
    help="the experiment's evaluator engine (harbor: Harbor with the bwrap environment)",
)
@click.option(
    "--candidates",
    type=click.IntRange(1, 64),  # schema.MAX_CANDIDATES_IN_FLIGHT
    default=None,
    help="the experiment's concurrency.candidates (candidates in flight; default 1)",
)
@click.option(
    "--mode",
    type=click.Choice(["generational", "steady"]),
    default=None,
    help="the experiment's concurrency.mode (steady is not deterministic)",
)
@click.option("--list", "list_only", is_flag=True, help="list the scenarios and exit")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def selftest_integrity(
    trials: int | None,
    scenarios: tuple[str, ...],
    seed: int | None,
    sandbox: str,
    engine: str,
    candidates: int | None,
    mode: str | None,
    list_only: bool,
    as_json: bool,
) -> None:
    """Crash and attack a tiny built-in experiment, then check the archive still holds.

    Each scenario (SIGKILL at a stage, a torn append, a candidate writing outside its
    surface or reading the key, a forged or replayed archive entry, an edited task,
    a misbehaving operator, ...) runs N independent trials, each in its own temp
    folder with its own key folder. A trial passes when the run ends valid and
    attributable (verify passes, or the tampering is detected and named), every
    certified reward equals the ground truth, and the champion reproduces.
    Exit 0 when every trial passes, 1 otherwise.
    """
    from rsiframe.selftest.runner import DEFAULT_TRIALS, check_names, describe, run_selftest, table

    if list_only:
        names = check_names(list(scenarios))
        if as_json:
            _print_json([{"name": n, "description": describe(n)} for n in names])
        else:
            for n in names:
                click.echo(f"{n:24} {describe(n)}")
        return
    err = _stderr()

    def on_trial(name: str, r: Any) -> None:
        if not as_json:
            mark = "ok" if r.passed else "FAIL"
            err.print(f"{name} #{r.trial}: {mark} ({r.seconds:.1f} s)", highlight=False)
            for p in r.problems[:3]:
                err.print(f"    {p}", highlight=False, markup=False)

    concurrency = {"candidates": candidates or 1, "mode": mode or "generational"}
    report = run_selftest(
        trials or DEFAULT_TRIALS,
        list(scenarios),
        seed=seed,
        sandbox=sandbox,
        engine=engine,
        concurrency=concurrency if candidates or mode else None,
        on_trial=on_trial,
    )
    if as_json:
        _print_json(report.model_dump(mode="json"))
    else:
        out = _stdout()
        out.print(table(report))
        failed = sum(s.failed for s in report.scenarios)
        total = sum(s.trials for s in report.scenarios)
        out.print(f"{total - failed}/{total} trials passed in {report.seconds:.0f} s")
    if not report.ok:
        bad = [s.name for s in report.scenarios if s.failed]
        click.echo(f"rsiframe: self-test failed: {', '.join(bad)}", err=True)
        sys.exit(EXIT_FAILED)


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--poll",
    type=click.FloatRange(min=0.1),
    default=1.0,
    show_default=True,
    help="seconds between checks for new events of a live run",
)
@friendly
def view(path: Path, poll: float) -> None:
    """Browse runs in the terminal, read-only: PATH is a run folder or a folder of runs.

    Screens: runs, run (recipe, budget, score plot, candidates table; `/` filters),
    lineage, candidate (diff, certificates, rewards, trajectories and logs, notes).
    A run still being written updates live. `?` lists every key, `q` quits.
    """
    from rsiframe.viewer.app import ViewerApp

    ViewerApp(path, poll_seconds=poll).run()


# -- recipes -------------------------------------------------------------------------


@main.group()
def recipe() -> None:
    """Check and show recipes."""


@recipe.command("check")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="override one key")
@_unset_option
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def recipe_check(file: Path, sets: tuple[str, ...], unsets: tuple[str, ...], as_json: bool) -> None:
    """Validate FILE: schema, operators and their configs, seed, tasks and surface."""
    from rsiframe.preflight import plan

    info = plan(file, list(sets), unsets=list(unsets))
    if as_json:
        _print_json(
            {
                "ok": True,
                "digest": info.resolved.digest,
                "split": info.split,
                "seed_files": len(info.seed.entries),
                "operators": {slot: spec.operator for slot, spec in _slots(info)},
                "models": info.models.as_json() if info.models else None,
            }
        )
    else:
        click.echo(f"{file}: ok ({info})")


@recipe.command("show")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="override one key")
@_unset_option
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def recipe_show(file: Path, sets: tuple[str, ...], unsets: tuple[str, ...], as_json: bool) -> None:
    """Print the resolved recipe (extends merged, overrides applied, defaults filled in)."""
    from rsiframe import recipe as recipe_mod

    resolved = recipe_mod.load(file, list(sets), unsets=list(unsets))
    if as_json:
        _print_json({"digest": resolved.digest, "recipe": resolved.data})
    else:
        click.echo(f"# digest: {resolved.digest}")
        click.echo(recipe_mod.dump(resolved.data), nl=False)


# -- task sets -----------------------------------------------------------------------


@main.group()
def tasks() -> None:
    """Check Harbor task folders and data sets."""


@tasks.command("check")
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--oracle",
    is_flag=True,
    help="run each task's solution/solve.sh as the agent on the local and harbor engines",
)
@click.option(
    "--engine",
    "engines",
    multiple=True,
    type=click.Choice(["local", "harbor"]),
    help="with --oracle: only this engine (repeatable; default both)",
)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def tasks_check(path: Path, oracle: bool, engines: tuple[str, ...], as_json: bool) -> None:
    """Validate PATH, a Harbor task folder or a folder of tasks: one line per problem.

    Exit 0 when there is none, 1 when there are problems, 2 when PATH holds no task."""
    from rsiframe.taskcheck import ENGINES, check

    report = check(path, oracle=oracle, engines=engines or ENGINES)
    if as_json:
        _print_json(report.to_json())
    else:
        for p in report.problems:
            click.echo(str(p))
        done = f"{report.tasks} task(s)" + (
            ", oracle on " + "+".join(report.oracle) if oracle else ""
        )
        click.echo(
            f"{path}: {done}: " + ("ok" if report.ok else f"{len(report.problems)} problem(s)"),
            err=True,
        )
    if not as_json:
        click.echo(
            f"hint: `rsiframe tasks audit {path}` attacks each task as a reward-hacking "
            "agent would",
            err=True,
        )
    if not report.ok:
        sys.exit(EXIT_FAILED)


@tasks.command("audit")
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--engine",
    "engines",
    multiple=True,
    type=click.Choice(["local", "harbor"]),
    help="only this engine (repeatable; default both)",
)
@click.option(
    "--tasks", "task_ids", multiple=True, metavar="ID", help="only this task (repeatable)"
)
@click.option("--hack", "hacks", multiple=True, metavar="NAME", help="only this hack (repeatable)")
@click.option(
    "--concurrency", default=4, show_default=True, type=click.IntRange(1, 64), help="tasks at once"
)
@click.option(
    "--sandbox",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "bwrap", "process", "docker"]),
    help="the local engine's sandbox",
)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def tasks_audit(
    path: Path,
    engines: tuple[str, ...],
    task_ids: tuple[str, ...],
    hacks: tuple[str, ...],
    concurrency: int,
    sandbox: str,
    as_json: bool,
) -> None:
    """Attack every task under PATH (or those named) with a battery of reward hacks, on
    the engines a run uses: one line per hack that scores above the do-nothing agent or
    sees the tests or the reward, a reference solution below 1, a task that pays for
    nothing. Exit 0 when clean, 1 on any finding, 2 for a bad PATH."""
    from rsiframe.taskaudit import ENGINES, AuditProgress, audit

    _sigterm_as_interrupt()  # a killed audit stops its sandboxes and Harbor too
    with AuditProgress(_stderr()) as progress:
        report = audit(
            path,
            engines=engines or ENGINES,
            task_ids=tuple(t for arg in task_ids for t in arg.split(",") if t),
            hacks=tuple(h for arg in hacks for h in arg.split(",") if h),
            concurrency=concurrency,
            sandbox=sandbox,
            progress=progress,
        )
    if as_json:
        _print_json(report.model_dump(mode="json"))
    else:
        for finding in report.findings:
            click.echo(str(finding))
        verdict = "clean" if report.ok else f"{len(report.findings)} finding(s)"
        click.echo(
            f"{path}: {len(report.tasks)} task(s) on {'+'.join(report.engines)}, "
            f"{len(report.runs)} run(s) in {report.seconds:g} s: {verdict}",
            err=True,
        )
    if not report.ok:
        sys.exit(EXIT_FAILED)


# -- operators -----------------------------------------------------------------------


@main.group()
def operators() -> None:
    """List and describe the installed operators."""


@operators.command("list")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def operators_list(as_json: bool) -> None:
    """Every operator registered under the rsiframe.operators entry point group."""
    from rsiframe.api import SLOTS
    from rsiframe.registry import installed, resolve

    rows = []
    for (slot, name), info in sorted(
        installed().items(), key=lambda kv: (SLOTS.index(kv[0][0]), kv[0][1])
    ):
        cls = resolve(slot, name)
        doc = inspect.cleandoc(cls.__doc__ or "").splitlines()
        rows.append({"slot": slot, "name": name, "ref": info.ref, "summary": doc[0] if doc else ""})
    if as_json:
        _print_json(rows)
        return
    table = Table()
    for col in ("slot", "name", "summary"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["slot"], r["name"], r["summary"])
    _stdout().print(table)


@operators.command("describe")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def operators_describe(name: str, as_json: bool) -> None:
    """Config fields of operator NAME (or SLOT.NAME): type, default, description."""
    from rsiframe.registry import describe

    info, cls = describe(name)
    fields = []
    for fname, f in cls.Config.model_fields.items():
        default = None if f.is_required() else f.get_default(call_default_factory=True)
        if hasattr(default, "model_dump"):  # a nested config model (e.g. network)
            default = default.model_dump(mode="json")
        fields.append(
            {
                "name": fname,
                "type": _type_name(f.annotation),
                "required": f.is_required(),
                "default": default,
                "description": f.description or "",
            }
        )
    doc = inspect.cleandoc(cls.__doc__ or "")
    from rsiframe.api import GATE_DETAIL, INFORMATION

    reads = sorted(INFORMATION[info.slot])
    if as_json:
        _print_json(
            {
                "slot": info.slot,
                "name": info.name,
                "ref": info.ref,
                "doc": doc,
                "fields": fields,
                "reads": reads,
                "reads_with_gate_detail": sorted(GATE_DETAIL),
                "grants": sorted(cls.grants),
            }
        )
        return
    out = _stdout()
    out.print(f"[bold]{info.slot}.{info.name}[/]  ({info.ref})")
    if doc:
        out.print(doc, markup=False, highlight=False)
    out.print(
        f"may read: {', '.join(reads)}; with information.gate_detail also "
        f"{', '.join(sorted(GATE_DETAIL))}; sealed results never",
        highlight=False,
    )
    if cls.grants:
        out.print(f"declared grants: {', '.join(sorted(cls.grants))}", highlight=False)
    if not fields:
        out.print("no config fields")
        return
    table = Table()
    for col in ("field", "type", "default", "description"):
        table.add_column(col, overflow="fold")
    for f in fields:
        default = "(required)" if f["required"] else json.dumps(f["default"], default=str)
        table.add_row(f["name"], f["type"], default, f["description"])
    out.print(table)


# -- models in the loop (issue 13) ----------------------------------------------------


@main.command("stub-llm")
@click.option("--script", "script", type=click.Path(path_type=Path), required=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8765, show_default=True)
@friendly
def stub_llm(script: Path, host: str, port: int) -> None:
    """Serve a scripted OpenAI-compatible stub endpoint (tests, demos; GET /stub/stats)."""
    from rsiframe.stubllm import Script, StubLLM, uvicorn

    stub = StubLLM(Script.load(script))
    click.echo(f"stub endpoint at http://{host}:{port}/v1 ({len(stub.remaining)} answers)")
    uvicorn.run(stub.app, host=host, port=port, log_level="warning", lifespan="off")


main.add_command(doctor.command(friendly, _print_json))
main.add_command(replay.command(friendly, _print_json))


def _slots(info: Any) -> list[tuple[str, Any]]:
    slots = info.resolved.recipe.slots
    return [(slot, slots.get(slot)) for slot in info.resolved.operators]


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if not hasattr(annotation, "__args__") else None
    return text or str(annotation).replace("typing.", "")


if __name__ == "__main__":  # pragma: no cover
    main()


__all__ = ["EXIT_BAD_INPUT", "main"]
