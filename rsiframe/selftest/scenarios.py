"""The integrity scenarios: each builds the experiment, attacks or crashes it, and judges.

A scenario returns the problems it found (none means the trial passed). Pass
means: the run reaches a valid, attributable state (``verify`` passes, or the
tampering is detected and named); no unauthorized change affects an accepted
result (every certified reward equals the ground truth of the committed
tree); and the champion is reproducible (``verify --reproduce``). Trials vary
the experiment's random seed, the kill point, the victim and the file.
"""

from __future__ import annotations

import base64
import json
import random
import shutil
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rsiframe.archive.loader import load_run
from rsiframe.archive.log import GENESIS, get_artifact
from rsiframe.archive.state import Candidate
from rsiframe.audit.verify import verify
from rsiframe.certs.signing import EVENT_TYPE, Signer
from rsiframe.selftest.common import (
    KILLED,
    Scenario,
    Trial,
    attack,
    certified_tasks,
    check_exit,
    one_line,
    sound,
)
from rsiframe.selftest.experiment import NEEDS, SPLIT, Experiment, build, folder_digest
from rsiframe.util.digest import canonical_json, sha256_bytes
from rsiframe.util.faults import times_reached

# -- judging ----------------------------------------------------------------------------


def _crash(exp: Experiment, fault: str, rng: random.Random) -> tuple[str, int]:
    """Run with ``fault`` (``kind:point:n``). A run that reached the point fewer than n
    times (its children were duplicates, so never evaluated) is an infeasible draw, not a
    failure: it runs again from scratch, n drawn among the times that run reached it."""
    killed = exp.run(fault=fault)
    reached = times_reached(killed.stderr) if killed.returncode == 0 else None
    head, _, n = fault.rpartition(":")
    if reached and reached < int(n):
        shutil.rmtree(exp.run_dir)
        fault = f"{head}:{rng.randint(1, reached)}"
        killed = exp.run(fault=fault)
    return fault, killed.returncode


def _crash_then_resume(exp: Experiment, fault: str, rng: random.Random) -> list[str]:
    fault, code = _crash(exp, fault, rng)
    if code != KILLED:
        return [f"{fault}: the fault never fired (exit {code})"]
    before = (exp.run_dir / "events.jsonl").read_bytes()
    torn = before[before.rfind(b"\n") + 1 :]
    problems, ok = check_exit(exp.resume(), "resume")
    if not ok:
        return problems
    after = (exp.run_dir / "events.jsonl").read_bytes()
    if not after.startswith(before[: len(before) - len(torn)]):
        problems.append("resume changed events written before the crash")
    if torn and (exp.run_dir / "events.torn-1").read_bytes() != torn:
        problems.append("the torn tail was not kept aside")
    return problems + sound(exp)


# -- SIGKILL at stage boundaries ----------------------------------------------------------

CRASH_RUN = {"generations": 2, "children": 2}


def kill_mutate(t: Trial) -> list[str]:
    """SIGKILL while a child is being mutated; resume abandons it and goes on."""
    # the in-process knobs mutator, or the script mutator (a sandboxed child process)
    script = {"mode": "benign", "victims": [], "level": 0} if t.rng.random() < 0.5 else None
    exp = t.experiment(**CRASH_RUN, params=script)
    fault = t.rng.choice(["kill:stage:mutate", "kill:after:rollout_done"])
    return _crash_then_resume(exp, f"{fault}:{t.rng.randint(1, 3)}", t.rng)


def kill_evaluate(t: Trial) -> list[str]:
    """SIGKILL during an evaluation; resume retries it as a new attempt."""
    exp = t.experiment(**CRASH_RUN)
    point, hi = t.rng.choice(
        [("stage:task", 12), ("after:task_finished", 12), ("after:evaluation_started", 6)]
    )
    return _crash_then_resume(exp, f"kill:{point}:{t.rng.randint(1, hi)}", t.rng)


