"""Untrusted operators: candidate code out of process, in bubblewrap, behind a JSON contract."""

from __future__ import annotations

import ast
import json
import random
import textwrap
from pathlib import Path
from typing import Any

import pytest

from rsiframe.api import (
    CandidateView,
    Check,
    MutateContext,
    Mutation,
    NoveltyContext,
    Rollout,
    ValidateContext,
)
from rsiframe.errors import RecipeError, SandboxError
from rsiframe.recipe.load import load as load_recipe
from rsiframe.sandbox.bwrap import bwrap_works
from rsiframe.slots import oprunner
from rsiframe.slots.registry import resolve
from rsiframe.slots.untrusted import UntrustedConfig, UntrustedOperator, UntrustedOperatorError
from tests.support.cli import cli, events, status_json
from tests.support.mini import Mini, make_mini
from tests.support.paths import REPO

pytestmark = pytest.mark.skipif(
    not bwrap_works(),
    reason="platform limit: bubblewrap is not installed or cannot make namespaces",
)

PARENT = CandidateView("c0", None, 0, "admitted", "a" * 40, "b" * 40, "seed")

HEADER = "import os, sys, time\nfrom rsiframe.api import *\nfrom pydantic import BaseModel\n"


class FakeRun:
    """A RunView that records what the host asked of it and what was reported."""

    lessons = "be bold"

    def __init__(self) -> None:
        self.violations: list[tuple[str, str]] = []

    def candidates(self) -> list[CandidateView]:
        return [PARENT]

    def score(self, cid: str, split: str) -> float | None:
        return {"train": 0.25, "gate": 0.5}[split]

    def rewards(self, cid: str, split: str = "train") -> dict[str, float] | None:
        assert split == "train", "the host must not ask for gate detail by default"
        return {"t1": 1.0, "t3": 0.0}

    def trajectories(self, cid: str, split: str = "train") -> list[dict[str, Any]]:
        return [{"task": "t1", "reward": 1.0}]

    def trees(self) -> set[str]:
        return {"b" * 40}

    def record_violation(self, what: str, detail: str) -> None:
        self.violations.append((what, detail))


def source(tmp_path: Path, body: str, name: str = "ops/op.py") -> Path:
    src = tmp_path / "src"
    f = src / name
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(HEADER + textwrap.dedent(body))
    return src


def make_op(
    slot: str, src: Path, cls: str = "Op", path: str = "ops/op.py", **cfg: Any
) -> UntrustedOperator:
    op = resolve(slot, f"candidate:{path}:{cls}")(UntrustedConfig(**cfg), lambda cid: src)
    assert isinstance(op, UntrustedOperator)
    return op


def mctx(tmp_path: Path, run: FakeRun | None = None) -> MutateContext:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "level.txt").write_text("1")
    return MutateContext(
        run or FakeRun(),
        random.Random(0),
        1,
        "c9",
        PARENT,
        work,
        Rollout(trajectories=[{"task": "t1", "reward": 1.0}]),
        None,
        "be bold",
        ("level.txt",),
        (),
    )


BUMP = """
class Cfg(BaseModel):
    step: int = 1

class Op(MutateOperator):
    Config = Cfg

    def mutate(self, ctx):
        print("chatter on stdout does not break the contract")
        p = ctx.workdir / "level.txt"
        n = int(p.read_text()) + self.config.step
        p.write_text(str(n))
        seen = {
            "train": ctx.run.score(ctx.parent.id, "train"),
            "gate": ctx.run.score(ctx.parent.id, "gate"),
            "rewards": ctx.run.rewards(ctx.parent.id, "train"),
            "lessons": ctx.lessons,
            "rollout": len(ctx.rollout.trajectories),
            "cwd": os.getcwd(),
            "source": ctx.run.read_file(ctx.parent.id, "ops/op.py")[:6].decode(),
        }
        return Mutation(description=f"level {n}", details=seen, usage=Usage(tokens=7))
"""


