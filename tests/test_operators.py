"""Built-in operators against a hand-made RunView (the same API a user's operator gets)."""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rsiframe.api import (
    Analysis,
    AnalyzeContext,
    CandidateView,
    GateContext,
    GateDecision,
    InformationFlowError,
    MutateContext,
    NoConfig,
    NoveltyContext,
    RecordContext,
    ReflectContext,
    Rollout,
    RolloutContext,
    SelectContext,
    ValidateContext,
)
from rsiframe.errors import SandboxError
from rsiframe.operators.analyze import Failures, FailuresConfig
from rsiframe.operators.gate import (
    Always,
    ImprovesParent,
    ImprovesParentConfig,
    Threshold,
    ThresholdConfig,
)
from rsiframe.operators.knobs import Knobs, KnobsConfig, KnobSpec
from rsiframe.operators.novelty import TreeDedup
from rsiframe.operators.record import NotesRecord
from rsiframe.operators.reflect import Lessons, LessonsConfig
from rsiframe.operators.rollout import LocalRollout, LocalRolloutConfig
from rsiframe.operators.script import Script, ScriptConfig
from rsiframe.operators.select import (
    Best,
    BestConfig,
    EpsilonGreedy,
    EpsilonGreedyConfig,
    Tournament,
    TournamentConfig,
    Uniform,
)
from rsiframe.operators.validate import Command, CommandConfig
from rsiframe.sandbox.bwrap import bwrap_works

REPO = Path(__file__).resolve().parents[1]


def cand(
    cid: str,
    parent: str | None = None,
    state: str = "admitted",
    tree: str | None = None,
    description: str = "",
) -> CandidateView:
    return CandidateView(
        id=cid,
        parent=parent,
        generation=0 if parent is None else 1,
        state=state,
        commit="c" * 40,
        tree=tree or cid,
        description=description,
    )


class FakeRun:
    def __init__(
        self,
        cands: list[CandidateView],
        gate: dict[str, float],
        train: dict[str, float] | None = None,
        files: dict[str, bytes] | None = None,
        trajectories: dict[str, list[dict[str, Any]]] | None = None,
    ) -> None:
        self._c = {c.id: c for c in cands}
        self._gate = gate
        self._train = train or {}
        self._files = files or {}
        self._traj = trajectories or {}

    lessons = ""

    def candidates(self) -> list[CandidateView]:
        return list(self._c.values())

    def candidate(self, cid: str) -> CandidateView:
        return self._c[cid]

    def admitted(self) -> list[CandidateView]:
        return [c for c in self._c.values() if c.state == "admitted"]

    def lineage(self, cid: str) -> list[CandidateView]:
        return [self._c[cid]]

    def score(self, cid: str, split: str) -> float | None:
        if split == "sealed":
            raise InformationFlowError("sealed")
        return (self._gate if split == "gate" else self._train).get(cid)

    def rewards(self, cid: str, split: str = "train") -> dict[str, float] | None:
        return None

    def trajectories(self, cid: str) -> list[dict[str, Any]]:
        return self._traj.get(cid, [])

    def artifact(self, digest: str) -> bytes:
        raise KeyError(digest)

    def read_file(self, cid: str, path: str) -> bytes:
        return self._files[path]

    def trees(self) -> set[str]:
        return {c.tree for c in self._c.values() if c.tree}


POP = [
    cand("c0"),
    cand("c1", "c0"),
    cand("c2", "c0"),
    cand("c3", "c0", state="declined"),
    cand("c4", "c1"),
]
SCORES = {"c0": 0.2, "c1": 0.6, "c2": 0.6, "c3": 0.9, "c4": 0.4}


def sctx(seed: int = 0) -> SelectContext:
    return SelectContext(FakeRun(POP, SCORES), random.Random(seed), 1)


# -- select ----------------------------------------------------------------------------


def test_best_picks_the_top_admitted_and_breaks_ties_by_age() -> None:
    assert Best(BestConfig()).select(sctx()).parent == "c1"  # c3 is declined, c2 is younger


