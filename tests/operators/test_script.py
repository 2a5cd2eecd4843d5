"""The script mutate operator: its inputs, failures, and the mutation sandbox (real
bubblewrap): what it sees, its network, its limits, the fallback."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from rsiframe.api import (
    MutateContext,
    Rollout,
    ValidateContext,
)
from rsiframe.errors import SandboxError
from rsiframe.operators.script import Script, ScriptConfig
from rsiframe.operators.validate import Command, CommandConfig
from rsiframe.sandbox.bwrap import bwrap_works
from tests.support.paths import REPO
from tests.support.runview import FakeRun, cand, mctx

# -- knobs -----------------------------------------------------------------------------


# -- script and validate -------------------------------------------------------------------


def test_script_mutates_the_workdir_with_its_inputs(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("old")
    cmd = (
        'echo "rewrote f for $RSI_CANDIDATE_ID from $RSI_PARENT"; '
        'cat "$RSI_LESSONS_FILE" > f.txt; test -f "$RSI_ROLLOUT_FILE"; echo "$SECRET" >> f.txt'
    )
    ctx = MutateContext(
        FakeRun([cand("c0")], {}),
        random.Random(0),
        1,
        "c9",
        cand("c0"),
        tmp_path,
        Rollout(trajectories=[]),
        None,
        "be bold",
        ("*",),
        (),
    )
    import os

    os.environ["SECRET"] = "leak"
    try:
        m = Script(ScriptConfig(command=cmd)).mutate(ctx)
    finally:
        del os.environ["SECRET"]
    assert m.description == "rewrote f for c9 from c0"
    assert (tmp_path / "f.txt").read_text() == "be bold\n"  # SECRET did not leak in


def test_script_failure_and_timeout_raise(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="exited with 3"):
        Script(ScriptConfig(command="echo nope; exit 3")).mutate(mctx(tmp_path, 0))
    with pytest.raises(TimeoutError):
        Script(ScriptConfig(command="sleep 5", timeout_s=0.2)).mutate(mctx(tmp_path, 0))


# -- the mutation sandbox (real bubblewrap) ------------------------------------------------

HAVE_BWRAP = bwrap_works()


needs_bwrap = pytest.mark.skipif(
    not HAVE_BWRAP, reason="platform limit: bubblewrap is not installed or cannot make namespaces"
)


@dataclass
class FakeRunFolder:
    """A run folder's worth of things a mutation must never see, and a work folder in it."""

    root: Path
    keys: Path
    sealed: Path
    work: Path


@pytest.fixture
def runfolder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeRunFolder:
    root = tmp_path / "run"
    (root / "events.jsonl").parent.mkdir(parents=True)
    (root / "events.jsonl").write_text('{"secret": "archive"}\n')
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "run.key").write_text("PRIVATE KEY")
    monkeypatch.setenv("RSIFRAME_KEY_DIR", str(keys))
    sealed = tmp_path / "tasks" / "t9" / "tests"
    sealed.mkdir(parents=True)
    (sealed / "need.txt").write_text("9\n")
    work = root / "work" / "mutate-c0009"
    work.mkdir(parents=True)
    (work / "f.txt").write_text("old")
    return FakeRunFolder(root, keys, sealed, work)


