"""Commands on one run: ``run``, ``resume``, ``status``, ``verify``, ``view``, ``report``,
``export``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape
from rich.table import Table

from rsiframe.cli.common import (
    EXIT_INTERRUPTED,
    RAY_ADDRESS,
    friendly,
    method_option,
    print_json,
    sigterm_as_interrupt,
    stderr,
    stdout,
    unset_option,
)
from rsiframe.errors import EXIT_DRIFT, EXIT_FAILED

if TYPE_CHECKING:  # imported where a command runs (the CLI loads nothing up front)
    from rsiframe.engine.loop import Engine


def _drive(engine: Engine, quiet: bool, as_json: bool) -> None:
    from rsiframe.archive.loader import LoadedRun
    from rsiframe.audit.report import print_summary, status_of
    from rsiframe.cli.progress import RichProgress
    from rsiframe.engine.loop import RunFailure

    err = stderr()
    budget = engine.recipe.budget
    progress = RichProgress(err, budget.max_generations, budget.max_candidates)
    if not quiet:
        engine.show_progress(progress)
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
        print_json(report.model_dump(mode="json"))
    else:
        print_summary(report, stdout())
    if interrupted:
        click.echo(
            f"rsiframe: interrupted; continue with: rsiframe resume {engine.paths.root}", err=True
        )
        sys.exit(EXIT_INTERRUPTED)
    if report.state == "failed":
        click.echo(f"rsiframe: run failed: {report.reason}", err=True)
        sys.exit(EXIT_FAILED)


NO_MODEL_CHECK = click.option(
    "--no-model-check",
    is_flag=True,
    help="do not check the declared models with one tiny call before the first generation",
)


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@click.command()
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
@unset_option
@method_option
@click.option("--quiet", "-q", is_flag=True, help="no live progress")
@click.option("--json", "as_json", is_flag=True, help="end with the status as JSON")
@RAY_ADDRESS
@NO_MODEL_CHECK
@friendly
def run(
    recipe: Path,
    out: Path | None,
    sets: tuple[str, ...],
    unsets: tuple[str, ...],
    method: str | None,
    quiet: bool,
    as_json: bool,
    ray_address: str | None,
    no_model_check: bool,
) -> None:
    """Start a run of RECIPE. Prints the run folder on the first line of stdout.

    Candidates in flight come from the recipe's `concurrency: {candidates: K, mode: M}`
    (e.g. --set concurrency.candidates=4). Mode generational (the default) gives the
    same candidates, scores and champion for every K; mode steady starts a new
    proposal whenever a slot frees and is NOT deterministic. Ctrl-C stops new work,
    waits up to $RSIFRAME_GRACE_S seconds (default 10) for work in flight, then kills
    its sandboxes; `resume` re-runs what was open.

    Each model the recipe declares first answers one tiny call (metered apart, not charged
    to the run's budget); one that does not stops the run before its folder exists (exit
    2). A model failing for infrastructure reasons 3 calls in a row during the run ends it
    `failed`, resumable.
    """
    from rsiframe.engine.loop import Engine

    sigterm_as_interrupt()
    engine = Engine.create(
        recipe,
        list(sets),
        out,
        ray_address,
        unsets=list(unsets),
        method=method,
        model_check=not no_model_check,
    )
    click.echo(str(engine.paths.root))
    sys.stdout.flush()
    for line in engine.state.warnings:  # also in run_started, shown by status
        click.echo(f"rsiframe: warning: {line}", err=True)
    _drive(engine, quiet, as_json)


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--retry-failed", is_flag=True, help="evaluate failed candidates again")
@click.option("--quiet", "-q", is_flag=True, help="no live progress")
@click.option("--json", "as_json", is_flag=True, help="end with the status as JSON")
@RAY_ADDRESS
@NO_MODEL_CHECK
@friendly
def resume(
    run_dir: Path,
    retry_failed: bool,
    quiet: bool,
    as_json: bool,
    ray_address: str | None,
    no_model_check: bool,
) -> None:
    """Continue an interrupted run after re-verifying its archive and locks.

    Right after a driver was killed, what it left running is settled first: its gateway
    recording the calls it was answering is waited for (bounded), anything else of it is
    ended; a line says which. A run still driven by a live process is refused. Each
    declared model first answers one tiny call, as for `run`.
    """
    from rsiframe.engine.loop import Engine

    sigterm_as_interrupt()
    engine, notes = Engine.open(
        run_dir,
        retry_failed=retry_failed,
        ray_address=ray_address,
        model_check=not no_model_check,
        say=lambda line: click.echo(f"rsiframe: {line}", err=True),
    )
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


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def status(run_dir: Path, as_json: bool) -> None:
    """Show a run's state, budget and every candidate with its verified scores."""
    from rsiframe.archive.loader import load_run
    from rsiframe.audit.drift import operator_drift, task_drift
    from rsiframe.audit.report import candidate_table, print_summary, status_of
    from rsiframe.audit.verify import lock_problems

    loaded = load_run(run_dir)
    report = status_of(loaded)
    report.notes += [f"lock: {p}" for p in lock_problems(loaded.paths, loaded.state)]
    report.notes += [f"lock: {p}" for p in operator_drift(loaded.paths)]
    report.notes += [f"lock: {p}" for p in task_drift(loaded.paths)[0]]
    if as_json:
        print_json(report.model_dump(mode="json"))
        return
    print_summary(report, stdout(), listing=candidate_table(report), after="status")