def test_happy_path_mutates_the_work_folder(tmp_path: Path) -> None:
    op = make_op("mutate", source(tmp_path, BUMP), config={"step": 3})
    ctx = mctx(tmp_path)
    m = op.mutate(ctx)
    assert isinstance(m, Mutation)
    assert m.description == "level 4"
    assert (ctx.workdir / "level.txt").read_text() == "4"
    assert m.details == {
        "train": 0.25,
        "gate": 0.5,
        "rewards": {"t1": 1.0, "t3": 0.0},
        "lessons": "be bold",
        "rollout": 1,
        "cwd": "/rsi/work",
        "source": "import",
    }
    assert m.usage.tokens == 7
    assert m.sandbox is not None and m.sandbox.isolation.startswith("bwrap userns")
    assert m.sandbox.network == []


def test_operator_config_is_validated_in_the_child(tmp_path: Path) -> None:
    op = make_op("mutate", source(tmp_path, BUMP), config={"step": "many"})
    with pytest.raises(UntrustedOperatorError, match="ValidationError"):
        op.mutate(mctx(tmp_path))


def test_the_sandbox_hides_the_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "run.key").write_text("PRIVATE")
    monkeypatch.setenv("RSIFRAME_KEY_DIR", str(keys))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    repo = REPO
    probe = f"""
    class Op(MutateOperator):
        def mutate(self, ctx):
            paths = [{str(keys)!r}, {str(repo / "rsiframe" / "evaluators" / "local.py")!r},
                     {str(repo / "tasks")!r}, {str(tmp_path)!r}, os.path.expanduser("~/.bashrc")]
            seen = [p for p in paths if os.path.exists(p)]
            try:
                open("/rsi/source/planted.txt", "w").write("x")
                wrote = True
            except OSError:
                wrote = False
            env = {{k: v for k, v in os.environ.items() if "secret" in v or k.startswith("RSI")}}
            return Mutation(description="probe", details={{"seen": seen, "wrote": wrote,
                            "env": env, "mods": sorted(m for m in sys.modules if "rsiframe" in m)}})
    """
    src = source(tmp_path, probe)
    m = make_op("mutate", src).mutate(mctx(tmp_path))
    assert m.details["seen"] == []
    assert m.details["wrote"] is False and not (src / "planted.txt").exists()
    assert m.details["env"] == {}
    # the child (the runner runs as __main__) imports the API and nothing else of rsiframe
    # (rsiframe.slots is the runner's staged package: an empty __init__.py)
    assert m.details["mods"] == ["rsiframe", "rsiframe.api", "rsiframe.slots"]


def test_malformed_result_is_rejected(tmp_path: Path) -> None:
    body = """
    class Wrong(BaseModel):
        description: int = 5
        bogus: str = "x"

    class Op(MutateOperator):
        def mutate(self, ctx):
            return Wrong()
    """
    with pytest.raises(UntrustedOperatorError, match="malformed result"):
        make_op("mutate", source(tmp_path, body)).mutate(mctx(tmp_path))


def test_garbage_on_the_response_channel_is_rejected(tmp_path: Path) -> None:
    body = """
    class Op(MutateOperator):
        def mutate(self, ctx):
            frame = sys._getframe()
            while "response_fd" not in frame.f_locals:
                frame = frame.f_back
            os.write(frame.f_locals["response_fd"], b'{"schema_version": 1, "ok": tru')
            os._exit(0)
    """
    with pytest.raises(UntrustedOperatorError, match="malformed response"):
        make_op("mutate", source(tmp_path, body)).mutate(mctx(tmp_path))


def test_oversized_result_is_rejected(tmp_path: Path) -> None:
    body = """
    class Op(MutateOperator):
        def mutate(self, ctx):
            return Mutation(description="big", details={"blob": "a" * 200_000})
    """
    op = make_op("mutate", source(tmp_path, body), max_result_bytes=100_000)
    with pytest.raises(UntrustedOperatorError, match="larger than 100000 bytes"):
        op.mutate(mctx(tmp_path))


