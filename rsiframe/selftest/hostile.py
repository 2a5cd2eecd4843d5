"""Integrity scenarios of the security review (issue 10): a root host, linked answers,
hostile files, hostile text, resource exhaustion, YAML bombs and a truncated archive.

:data:`HOSTILE_SCENARIOS` is listed in :mod:`rsiframe.selftest.catalog` beside the
original ones, judged the same way: a list of problems, empty when the trial passed.
"""

from __future__ import annotations

import json
import site
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from rsiframe.archive.loader import load_run
from rsiframe.archive.log import get_artifact, get_json
from rsiframe.sandbox.bwrap import Mount, make_sandbox
from rsiframe.selftest.common import (
    KILLED,
    CertifiedTask,
    Trial,
    attack,
    certified_tasks,
    check_exit,
    one_line,
    sound,
)
from rsiframe.selftest.experiment import ROOT_ATTACK, Experiment

PLANTED = "rsiframe-selftest-planted.pth"


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def attack_lines(exp: Experiment, prefix: str) -> list[str]:
    """Every output line starting with ``prefix``: in the events (a mutation's output) and
    in each certified task's agent stdout."""
    lines: list[str] = []
    for raw in (exp.run_dir / "events.jsonl").read_text().splitlines():
        for text in _strings(json.loads(raw).get("data")):
            lines += [x for x in text.splitlines() if x.startswith(prefix)]
    loaded = load_run(exp.run_dir)
    for c in loaded.state.candidates.values():
        for tries in c.attempts.values():
            for a in tries:
                if a.record is None:
                    continue
                for digest in a.record.predicate.trajectories.values():
                    traj = get_json(exp.run_dir, digest)
                    ref = traj.get("artifacts", {}).get("agent.stdout")
                    if ref:
                        out = get_artifact(exp.run_dir, ref).decode(errors="replace")
                        lines += [x for x in out.splitlines() if x.startswith(prefix)]
    return lines


def _planted() -> list[Path]:
    """``.pth`` files the attack planted in the host's Python (removed: they are evidence)."""
    dirs = dict.fromkeys([sysconfig.get_paths()["purelib"], *site.getsitepackages()])
    found = [Path(d) / PLANTED for d in dirs if (Path(d) / PLANTED).exists()]
    for p in found:
        p.unlink()
    return found


# -- item 1: escape from every sandbox as root ---------------------------------------------

#: the mount layouts of the sandboxes a candidate does not reach through the tiny run
_LAYOUTS = {
    "verifier": [("app", "/app", True), ("tests", "/tests", False), ("v", "/logs/verifier", True)],
    "build": [("data", "/build/data", False), ("out", "/build/out", True)],
    "model server": [("models", "/models", False), ("serve", "/serve", True)],
    "operator": [("lib", "/rsi/lib", False), ("src", "/rsi/src", False), ("w", "/rsi/work", True)],
}


def _direct(t: Trial) -> list[str]:
    """The attack from the verifier, build, model-server and operator layouts, and from a
    task environment's set-up step (namespace-local root), on the evaluator's sandbox."""
    sb = make_sandbox(t.sandbox)
    lines = []
    kinds = list(_LAYOUTS) + (["setup"] if getattr(sb, "kind", "") == "bwrap" else [])
    for kind in kinds:
        mounts = []
        for name, inside, writable in _LAYOUTS.get(kind, _LAYOUTS["verifier"]):
            host = t.root / "direct" / kind.replace(" ", "-") / name
            host.mkdir(parents=True, exist_ok=True)
            mounts.append(Mount(host, inside, writable))
        code = ROOT_ATTACK + f"\nroot_attack({kind!r}, allow_ns_caps={kind == 'setup'})\n"
        res = sb.run(
            [sys.executable, "-c", code],
            mounts=mounts,
            cwd=mounts[-1],
            env={},
            timeout=60,
            setup_root=kind == "setup",
        )
        out = res.stdout.decode(errors="replace")
        lines += [x for x in out.splitlines() if x.startswith("ATTACK root_escape")]
        if not res.ok:
            lines.append(f"ATTACK root_escape {kind} did not run: {res.stderr[-200:]!r}")
    return lines


