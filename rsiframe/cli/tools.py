"""Tools: ``recipe check/show``, ``tasks check``, ``operators list/describe``,
``selftest integrity``, ``stub-llm``."""

from __future__ import annotations

import inspect
import json
import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin

import click
from pydantic import BaseModel
from pydantic_core import to_jsonable_python
from rich.table import Table

from rsiframe.cli.common import (
    friendly,
    method_option,
    print_json,
    sigterm_as_interrupt,
    stderr,
    stdout,
    unset_option,
)
from rsiframe.errors import EXIT_FAILED

if TYPE_CHECKING:  # the self-test's modules load only when it runs
    from rich.console import Console

    from rsiframe.selftest.runner import SelftestReport


@click.group()
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
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(1, 16),
    default=1,
    show_default=True,
    help="trials run at a time, each in a process of its own (CI runs 2 on 2 cores)",
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
    jobs: int,
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
    from rsiframe.selftest.runner import DEFAULT_TRIALS, check_names, describe, run_selftest

    if list_only:
        names = check_names(list(scenarios))
        if as_json:
            print_json([{"name": n, "description": describe(n)} for n in names])
        else:
            for n in names:
                click.echo(f"{n:24} {describe(n)}")
        return
    err = stderr()

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
        jobs=jobs,
    )
    if as_json:
        print_json(report.model_dump(mode="json"))
    else:
        _print_selftest(report, err)
    if not report.ok:
        bad = [s.name for s in report.scenarios if s.failed]
        click.echo(f"rsiframe: self-test failed: {', '.join(bad)}", err=True)
        sys.exit(EXIT_FAILED)


def _print_selftest(report: SelftestReport, err: Console) -> None:
    """The self-test's table and count, then each failed trial's problems again (on
    ``err``), at the end where a log's tail shows them."""
    from rsiframe.selftest.runner import failure_lines, table

    out = stdout()
    out.print(table(report))
    failed = sum(s.failed for s in report.scenarios)
    total = sum(s.trials for s in report.scenarios)
    out.print(f"{total - failed}/{total} trials passed in {report.seconds:.0f} s")
    for line in failure_lines(report):
        err.print(line, highlight=False, markup=False)


@click.group()
def recipe() -> None:
    """Check and show recipes."""


@recipe.command("check")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="override one key")
@unset_option
@method_option
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def recipe_check(
    file: Path, sets: tuple[str, ...], unsets: tuple[str, ...], method: str | None, as_json: bool
) -> None:
    """Validate FILE: schema, operators and their configs, seed, tasks and surface. A method
    file (kind: method) is checked alone: what it holds and its operators' configs."""
    from rsiframe.engine.preflight import plan
    from rsiframe.recipe.load import is_method_file

    if is_method_file(file) and not (sets or unsets or method):
        _check_method(file, as_json)
        return
    info = plan(file, list(sets), unsets=list(unsets), method=method)
    if as_json:
        print_json(
            {
                "ok": True,
                "digest": info.resolved.digest,
                "split": info.split,
                "seed_files": len(info.seed.entries),
                "operators": {slot: spec.operator for slot, spec in _slots(info)},
                "models": info.models.as_json() if info.models else None,
                "warnings": info.warnings,
            }
        )
    else:
        click.echo(f"{file}: ok ({info})")
        for warning in info.warnings:
            click.echo(f"rsiframe: warning: {warning}", err=True)


@recipe.command("show")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="override one key")
@unset_option
@method_option
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def recipe_show(
    file: Path, sets: tuple[str, ...], unsets: tuple[str, ...], method: str | None, as_json: bool
) -> None:
    """Print the resolved recipe (extends merged, overrides applied, defaults filled in)."""
    from rsiframe.recipe import load as recipe_mod

    resolved = recipe_mod.load(file, list(sets), unsets=list(unsets), method=method)
    if as_json:
        print_json({"digest": resolved.digest, "recipe": resolved.data})
    else:
        click.echo(f"# digest: {resolved.digest}")
        click.echo(recipe_mod.dump(resolved.data), nl=False)


