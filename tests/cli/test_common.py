"""rsiframe.cli.common: a user error is one line and its exit code (JSON on stdout with
``--json``), Ctrl-C is exit 130, and a bug is still a traceback."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from rsiframe.cli.common import EXIT_INTERRUPTED, error_json, friendly
from rsiframe.errors import ArchiveCorrupt, RecipeError


@click.command()
@click.option("--json", "as_json", is_flag=True)
@click.argument("what")
@friendly
def raising(what: str, as_json: bool) -> None:
    if what == "recipe":
        raise RecipeError("slots.selct: unknown key", where="r.yaml")
    if what == "archive":
        raise ArchiveCorrupt("event 3 is not signed", where="run")
    if what == "interrupt":
        raise KeyboardInterrupt
    raise ValueError("a bug")


def test_a_user_error_is_one_line_with_its_exit_code() -> None:
    res = CliRunner().invoke(raising, ["recipe"])
    assert (res.exit_code, res.stderr) == (2, "rsiframe: error: r.yaml: slots.selct: unknown key\n")
    assert CliRunner().invoke(raising, ["archive"]).exit_code == 1


def test_with_json_the_error_is_also_json_on_stdout() -> None:
    res = CliRunner().invoke(raising, ["recipe", "--json"])
    assert res.exit_code == 2
    assert res.stdout.strip().startswith("{") and '"key": "slots.selct"' in res.stdout
    assert error_json(RecipeError("no key here")) == {
        "error": "no key here",
        "file": None,
        "key": None,
    }


def test_ctrl_c_is_exit_130_and_a_bug_stays_a_traceback() -> None:
    res = CliRunner().invoke(raising, ["interrupt"])
    assert (res.exit_code, res.stderr) == (EXIT_INTERRUPTED, "rsiframe: interrupted\n")
    with pytest.raises(ValueError, match="a bug"):
        CliRunner().invoke(raising, ["bug"], catch_exceptions=False)


def test_lines_are_not_wrapped_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    from rsiframe.cli.common import stderr, stdout

    long = "count: " + " ".join(f"{n} -> {n + 1000}" for n in range(1000, 9000, 1000))
    assert len(long) > 100
    for console in (stderr(), stdout()):
        assert not console.is_terminal
        console.print(long, highlight=False)
    captured = capsys.readouterr()
    assert captured.err == long + "\n" and captured.out == long + "\n"


def test_a_terminal_still_wraps_to_its_width() -> None:
    import io

    from rich.console import Console

    from rsiframe.cli.common import _unwrapped_off_terminal

    console = _unwrapped_off_terminal(Console(file=io.StringIO(), force_terminal=True, width=40))
    console.print("word " * 20, highlight=False)
    assert len(console.file.getvalue().splitlines()) > 1  # type: ignore[attr-defined]