def test_best_top_k_spreads_over_the_k_best() -> None:
    picks = {Best(BestConfig(top_k=2)).select(sctx(s)).parent for s in range(40)}
    assert picks == {"c1", "c2"}


def test_tournament_size_one_is_uniform_and_full_size_is_best() -> None:
    full = {Tournament(TournamentConfig(size=10)).select(sctx(s)).parent for s in range(20)}
    assert full == {"c1"}
    one = Counter(Tournament(TournamentConfig(size=1)).select(sctx(s)).parent for s in range(400))
    assert set(one) == {"c0", "c1", "c2", "c4"}


def test_epsilon_greedy_extremes() -> None:
    greedy = {
        EpsilonGreedy(EpsilonGreedyConfig(epsilon=0)).select(sctx(s)).parent for s in range(30)
    }
    assert greedy == {"c1"}
    explore = Counter(
        EpsilonGreedy(EpsilonGreedyConfig(epsilon=1)).select(sctx(s)).parent for s in range(400)
    )
    assert set(explore) == {"c0", "c1", "c2", "c4"}


def test_uniform_never_picks_declined_and_is_deterministic() -> None:
    picks = [Uniform(NoConfig()).select(sctx(s)).parent for s in range(200)]
    assert "c3" not in picks and set(picks) == {"c0", "c1", "c2", "c4"}
    assert picks == [Uniform(NoConfig()).select(sctx(s)).parent for s in range(200)]


def test_select_with_nothing_admitted_raises() -> None:
    ctx = SelectContext(FakeRun([cand("c0", state="declined")], {"c0": 1.0}), random.Random(0), 1)
    with pytest.raises(ValueError, match="no admitted candidate"):
        Best(BestConfig()).select(ctx)


# -- knobs -----------------------------------------------------------------------------


def mctx(
    workdir: Path,
    seed: int,
    run: FakeRun | None = None,
    include: tuple[str, ...] = ("*",),
    exclude: tuple[str, ...] = (),
) -> MutateContext:
    return MutateContext(
        run or FakeRun([cand("c0")], {}),
        random.Random(seed),
        1,
        "c9",
        cand("c0"),
        workdir,
        Rollout(trajectories=[]),
        None,
        "",
        include,
        exclude,
    )


SPACE = [
    KnobSpec(file="cfg.yaml", key="solver.branching", choices=["first", "jw", "dlis"]),
    KnobSpec(file="cfg.yaml", key="solver.base", range=(10, 100), step=10),
    KnobSpec(file="cfg.yaml", key="decay", range=(0.5, 1.0), step=0.05),
    KnobSpec(file="p.json", key="temp", choices=[0.0, 0.5, 1.0]),
]


def write_cfg(d: Path) -> None:
    (d / "cfg.yaml").write_text(
        yaml.safe_dump({"solver": {"branching": "first", "base": 10}, "decay": 1.0})
    )
    (d / "p.json").write_text('{"temp": 0.0, "other": "x"}')


def test_knobs_moves_stay_in_the_space(tmp_path: Path) -> None:
    for seed in range(60):
        d = tmp_path / str(seed)
        d.mkdir()
        write_cfg(d)
        m = Knobs(KnobsConfig(knobs=SPACE, max_changes=2, max_steps=3)).mutate(mctx(d, seed))
        moves = m.details["moves"]
        assert 1 <= len(moves) <= 2
        cfg = yaml.safe_load((d / "cfg.yaml").read_text())
        import json

        p = json.loads((d / "p.json").read_text())
        assert cfg["solver"]["branching"] in ("first", "jw", "dlis")
        assert 10 <= cfg["solver"]["base"] <= 100 and isinstance(cfg["solver"]["base"], int)
        assert cfg["solver"]["base"] % 10 == 0
        assert 0.5 <= cfg["decay"] <= 1.0
        assert p["temp"] in (0.0, 0.5, 1.0) and p["other"] == "x"
        for mv in moves:
            assert mv["from"] != mv["to"]
        assert m.description == "; ".join(
            f"{mv['key']}: {mv['from']} -> {mv['to']}" for mv in moves
        )


