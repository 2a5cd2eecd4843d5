"""Typed errors a user can cause. The CLI renders each as one line with its exit code.

Bugs are not modelled here: they still raise ordinary exceptions with tracebacks.
"""

from __future__ import annotations

import os
from pathlib import Path

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
#: ``verify``: the archive verifies, but files on disk (operator code, the task set) differ
#: from the run's locks
EXIT_DRIFT = 3


class RsiError(Exception):
    """Base for every error a user can cause; ``exit_code`` is what the CLI returns."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, *, where: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.where = where

    def __str__(self) -> str:
        return f"{shown_path(self.where)}: {self.message}" if self.where else self.message


def shown_path(where: str) -> str:
    """A file as error lines name it, the same everywhere: relative to the working directory
    when it lies below it, absolute otherwise (a relative name is kept as given)."""
    path = Path(where)
    if not path.is_absolute():
        return where
    try:
        cwd = Path(os.getcwd())
    except OSError:  # the working directory was deleted
        return where
    return str(path.relative_to(cwd)) if path.is_relative_to(cwd) and path != cwd else where


class RecipeError(RsiError):
    """A recipe file is malformed, names something unknown, or fails validation."""


class OperatorNotFound(RecipeError):
    """An operator reference does not resolve to a class."""


class TaskSetError(RsiError):
    """A task set is malformed (missing verifier, empty split, unknown task id)."""


class TaskSetChanged(TaskSetError):
    """A task file changed on disk since the run froze its task lock."""


class LockMismatch(RsiError):
    """The recipe, evaluator or task set differ from what the run locked at start."""


class RunFolderError(RsiError):
    """A path is not a run folder, or the run is busy."""


class ArchiveCorrupt(RsiError):
    """The archive's hash chain or an event in it is broken."""

    exit_code = EXIT_FAILED


class KeyMissing(RsiError):
    """The run's private signing key is not available on this machine."""


class SandboxError(RsiError):
    """The sandbox could not be started (not a task failure: the evaluation fails)."""

    exit_code = EXIT_FAILED


class ClusterError(RsiError):
    """The Ray cluster a recipe or ``--ray-address`` names cannot be used (extra, address)."""


class ClusterLost(RsiError):
    """The Ray cluster went away mid-run: the run ends ``failed`` and stays resumable."""

    exit_code = EXIT_FAILED


class EngineUnavailable(RsiError):
    """An evaluator engine or environment the recipe names cannot run here (checked at
    preflight: Harbor's environment, an environment that cannot start, Docker down)."""


class ModelError(RsiError):
    """A model call cannot be made or answered: unreachable, refused, garbage, over budget."""

    exit_code = EXIT_FAILED


class ModelUnavailable(RsiError):
    """A declared model failed the check ``run`` and ``resume`` make before the first
    generation (a setup problem: nothing was started)."""


class RunNotVerified(RsiError):
    """A run given to compare fails ``verify``: its scores are not read."""


class ReportRefused(RunNotVerified):
    """A run given to ``report`` fails ``verify``: no page is written (``--force`` marks one)."""

    exit_code = EXIT_FAILED


class MixedRuns(RsiError):
    """Runs to compare differ in task set or evaluator (allowed only with --force)."""