def test_flooding_output_kills_the_child(tmp_path: Path) -> None:
    body = """
    class Op(MutateOperator):
        def mutate(self, ctx):
            while True:
                sys.stderr.write("x" * 65536)
    """
    op = make_op("mutate", source(tmp_path, body), output_cap_bytes=2 << 20, timeout_s=30)
    with pytest.raises(UntrustedOperatorError, match="wrote more than"):
        op.mutate(mctx(tmp_path))


def test_crashing_operator_is_rejected(tmp_path: Path) -> None:
    raising = """
    class Op(MutateOperator):
        def mutate(self, ctx):
            raise ValueError("kaboom")
    """
    with pytest.raises(UntrustedOperatorError, match="failed: ValueError: kaboom"):
        make_op("mutate", source(tmp_path, raising)).mutate(mctx(tmp_path))
    dying = """
    class Op(MutateOperator):
        def mutate(self, ctx):
            print("dying", file=sys.stderr)
            os._exit(3)
    """
    with pytest.raises(UntrustedOperatorError, match="exited with 3 without a result: dying"):
        make_op("mutate", source(tmp_path, dying)).mutate(mctx(tmp_path))
    missing = make_op("mutate", source(tmp_path, raising), cls="Nope")
    with pytest.raises(UntrustedOperatorError, match="is not a mutate operator"):
        missing.mutate(mctx(tmp_path))


def test_hanging_operator_is_killed(tmp_path: Path) -> None:
    body = """
    class Op(MutateOperator):
        def mutate(self, ctx):
            time.sleep(60)
    """
    start = __import__("time").monotonic()
    with pytest.raises(UntrustedOperatorError, match="timed out after 1s"):
        make_op("mutate", source(tmp_path, body), timeout_s=1).mutate(mctx(tmp_path))
    assert __import__("time").monotonic() - start < 10


def test_memory_limit(tmp_path: Path) -> None:
    body = """
    class Op(MutateOperator):
        def mutate(self, ctx):
            blob = bytearray(1 << 30)
            return Mutation(description=str(len(blob)))
    """
    with pytest.raises(UntrustedOperatorError, match="MemoryError"):
        make_op("mutate", source(tmp_path, body), memory_mb=300).mutate(mctx(tmp_path))


def test_reads_beyond_the_view_are_reported(tmp_path: Path) -> None:
    body = """
    class Op(MutateOperator):
        def mutate(self, ctx):
            out = []
            for split in ("sealed",):
                try:
                    ctx.run.score(ctx.parent.id, split)
                except InformationFlowError as exc:
                    out.append(str(exc))
            try:
                ctx.run.rewards(ctx.parent.id, "gate")
            except InformationFlowError as exc:
                out.append(str(exc))
            (ctx.workdir / "level.txt").write_text("2")
            return Mutation(description="sneaky", details={"errors": out})
    """
    run = FakeRun()
    m = make_op("mutate", source(tmp_path, body)).mutate(mctx(tmp_path, run))
    assert len(m.details["errors"]) == 2
    assert [w for w, _ in run.violations] == ["scores:sealed", "rewards:gate"]
    assert all("reported by the sandboxed operator" in d for _, d in run.violations)


def test_validate_and_novelty_slots(tmp_path: Path) -> None:
    body = """
    class V(ValidateOperator):
        def validate(self, ctx):
            try:
                open(ctx.workdir / "new.txt", "w").write("x")
                return Check(ok=False, reason="could write")
            except OSError:
                return Check(ok=True, reason=str(len(ctx.changes)))

    class N(NoveltyOperator):
        def novelty(self, ctx):
            return Check(ok=ctx.tree not in ctx.run.trees(), reason=ctx.tree)
    """
    src = source(tmp_path, body)
    work = tmp_path / "work"
    work.mkdir()
    vctx = ValidateContext(FakeRun(), random.Random(0), 1, "c9", PARENT, work, [{"kind": "M"}])
    check = make_op("validate", src, cls="V").validate(vctx)
    assert isinstance(check, Check) and check.ok and check.reason == "1"
    assert check.sandbox is not None and check.sandbox.isolation.startswith("bwrap userns")
    nctx = NoveltyContext(FakeRun(), random.Random(0), 1, "c9", PARENT, "b" * 40, [])
    assert not make_op("novelty", src, cls="N").novelty(nctx).ok
    nctx2 = NoveltyContext(FakeRun(), random.Random(0), 1, "c9", PARENT, "e" * 40, [])
    assert make_op("novelty", src, cls="N").novelty(nctx2).ok


