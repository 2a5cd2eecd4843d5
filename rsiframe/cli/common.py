"""What every command shares: one line per user error (``friendly``), JSON output, Ctrl-C
and SIGTERM as an interrupt, the shared options. Exit codes: 0 success, 1 a run or
verification failed, 2 bad input, 130 interrupted."""

from __future__ import annotations

import json
import re
import signal
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click
from rich.console import Console

from rsiframe.errors import RsiError, shown_path

F = TypeVar("F", bound=Callable[..., Any])

EXIT_INTERRUPTED = 130


def stdout() -> Console:
    return _unwrapped_off_terminal(Console(soft_wrap=False))


def stderr() -> Console:
    return _unwrapped_off_terminal(Console(stderr=True))


def _unwrapped_off_terminal(console: Console) -> Console:
    """Text lines are never wrapped where the stream is no terminal (nohup, CI, a pipe):
    Rich would wrap at 80 columns there and split a line mid-value."""
    if not console.is_terminal:
        console.soft_wrap = True
    return console


_KEY = re.compile(r"^([A-Za-z_][\w.\-]*): ")


def error_json(exc: RsiError) -> dict[str, Any]:
    """A user error for scripts: the message, the file it is about, the dotted key if any."""
    m = _KEY.match(exc.message)
    where = shown_path(exc.where) if exc.where else None
    return {"error": exc.message, "file": where, "key": m.group(1) if m else None}


def friendly(fn: F) -> F:
    """Render user errors as one line with their exit code (and, with ``--json``, as JSON
    on stdout: ``{"error", "file", "key"}``)."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RsiError as exc:
            if kwargs.get("as_json"):
                print_json(error_json(exc))
            click.echo(f"rsiframe: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("rsiframe: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)

    return wrapper  # type: ignore[return-value]  # functools.wraps keeps fn's signature


def sigterm_as_interrupt() -> None:
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


unset_option = click.option(
    "--unset",
    "unsets",
    multiple=True,
    metavar="KEY",
    help="remove one recipe key, e.g. tasks.split.ratios (repeatable; same as KEY=null on a "
    "mapping)",
)

method_option = click.option(
    "--method",
    metavar="NAME|FILE",
    help="run the recipe's target with this method: a shipped method's name (recipes/methods/"
    "NAME.yaml: hill_climb, gepa, dgm, islands, ...) or a method file; its slots replace the "
    "recipe's (same as extends: [RECIPE, METHOD])",
)


def print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=False))


RAY_ADDRESS = click.option(
    "--ray-address",
    metavar="ADDR",
    help='evaluate on a Ray cluster this session: "auto", host:port or ray://host:port '
    "(needs the cluster extra)",
)