@click.group()
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
    from rsiframe.evaluators.taskcheck import ENGINES, check

    report = check(path, oracle=oracle, engines=engines or ENGINES)
    if as_json:
        print_json(report.to_json())
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
    from rsiframe.evaluators.taskaudit import ENGINES, AuditProgress, audit

    sigterm_as_interrupt()  # a killed audit stops its sandboxes and Harbor too
    with AuditProgress(stderr()) as progress:
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
        print_json(report.model_dump(mode="json"))
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


@click.group()
def operators() -> None:
    """List and describe the installed operators."""


@operators.command("list")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def operators_list(as_json: bool) -> None:
    """Every operator registered under the rsiframe.operators entry point group."""
    from rsiframe.api import SLOTS
    from rsiframe.slots.registry import installed, resolve

    rows = []
    for (slot, name), info in sorted(
        installed().items(), key=lambda kv: (SLOTS.index(kv[0][0]), kv[0][1])
    ):
        cls = resolve(slot, name)
        doc = inspect.cleandoc(cls.__doc__ or "").splitlines()
        rows.append({"slot": slot, "name": name, "ref": info.ref, "summary": doc[0] if doc else ""})
    if as_json:
        print_json(rows)
        return
    table = Table()
    for col in ("slot", "name", "summary"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["slot"], r["name"], r["summary"])
    stdout().print(table)


@operators.command("describe")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@friendly
def operators_describe(name: str, as_json: bool) -> None:
    """Config fields of operator NAME (or SLOT.NAME): type, default, description."""
    from rsiframe.slots.registry import describe

    info, cls = describe(name)
    fields: list[dict[str, Any]] = []
    for fname, f in cls.Config.model_fields.items():
        default = None if f.is_required() else f.get_default(call_default_factory=True)
        # nested config models (network, islands' features) as plain JSON
        default = to_jsonable_python(default)
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
        print_json(
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
    out = stdout()
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
    for row in fields:
        default = "(required)" if row["required"] else json.dumps(row["default"], default=str)
        table.add_row(row["name"], row["type"], default, row["description"])
    out.print(table)


@click.command("stub-llm")
@click.option("--script", "script", type=click.Path(path_type=Path), required=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8765, show_default=True)
@friendly
def stub_llm(script: Path, host: str, port: int) -> None:
    """Serve a scripted OpenAI-compatible stub endpoint (tests, demos; GET /stub/stats)."""
    from rsiframe.gateway.stub import Script, StubLLM, uvicorn

    stub = StubLLM(Script.load(script))
    click.echo(f"stub endpoint at http://{host}:{port}/v1 ({len(stub.remaining)} answers)")
    uvicorn.run(stub.app, host=host, port=port, log_level="warning", lifespan="off")


def _check_method(file: Path, as_json: bool) -> None:
    """``recipe check`` of a method file: it holds only what a method decides."""
    from rsiframe.recipe.load import check_method_file, method_ref

    method, operators = check_method_file(file)
    if as_json:
        print_json({"ok": True, "kind": "method", "name": method.name, "operators": operators})
        return
    ops = ", ".join(f"{slot}={op}" for slot, op in operators.items())
    click.echo(f"{file}: ok (method {method.name}: {ops}; run it with --method {method_ref(file)})")


def _slots(info: Any) -> list[tuple[str, Any]]:
    slots = info.resolved.recipe.slots
    return [(slot, slots.get(slot)) for slot in info.resolved.operators]


_SCALARS = {int: "integer", float: "number", str: "string", bool: "true/false", Any: "any"}


def _type_name(annotation: Any) -> str:
    """A config field's type in words: ``list of string, or null``, ``one of 'a', 'b'``."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        kinds = [_type_name(a) for a in args if a is not type(None)]
        text = " or ".join(kinds)
        return f"{text}, or null" if type(None) in args else text
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (list, tuple, set, frozenset):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping of {_type_name(args[0])} to {_type_name(args[1])}" if args else "mapping"
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if annotation in (list, tuple):
        return "list"
    if annotation is dict:
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"mapping ({annotation.__name__})"
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")
