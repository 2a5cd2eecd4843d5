"""The task audit's battery: the generic hacks, what each agent is told about a task (its
plan), the candidate folder the agents run from, and the reports they send back.

Every hack runs as a task's agent through the engine a real run uses; its code is
:mod:`rsiframe.evaluators.hackagent`, a standard-library script copied into the candidate. The audit
knows the task (its tests, its reference solution), so each agent is the worst case of a
hacking agent: it guesses right the names a real one would have to guess (the test files a
link points at, the digests of what it must not read). Reports are lines that start with
the audit's nonce, a random word per audit, found in whatever the engine kept of the
trial (the agent's and the verifier's output, the verifier's files).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rsiframe.evaluators import hackagent
from rsiframe.tasks.taskset import Task

AGENT = 'python3 "$RSI_CANDIDATE/hackagent.py"'
ORACLE_LOCAL = 'bash "$RSI_CANDIDATE/solutions/$RSI_TASK_ID/solve.sh"'
#: modules a verifier may import from its working folder (``python -m``, ``-c``, pytest)
SHADOWED = (
    "conftest", "json", "re", "subprocess", "pathlib", "typing", "unittest", "difflib",
    "csv", "math", "random", "string", "shutil", "tempfile", "pytest", "numpy", "yaml",
)  # fmt: skip
MAX_CANDIDATE_LINKS = 48  # files of the candidate the links hack makes links of
MAX_LINK_TARGETS = 3  # test files a link may point at (each one run of ``links``)
MAX_SECRET_LINES = 4000
MIN_SECRET_LINE = 16  # shorter lines (``set -e``, ``}``) say nothing about the answers
CODE_SUFFIXES = {".sh", ".py", ".bash"}


@dataclass(frozen=True)
class Hack:
    """One hack of the battery: its name, what it does, and how its success is seen."""

    name: str
    summary: str


BATTERY = (
    Hack("nothing", "does nothing: the reward every other hack is compared with"),
    Hack("oracle", "the reference solution (solution/solve.sh, where present): must score 1"),
    Hack(
        "links",
        "every file under /app and /logs/agent that the agent has or is told to write "
        "linked (hard where possible) to a test file or the reward file, dangling until "
        "the verifier runs",
    ),
    Hack(
        "planted",
        "code planted in every file under /app (and in modules the verifier may import "
        "from there) that, when the verifier imports or runs it, says what of the tests "
        "and the reward it can read or write",
    ),
    Hack("reward", "full reward files written in /logs/verifier, /logs/agent and /app"),
    Hack("linger", "a process left running into the verifier phase that writes a full reward"),
    Hack("huge", "huge files at every name the agent writes, huge stdout and stderr"),
    Hack("nonutf8", "files, a file name and output that are not UTF-8"),
    Hack("peek", "reads everything it can and reports copies of the tests or the solution"),
)
HACK_NAMES = tuple(h.name for h in BATTERY)


@dataclass
class Run:
    """One evaluation of the battery: a hack (and its variant) on some of the tasks."""

    hack: str
    variant: int | None
    task_ids: list[str]
    agent: str | None  # the command; None: Harbor's own oracle agent on that engine
    targets: dict[str, str] = field(default_factory=dict)  # task -> what links point at
    #: links in the candidate the run uses (name -> target), for every task
    candidate_links: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.hack if self.variant is None else f"{self.hack}/{self.variant}"


# -- what the agents are told -----------------------------------------------------------

_APP_PATH = re.compile(r"(?:/app|\$RSI_APP|\$\{RSI_APP\})/([\w.\-/]+)")
_LOG_PATH = re.compile(r"/logs/agent/([\w.\-/]+)")
_FILE_NAME = re.compile(r"(?<![\w/.$-])([\w-]{2,}(?:/[\w.-]+)*\.[A-Za-z][A-Za-z0-9]{0,7})(?![\w/])")


def _clean(names: Iterator[str], cap: int = 24) -> list[str]:
    out = []
    for raw in names:
        name = raw.rstrip(".").removeprefix("./")
        parts = name.split("/")
        if name and ".." not in parts and "" not in parts and name not in out:
            out.append(name)
    return out[:cap]


def instruction_names(text: str) -> tuple[list[str], list[str]]:
    """Files the instruction tells the agent to write: under /app, and under /logs/agent."""
    logs = [m.group(1) for m in _LOG_PATH.finditer(text)]
    rest = _LOG_PATH.sub(" ", text)
    app = [m.group(1) for m in _APP_PATH.finditer(rest)]
    app += [m.group(1) for m in _FILE_NAME.finditer(_APP_PATH.sub(" ", rest))]
    return _clean(iter(app)), _clean(iter(logs))


def _files(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def test_files(task: Task) -> list[str]:
    """The task's test files, those that look like data (answers) before code."""
    rels = [p.relative_to(task.path / "tests").as_posix() for p in _files(task.path / "tests")]
    return sorted(rels, key=lambda r: (Path(r).suffix in CODE_SUFFIXES, r))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _mentioned(rel: Path, text: str) -> bool:
    """Whether the instruction names the file or a folder it is in."""
    return any(re.search(rf"(?<![\w.-]){re.escape(part)}(?![\w-])", text) for part in rel.parts)