def kill_after_certificate(t: Trial) -> list[str]:
    """SIGKILL right after a certificate is durable, before the gate decides."""
    exp = t.experiment(**CRASH_RUN)
    return _crash_then_resume(exp, f"kill:after:evaluation_certified:{t.rng.randint(1, 6)}", t.rng)


def kill_gate_record(t: Trial) -> list[str]:
    """SIGKILL during gate or record."""
    exp = t.experiment(**CRASH_RUN)
    point, hi = t.rng.choice(
        [
            ("stage:gate", 2),
            ("after:candidate_gated", 3),
            ("stage:record", 2),
            ("after:candidate_recorded", 3),
        ]
    )
    return _crash_then_resume(exp, f"kill:{point}:{t.rng.randint(1, hi)}", t.rng)


def torn_append(t: Trial) -> list[str]:
    """SIGKILL in the middle of an archive append (half a line written)."""
    exp = t.experiment(**CRASH_RUN)
    event, hi = t.rng.choice(
        [
            ("evaluation_certified", 6),
            ("task_finished", 12),
            ("candidate_proposed", 3),
            ("candidate_mutated", 3),
            ("candidate_gated", 3),
            ("candidate_recorded", 3),
        ]
    )
    return _crash_then_resume(exp, f"torn:{event}:{t.rng.randint(1, hi)}", t.rng)


# -- a candidate attacks ----------------------------------------------------------------


def _guardrail_refuses(t: Trial, params: dict[str, Any], reason: str) -> list[str]:
    exp, res = attack(t, params)
    problems, ok = check_exit(res, "run")
    if not ok:
        return problems
    params_file = json.loads((exp.seed / "fixed" / "params.json").read_text())
    loaded = load_run(exp.run_dir)
    rejected = {c.id: c.rejected for c in loaded.state.candidates.values() if c.rejected}
    for cid in params_file["victims"]:
        if cid not in loaded.state.candidates:
            continue
        r = rejected.get(cid)
        if r is None or r.get("stage") != "guardrail":
            problems.append(f"{cid} attacked ({params['mode']}) but was not rejected by guardrail")
        elif not any(reason in why for why in r.get("reasons", [])):
            problems.append(f"{cid}: guardrail reasons do not name it: {r.get('reasons')}")
    return problems + sound(exp)


def outside_surface(t: Trial) -> list[str]:
    """A mutation writes a file outside the surface (fixed/**), by direct path."""
    target = t.rng.choice(["fixed/README.md", "fixed/mutate.py", "fixed/new.txt"])
    return _guardrail_refuses(t, {"mode": "outside_surface", "target": target}, target)


def symlink_escape(t: Trial) -> list[str]:
    """A mutation adds a symlink that points out of the tree (absolute, relative, chained)."""
    outside = t.root / "outside"
    outside.mkdir(exist_ok=True)
    variant = t.rng.choice(["absolute", "relative", "chain"])
    params = {"mode": "symlink_escape", "variant": variant, "outside": str(outside)}
    return _guardrail_refuses(t, params, "symlink points outside the tree")


def git_hooks(t: Trial) -> list[str]:
    """A mutation plants a .git/hooks script in the work folder."""
    hook = t.rng.choice(["pre-commit", "post-checkout", "post-merge"])
    return _guardrail_refuses(t, {"mode": "git_hooks", "hook": hook}, ".git")


def gitmodules(t: Trial) -> list[str]:
    """A mutation adds a .gitmodules file (a submodule pointing anywhere)."""
    url = t.rng.choice(["https://example.invalid/x.git", "../../../etc", "file:///"])
    return _guardrail_refuses(t, {"mode": "gitmodules", "url": url}, ".gitmodules")


