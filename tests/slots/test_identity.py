"""Operator code in the recipe lock: resume refuses edited operator code, verify and status
report it, and certificates carry the gate's and the evaluator's code identity."""

from __future__ import annotations

import json
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from rsiframe import __version__
from rsiframe.certs.signing import RecordVerifier
from rsiframe.recipe import load as recipe_mod
from rsiframe.slots import identity as opidentity
from rsiframe.slots import registry
from rsiframe.util.digest import sha256_bytes
from tests.support.cli import cli, events, run_proc, status_json
from tests.support.mini import Mini

GATE = textwrap.dedent("""\
    from pydantic import BaseModel, ConfigDict
    from rsiframe.api import GateContext, GateDecision, GateOperator


    class Config(BaseModel):
        model_config = ConfigDict(extra="forbid")


    class BeatsChampion(GateOperator):
        \"\"\"Admit a child whose gate score beats the parent's.\"\"\"

        Config = Config

        def gate(self, ctx: GateContext) -> GateDecision:
            child = ctx.run.score(ctx.candidate.id, "gate")
            parent = ctx.run.score(ctx.parent.id, "gate")
            return GateDecision(admit=child > parent, reason=f"{child - parent:+.3f}")
    """)


def _with_file_gate(mini: Mini) -> Path:
    ops = mini.root / "ops"
    ops.mkdir()
    gates = ops / "gates.py"
    gates.write_text(GATE)
    text = mini.recipe.read_text()
    mini.recipe.write_text(
        text.replace(
            "gate: {operator: improves_parent}", 'gate: {operator: "ops/gates.py:BeatsChampion"}'
        )
    )
    return gates