@needs_bwrap
def test_script_sandbox_sees_only_the_work_folder_and_inputs(
    runfolder: FakeRunFolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret-value")
    home = Path.home()
    probes = [
        runfolder.root / "events.jsonl",
        runfolder.keys / "run.key",
        runfolder.sealed / "need.txt",
        REPO / "rsiframe" / "evaluators" / "local.py",
        REPO / "tasks",
        *[p for p in home.iterdir() if p.name != ".pyenv"],
    ]
    checks = "; ".join(f'test -e "{p}" && echo "SEEN {p}"' for p in probes)
    cmd = (
        f"{checks}; env > env.txt; "
        'cat "$RSI_LESSONS_FILE" > f.txt; '
        'echo tampered > "$RSI_LESSONS_FILE" 2>/dev/null && echo INPUT-WRITABLE; '
        f"echo x > {runfolder.root}/planted 2>/dev/null && echo RUN-WRITABLE; "
        f"echo x > {home}/planted 2>/dev/null; "  # lands in the sandbox's throwaway root
        "echo x > /tmp/planted; echo done; true"
    )
    m = Script(ScriptConfig(command=cmd, pass_env=["OPENAI_API_KEY"])).mutate(
        mctx_at(runfolder.work, lessons="be bold")
    )
    out = m.details["output"]
    assert "SEEN" not in out, out
    assert "WRITABLE" not in out, out
    assert (runfolder.work / "f.txt").read_text() == "be bold"
    assert not (runfolder.root / "planted").exists() and not (home / "planted").exists()
    assert not Path("/tmp/planted").exists()  # the sandbox's /tmp is its own
    env = dict(line.split("=", 1) for line in (runfolder.work / "env.txt").read_text().splitlines())
    assert env["OPENAI_API_KEY"] == "sk-secret-value"  # named in pass_env
    assert "GITHUB_TOKEN" not in env
    assert not any(k.startswith("RSIFRAME") for k in env)
    assert str(runfolder.keys) not in "".join(env.values())
    assert env["RSI_WORKDIR"] == "/rsi/work" and env["HOME"] == "/tmp"
    assert m.sandbox is not None
    assert (m.sandbox.isolation.split()[0], m.sandbox.requested) == ("bwrap", "bwrap")
    assert m.sandbox.passed_env == ["OPENAI_API_KEY"]
    assert m.sandbox.network == []


def mctx_at(workdir: Path, lessons: str = "") -> MutateContext:
    return MutateContext(
        FakeRun([cand("c0")], {}),
        random.Random(0),
        1,
        "c9",
        cand("c0"),
        workdir,
        Rollout(trajectories=[]),
        None,
        lessons,
        ("*",),
        (),
    )


def test_framework_variables_can_never_be_passed_in() -> None:
    with pytest.raises(ValueError, match="RSIFRAME_KEY_DIR may not be passed"):
        ScriptConfig(command="true", pass_env=["RSIFRAME_KEY_DIR"])
    with pytest.raises(ValueError, match="may not be set inside a sandbox"):
        CommandConfig(command="true", env={"RSIFRAME_FAULT": "x"})
    with pytest.raises(ValueError, match="is not host:port"):
        ScriptConfig(command="true", network={"allow": ["https://api.openai.com"]})


@needs_bwrap
def test_script_network_is_off_unless_allow_listed(tmp_path: Path) -> None:
    count = "grep -c : /proc/net/dev"
    off = Script(ScriptConfig(command=count)).mutate(mctx_at(tmp_path))
    assert off.description == "1"  # loopback only
    on = Script(ScriptConfig(command=count, network={"allow": ["api.openai.com:443"]})).mutate(
        mctx_at(tmp_path)
    )
    host_ifaces = sum(1 for line in Path("/proc/net/dev").read_text().splitlines() if ":" in line)
    assert on.description == str(host_ifaces)
    assert on.sandbox is not None and on.sandbox.network == ["api.openai.com:443"]


@needs_bwrap
def test_script_limits_kill_cleanly(tmp_path: Path) -> None:
    grab = "python3 -c 'bytearray(1 << 30)'"
    with pytest.raises(RuntimeError, match=r"(?s)exited with 1 \[bwrap[^]]*\].*MemoryError"):
        Script(ScriptConfig(command=grab, memory_mb=256)).mutate(mctx_at(tmp_path))
    with pytest.raises(RuntimeError, match=r"output exceeded 100000 bytes \[bwrap[^]]*\]"):
        Script(ScriptConfig(command="yes", output_cap_bytes=100_000)).mutate(mctx_at(tmp_path))
    # a daemon that outlives the command (setsid, double fork) dies with the sandbox
    daemon = "setsid sh -c 'sleep 0.5; echo late > late.txt' & echo forked"
    m = Script(ScriptConfig(command=daemon)).mutate(mctx_at(tmp_path))
    assert m.description == "forked"
    time.sleep(1.0)
    assert not (tmp_path / "late.txt").exists()
    with pytest.raises(TimeoutError, match=r"timed out after 0.3s \[bwrap[^]]*\]"):
        Script(ScriptConfig(command="sleep 30", timeout_s=0.3)).mutate(mctx_at(tmp_path))


def test_fallback_only_when_the_recipe_allows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rsiframe.sandbox.bwrap as sandbox_mod

    monkeypatch.setattr(sandbox_mod, "bwrap_works", lambda: False)
    with pytest.raises(SandboxError, match="bubblewrap was requested"):
        Script(ScriptConfig(command="echo hi")).mutate(mctx_at(tmp_path))
    m = Script(ScriptConfig(command="echo hi", sandbox="auto")).mutate(mctx_at(tmp_path))
    assert m.sandbox is not None
    assert (m.sandbox.isolation, m.sandbox.requested) == ("process", "auto")
    vctx = ValidateContext(
        FakeRun([cand("c0")], {}), random.Random(0), 1, "c9", cand("c0"), tmp_path, []
    )
    check = Command(CommandConfig(command="true", sandbox="auto")).validate(vctx)
    assert check.ok and check.sandbox is not None and check.sandbox.isolation == "process"


@needs_bwrap
def test_a_run_records_the_isolation_of_each_mutation(tmp_path: Path) -> None:
    from tests.support.cli import cli, events
    from tests.support.mini import make_mini

    mini = make_mini(tmp_path / "p", generations=1, children=2)
    text = mini.recipe.read_text()
    start, end = text.index("  mutate:\n"), text.index("  novelty:")
    mini.recipe.write_text(
        text[:start]
        + "  mutate:\n"
        + "    operator: script\n"
        + "    config:\n"
        + "      command: 'echo climb; echo \"level: $((RSI_SEED % 5 + 2))\" > config.yaml'\n"
        + "  validate:\n"
        + "    operator: command\n"
        + "    config: {command: 'grep -q level config.yaml', sandbox: auto}\n"
        + text[end:]
    )
    res = cli("run", mini.recipe, "--out", mini.run_dir(), "--quiet")
    assert res.exit_code == 0, res.stderr
    mutated = [e["data"] for e in events(mini.run_dir()) if e["type"] == "candidate_mutated"]
    kids = [d for d in mutated if d["id"] != "c0000"]
    assert kids, mutated
    for d in kids:
        assert d["sandbox"]["mutate"]["isolation"].startswith("bwrap userns")
        assert d["sandbox"]["mutate"]["requested"] == "bwrap"
        assert d["sandbox"]["validate"]["requested"] == "auto"
        assert d["sandbox"]["validate"]["isolation"].startswith(
            "bwrap userns"
        )  # auto picks bwrap where it works
