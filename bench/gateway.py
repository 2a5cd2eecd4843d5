"""The gateway's added latency per call, and throughput of concurrent calls through it.

Three processes: the scripted stub (a fixed short answer), the gateway (its own process,
as in a run: ledger fsynced per call, evidence written) and this client. The same chat
request is timed N times directly and through the gateway (sampled, temperature 1, so
every call is forwarded and metered, never served from the cache), each over one kept
HTTP connection; then ``--concurrency`` threads send calls through the gateway at once.

    python bench/gateway.py                 # 300 calls each way, 8 concurrent
    python bench/gateway.py --calls 1000 --json

Target (issue 29): the gateway adds at most 2 ms per call at the median plus the median
``fdatasync`` of the same disk, measured in the same run (the ledger line made durable
before an answer is handed out); both are printed, with the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from rsiframe.gateway.app import Gateway, Ledger
from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM
from rsiframe.recipe.models import ModelSpec

BODY = {
    "model": "p",
    "messages": [{"role": "user", "content": "fix the function, please"}],
    "temperature": 1.0,
    "max_tokens": 64,
}


def timed(client: httpx.Client, url: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = client.post(url, json=BODY)
        out.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200, r.text
    return out


def fdatasync_ms(n: int = 200) -> list[float]:
    """One small append made durable, n times, on the disk the ledger is on (the temp
    folder): the floor a fsynced ledger line adds to a call."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "probe"
        with path.open("ab") as f:
            out = []
            for _ in range(n):
                f.write(b"x" * 200 + b"\n")
                f.flush()
                t0 = time.perf_counter()
                os.fdatasync(f.fileno())
                out.append((time.perf_counter() - t0) * 1000)
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def child(kind: str, arg: str, concurrency: int, fsync: bool) -> None:
    """Serve the stub (kind "stub") or a gateway to the stub at ``arg`` ("gateway")."""
    if kind == "stub":
        stub = StubLLM(Script(answers=[Answer(content="def f(x):\n    return x\n", repeat=True)]))
        srv = ServerThread(stub.app).start()
        print(json.dumps({"url": srv.url}), flush=True)
        sys.stdin.read()  # until the parent closes it
        print(json.dumps(stub.stats.as_dict()), flush=True)
        return
    spec = ModelSpec.model_validate(
        {"base_url": arg, "model": "stub", "max_concurrency": concurrency}
    )
    with tempfile.TemporaryDirectory() as tmp:
        gw = Gateway({"p": spec}, Ledger(Path(tmp), fsync=fsync), environ={}).start()
        cpu0 = time.process_time()
        print(json.dumps({"url": gw.url, "token": gw.consumer("bench").token}), flush=True)
        sys.stdin.read()
        cpu = time.process_time() - cpu0  # the gateway process's CPU time while serving
        print(json.dumps({"calls": gw.ledger.totals.calls, "cpu_s": cpu}), flush=True)
        gw.stop()


def spawn(*argv: str) -> tuple[subprocess.Popen[str], dict]:
    p = subprocess.Popen(
        [sys.executable, __file__, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None
    return p, json.loads(p.stdout.readline())


def finish(p: subprocess.Popen[str]) -> dict:
    out, _ = p.communicate("", timeout=30)
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--no-fsync", action="store_true", help="ledger lines written, not fsynced (SIGKILL-safe)"
    )
    ap.add_argument("--child", nargs=2, metavar=("KIND", "ARG"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.concurrency, not args.no_fsync)
        return 0

    stub_proc, stub_info = spawn("--child", "stub", "-")
    gw_proc, gw_info = spawn(
        "--child",
        "gateway",
        stub_info["url"],
        "--concurrency",
        str(args.concurrency),
        *(["--no-fsync"] if args.no_fsync else []),
    )
    stub_url, gw_url, token = stub_info["url"], gw_info["url"], gw_info["token"]
    direct = httpx.Client(timeout=30)
    via = httpx.Client(timeout=30, headers={"Authorization": f"Bearer {token}"})
    timed(direct, stub_url + "/chat/completions", 20)  # warm up both paths
    timed(via, gw_url + "/chat/completions", 20)
    d = timed(direct, stub_url + "/chat/completions", args.calls)
    g = timed(via, gw_url + "/chat/completions", args.calls)
    sync = fdatasync_ms()
    load = os.getloadavg()[0]

    per_thread = max(1, args.calls // args.concurrency)
    clients = [
        httpx.Client(timeout=30, headers={"Authorization": f"Bearer {token}"})
        for _ in range(args.concurrency)
    ]
    threads = [
        threading.Thread(target=timed, args=(c, gw_url + "/chat/completions", per_thread))
        for c in clients
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    gw_done = finish(gw_proc)
    metered = gw_done["calls"]
    stub_requests = finish(stub_proc)["requests"]
    result = {
        "calls": args.calls,
        "direct_ms": {"p50": round(statistics.median(d), 3), "p99": round(pct(d, 0.99), 3)},
        "gateway_ms": {"p50": round(statistics.median(g), 3), "p99": round(pct(g, 0.99), 3)},
        "added_ms": {
            "p50": round(statistics.median(g) - statistics.median(d), 3),
            "p99": round(pct(g, 0.99) - pct(d, 0.99), 3),
        },
        "concurrent": {
            "threads": args.concurrency,
            "calls": per_thread * args.concurrency,
            "seconds": round(wall, 3),
            "calls_per_s": round(per_thread * args.concurrency / wall, 1),
        },
        "ledger_fsync": not args.no_fsync,
        # issue 29's target: added p50 <= 2 ms + the median fdatasync of this disk, this run
        "fdatasync_ms": {"p50": round(statistics.median(sync), 3), "p90": round(pct(sync, 0.9), 3)},
        "target_ms": round(2 + statistics.median(sync), 3),
        "load_1min": round(load, 2),
        # CPU the gateway spent per call (all threads): what the added latency
        # approaches on an idle machine, whatever the scheduler adds on a loaded one
        "gateway_cpu_ms_per_call": round(gw_done["cpu_s"] * 1000 / max(1, metered), 3),
        "metered_calls": metered,
        "stub_requests": stub_requests,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        a = result["added_ms"]
        print(f"direct  p50 {result['direct_ms']['p50']} ms  p99 {result['direct_ms']['p99']} ms")
        print(f"gateway p50 {result['gateway_ms']['p50']} ms  p99 {result['gateway_ms']['p99']} ms")
        f = result["fdatasync_ms"]
        print(f"added   p50 {a['p50']} ms  p99 {a['p99']} ms")
        print(
            f"fdatasync p50 {f['p50']} ms  p90 {f['p90']} ms: target added p50 <= "
            f"{result['target_ms']} ms (2 ms + the median fdatasync; load {result['load_1min']})"
        )
        print(f"gateway CPU per call {result['gateway_cpu_ms_per_call']} ms")
        c = result["concurrent"]
        print(
            f"{c['threads']} concurrent: {c['calls']} calls in {c['seconds']} s "
            f"= {c['calls_per_s']} calls/s; metered {metered}, stub saw {stub_requests}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