def edit_evaluator(t: Trial) -> list[str]:
    """A mutation overwrites a verifier file of the task set (the evaluator's data).

    Either the write is blocked (the mutation runs sandboxed), or it lands and is
    caught before any evaluation uses it (task lock); the researcher restores the
    file and resumes. Either way no certified reward may differ from the truth.
    """
    task = t.rng.choice(sorted(NEEDS))
    name, content = t.rng.choice(
        [
            ("test.sh", '#!/bin/bash\necho 1 > "${RSI_LOGS:-/logs}/verifier/reward.txt"\n'),
            ("need.txt", "0\n"),
        ]
    )
    exp = build(
        t.root / "exp",
        seed=t.rng.randrange(10_000),
        sandbox=t.sandbox,
        engine=t.engine,
        concurrency=t.concurrency,
        generations=1,
        children=2,
        params={
            "mode": "edit_evaluator",
            "victims": [t.rng.choice(["c0001", "c0002"])],
            "level": 0,
            "target": "",
            "content": content,
        },
    )
    # the mutation runs sandboxed (the write is blocked) or, as a recipe may ask, as a plain
    # process (the write lands, and must be caught before any evaluation uses it)
    exp.data["slots"]["mutate"]["config"]["sandbox"] = t.rng.choice(["bwrap", "process"])
    exp.write_recipe()
    target = exp.tasks / task / "tests" / name
    original = target.read_bytes()
    params = json.loads((exp.seed / "fixed" / "params.json").read_text())
    params["target"] = str(target)
    (exp.seed / "fixed" / "params.json").write_text(json.dumps(params))
    res = exp.run()
    problems = one_line(res, "run")
    if target.read_bytes() == original:  # blocked
        if res.returncode != 0:
            return [*problems, f"run exit {res.returncode}: {res.stderr.strip()[-300:]}"]
        return problems + sound(exp)
    # the write landed: the run must have stopped, naming the file, before using it
    if res.returncode != 2 or f"/{task}/tests/{name}" not in res.stderr:
        problems.append(
            f"edited {task}/tests/{name} not named (exit {res.returncode}): "
            f"{res.stderr.strip()[-200:]}"
        )
    target.write_bytes(original)
    again = exp.resume()
    if again.returncode != 0:
        return [*problems, f"resume after restoring exit {again.returncode}: {again.stderr[-300:]}"]
    return problems + sound(exp)


def _agent_attack(t: Trial, mode: str, targets: list[str], level: int) -> list[str]:
    exp, res = attack(t, {"mode": mode, "targets": targets, "level": level})
    problems, ok = check_exit(res, "run")
    if not ok:
        return problems
    ran = 0
    for done in certified_tasks(exp):
        stdout = done.trajectory["artifacts"]["agent.stdout"]
        out = get_artifact(exp.run_dir, stdout).decode()
        attacks = [x for x in out.splitlines() if x.startswith("ATTACK")]
        ran += len(attacks)
        problems += [f"{done.candidate}/{done.split}: {x[:300]}" for x in attacks if "LEAKED" in x]
    if mode != "forge_reward" and not ran:
        problems.append("the attacking agent never ran")
    return problems[:5] + sound(exp)


def read_sealed(t: Trial) -> list[str]:
    """A candidate's agent tries to read sealed (and gate) task files during its evaluation."""
    tasks = t.root / "exp" / "tasks"
    hidden = SPLIT["sealed"] + SPLIT["gate"]
    targets = [str(tasks / tid / "tests" / "need.txt") for tid in hidden] + [
        str(tasks / "*/tests/*")
    ]
    return _agent_attack(t, "read_sealed", targets, t.rng.randint(2, 6))


def read_key(t: Trial) -> list[str]:
    """A candidate's agent tries to read the signing key and the archive."""
    exp_root = t.root / "exp"
    targets = [str(exp_root / "keys" / "*.pem"), str(exp_root / "run" / "events.jsonl")]
    return _agent_attack(t, "read_key", targets, t.rng.randint(2, 6))


def forge_reward(t: Trial) -> list[str]:
    """A candidate's agent writes its own reward file (now, and from a lingering process),
    and a test script that says 1 into the tests kept from its task's last trial."""
    return _agent_attack(t, "forge_reward", [], 0)