def root_escape(t: Trial) -> list[str]:
    """As root, a candidate tries remount, umount, mknod and .pth planting from every sandbox."""
    try:
        exp, res = attack(t, {"mode": "root_escape"})
        problems, ok = check_exit(res, "run")
        lines = attack_lines(exp, "ATTACK root_escape") if ok else []
        lines += _direct(t)
    finally:
        planted = _planted()
    problems += [f"a .pth file was planted in the host's Python: {p}" for p in planted]
    seen = {x.split()[2] for x in lines if len(x.split()) > 2}
    for kind in ("mutation", "agent", "verifier", "build", "model", "operator"):
        if kind not in seen:
            problems.append(f"the attack never ran from the {kind} sandbox")
    problems += sorted({x[:300] for x in lines if "LEAKED" in x or "did not run" in x})
    return problems + (sound(exp) if ok else [])


# -- item 2: the agent links its answer file to the tests ---------------------------------


def linked_answer(t: Trial) -> list[str]:
    """The agent links its answer file to the tests (/tests, ../tests, hard, a late process)."""
    variant = t.rng.choice(["absolute", "relative", "hard", "late"])
    exp, res = attack(t, {"mode": "link_answer", "variant": variant})
    return linked_answer_problems(exp, res, variant)


def linked_answer_problems(
    exp: Experiment, res: subprocess.CompletedProcess[str], variant: str
) -> list[str]:
    """The run of a linking agent: every certified trial of it names what was removed."""
    problems, ok = check_exit(res, "run")
    if not ok:
        return problems
    planted = attack_lines(exp, "ATTACK link_answer")
    if not planted:
        problems.append("the linking agent never ran")
    # every certified trial of a linking agent names what was removed from its /app
    want = {"vlogs", "tests-link"} | (
        {"answer.txt"} if variant in ("absolute", "relative") else set()
    )
    for t in certified_tasks(exp):
        ref = t.trajectory.get("artifacts", {}).get("agent.stdout")
        out = get_artifact(exp.run_dir, ref).decode() if ref else ""
        if "ATTACK link_answer" not in out:
            continue
        removed = {r["path"] for r in t.trajectory.get("app_removed", [])}
        if not want <= removed:
            problems.append(
                f"{t.where}: links out of /app not removed and recorded: {sorted(want - removed)}"
            )
    return problems[:5] + sound(exp)


# -- item 10: resource limits of agent and verifier -----------------------------------------

#: the limits the scenario's tasks declare (task.toml ``[rsiframe]``)
LIMITS = {"memory_mb": 512, "pids": 64, "tmp_mb": 16, "app_mb": 32, "artifacts_mb": 2}


#: what ends each variant's agent (the ``logs`` variant runs to its end, its logs dropped)
ENDED_BY = {
    "fork": "limit of 64 processes",
    "memory": "memory limit of 512 MiB",
    "app": "app grew past 32 MiB",
}


def exhaust(t: Trial) -> list[str]:
    """The agent fills /tmp and its logs, and forks 150 processes, takes 768 MiB or floods /app."""
    variant = t.rng.choice(["fork", "memory", "app", "logs"])
    exp = _limited_experiment(t, variant)
    problems, ok = check_exit(exp.run(), "run")
    if not ok:
        return problems
    seen = 0
    for done in certified_tasks(exp):
        ref = done.trajectory.get("artifacts", {}).get("agent.stdout")
        out = get_artifact(exp.run_dir, ref).decode() if ref else ""
        if "ATTACK exhaust" in out:
            seen += 1
            problems += _past_limits(done, variant, out)
    if not seen:
        problems.append("the exhausting agent never ran")
    stored = sum(p.stat().st_size for p in (exp.run_dir / "artifacts").rglob("*") if p.is_file())
    if stored > 24 << 20:
        problems.append(f"the run's artifacts grew to {stored >> 20} MiB")
    return problems[:6] + sound(exp)


def _limited_experiment(t: Trial, variant: str) -> Experiment:
    """The exhausting agent's experiment, whose tasks declare :data:`LIMITS`."""
    victims = t.rng.sample(["c0001", "c0002", "c0003"], t.rng.randint(1, 2))
    params = {"mode": "exhaust", "variant": variant, "victims": victims, "level": 0}
    exp = t.experiment(generations=2, children=2, params=params)
    table = "\n[rsiframe]\n" + "".join(f"{k} = {v}\n" for k, v in LIMITS.items())
    for toml in exp.tasks.glob("*/task.toml"):
        toml.write_text(toml.read_text() + table)
    return exp