def test_knobs_is_deterministic_per_seed(tmp_path: Path) -> None:
    outs = []
    for i in range(2):
        d = tmp_path / f"r{i}"
        d.mkdir()
        write_cfg(d)
        outs.append(Knobs(KnobsConfig(knobs=SPACE)).mutate(mctx(d, 42)).details)
    assert outs[0] == outs[1]


def test_knobs_only_moves_knobs_inside_the_surface(tmp_path: Path) -> None:
    for seed in range(30):
        d = tmp_path / str(seed)
        d.mkdir()
        write_cfg(d)
        before = (d / "p.json").read_text()
        m = Knobs(KnobsConfig(knobs=SPACE)).mutate(mctx(d, seed, include=("cfg.yaml",)))
        assert {mv["file"] for mv in m.details["moves"]} == {"cfg.yaml"}
        assert (d / "p.json").read_text() == before
    with pytest.raises(ValueError, match="inside the recipe's surface"):
        Knobs(KnobsConfig(knobs=SPACE)).mutate(mctx(d, 0, include=("*",), exclude=("*",)))


def test_knobs_at_the_edge_moves_inward(tmp_path: Path) -> None:
    space = [KnobSpec(file="cfg.yaml", key="decay", range=(0.5, 1.0), step=0.05)]
    for seed in range(20):
        d = tmp_path / str(seed)
        d.mkdir()
        write_cfg(d)
        Knobs(KnobsConfig(knobs=space, max_steps=1)).mutate(mctx(d, seed))
        assert yaml.safe_load((d / "cfg.yaml").read_text())["decay"] == 0.95


def test_knobs_space_from_the_parent_tree(tmp_path: Path) -> None:
    write_cfg(tmp_path)
    space = yaml.safe_dump(
        {"knobs": [{"file": "cfg.yaml", "key": "solver.branching", "choices": ["first", "jw"]}]}
    ).encode()
    run = FakeRun([cand("c0")], {}, files={"knobs.yaml": space})
    m = Knobs(KnobsConfig(space="knobs.yaml")).mutate(mctx(tmp_path, 0, run))
    assert m.details["moves"] == [
        {"file": "cfg.yaml", "key": "solver.branching", "from": "first", "to": "jw"}
    ]


def test_knobs_config_errors() -> None:
    with pytest.raises(ValueError, match="exactly one of choices or range"):
        KnobSpec(file="a", key="b")
    with pytest.raises(ValueError, match="needs a step"):
        KnobSpec(file="a", key="b", range=(0, 1))
    with pytest.raises(ValueError, match="inline"):
        KnobsConfig()


def test_knobs_missing_key_or_file(tmp_path: Path) -> None:
    write_cfg(tmp_path)
    with pytest.raises(KeyError, match="no key nope"):
        Knobs(KnobsConfig(knobs=[KnobSpec(file="cfg.yaml", key="nope", choices=[1, 2])])).mutate(
            mctx(tmp_path, 0)
        )
    with pytest.raises(FileNotFoundError):
        Knobs(KnobsConfig(knobs=[KnobSpec(file="x.yaml", key="a", choices=[1, 2])])).mutate(
            mctx(tmp_path, 0)
        )


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


def test_validate_command(tmp_path: Path) -> None:
    (tmp_path / "ok").write_text("")
    vctx = ValidateContext(
        FakeRun([cand("c0")], {}), random.Random(0), 1, "c9", cand("c0"), tmp_path, []
    )
    assert Command(CommandConfig(command="test -f ok")).validate(vctx).ok
    bad = Command(CommandConfig(command=["sh", "-c", "echo broken >&2; exit 1"])).validate(vctx)
    assert not bad.ok and "exited with 1" in bad.reason and "broken" in bad.output