@click.command()
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
    reproduce, --head adds head (a recorded chain head is still in the chain). Each check's
    detail is what it found. Nothing is written into the run folder.

    \b
    Exit status:
      0  every check passed: the archive verifies and the files on disk match its locks
      1  the archive does not verify (or --reproduce got other rewards), drift or not
      2  bad input (no such run folder, a malformed --head or --key)
      3  drift only: the archive verifies, but operator code or the task set on disk
         differs from the run's locks (resume refuses until they are back)
    """
    from rsiframe.audit.verify import verify as verify_run
    from rsiframe.errors import RunFolderError

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
        print_json(report.model_dump(mode="json"))
    else:
        out = stdout()
        table = Table(title=f"verify {report.path}", title_justify="left")
        for col in ("check", "result", "detail"):
            table.add_column(col, overflow="fold")
        style = {"ok": "green", "failed": "bold red", "drift": "bold yellow", "skipped": "yellow"}
        for c in report.checks:
            table.add_row(c.name, f"[{style[c.status]}]{c.status}[/]", escape(c.detail))
        out.print(table)
        out.print(f"keyid {report.keyid}", highlight=False)
        for p in report.problems:
            out.print(f"  - {p}", highlight=False, markup=False)
        for n in report.notes + (report.reproduce.notes if report.reproduce else []):
            out.print(f"note: {n}", highlight=False, markup=False)
        out.print(verify_headline(report), highlight=False, markup=False)
    if not report.ok:
        click.echo(f"rsiframe: {verify_error(report)}", err=True)
        sys.exit(EXIT_FAILED if report.verdict == "failed" else EXIT_DRIFT)


def _named(report: Any, status: str) -> list[Any]:
    return [c for c in report.checks if c.status == status]


def verify_headline(report: Any) -> str:
    """The verdict in one line: the archive's, and drift apart from it."""
    drift = ", ".join(c.name for c in _named(report, "drift"))
    files = f"; files on disk differ from its locks ({drift})" if drift else ""
    if report.verdict == "failed":
        failed = ", ".join(c.name for c in _named(report, "failed"))
        return f"FAILED: the archive does not verify ({failed}){files}"
    if report.verdict == "drift":
        return f"DRIFT: the archive verifies ({report.records} signed records){files}"
    return f"OK: the archive verifies ({report.records} signed records), files on disk as locked"


