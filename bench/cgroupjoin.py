"""What a sandboxed command pays to join its cgroups, with and without the keeper.

Each round makes a command's cgroups as a run does (:class:`RunCgroups`: pids and memory),
starts a child, times writing it into both ``cgroup.procs`` files (what the command's
``/bin/sh`` step does) and removes the cgroups; rounds are ``--pause`` ms apart, as
commands are (an agent's and a verifier's run in between). "cold": the keeper is off
(``RSIFRAME_CGROUP_WARM=0``), as before stop 41; "warm": on (``rsiframe/sandbox/
cgroupwarm.py``). Also the keeper's own CPU time per second while it runs.

    python bench/cgroupjoin.py                  # 40 rounds each, 30 ms apart
    python bench/cgroupjoin.py --rounds 100 --pause 50 --json

Needs root and cgroup v1 pids and memory hierarchies (this machine, CI).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from rsiframe.sandbox import cgroups


def _round() -> float:
    made = cgroups.RunCgroups(pids=64, memory_mb=256)
    child = subprocess.Popen(["sleep", "5"])
    try:
        t0 = time.perf_counter()
        for procs in made.joins():
            procs.write_text(str(child.pid))
        return (time.perf_counter() - t0) * 1000
    finally:
        child.kill()
        child.wait()
        made.remove()


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(rounds: int, pause_s: float, warm: bool) -> dict[str, float]:
    os.environ["RSIFRAME_CGROUP_WARM"] = "1" if warm else "0"
    cgroups.keeper.close()
    _round()  # the keeper (when on) is started by the first command, as in a run
    times = []
    for _ in range(rounds):
        time.sleep(pause_s)
        times.append(_round())
    times.sort()
    row = {
        "median_ms": statistics.median(times),
        "p90_ms": times[int(0.9 * (len(times) - 1))],
        "max_ms": times[-1],
    }
    proc = cgroups.keeper.proc
    if warm and proc is not None:
        t0, c0 = time.monotonic(), _cpu_s(proc.pid)
        for _ in range(20):
            cgroups.keeper.poke(cgroups.keeper.path.parent)  # type: ignore[union-attr]
            time.sleep(0.1)
        row["keeper_cpu_pct"] = (_cpu_s(proc.pid) - c0) / (time.monotonic() - t0) * 100
    cgroups.keeper.close()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--pause", type=float, default=30.0, help="ms between two commands")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    for controller in ("pids", "memory"):
        if isinstance(cgroups.root(controller), str):
            why = cgroups.root(controller)
            raise SystemExit(f"no cgroup v1 {controller} hierarchy here: {why}")
    rows = {}
    for warm in (False, True, False, True):  # alternated: the host's load moves
        key = "warm" if warm else "cold"
        rows.setdefault(key, []).append(measure(args.rounds, args.pause / 1000, warm))
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"rows": rows, "load": load, "pause_ms": args.pause}))
        return
    print(f"a command joining its pids and memory cgroups, {args.pause:.0f} ms apart")
    print(f"(load {load:.2f})")
    print(f"{'keeper':>7} {'median ms':>10} {'p90 ms':>8} {'max ms':>8} {'keeper CPU %':>13}")
    for key, runs in rows.items():
        for r in runs:
            cpu = f"{r['keeper_cpu_pct']:.1f}" if "keeper_cpu_pct" in r else "-"
            ms = f"{r['median_ms']:>10.3f} {r['p90_ms']:>8.3f} {r['max_ms']:>8.2f}"
            print(f"{key:>7} {ms} {cpu:>13}")


if __name__ == "__main__":
    main()
