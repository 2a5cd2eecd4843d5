#!/usr/bin/env python3
"""pyfix verifier (python3 stdlib only).

Loads the agent's module from ``$RSI_APP/<module>.py`` (a regular file, never a link)
and runs the hidden cases in ``cases.json`` next to this file, each compared with
``==`` and given CASE_SECONDS. Reward 1 iff every case passes; anything else (missing
module, syntax error, exception, endless loop, wrong answer) gives 0 with the reason
printed. The reward is always written.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import stat
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAX_MODULE_BYTES = 1 << 20
CASE_SECONDS = 2  # a case that runs longer (an endless loop) fails


class CaseTimeout(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise CaseTimeout


def _as_tuple_pairs(value: object) -> object:
    """JSON has no tuples: compare lists of pairs as lists of lists."""
    if isinstance(value, (list, tuple)):
        return [_as_tuple_pairs(v) for v in value]
    return value


def verdict(app: Path) -> tuple[int, str]:
    spec = json.loads((HERE / "cases.json").read_text())
    module_path = app / f"{spec['module']}.py"
    try:
        st = os.lstat(module_path)
    except FileNotFoundError:
        return 0, f"no module at {module_path}"
    if not stat.S_ISREG(st.st_mode):
        return 0, f"{module_path} is not a regular file"
    if st.st_size > MAX_MODULE_BYTES:
        return 0, f"{module_path} is too large"
    sys.dont_write_bytecode = True
    loader = importlib.util.spec_from_file_location(spec["module"], module_path)
    module = importlib.util.module_from_spec(loader)  # type: ignore[arg-type]
    try:
        loader.loader.exec_module(module)  # type: ignore[union-attr]
        fn = getattr(module, spec["function"])
    except BaseException as exc:  # the candidate's code: any failure is a 0
        return 0, f"cannot load {spec['function']}: {type(exc).__name__}: {exc}"
    signal.signal(signal.SIGALRM, _alarm)
    for i, (args, expected) in enumerate(spec["cases"]):
        signal.alarm(CASE_SECONDS)
        try:
            got = fn(*args)
        except CaseTimeout:
            return 0, f"case {i}: took longer than {CASE_SECONDS} s"
        except BaseException as exc:
            return 0, f"case {i}: raised {type(exc).__name__}"
        finally:
            signal.alarm(0)
        if _as_tuple_pairs(got) != expected:
            return 0, f"case {i}: wrong answer"
    return 1, f"all {len(spec['cases'])} cases pass"


def main() -> int:
    app = Path(os.environ.get("RSI_APP", "/app"))
    logs = Path(os.environ.get("RSI_LOGS", "/logs"))
    try:
        reward, reason = verdict(app)
    except Exception as exc:  # a verifier error is a 0, never a crash without a reward
        reward, reason = 0, f"verifier error: {type(exc).__name__}: {exc}"
    print(reason)
    (logs / "verifier").mkdir(parents=True, exist_ok=True)
    (logs / "verifier" / "reward.txt").write_text(str(reward))
    return 0


if __name__ == "__main__":
    sys.exit(main())
