"""Every `rsiframe` command in README.md and docs/ parses: its subcommands exist (and their
`--help` works), every `--option` it uses is one of that command's, and every recipe it names
under recipes/ exists. Commands are read from code blocks (continued lines joined, one per
`&&` or `;`) and from inline code spans."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import click
import pytest

from rsiframe.cli.main import main
from tests.support.cli import cli
from tests.support.paths import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`(rsiframe [^`]+)`")
# a command starts at "rsiframe " (not "rsiframe:" output, not the rsiframe/ folder)
START = re.compile(r"(?:^|(?<=[\s(]))rsiframe (?=[a-z\-\[])")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
RECIPE = re.compile(r"(?<![\w/.-])(recipes/[\w./-]+\.yaml)\b")


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    text: str  # from "rsiframe" on


def _segments(line: str) -> list[str]:
    line = re.sub(r"\s#\s.*$", "", line)  # a shell comment
    out = []
    for part in re.split(r"&&|;", line):
        m = START.search(part)
        if m:
            out.append(part[m.start() :].strip())
    return out


def _commands(path: Path) -> list[DocCommand]:
    text = path.read_text()
    name = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    found: list[DocCommand] = []
    for block in FENCE.finditer(text):
        first = text.count("\n", 0, block.start(1)) + 1
        lines = block.group(1).splitlines()
        i = 0
        while i < len(lines):
            start, line = i, lines[i]
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i].strip()
            found += [DocCommand(f"{name}:{first + start}", s) for s in _segments(line)]
            i += 1
    for m in INLINE.finditer(text):
        line_no = text.count("\n", 0, m.start()) + 1
        found += [DocCommand(f"{name}:{line_no}", s) for s in _segments(m.group(1))]
    return found


ALL = [c for path in DOCS for c in _commands(path)]


@cache
def _help_works(path: tuple[str, ...]) -> bool:
    return cli(*path, "--help").exit_code == 0


def _resolve(text: str) -> tuple[tuple[str, ...], click.Command]:
    """The subcommand path a command names and the click command it ends at."""
    words = text.split()[1:]
    command: click.Command = main
    path: list[str] = []
    ctx = click.Context(main)
    while isinstance(command, click.Group) and words and re.fullmatch(r"[a-z][a-z-]*", words[0]):
        sub = command.get_command(ctx, words[0])
        assert sub is not None, f"unknown command rsiframe {' '.join([*path, words[0]])}"
        path.append(words.pop(0))
        command = sub
    return tuple(path), command


def _options(command: click.Command) -> set[str]:
    names = {"--help"}
    for param in command.params:
        names |= {o for o in (*param.opts, *param.secondary_opts) if o.startswith("--")}
    return names


def test_the_docs_name_many_commands() -> None:
    assert len(ALL) > 80, len(ALL)
    assert any(c.text.startswith("rsiframe view $run") for c in ALL)  # README's first screen


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_command_parses(doc: Path) -> None:
    problems = []
    for c in _commands(doc):
        try:
            path, command = _resolve(c.text)
        except AssertionError as exc:
            problems.append(f"{c.where}: {exc}")
            continue
        if not _help_works(path):
            problems.append(f"{c.where}: rsiframe {' '.join(path)} --help fails")
        unknown = set(OPTION.findall(c.text)) - _options(command)
        if unknown:
            problems.append(
                f"{c.where}: {c.text!r}: rsiframe {' '.join(path)} has no {sorted(unknown)}"
            )
        missing = [r for r in RECIPE.findall(c.text) if not (REPO / r).is_file()]
        if missing:
            problems.append(f"{c.where}: {c.text!r} names missing {missing}")
    assert not problems, "\n".join(problems)


def test_a_wrong_option_or_recipe_is_caught(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text("```sh\nrsiframe status DIR --jsno\n```\n`rsiframe run recipes/nope.yaml`\n")
    ((path, command),) = {_resolve(c.text) for c in _commands(doc)[:1]}
    assert path == ("status",) and "--jsno" not in _options(command)
    assert RECIPE.findall(_commands(doc)[1].text) == ["recipes/nope.yaml"]
    with pytest.raises(AssertionError, match="unknown command rsiframe recipe chek"):
        _resolve("rsiframe recipe chek FILE")