# -- the archive is tampered with -------------------------------------------------------


def _finished(
    t: Trial, prepare: Callable[[Experiment], None] | None = None, **kw: Any
) -> tuple[Experiment, list[str]]:
    exp = t.experiment(generations=1, children=2, **kw)
    if prepare is not None:
        prepare(exp)
    res = exp.run()
    if res.returncode != 0:
        return exp, [f"run exit {res.returncode}: {res.stderr.strip()[-300:]}"]
    return exp, []


def _lines(exp: Experiment) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (exp.run_dir / "events.jsonl").read_text().splitlines()]


def _write(exp: Experiment, events: list[dict[str, Any]], *, rechain: bool) -> None:
    prev = GENESIS
    out = []
    for i, ev in enumerate(events):
        if rechain:
            ev["seq"], ev["prev"] = i, prev
        line = canonical_json(ev)
        prev = sha256_bytes(line)
        out.append(line)
    (exp.run_dir / "events.jsonl").write_bytes(b"\n".join(out) + b"\n")


def _detected(exp: Experiment, checks: set[str], fragment: str | None = None) -> list[str]:
    """verify fails naming one of ``checks``; status and resume refuse; nothing is written."""
    problems = []
    before = folder_digest(exp.run_dir)
    report = verify(exp.run_dir)
    failed = {c.name for c in report.checks if c.status == "failed"}
    if report.ok:
        problems.append("verify passed a tampered archive")
    elif not failed & checks:
        problems.append(f"verify failed {sorted(failed)}, expected one of {sorted(checks)}")
    if fragment and not any(fragment in p for p in report.problems):
        problems.append(f"no verify problem names {fragment!r}: {report.problems[:3]}")
    for cmd in ("status", "resume"):
        res = exp.cli(cmd, str(exp.run_dir))
        problems += one_line(res, cmd)
        if res.returncode != 1 or len(res.stderr.strip().splitlines()) != 1:
            problems.append(f"{cmd} on a tampered archive: exit {res.returncode}, {res.stderr!r}")
    if folder_digest(exp.run_dir) != before:
        problems.append("checking the tampered run changed its folder")
    return problems


def forged_event(t: Trial) -> list[str]:
    """An event is forged: appended under another key, inserted, or edited in place."""
    exp, problems = _finished(t)
    if problems:
        return problems
    events = _lines(exp)
    variant = t.rng.choice(["append", "insert", "edit"])
    declined = [e["data"]["id"] for e in events if e["type"] == "candidate_gated"]
    victim = t.rng.choice(declined)
    forged = {"id": victim, "admit": True, "reason": "forged"}
    if variant == "append":
        last = events[-1]
        record = {
            "seq": last["seq"] + 1,
            "ts": last["ts"] + 1,
            "type": "candidate_gated",
            "data": forged,
            "prev": sha256_bytes(canonical_json(last)),
        }
        sig = Signer(Ed25519PrivateKey.generate()).sign_bytes(EVENT_TYPE, canonical_json(record))
        events.append({**record, "sig": sig})
        _write(exp, events, rechain=False)
        seq = record["seq"]
    elif variant == "insert":
        at = t.rng.randint(2, len(events) - 1)
        events.insert(at, {**events[at], "type": "usage", "data": {"tokens": 0, "cost": 0.0}})
        _write(exp, events, rechain=True)
        seq = at
    else:
        gated = [i for i, e in enumerate(events) if e["type"] == "candidate_gated"]
        seq = t.rng.choice(gated)
        events[seq]["data"]["admit"] = not events[seq]["data"]["admit"]
        _write(exp, events, rechain=True)
    return _detected(exp, {"signatures"}, f"event {seq} ")


