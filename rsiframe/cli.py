"""The ``rsiframe`` command line. Imports everything; nothing imports it.

Exit codes: 0 success, 1 a run or verification failed, 2 bad input, 130 interrupted.
A user's mistake is one line on stderr, never a traceback.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from rsiframe import __version__
from rsiframe.errors import EXIT_BAD_INPUT, EXIT_FAILED, RsiError

F = TypeVar("F", bound=Callable[..., Any])
EXIT_INTERRUPTED = 130


def _stdout() -> Console:
    return Console(soft_wrap=False)


def _stderr() -> Console:
    return Console(stderr=True)


def friendly(fn: F) -> F:
    """Render user errors as one line with their exit code."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RsiError as exc:
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
    failure: str | None = None
    try:
        with progress if not quiet else _Null():
            engine.drive()
    except KeyboardInterrupt:
        interrupted = True
    except RunFailure as exc:
        failure = str(exc)
        engine.archive.append("run_finished", {"state": "failed", "reason": failure})
    except Exception as exc:  # a bug: leave the run resumable, then show the traceback
        engine.archive.append(
            "run_finished", {"state": "failed", "reason": f"internal error: {exc!r}"}
        )
        raise
    finally:
        engine.close()
    # the engine's own state is the fold of everything it read and wrote: no re-read
    report = status_of(LoadedRun(engine.paths, engine.state.verifier, [], engine.state, b""))
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
    help="override one recipe key, e.g. slots.select.config.size=4 (repeatable)",
)
@click.option("--quiet", "-q", is_flag=True, help="no live progress")
@click.option("--json", "as_json", is_flag=True, help="end with the status as JSON")
@friendly
def run(recipe: Path, out: Path | None, sets: tuple[str, ...], quiet: bool, as_json: bool) -> None:
    """Start a run of RECIPE. Prints the run folder on the first line of stdout."""
    from rsiframe.engine import Engine

    _sigterm_as_interrupt()
    engine = Engine.create(recipe, list(sets), out)
    click.echo(str(engine.paths.root))
    sys.stdout.flush()
    _drive(engine, quiet, as_json)


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--retry-failed", is_flag=True, help="evaluate failed candidates again")
@click.option("--quiet", "-q", is_flag=True, help="no live progress")
@click.option("--json", "as_json", is_flag=True, help="end with the status as JSON")
@friendly
def resume(run_dir: Path, retry_failed: bool, quiet: bool, as_json: bool) -> None:
    """Continue an interrupted run after re-verifying its archive and locks."""
    from rsiframe.engine import Engine

    _sigterm_as_interrupt()
    engine, notes = Engine.open(run_dir, retry_failed=retry_failed)
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
    from rsiframe.loader import load_run
    from rsiframe.report import candidate_table, print_summary, status_of

    report = status_of(load_run(run_dir))
    if as_json:
        _print_json(report.model_dump(mode="json"))
        return
    out = _stdout()
    out.print(candidate_table(report))
    print_summary(report, out)


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def verify(run_dir: Path, as_json: bool) -> None:
    """Check every signature, the hash chain, the locks and the evidence of every record."""
    from rsiframe.report import verify as verify_run

    report = verify_run(run_dir)
    if as_json:
        _print_json(report.model_dump(mode="json"))
    else:
        verdict = "OK" if report.ok else "FAILED"
        click.echo(f"{verdict}: {report.records} signed records, {len(report.problems)} problems")
        for p in report.problems:
            click.echo(f"  - {p}")
    if not report.ok:
        sys.exit(EXIT_FAILED)


# -- recipes -------------------------------------------------------------------------


@main.group()
def recipe() -> None:
    """Check and show recipes."""


@recipe.command("check")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="override one key")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def recipe_check(file: Path, sets: tuple[str, ...], as_json: bool) -> None:
    """Validate FILE: schema, operators and their configs, seed, tasks and surface."""
    from rsiframe.preflight import plan

    info = plan(file, list(sets))
    if as_json:
        _print_json(
            {
                "ok": True,
                "digest": info.resolved.digest,
                "split": info.split,
                "seed_files": len(info.seed.entries),
                "operators": {slot: spec.operator for slot, spec in _slots(info)},
            }
        )
    else:
        click.echo(f"{file}: ok ({info})")


@recipe.command("show")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="override one key")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def recipe_show(file: Path, sets: tuple[str, ...], as_json: bool) -> None:
    """Print the resolved recipe (extends merged, overrides applied, defaults filled in)."""
    from rsiframe import recipe as recipe_mod

    resolved = recipe_mod.load(file, list(sets))
    if as_json:
        _print_json({"digest": resolved.digest, "recipe": resolved.data})
    else:
        click.echo(f"# digest: {resolved.digest}")
        click.echo(recipe_mod.dump(resolved.data), nl=False)


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
        doc = (cls.__doc__ or "").strip().splitlines()
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
        fields.append(
            {
                "name": fname,
                "type": _type_name(f.annotation),
                "required": f.is_required(),
                "default": default,
                "description": f.description or "",
            }
        )
    doc = (cls.__doc__ or "").strip()
    if as_json:
        _print_json(
            {"slot": info.slot, "name": info.name, "ref": info.ref, "doc": doc, "fields": fields}
        )
        return
    out = _stdout()
    out.print(f"[bold]{info.slot}.{info.name}[/]  ({info.ref})")
    if doc:
        out.print(doc)
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


def _slots(info: Any) -> list[tuple[str, Any]]:
    slots = info.resolved.recipe.slots
    return [(slot, slots.get(slot)) for slot in info.resolved.operators]


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if not hasattr(annotation, "__args__") else None
    return text or str(annotation).replace("typing.", "")


if __name__ == "__main__":  # pragma: no cover
    main()


__all__ = ["EXIT_BAD_INPUT", "main"]