# -- novelty, gate, record, reflect ---------------------------------------------------------


def test_tree_dedup() -> None:
    run = FakeRun(POP, SCORES)
    nctx = NoveltyContext(run, random.Random(0), 1, "c9", cand("c0"), "c2", [])
    check = TreeDedup(NoConfig()).novelty(nctx)
    assert not check.ok and "c2" in check.reason
    assert (
        TreeDedup(NoConfig())
        .novelty(NoveltyContext(run, random.Random(0), 1, "c9", cand("c0"), "fresh", []))
        .ok
    )


def gctx(child: float, parent: float) -> GateContext:
    run = FakeRun([cand("p"), cand("k", "p", state="certified")], {"p": parent, "k": child})
    return GateContext(run, random.Random(0), 1, cand("k", "p"), cand("p"))


def test_improves_parent_is_strict_with_min_delta() -> None:
    assert ImprovesParent(ImprovesParentConfig()).gate(gctx(0.5, 0.4)).admit
    assert not ImprovesParent(ImprovesParentConfig()).gate(gctx(0.4, 0.4)).admit
    assert not ImprovesParent(ImprovesParentConfig(min_delta=0.2)).gate(gctx(0.5, 0.4)).admit
    assert "+0.100" in ImprovesParent(ImprovesParentConfig()).gate(gctx(0.5, 0.4)).reason


def test_threshold_and_always() -> None:
    assert Threshold(ThresholdConfig(min_score=0.5)).gate(gctx(0.5, 0.9)).admit
    assert not Threshold(ThresholdConfig(min_score=0.5)).gate(gctx(0.49, 0.0)).admit
    assert Always(NoConfig()).gate(gctx(0.0, 1.0)).admit


def test_gate_without_a_verified_score_raises() -> None:
    run = FakeRun([cand("p"), cand("k", "p")], {"p": 0.1})
    with pytest.raises(ValueError, match="no verified gate score"):
        ImprovesParent(ImprovesParentConfig()).gate(
            GateContext(run, random.Random(0), 1, cand("k", "p"), cand("p"))
        )


def test_notes_record_deltas() -> None:
    run = FakeRun([cand("p"), cand("k", "p")], {"p": 0.25, "k": 0.5}, train={"p": 0.5, "k": 0.25})
    notes = (
        NotesRecord(NoConfig())
        .record(
            RecordContext(
                run,
                random.Random(0),
                1,
                cand("k", "p", description="d"),
                cand("p"),
                GateDecision(admit=True, reason="why"),
                [{"kind": "modified", "path": "a"}],
            )
        )
        .notes
    )
    assert notes == {
        "description": "d",
        "changed_paths": ["a"],
        "decision": "why",
        "parent": "p",
        "train_delta": -0.25,
        "gate_delta": 0.25,
    }


def test_lessons_append_one_line_per_child_and_cap() -> None:
    members = [
        cand("k1", "p", "admitted", description="raise x"),
        cand("k2", "p", "declined", description="lower y"),
        cand("k3", "p", "rejected", description="touch z"),
    ]
    run = FakeRun([cand("p"), *members], {"p": 0.5, "k1": 0.75, "k2": 0.25})
    out = (
        Lessons(LessonsConfig(max_lines=3))
        .reflect(ReflectContext(run, random.Random(0), 2, "old line\n", members))
        .lessons
    )
    assert out.splitlines() == [
        "g2 k1 [kept] (+0.250 on gate): raise x",
        "g2 k2 [no better] (-0.250 on gate): lower y",
        "g2 k3 [rejected]: touch z",
    ]


# -- rollout and analyze -------------------------------------------------------------------