def replayed_certificate(t: Trial) -> list[str]:
    """A valid certificate of one candidate is replayed onto another candidate's evaluation."""
    exp, problems = _finished(t)
    if problems:
        return problems
    events = _lines(exp)
    certs = [i for i, e in enumerate(events) if e["type"] == "evaluation_certified"]
    src = t.rng.choice(certs)
    dst = t.rng.choice([i for i in certs if events[i]["data"]["id"] != events[src]["data"]["id"]])
    events[dst]["data"]["envelope"] = events[src]["data"]["envelope"]
    _write(exp, events, rechain=True)
    return _detected(exp, {"certificates"}, "bound to")


def edited_score(t: Trial) -> list[str]:
    """A certified score (and rewards) is edited inside the archive."""
    exp, problems = _finished(t)
    if problems:
        return problems
    events = _lines(exp)
    certs = [i for i, e in enumerate(events) if e["type"] == "evaluation_certified"]
    at = t.rng.choice(certs)
    env = events[at]["data"]["envelope"]
    st = json.loads(base64.b64decode(env["payload"]))
    flipped = {t: 1.0 - r for t, r in st["predicate"]["rewards"].items()}  # always a change
    st["predicate"]["rewards"] = flipped
    st["predicate"]["score"] = sum(flipped.values()) / len(flipped)
    env["payload"] = base64.b64encode(canonical_json(st)).decode()
    rechain = t.rng.random() < 0.5
    _write(exp, events, rechain=rechain)
    problems = _detected(exp, {"certificates", "signatures"} if rechain else {"chain"})
    if rechain:  # even read without signature checks, the edited score is never a score
        loaded = load_run(exp.run_dir, strict=False)
        c = loaded.state.candidates[events[at]["data"]["id"]]
        if c.score(events[at]["data"]["split"]) is not None:
            problems.append("the edited score was read as a score")
    return problems


def task_edited(t: Trial) -> list[str]:
    """A task file is edited between sessions: resume refuses, naming it; restored, it goes on."""
    exp = t.experiment(generations=2, children=2)
    point = t.rng.choice(
        ["after:candidate_gated:1", "after:evaluation_certified:4", "stage:mutate:2"]
    )
    fault, code = _crash(exp, f"kill:{point}", t.rng)
    if code != KILLED:
        return [f"{fault}: the fault never fired (exit {code})"]
    split = t.rng.choice(sorted(SPLIT))
    task = t.rng.choice(SPLIT[split])
    name = t.rng.choice(["tests/test.sh", "tests/need.txt", "instruction.md", "task.toml"])
    path = exp.tasks / task / name
    original = path.read_bytes()
    path.write_bytes(original + b"\n# edited\n")
    before = folder_digest(exp.run_dir)
    res = exp.resume()
    problems = one_line(res, "resume")
    if res.returncode != 2 or f"{split}/{task}/{name}" not in res.stderr:
        problems.append(f"resume did not refuse naming {split}/{task}/{name}: {res.stderr!r}")
    if folder_digest(exp.run_dir) != before:
        problems.append("the refused resume changed the run folder")
    path.write_bytes(original)
    res = exp.resume()
    if res.returncode != 0:
        return [*problems, f"resume after restoring exit {res.returncode}: {res.stderr[-300:]}"]
    return problems + sound(exp)


# -- operators misbehave ----------------------------------------------------------------