def test_resume_refuses_an_edited_gate_file(mini: Mini) -> None:
    gates = _with_file_gate(mini)
    out = mini.run_dir()
    killed = run_proc(
        ["run", str(mini.recipe), "--out", str(out), "--quiet"],
        {"RSIFRAME_FAULT": "kill:after:candidate_gated:1"},
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    lock = json.loads((out / "recipe.lock.json").read_text())
    gate = lock["operators"]["gate"]
    assert gate["kind"] == "file" and gate["file"] == str(gates.resolve())
    assert gate["sha256"] == sha256_bytes(gates.read_bytes())

    gates.write_text(GATE.replace("admit=child > parent", "admit=True"))  # admit everything
    before = (out / "events.jsonl").read_bytes()
    res = cli("resume", out, "--quiet")
    assert res.exit_code == 2, res.stderr
    line = res.stderr.strip()
    assert "operator code changed since the run began" in line
    assert "slots.gate" in line and "ops/gates.py:BeatsChampion" in line
    assert str(gates.resolve()) in line
    assert (out / "events.jsonl").read_bytes() == before  # a refusal changes nothing

    notes = status_json(out)["notes"]
    assert any("operator code on disk differs" in n and "slots.gate" in n for n in notes), notes
    res = cli("verify", out, "--json")
    assert res.exit_code == 3  # drift: the archive verifies, the code on disk differs
    report = json.loads(res.stdout)
    assert report["verdict"] == "drift" and not report["ok"]
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["operators"]["status"] == "drift"
    assert "gates.py" in checks["operators"]["problems"][0]
    assert checks["operators"]["detail"] == checks["operators"]["problems"][0]  # what it found
    for name in ("chain", "signatures", "certificates", "locks", "tasks"):
        assert checks[name]["status"] == "ok", checks[name]

    # editing the lock to fit the new code does not help: run_started signed its digest
    lock_path = out / "recipe.lock.json"
    original = lock_path.read_text()
    forged = json.loads(original)
    forged["operators"]["gate"]["sha256"] = sha256_bytes(gates.read_bytes())
    lock_path.write_text(json.dumps(forged))
    res = cli("resume", out, "--quiet")
    assert res.exit_code == 2
    assert "operator identities differ from those the run signed at start" in res.stderr
    res = cli("verify", out, "--json")
    assert res.exit_code == 1  # a lock that is not the signed one: the archive is broken
    checks = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
    assert checks["locks"]["status"] == "failed"
    assert any("signed at start" in p for p in checks["locks"]["problems"])
    lock_path.write_text(original)

    gates.write_text(GATE)  # the locked code back: resume goes on, verify is clean
    res = cli("resume", out, "--quiet")
    assert res.exit_code == 0, res.stderr
    assert json.loads(cli("verify", out, "--json").stdout)["ok"]


def test_certificates_carry_gate_and_evaluator_code(mini: Mini) -> None:
    gates = _with_file_gate(mini)
    out = mini.run_dir()
    res = cli("run", mini.recipe, "--out", out, "--quiet", "--set", "budget.max_generations=1")
    assert res.exit_code == 0, res.stderr
    verifier = RecordVerifier.from_pem((out / "pubkey.pem").read_bytes())
    certs = [e for e in events(out) if e["type"] == "evaluation_certified"]
    assert certs
    for ev in certs:
        statement = verifier.open(ev["data"]["envelope"])
        code = statement["predicate"]["code"]
        assert code["gate"]["sha256"] == sha256_bytes(gates.read_bytes())
        assert code["evaluator"]["engine"] == "local"
        assert code["evaluator"]["file"].endswith("evaluators/local.py")
        assert code["evaluator"]["sha256"] == sha256_bytes(
            Path(code["evaluator"]["file"]).read_bytes()
        )


def test_lock_kinds_for_builtins_modules_and_candidates(mini: Mini) -> None:
    r = recipe_mod.load(
        mini.recipe,
        [
            "slots.select.operator=rsiframe.operators.select:Best",
            "slots.mutate.operator=candidate:ops/m.py:M",
        ],
    )
    ids = opidentity.identities(r)
    assert ids["mutate"] == {"ref": "candidate:ops/m.py:M", "kind": "candidate"}
    gate = ids["gate"]
    assert gate["kind"] == "builtin" and gate["rsiframe"] == __version__
    assert gate["sha256"] == sha256_bytes(Path(gate["file"]).read_bytes())
    select = ids["select"]
    assert select["kind"] == "module" and select["distribution"] == "rsiframe"
    assert select["file"].endswith("select.py")


def test_entry_point_identity_names_distribution_version_and_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    pkg = site / "myops"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from rsiframe.api import GateDecision, GateOperator\n\n"
        "class Yes(GateOperator):\n"
        "    '''Admit everything.'''\n"
        "    def gate(self, ctx):\n"
        "        return GateDecision(admit=True, reason='yes')\n"
    )
    info = site / "myops-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: myops\nVersion: 1.2\n")
    (info / "entry_points.txt").write_text("[rsiframe.operators]\ngate.yes = myops:Yes\n")
    (info / "top_level.txt").write_text("myops\n")
    (pkg / "weights.json").write_text('{"w": 1}\n')  # data of the package, no import leads to it
    record = "myops/__init__.py,,\nmyops/weights.json,,\nmyops-1.2.dist-info/METADATA,,\n"
    (info / "RECORD").write_text(record)
    monkeypatch.syspath_prepend(str(site))
    registry.installed.cache_clear()
    try:
        cls = registry.resolve("gate", "yes")
        ident = opidentity.identity("gate", "yes", cls)
    finally:
        registry.installed.cache_clear()
        sys.modules.pop("myops", None)
    assert ident["kind"] == "entry_point"
    assert (ident["distribution"], ident["version"]) == ("myops", "1.2")
    assert ident["record_sha256"] == sha256_bytes(record.encode())
    assert ident["sha256"] == sha256_bytes((pkg / "__init__.py").read_bytes())
    # the distribution's RECORD: every file it installed, data too
    files = {Path(p).relative_to(site).as_posix() for p in ident["files"]}
    assert files == {"myops/__init__.py", "myops/weights.json", "myops-1.2.dist-info/METADATA"}
    assert opidentity.drift({"gate": ident}) == []
    (pkg / "weights.json").write_text('{"w": 2}\n')
    (problem,) = opidentity.drift({"gate": ident})
    assert "slots.gate yes" in problem and "weights.json" in problem
    bumped = {**ident, "version": "1.3"}
    assert opidentity.changes({"gate": ident}, {"gate": bumped}) == [
        "slots.gate: operator yes: version 1.2 -> 1.3"
    ]


def test_task_drift_is_its_own_check_in_status_and_verify(mini: Mini) -> None:
    out = mini.run_dir()
    res = cli("run", mini.recipe, "--out", out, "--quiet", "--set", "budget.max_generations=0")
    assert res.exit_code == 0, res.stderr
    instruction = mini.tasks / "t1" / "instruction.md"
    instruction.write_text(instruction.read_text() + "\nedited after the run\n")
    want = "task set on disk differs from the run's lock: train/t1/instruction.md"
    assert f"lock: {want}" in status_json(out)["notes"]
    assert want in " ".join(cli("status", out).stdout.split())  # the console wraps
    res = cli("verify", out, "--json")
    assert res.exit_code == 3
    checks = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
    assert checks["tasks"]["status"] == "drift" and checks["tasks"]["problems"] == [want]
    # archive integrity still holds
    for name in ("chain", "signatures", "certificates", "locks", "evidence"):
        assert checks[name]["status"] == "ok", checks[name]


