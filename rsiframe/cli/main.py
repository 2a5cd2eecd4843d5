"""The ``rsiframe`` command line: one group whose commands are imported when they run
(:data:`COMMANDS`), so ``recipe check`` loads the recipe code and nothing of the engine,
and nothing imports the CLI.

Exit codes: 0 success, 1 a run or verification failed, 2 bad input, 130 interrupted.
A user's mistake is one line on stderr, never a traceback.
"""

from __future__ import annotations

import importlib

import click

from rsiframe import __version__

#: every command: its name -> ``module:attribute`` (imported only when it is asked for)
COMMANDS = {
    "run": "rsiframe.cli.runs:run",
    "resume": "rsiframe.cli.runs:resume",
    "status": "rsiframe.cli.runs:status",
    "verify": "rsiframe.cli.runs:verify",
    "view": "rsiframe.cli.runs:view",
    "report": "rsiframe.cli.runs:report",
    "export": "rsiframe.cli.runs:export",
    "compare": "rsiframe.cli.study:compare",
    "ablate": "rsiframe.cli.study:ablate",
    "fidelity": "rsiframe.cli.study:fidelity",
    "replay": "rsiframe.cli.study:replay",
    "recipe": "rsiframe.cli.tools:recipe",
    "tasks": "rsiframe.cli.tools:tasks",
    "operators": "rsiframe.cli.tools:operators",
    "selftest": "rsiframe.cli.tools:selftest",
    "stub-llm": "rsiframe.cli.tools:stub_llm",
    "doctor": "rsiframe.cli.doctor:doctor_command",
}


class LazyGroup(click.Group):
    """A group whose commands are imported from :data:`COMMANDS` on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        ref = COMMANDS.get(name)
        if ref is None:
            return None
        module, _, attr = ref.partition(":")
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rsiframe")
def main() -> None:
    """Run and compare methods that evolve agent systems under a certified evaluator.

    A recipe (YAML) binds operators to lifecycle slots; every candidate is a git
    commit; every score is a signed record. Start with:

        rsiframe run recipes/quickstart.yaml
    """


if __name__ == "__main__":  # pragma: no cover
    main()
