"""Where things are in the repository: the shipped task sets, scripts and test corpora."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CI_SETUP = REPO / "scripts" / "ci-setup.sh"
SAT3 = REPO / "tasks" / "sat3"
TERMINAL = REPO / "tasks" / "terminal"
PYFIX = REPO / "tasks" / "pyfix"
TEXTOPS = REPO / "tasks" / "textops"
TASKSET_CORPUS = REPO / "tests" / "corpus" / "tasksets"
AUDIT_FIXTURES = TASKSET_CORPUS / "audit"