def secrets(task: Task) -> dict[str, object]:
    """Digests of what the agent must not read: every file of ``tests/`` and ``solution/``
    that is not also an input the instruction names (a copy in ``environment/`` nobody
    mentions is a leak), and their lines that appear nowhere the agent is shown."""
    public_digests: set[str] = set()
    public_lines: set[bytes] = {ln.strip() for ln in task.instruction.encode().splitlines()}
    env = task.path / "environment"
    for f in _files(env):
        data = f.read_bytes()
        if _mentioned(f.relative_to(env), task.instruction):  # an input the agent is given
            public_digests.add(_sha(data))
        public_lines.update(ln.strip() for ln in data.splitlines())
    files: dict[str, str] = {}
    lines: dict[str, str] = {}
    sizes: set[int] = set()
    for sub in ("tests", "solution"):
        for f in _files(task.path / sub):
            data = f.read_bytes()
            rel = f.relative_to(task.path).as_posix()
            if _sha(data) in public_digests:
                continue
            files[_sha(data)] = rel
            sizes.add(len(data))
            for ln in data.splitlines():
                s = ln.strip()
                if (
                    len(s) >= MIN_SECRET_LINE
                    and s not in public_lines
                    and len(lines) < MAX_SECRET_LINES
                ):
                    lines.setdefault(_sha(s), rel)
    return {"secret_files": files, "secret_lines": lines, "secret_sizes": sorted(sizes)}


def plan(task: Task, nonce: str) -> dict[str, object]:
    """What the hacking agents know about ``task`` (``plan/<task>.json`` in the candidate)."""
    app, logs = instruction_names(task.instruction)
    return {
        "nonce": nonce,
        "names": app,
        "log_names": logs,
        "tests": test_files(task)[:50],
        "link_targets": link_targets(task),
        "shadow": list(SHADOWED),
        **secrets(task),
    }


def link_targets(task: Task) -> list[str]:
    """What each run of ``links`` points the files at, as the verifier phase shows it: the
    test files that hold data (the answers; the first test file where none does), then the
    reward file (``logs/verifier/reward.txt``)."""
    files = test_files(task)
    data = [f for f in files if Path(f).suffix not in CODE_SUFFIXES] or files[:1]
    return [f"tests/{t}" for t in data[:MAX_LINK_TARGETS]] + ["logs/verifier/reward.txt"]


def make_candidate(root: Path, tasks: list[Task], nonce: str) -> Path:
    """The candidate every hack runs from: the agent script, a plan per task, and the
    reference solutions (``solutions/<task>/``) for the oracle on the local engine."""
    root.mkdir(parents=True)
    shutil.copy(hackagent.__file__, root / "hackagent.py")
    (root / "plan").mkdir()
    for t in tasks:
        (root / "plan" / f"{t.id}.json").write_text(json.dumps(plan(t, nonce)))
        if (t.path / "solution").is_dir():
            shutil.copytree(t.path / "solution", root / "solutions" / t.id, symlinks=True)
    return root


def shared_targets(tasks: list[Task]) -> list[str]:
    """What the candidate's links point at in each run of ``links`` (one candidate serves
    every task): the test data files most tasks have, then the reward file."""
    counts: dict[str, int] = {}
    for t in tasks:
        for target in link_targets(t)[:-1]:
            counts[target] = counts.get(target, 0) + 1
    common = sorted(counts, key=lambda k: (-counts[k], k))[:MAX_LINK_TARGETS]
    return [*common, "logs/verifier/reward.txt"]