def _past_limits(done: CertifiedTask, variant: str, out: str) -> list[str]:
    """What an exhausting agent (its stdout ``out``) got past the limits in one task."""
    traj, where = done.trajectory, done.where
    problems = []
    if "tmp blocked" not in out or "memory GOT" in out:
        problems.append(f"{where}: /tmp or memory not limited: {out[:120]!r}")
    error = traj.get("error") or ""
    if variant in ENDED_BY and ENDED_BY[variant] not in error:
        problems.append(f"{where}: {variant} not ended by its limit: {error!r}")
    # a limit held by an rlimit only is said; with cgroups it never is
    fallback = traj.get("agent", {}).get("limits_fallback")
    if fallback:
        problems.append(f"{where}: limits without a cgroup: {fallback}")
    if variant == "logs" and len(traj.get("artifacts_dropped", [])) < 10:
        problems.append(f"{where}: agent logs stored past the artifacts cap")
    return problems


# -- item 6: a candidate's file can hang the framework --------------------------------------

DATA_GEN = """import json, os
with open(os.path.join(os.environ["RSI_DATASET_OUT"], "train.jsonl"), "w") as f:
    f.write(json.dumps({"prompt": "1+1=", "completion": "2"}) + "\\n")
"""


def fifo_trap(t: Trial) -> list[str]:
    """The seed's train step writes config.json or train_metrics.json as a named pipe."""
    name = t.rng.choice(["config.json", "train_metrics.json"])
    exp = t.experiment(generations=1, children=1)
    (exp.seed / "data").mkdir()
    (exp.seed / "data" / "gen.py").write_text(DATA_GEN)
    (exp.seed / "trainer").mkdir()
    out = '"$RSI_MODEL_OUT"'
    config = '{"model_type": "gpt2"}'
    (exp.seed / "trainer" / "train.sh").write_text(
        f"touch {out}/model.safetensors\n"
        + (f"mkfifo {out}/config.json\n" if name == "config.json" else "")
        + (f"echo '{config}' > {out}/config.json\nmkfifo {out}/train_metrics.json\n")
        * (name != "config.json")
    )
    exp.data["evaluator"]["config"]["build"] = {
        "data": "python3 gen.py",
        "train": "sh train.sh",
        "serve": {"backend": "transformers", "start_timeout_s": 120},
    }
    exp.write_recipe()
    res = exp.run()
    problems = one_line(res, "run")
    loaded = load_run(exp.run_dir)
    seed = loaded.state.candidates.get("c0000")
    rejected = (seed.rejected or {}) if seed else {}
    if rejected.get("stage") != "train" or "special files" not in str(rejected):
        problems.append(f"the seed's FIFO was not rejected at the train step: {rejected}")
    for cmd in ("status", "verify"):
        r = exp.cli(cmd, str(exp.run_dir))
        problems += one_line(r, cmd)
        if cmd == "verify" and r.returncode != 0:
            problems.append(f"verify exit {r.returncode}: {r.stdout[-300:]}")
    return problems


# -- item 8: text from a candidate crashes the run and status -------------------------------


def hostile_text(t: Trial) -> list[str]:
    """Mutation output full of Rich markup, a file name that is not UTF-8; status and resume."""
    # every child prints the markup; one of the first two, which always start before the
    # kill, also writes the bad name. A third generation: with 4 candidates in flight the
    # resume abandons up to 3 mutations the kill cut, and later children take their place
    victims = [f"c{i:04d}" for i in range(1, 11)]
    bad = t.rng.choice(victims[:2])
    params = {"mode": "hostile_text", "victims": victims, "bad_name": bad, "level": 0}
    exp = t.experiment(generations=3, children=2, params=params)
    # not --quiet: the live progress renders every description and reason
    args = ("run", str(exp.recipe), "--out", str(exp.run_dir))
    killed = exp.cli(*args, fault="kill:after:candidate_rejected:1")
    problems = one_line(killed, "run")
    if killed.returncode != KILLED:
        return [*problems, f"the run never rejected the bad name (exit {killed.returncode})"]
    res = exp.resume()
    more, ok = check_exit(res, "resume")
    problems += more
    if not ok:
        return problems
    loaded = load_run(exp.run_dir)
    c = loaded.state.candidates[bad]
    reasons = " ".join((c.rejected or {}).get("reasons", []))
    if (c.rejected or {}).get("stage") != "guardrail" or "not valid UTF-8" not in reasons:
        problems.append(f"{bad} with a non-UTF-8 file name: {c.state}, {c.rejected}")
    status = exp.cli("status", str(exp.run_dir))
    problems += one_line(status, "status")
    if status.returncode != 0 or "[/][/][/]" not in status.stdout:
        problems.append(f"status: exit {status.returncode}, {status.stderr.strip()[-200:]!r}")
    return problems + sound(exp)