def test_refs_are_checked_at_recipe_time(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p")
    for ref, msg in [
        ("candidate:ops/x.py:Op", None),
        ("candidate:../x.py:Op", "inside the candidate tree"),
        ("candidate:/abs/x.py:Op", "inside the candidate tree"),
        ("candidate:ops/x.txt:Op", "inside the candidate tree"),
        ("candidate:ops/x.py:1bad", "is not candidate:PATH.py:Class"),
    ]:
        if msg is None:
            r = load_recipe(mini.recipe, [f"slots.mutate.operator={ref}"])
            assert r.data["slots"]["mutate"]["operator"] == ref  # not made absolute
            assert r.data["slots"]["mutate"]["config"]["sandbox"] == "bwrap"
            continue
        with pytest.raises(RecipeError, match=msg):
            load_recipe(mini.recipe, [f"slots.mutate.operator={ref}"])
    with pytest.raises(RecipeError, match="may fill only analyze, mutate, validate, novelty"):
        load_recipe(mini.recipe, ["slots.gate.operator=candidate:ops/g.py:G"])


def test_the_child_runner_imports_only_the_api() -> None:
    tree = ast.parse(Path(oprunner.__file__).read_text())
    inner = {
        n.module
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("rsiframe")
    }
    assert inner == {"rsiframe.api"}


# -- in a run ------------------------------------------------------------------------


SELF_MUTATOR = """
import yaml
from rsiframe.api import MutateOperator, Mutation

class Climb(MutateOperator):
    def mutate(self, ctx):
        cfg = yaml.safe_load((ctx.workdir / "config.yaml").read_text())
        cfg["level"] += 1
        (ctx.workdir / "config.yaml").write_text(yaml.safe_dump(cfg))
        return Mutation(description=f"level {cfg['level']}")

class Liar(MutateOperator):
    def mutate(self, ctx):
        return Mutation(description="x" * 10, details={"pad": "y" * 5000})
"""


KNOBS = """    operator: knobs
    config:
      max_changes: 1
      knobs:
        - {file: config.yaml, key: level, range: [0, 9], step: 1}
        - {file: config.yaml, key: style, choices: [plain, fancy]}"""


def _run(mini: Mini, ref: str, config: str = "{}") -> Path:
    text = mini.recipe.read_text()
    assert KNOBS in text
    mini.recipe.write_text(text.replace(KNOBS, f'    operator: "{ref}"\n    config: {config}'))
    out = mini.run_dir()
    res = cli("run", mini.recipe, "--out", out, "--quiet")
    assert res.exit_code == 0, res.stderr
    return out


def test_a_run_with_the_candidates_own_mutator(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p", generations=2, children=1)
    (mini.seed / "ops").mkdir()
    (mini.seed / "ops" / "mutate.py").write_text(SELF_MUTATOR)
    out = _run(mini, "candidate:ops/mutate.py:Climb")
    st = status_json(out)
    assert st["state"] == "finished"
    kids = st["candidates"][1:]
    assert [c["description"] for c in kids] == ["level 2", "level 3"]
    assert kids[0]["state"] == "admitted"  # level 2 solves gate task t2; level 3 adds none
    mutated = [e for e in events(out) if e["type"] == "candidate_mutated"][1:]
    assert all(
        e["data"]["sandbox"]["mutate"]["isolation"].startswith("bwrap userns") for e in mutated
    )


def test_a_bad_result_rejects_the_child_and_the_run_goes_on(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p", generations=1, children=2)
    (mini.seed / "ops").mkdir()
    (mini.seed / "ops" / "mutate.py").write_text(SELF_MUTATOR)
    out = _run(mini, "candidate:ops/mutate.py:Liar", "{max_result_bytes: 1000}")
    st = status_json(out)
    assert st["state"] == "finished"
    kids = st["candidates"][1:]
    assert [c["state"] for c in kids] == ["rejected", "rejected"]
    assert "larger than 1000 bytes" in kids[0]["reasons"][0]
    rejected = [e for e in events(out) if e["type"] == "candidate_rejected"]
    assert json.dumps(rejected[0]["data"]).count("UntrustedOperatorError") >= 1


def test_process_fallback_only_with_auto(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rsiframe.sandbox.bwrap as sandbox_mod

    monkeypatch.setattr(sandbox_mod, "bwrap_works", lambda: False)
    src = source(tmp_path, BUMP)
    with pytest.raises(SandboxError, match="bubblewrap was requested"):
        make_op("mutate", src).mutate(mctx(tmp_path))
    m = make_op("mutate", src, sandbox="auto").mutate(mctx(tmp_path))
    assert m.description == "level 2"
    assert m.sandbox is not None
    assert (m.sandbox.isolation, m.sandbox.requested) == ("process", "auto")


# -- a candidate operator that calls a model (issue 31, item 3) ----------------------------


MODEL_MUTATOR = """
import json, os, urllib.request
import yaml
from rsiframe.api import MutateOperator, Mutation

class Ask(MutateOperator):
    def mutate(self, ctx):
        body = {"model": os.environ["RSI_MODEL"],
                "messages": [{"role": "user", "content": "which level next?"}]}
        req = urllib.request.Request(
            os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                     "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            answer = json.load(r)["choices"][0]["message"]["content"]
        cfg = yaml.safe_load((ctx.workdir / "config.yaml").read_text())
        cfg["level"] = int(answer.strip())
        (ctx.workdir / "config.yaml").write_text(yaml.safe_dump(cfg))
        return Mutation(description=f"level {cfg['level']} (asked)")

class NoModel(MutateOperator):
    def mutate(self, ctx):
        seen = sorted(k for k in os.environ if k.startswith("OPENAI_") or k == "RSI_MODEL")
        cfg = yaml.safe_load((ctx.workdir / "config.yaml").read_text())
        cfg["level"] += 1
        (ctx.workdir / "config.yaml").write_text(yaml.safe_dump(cfg))
        return Mutation(description="env " + ",".join(seen) if seen else "no model endpoint")
"""

MODELS = """\
models:
  proposer: {base_url_env: LLM_BASE_URL, api_key_env: LLM_API_KEY, model: stub, retries: 0}
"""


def test_a_candidate_operator_calls_its_slots_model_through_the_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM

    stub = StubLLM(Script(answers=[Answer(content="7", repeat=True)]))
    srv = ServerThread(stub.app).start()
    monkeypatch.setenv("LLM_BASE_URL", srv.url)
    monkeypatch.setenv("LLM_API_KEY", "provider-key")
    try:
        mini = make_mini(tmp_path / "p", generations=1, children=1, extra=MODELS)
        (mini.seed / "ops").mkdir()
        (mini.seed / "ops" / "mutate.py").write_text(MODEL_MUTATOR)
        out = _run(mini, "candidate:ops/mutate.py:Ask", "{model: proposer}")
    finally:
        srv.stop()
    st = status_json(out)
    assert [c["description"] for c in st["candidates"][1:]] == ["level 7 (asked)"]
    calls = [e["data"] for e in events(out) if e["type"] == "model_call"]
    assert [(c["candidate"], c["slot"], c["model"]) for c in calls] == [
        ("c0001", "mutate", "proposer")
    ]
    # the provider's key never reached the candidate: the stub saw the gateway's own
    assert len(stub.requests) == 1 and "provider-key" not in json.dumps(stub.requests)


def test_a_candidate_operator_without_a_model_gets_no_endpoint(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p", generations=1, children=1)
    (mini.seed / "ops").mkdir()
    (mini.seed / "ops" / "mutate.py").write_text(MODEL_MUTATOR)
    out = _run(mini, "candidate:ops/mutate.py:NoModel")
    st = status_json(out)
    assert [c["description"] for c in st["candidates"][1:]] == ["no model endpoint"]