TRAJ = [
    {
        "task": "a",
        "reward": 1.0,
        "error": None,
        "trajectory": "sha256:1",
        "agent": {"stdout_tail": "solved", "stderr_tail": ""},
    },
    {
        "task": "b",
        "reward": 0.0,
        "error": None,
        "trajectory": "sha256:2",
        "agent": {"stdout_tail": "x\ngave up after 300 decisions", "stderr_tail": ""},
    },
    {
        "task": "c",
        "reward": 0.0,
        "error": "agent timed out after 5s",
        "trajectory": "sha256:3",
        "agent": {"stdout_tail": "", "stderr_tail": ""},
    },
    {
        "task": "d",
        "reward": 0.0,
        "error": None,
        "trajectory": "sha256:4",
        "agent": {"stdout_tail": "gave up after 300 decisions", "stderr_tail": ""},
    },
]


def rctx(run: FakeRun, calls: list[list[str] | None]) -> RolloutContext:
    def run_train(ids: list[str] | None) -> list[dict[str, Any]]:
        calls.append(ids)
        return [{"task": t, "reward": 0.0, "error": None, "trajectory": ""} for t in ids or []]

    return RolloutContext(run, random.Random(0), 1, cand("p"), run_train, ["a", "b", "c", "d"])


def test_rollout_reuses_certified_trajectories() -> None:
    calls: list[list[str] | None] = []
    out = LocalRollout(LocalRolloutConfig()).rollout(
        rctx(FakeRun([cand("p")], {}, trajectories={"p": TRAJ}), calls)
    )
    assert out.reused and calls == []
    assert [t["task"] for t in out.trajectories] == ["a", "b", "c", "d"]
    assert out.trajectories[1]["stdout_tail"].endswith("300 decisions")


def test_rollout_runs_a_sample_when_asked() -> None:
    calls: list[list[str] | None] = []
    out = LocalRollout(LocalRolloutConfig(reuse_certified=False, max_tasks=2)).rollout(
        rctx(FakeRun([cand("p")], {}, trajectories={"p": TRAJ}), calls)
    )
    assert not out.reused and len(calls) == 1 and len(calls[0] or []) == 2
    assert {t["task"] for t in out.trajectories} == set(calls[0] or [])


def test_failures_analysis() -> None:
    rows = (
        LocalRollout(LocalRolloutConfig())
        .rollout(rctx(FakeRun([cand("p")], {}, trajectories={"p": TRAJ}), []))
        .trajectories
    )
    a = Failures(FailuresConfig(max_examples=2)).analyze(
        AnalyzeContext(
            FakeRun([cand("p")], {}), random.Random(0), 1, cand("p"), Rollout(trajectories=rows)
        )
    )
    assert isinstance(a, Analysis)
    assert a.summary.startswith("3/4 train tasks not solved")
    assert "gave up after 300 decisions (x2)" in a.summary
    assert a.details["failed"] == ["b", "c", "d"]
    assert a.details["pass_rate"] == 0.25
    assert len(a.details["examples"]) == 2


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
    from conftest import cli, events, make_mini

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


def test_knobs_change_is_a_one_line_diff_with_comments_kept(tmp_path: Path) -> None:
    seed = (REPO / "tasks" / "sat3" / "seed" / "solver.yaml").read_text()
    space = [
        KnobSpec(file="solver.yaml", key="branching", choices=["first", "jw", "dlis"]),
        KnobSpec(file="solver.yaml", key="restarts.base", range=(10, 400), step=10),
    ]
    for i in range(10):
        d = tmp_path / str(i)
        d.mkdir()
        (d / "solver.yaml").write_text(seed)
        m = Knobs(KnobsConfig(knobs=space, max_changes=1)).mutate(mctx(d, i))
        (move,) = m.details["moves"]
        before, after = seed.splitlines(), (d / "solver.yaml").read_text().splitlines()
        assert len(before) == len(after)
        changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
        assert len(changed) == 1, changed
        old, new = changed[0]
        assert "#" in new and old.split("#")[1] == new.split("#")[1]  # the comment stays
        assert str(move["to"]) in new
        assert type(move["to"]) in (str, int)  # plain JSON values in the record