def verify_error(report: Any) -> str:
    """The one stderr line of a run that did not verify cleanly."""
    worst = _named(report, "failed") or _named(report, "drift")
    first = next((c.problems[0] for c in worst if c.problems), "checks skipped")
    more = sum(len(c.problems) for c in worst) - 1
    what = "verification failed" if report.verdict == "failed" else "drift: files on disk differ"
    names = ", ".join(c.name for c in worst)
    return f"{what} ({names}): {first}" + (f" (+{more} more)" if more > 0 else "")


@click.command()
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


@click.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--html",
    "html_out",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="the HTML file to write (for a folder of runs: the index; each run's page beside it)",
)
@click.option(
    "--force",
    is_flag=True,
    help="write the page of a run that fails verify anyway, marked NOT VERIFIED on every part",
)
@click.option("--json", "as_json", is_flag=True, help="what was written, as JSON")
@friendly
def report(path: Path, html_out: Path, force: bool, as_json: bool) -> None:
    """Write a self-contained HTML report of a run (or of a folder of runs: an index).

    The page opens from disk with no server and no network: the header (recipe, digests,
    fingerprints, budget, cost, seed → champion), the lineage graph (pan, zoom, click a
    candidate for its scores, per-task rewards, diff, model calls, gate decision and
    certificates) and the best-score curve. Only a run that passes verify is reported;
    it says so at the top with the chain head and the public key's fingerprint.

    \b
    Exit status: 0 written, 1 the run does not verify (nothing written), 2 bad input.
    """
    from rsiframe.study.report_index import report as write_report

    result = write_report(path, html_out, force=force)
    if as_json:
        print_json(result.data())
        return
    for page in result.pages:
        mark = "" if page.verified else " (NOT VERIFIED)"
        click.echo(f"wrote {page.path}{mark}: {page.candidates} candidates, {page.bytes} bytes")
    for left in result.refused:
        click.echo(f"left out {left['run']}: {left['error']}", err=True)
    if result.index:
        click.echo(f"wrote {result.index} (index)")
    if result.compare_error:
        click.echo(f"no compare tables: {result.compare_error}", err=True)


@click.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--mlflow",
    "uri",
    required=True,
    metavar="URI",
    help="MLflow tracking URI: sqlite:///FILE.db, a folder, or http://HOST:PORT",
)
@click.option("--experiment", default="rsiframe", show_default=True, help="MLflow experiment")
@click.option(
    "--artifact-location",
    metavar="URI",
    help="where a new experiment keeps its artifacts (default: the tracking store's)",
)
@click.option("--json", "as_json", is_flag=True, help="what was exported, as JSON")
@friendly
def export(
    path: Path, uri: str, experiment: str, artifact_location: str | None, as_json: bool
) -> None:
    """Log a verified run (or a folder of runs: a parent run with a child each) to MLflow.

    Params: the resolved recipe. Metrics: each admitted candidate's verified scores stepped
    by evaluations, the best admitted gate score, the seed's and champion's scores. Tags:
    the method digest, fingerprints, chain head, key. Artifacts: the champion's files and
    the report page. Exporting again updates the same MLflow run; the run folder is only
    read. Needs the mlflow extra: pip install 'rsiframe[mlflow]'.

    \b
    Exit status: 0 exported, 1 the run does not verify, 2 bad input or MLflow refused.
    """
    from rsiframe.study.export_mlflow import export as export_run

    result = export_run(path, uri, experiment=experiment, artifacts=artifact_location)
    if as_json:
        print_json(result.data())
        return
    for r in result.runs:
        what = "created" if r.created else "updated"
        click.echo(
            f"{what} MLflow run {r.mlflow_run_id} for {r.run_id}: {r.params} params, "
            f"{r.metrics_logged} new metric points"
        )
    for left in result.refused:
        click.echo(f"left out {left['run']}: {left['error']}", err=True)