def test_certificate_and_signed_lock_checks() -> None:
    gate = {"ref": "g", "kind": "file", "file": "/x/g.py", "sha256": "a"}
    other = {**gate, "sha256": "b"}
    certified = [("c1 gate #1", {"gate": gate}), ("c2 gate #1", {"gate": other}), ("c3", None)]
    assert opidentity.certificate_problems({"gate": gate}, certified) == [
        "c2 gate #1: its certificate names other gate code than the recipe lock"
    ]
    signed = {"operators_digest": opidentity.lock_digest({"gate": gate})}
    assert opidentity.signed_lock_problems({"gate": gate}, signed) == []
    assert opidentity.signed_lock_problems({"gate": other}, signed)
    assert opidentity.signed_lock_problems({"gate": other}, {}) == []  # a run from before the lock


# -- the operator's whole package (issue 27) ------------------------------------------------

TPOPS = {
    "__init__.py": "MARGIN = 0.0\n",
    "helpers.py": "def delta(a, b):\n    return a - b\n",
    "unrelated.py": "X = 1\n",
    "gates.py": textwrap.dedent("""\
        from pydantic import BaseModel, ConfigDict
        from rsiframe.api import GateContext, GateDecision, GateOperator

        from tpops import MARGIN


        class Config(BaseModel):
            model_config = ConfigDict(extra="forbid")


        class BeatsParent(GateOperator):
            \"\"\"Admit a child whose gate score beats the parent's by MARGIN.\"\"\"

            Config = Config

            def gate(self, ctx: GateContext) -> GateDecision:
                from .helpers import delta  # inside a function, relative: counted too

                run = ctx.run
                d = delta(run.score(ctx.candidate.id, "gate"), run.score(ctx.parent.id, "gate"))
                return GateDecision(admit=d > MARGIN, reason=f"{d:+.3f}")
        """),
}


@pytest.fixture
def tpops(mini: Mini, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A researcher's operator package on sys.path, its gate named ``tpops.gates:...``."""
    pkg = mini.root / "src" / "tpops"
    pkg.mkdir(parents=True)
    for name, text in TPOPS.items():
        (pkg / name).write_text(text)
    monkeypatch.syspath_prepend(str(pkg.parent))
    text = mini.recipe.read_text()
    mini.recipe.write_text(
        text.replace(
            "gate: {operator: improves_parent}", "gate: {operator: tpops.gates:BeatsParent}"
        )
    )
    yield pkg
    for name in [m for m in sys.modules if m == "tpops" or m.startswith("tpops.")]:
        del sys.modules[name]


def test_an_edit_anywhere_in_the_operators_package_is_code_changed(mini: Mini, tpops: Path) -> None:
    out = mini.run_dir()
    res = cli("run", mini.recipe, "--out", out, "--quiet", "--set", "budget.max_generations=1")
    assert res.exit_code == 0, res.stderr
    gate = json.loads((out / "recipe.lock.json").read_text())["operators"]["gate"]
    assert gate["kind"] == "module"
    locked = {Path(p).name: d for p, d in gate["files"].items()}
    assert set(locked) == {"__init__.py", "gates.py", "helpers.py"}  # not unrelated.py
    assert locked["__init__.py"] == sha256_bytes(TPOPS["__init__.py"].encode())

    (tpops / "unrelated.py").write_text("X = 2\n")  # not the operator's: nothing to say
    assert cli("verify", out).exit_code == 0
    init = tpops / "__init__.py"
    init.write_text("MARGIN = -1.0  # admit everything\n")
    res = cli("resume", out, "--quiet")
    assert res.exit_code == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "operator code changed since the run began" in res.stderr
    assert f"code changed: {init.resolve()}" in res.stderr
    notes = status_json(out)["notes"]
    assert any("slots.gate" in n and str(init.resolve()) in n for n in notes), notes
    res = cli("verify", out)
    assert res.exit_code == 3, res.stderr
    assert "DRIFT: the archive verifies" in res.stdout and "(operators)" in res.stdout
    assert "drift: files on disk differ (operators)" in res.stderr
    assert "__init__.py" in res.stderr

    init.write_text(TPOPS["__init__.py"])
    (tpops / "helpers.py").write_text("def delta(a, b):\n    return 1.0\n")
    report = json.loads(cli("verify", out, "--json").stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert report["verdict"] == "drift" and "helpers.py" in checks["operators"]["detail"]
    (tpops / "helpers.py").write_text(TPOPS["helpers.py"])
    res = cli("verify", out)
    assert res.exit_code == 0 and "OK: the archive verifies" in res.stdout


def test_a_broken_archive_with_drift_is_failed_and_names_both(mini: Mini, tpops: Path) -> None:
    out = mini.run_dir()
    res = cli("run", mini.recipe, "--out", out, "--quiet", "--set", "budget.max_generations=0")
    assert res.exit_code == 0, res.stderr
    (tpops / "__init__.py").write_text("MARGIN = 9\n")
    pubkey = out / "pubkey.pem"
    pubkey.write_text("not a key\n")
    res = cli("verify", out)
    assert res.exit_code == 1
    assert "FAILED: the archive does not verify (pubkey)" in res.stdout
    assert "verification failed (pubkey)" in res.stderr