# -- low: YAML alias bombs; truncating the events file ---------------------------------------


def _bomb(levels: int) -> str:
    """A YAML list of 10**levels leaves in a few lines, built from aliases."""
    rows = ['  l0: &l0 ["x","x","x","x","x","x","x","x","x","x"]']
    rows += [f"  l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(rows)


def yaml_bomb(t: Trial) -> list[str]:
    """A recipe and a knob space built from YAML aliases (10**5 leaves): refused, named."""
    problems = []
    exp = t.experiment(generations=1, children=2)
    levels = 5
    text = exp.recipe.read_text()
    where = t.rng.choice(["slots.mutate.config.knobs", "description"])
    if where == "description":
        bombed = text + "x-bomb:\n" + _bomb(levels) + f"\ndescription: *l{levels - 1}\n"
    else:
        bombed = text.replace(
            "  mutate:\n",
            "  mutate:\n    bomb:\n" + _bomb(levels).replace("  l", "      l") + "\n",
            1,
        )
    (exp.root / "bomb.yaml").write_text(bombed)
    res = exp.cli("recipe", "check", str(exp.root / "bomb.yaml"))
    problems += one_line(res, "recipe check")
    if res.returncode != 2 or "aliases" not in res.stderr:
        problems.append(f"a recipe bomb ({where}) was not refused: {res.stderr.strip()[-200:]!r}")
    # a knob space in the candidate's own tree, read by the knobs mutator
    (exp.seed / "fixed" / "knobs.yaml").write_text(
        "bomb:\n" + _bomb(levels) + f"\nknobs: *l{levels - 1}\n"
    )
    exp.data["slots"]["mutate"]["config"] = {"space": "fixed/knobs.yaml", "max_changes": 1}
    exp.write_recipe()
    more, ok = check_exit(exp.run(), "run")
    problems += more
    if not ok:
        return problems
    loaded = load_run(exp.run_dir)
    for c in loaded.state.candidates.values():
        if c.id == "c0000":
            continue
        why = " ".join((c.rejected or {}).get("reasons", []))
        if (c.rejected or {}).get("stage") != "mutate" or "aliases" not in why:
            problems.append(f"{c.id}: a knob-space bomb not refused at mutate: {c.rejected}")
    return problems + sound(exp)


def truncated_archive(t: Trial) -> list[str]:
    """The events are cut back to before the sealed evaluation; the recorded head says so."""
    exp = t.experiment(generations=1, children=2)
    res = exp.run()
    problems, ok = check_exit(res, "run")
    if not ok:
        return problems
    heads = [x.split()[-1] for x in res.stdout.splitlines() if x.startswith("chain head: ")]
    status = exp.cli("status", str(exp.run_dir), "--json")
    if not heads or status.returncode != 0 or json.loads(status.stdout).get("head") != heads[0]:
        return [*problems, f"run and status do not print the same chain head: {heads}"]
    head = heads[0]
    ok_now = exp.cli("verify", str(exp.run_dir), "--head", head)
    if ok_now.returncode != 0:
        problems.append(f"verify --head of the untouched run: exit {ok_now.returncode}")
    lines = (exp.run_dir / "events.jsonl").read_bytes().splitlines(keepends=True)
    cut = next(
        i
        for i, x in enumerate(lines)
        if json.loads(x)["type"] == "evaluation_started"
        and json.loads(x)["data"]["split"] == "sealed"
    )
    cut -= t.rng.randint(0, 3)
    (exp.run_dir / "events.jsonl").write_bytes(b"".join(lines[:cut]))
    res = exp.cli("verify", str(exp.run_dir), "--head", head, "--json")
    problems += one_line(res, "verify --head")
    report = json.loads(res.stdout) if res.stdout.strip().startswith("{") else {}
    failed = [c for c in report.get("checks", []) if c["status"] == "failed"]
    if res.returncode != 1 or [c["name"] for c in failed] != ["head"]:
        problems.append(f"verify --head missed the truncation: exit {res.returncode}, {failed}")
    elif "truncated" not in " ".join(failed[0]["problems"]):
        problems.append(f"the head check does not say truncated: {failed[0]['problems']}")
    return problems


HOSTILE_SCENARIOS = {
    "root_escape": root_escape,
    "linked_answer": linked_answer,
    "exhaust": exhaust,
    "fifo_trap": fifo_trap,
    "hostile_text": hostile_text,
    "yaml_bomb": yaml_bomb,
    "truncated_archive": truncated_archive,
}