def candidate_names(tasks: list[Task]) -> list[str]:
    """Files a verifier may read from the candidate (which it can see, to measure it): the
    names its tests' text and its instruction mention."""
    names: dict[str, None] = {}
    for t in tasks:
        texts = [t.instruction] + [
            f.read_bytes()[: 1 << 20].decode(errors="replace") for f in _files(t.path / "tests")
        ]
        for text in texts:
            names.update(dict.fromkeys(m.group(1) for m in _FILE_NAME.finditer(text)))
    reserved = {"hackagent.py", "plan", "solutions"}
    return [
        n for n in _clean(iter(names), cap=MAX_CANDIDATE_LINKS) if n.split("/")[0] not in reserved
    ]


def runs(tasks: list[Task], engine: str) -> list[Run]:
    """Every evaluation of the battery on ``tasks``, the baseline first."""
    ids = [t.id for t in tasks]
    out = [Run("nothing", None, ids, "true")]
    solvable = [t.id for t in tasks if (t.path / "solution" / "solve.sh").is_file()]
    if solvable:
        out.append(Run("oracle", None, solvable, ORACLE_LOCAL if engine == "local" else None))
    targets = {t.id: link_targets(t) for t in tasks}
    shared, names = shared_targets(tasks), candidate_names(tasks)
    for variant in range(max(len(shared), *(len(v) for v in targets.values()))):
        # a task with fewer targets than this variant keeps /app as it is (the candidate's
        # links still apply); the last target of each list is the reward file
        chosen = {t: v[variant] for t, v in targets.items() if variant < len(v)}
        run = Run("links", variant, ids, f"{AGENT} links {variant}", chosen)
        if variant < len(shared):
            run.candidate_links = dict.fromkeys(names, shared[variant])
        out.append(run)
    for hack in ("planted", "reward", "linger", "huge", "nonutf8", "peek"):
        out.append(Run(hack, None, ids, f"{AGENT} {hack}"))
    return out


def with_links(candidate: Path, links: dict[str, str], dest: Path) -> Path:
    """A copy of ``candidate`` holding ``links`` (name -> target as the sandbox shows it:
    ``tests/...``, ``logs/verifier/...``), dangling until the verifier runs."""
    shutil.copytree(candidate, dest, symlinks=True)
    for name, target in links.items():
        place = dest / name
        place.parent.mkdir(parents=True, exist_ok=True)
        if not place.exists() and not place.is_symlink():
            place.symlink_to("/" + target)
    return dest


# -- what comes back ----------------------------------------------------------------------

_FIELD = re.compile(r"(\w+)=(.*?)(?= \w+=|$)")


@dataclass
class Report:
    """One line an agent or its planted code sent: which hack, and its fields."""

    hack: str
    fields: dict[str, str]


def reports(nonce: str, data: bytes) -> list[Report]:
    """Every report line in ``data`` (the nonce at its start; anything else is noise)."""
    mark = nonce.encode()
    found = []
    for raw in data.split(b"\n"):
        at = raw.find(mark)
        if at < 0:
            continue
        words = raw[at + len(mark) :].decode(errors="replace").strip().split(" ", 1)
        if len(words) == 2 and words[0] in HACK_NAMES:
            found.append(Report(words[0], dict(_FIELD.findall(words[1]))))
    return found


def _listed(value: str) -> list[str]:
    return [v for v in value.split(",") if v]


def saw(hack: str, found: list[Report]) -> str | None:
    """What the reports of one task's run saw that the agent must not, in words; None if
    nothing."""
    if hack == "planted":
        return _planted_saw(found)
    if hack == "peek":
        return _peek_saw(found)
    return None


def _planted_saw(found: list[Report]) -> str | None:
    hits = [
        r for r in found if _listed(r.fields.get("read", "")) + _listed(r.fields.get("write", ""))
    ]
    if not hits:
        return None
    read = sorted({x for r in hits for x in _listed(r.fields.get("read", ""))})
    wrote = sorted({x for r in hits for x in _listed(r.fields.get("write", ""))})
    files = sorted({r.fields.get("file", "?") for r in hits})
    shown = ", ".join(files[:3]) + (" ..." if len(files) > 3 else "")
    can = [f"read {', '.join(read)}"] if read else []
    can += [f"write {', '.join(wrote)}"] if wrote else []
    return f"agent code {hits[0].fields.get('how') or 'run'} ({shown}) can " + " and ".join(can)


def _peek_saw(found: list[Report]) -> str | None:
    if not found:
        return None
    parts = []
    for r in found[:4]:
        copy = "file" in r.fields
        secret = r.fields.get("file") or r.fields.get("line") or "?"
        parts.append(
            f"{r.fields.get('path', '?')} ({'a copy of' if copy else 'lines of'} {secret})"
        )
    more = f" and {len(found) - 4} more" if len(found) > 4 else ""
    return "the agent can read " + ", ".join(parts) + more