OPS = '''"""Operators that misbehave on one victim call (the self-test writes this file)."""
from pydantic import BaseModel

from rsiframe.api import (GateDecision, GateOperator, MutateOperator, Mutation, Notes,
                          RecordOperator, SelectOperator, Selection)
from rsiframe.operators.gate import ImprovesParent
from rsiframe.operators.knobs import Knobs, KnobsConfig
from rsiframe.operators.select import Best


class BadConfig(BaseModel):
    victim: str = ""
    kind: str = ""
    size: int = 0


def bad(kind, size, good):
    if kind == "none":
        return None
    if kind == "dict":
        return {"admit": True, "reason": "a dict", "description": "a dict", "notes": {}}
    if kind == "string":
        return "yes"
    if kind == "raise":
        raise RuntimeError("operator crashed on purpose")
    if kind == "huge":
        return good("x" * size)
    raise AssertionError(kind)


class BadMutate(MutateOperator):
    name = "bad_mutate"
    Config = BadConfig

    def mutate(self, ctx):
        if ctx.candidate_id != self.config.victim:
            knobs = Knobs(KnobsConfig(max_changes=1, knobs=[
                {"file": "config.yaml", "key": "level", "range": [0, 6], "step": 1}]))
            return knobs.mutate(ctx)
        (ctx.workdir / "config.yaml").write_text("level: 6\\nstyle: plain\\n")
        return bad(self.config.kind, self.config.size,
                   lambda s: Mutation(description="huge", details={"blob": s}))


class BadGate(GateOperator):
    name = "bad_gate"
    Config = BadConfig

    def gate(self, ctx):
        if ctx.candidate.id != self.config.victim:
            return ImprovesParent(ImprovesParent.Config()).gate(ctx)
        return bad(self.config.kind, self.config.size,
                   lambda s: GateDecision(admit=True, reason=s))


class BadRecord(RecordOperator):
    name = "bad_record"
    Config = BadConfig

    def record(self, ctx):
        if ctx.candidate.id != self.config.victim:
            return Notes(notes={"ok": True})
        return bad(self.config.kind, self.config.size, lambda s: Notes(notes={"blob": s}))


class BadSelect(SelectOperator):
    name = "bad_select"
    Config = BadConfig

    def select(self, ctx):
        if ctx.candidate_id == self.config.victim:
            return Selection(parent="c9999", reason="a parent that does not exist")
        return Best(Best.Config()).select(ctx)
'''


UNTRUSTED = '''"""A candidate's own mutate operator (run out of process) that misbehaves once."""
import os
import stat
from pydantic import BaseModel
from rsiframe.api import MutateOperator, Mutation


class Cfg(BaseModel):
    victim: str = ""
    kind: str = ""
    size: int = 0


class Bad(MutateOperator):
    name = "bad"
    Config = Cfg

    def mutate(self, ctx):
        level = 2 + ctx.rng.randrange(5)
        (ctx.workdir / "config.yaml").write_text("level: %d\\nstyle: plain\\n" % level)
        if ctx.candidate_id != self.config.victim:
            return Mutation(description="level %d" % level)
        kind, size = self.config.kind, self.config.size
        if kind in ("raw_garbage", "raw_huge"):  # write straight to the response pipe
            data = b"{not json" if kind == "raw_garbage" else b"[" + b"1," * (size // 2) + b"1]"
            for fd in range(3, 64):  # whichever of them is the response
                try:
                    mode = os.fstat(fd).st_mode
                    if stat.S_ISFIFO(mode) or stat.S_ISREG(mode):
                        os.write(fd, data)
                except OSError:
                    pass
            os._exit(0)
        if kind == "huge":
            return Mutation(description="huge", details={"blob": "x" * size})
        return None
'''


def _bad_operator_spec(
    t: Trial, slot: str, bad: dict[str, Any], untrusted: bool
) -> tuple[dict[str, Any], Callable[[Experiment], None] | None]:
    """The slot spec of a misbehaving operator, and what to write into the seed first."""
    if untrusted:  # the operator's code comes from the candidate's own tree

        def prepare(exp: Experiment) -> None:
            (exp.seed / "fixed" / "untrusted.py").write_text(UNTRUSTED)

        return {"operator": "candidate:fixed/untrusted.py:Bad", "config": {"config": bad}}, prepare
    ops = t.root / "ops.py"
    ops.write_text(OPS)
    cls = {"mutate": "BadMutate", "gate": "BadGate", "record": "BadRecord"}.get(slot)
    return {"operator": f"{ops}:{cls or 'BadSelect'}", "config": bad}, None


def _bad_result_problems(slot: str, victim: str, c: Candidate) -> list[str]:
    """The victim's bad mutate, gate or record result must be rejected, declined or noted."""
    problems = []
    if slot == "mutate" and (c.rejected is None or c.rejected.get("stage") != "mutate"):
        problems.append(f"{victim}: bad mutate result not rejected at mutate: {c.state}")
    if slot == "gate" and (
        c.decision is None
        or c.decision["admit"]
        or "gate operator failed" not in c.decision["reason"]
    ):
        problems.append(f"{victim}: bad gate result not declined as a failure: {c.decision}")
    if slot == "record" and not (c.notes or {}).get("error"):
        problems.append(f"{victim}: bad record result not noted as an error: {c.notes}")
    return problems


def _bad_operator_run(
    t: Trial, slot: str, kind: str, size: int = 0, untrusted: bool = False
) -> list[str]:
    victim = t.rng.choice(["c0001", "c0002"])
    spec, prepare = _bad_operator_spec(
        t, slot, {"victim": victim, "kind": kind, "size": size}, untrusted
    )
    # a benign script mutator whose children never repeat a tree: a victim rejected as a
    # sibling's duplicate would never reach the slot that misbehaves for it
    benign = None if slot == "mutate" else {"mode": "benign", "victims": []}
    exp, problems = _finished(t, prepare, slots={slot: spec}, params=benign)
    if problems and slot != "select":
        return problems
    loaded = load_run(exp.run_dir)
    st = loaded.state
    if slot == "select":  # a parent that does not exist: the run fails, naming select
        reason = (st.terminal or {}).get("reason", "")
        problems = [p for p in problems if "select operator chose" not in p]
        if loaded.run_state() != "failed" or "select" not in reason:
            problems.append(f"bad select: run {loaded.run_state()} ({reason})")
        return problems + sound(exp, state="failed")
    c = st.candidates.get(victim)
    if c is None:
        return [f"{victim} was never proposed"]
    problems = _bad_result_problems(slot, victim, c)
    size_now = (exp.run_dir / "events.jsonl").stat().st_size
    if size and size_now > size // 2:
        problems.append(f"an oversized result reached the archive ({size_now} bytes)")
    return problems + sound(exp)


def malformed_result(t: Trial) -> list[str]:
    """An operator (in-process, or a candidate's own out of process) returns a malformed result."""
    slot = t.rng.choice(["mutate", "gate", "record", "select", "untrusted mutate"])
    if slot == "untrusted mutate":
        return _bad_operator_run(t, "mutate", t.rng.choice(["none", "raw_garbage"]), untrusted=True)
    return _bad_operator_run(t, slot, t.rng.choice(["none", "dict", "string", "raise"]))


def oversized_result(t: Trial) -> list[str]:
    """An operator (in-process, or a candidate's own out of process) returns 12-24 MiB."""
    slot = t.rng.choice(["mutate", "gate", "record", "untrusted mutate"])
    size = t.rng.randint(12, 24) << 20
    if slot == "untrusted mutate":
        kind = t.rng.choice(["huge", "raw_huge"])
        return _bad_operator_run(t, "mutate", kind, size, untrusted=True)
    return _bad_operator_run(t, slot, "huge", size)


CORE_SCENARIOS: dict[str, Scenario] = {
    "kill_mutate": kill_mutate,
    "kill_evaluate": kill_evaluate,
    "kill_after_certificate": kill_after_certificate,
    "kill_gate_record": kill_gate_record,
    "torn_append": torn_append,
    "edit_evaluator": edit_evaluator,
    "outside_surface": outside_surface,
    "symlink_escape": symlink_escape,
    "git_hooks": git_hooks,
    "gitmodules": gitmodules,
    "read_sealed": read_sealed,
    "read_key": read_key,
    "forge_reward": forge_reward,
    "forged_event": forged_event,
    "replayed_certificate": replayed_certificate,
    "edited_score": edited_score,
    "task_edited": task_edited,
    "malformed_result": malformed_result,
    "oversized_result": oversized_result,
}
