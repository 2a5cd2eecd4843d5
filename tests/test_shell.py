"""rsiframe.shell: a researcher's command in a candidate's work folder (script, validate):
its folders and variables, a rebuilt environment, and why it failed. Real bubblewrap where
it works (CI requires it), the plain process runner otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.sandbox.bwrap import SandboxOptions, bwrap_works
from rsiframe.shell import argv_of, failure, run_command, tail

MODES = ["process", *(["bwrap"] if bwrap_works() else [])]


@pytest.mark.parametrize("mode", MODES)
def test_the_command_sees_its_work_folder_and_inputs_by_variable(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work, inputs = tmp_path / "work", tmp_path / "in"
    work.mkdir()
    inputs.mkdir()
    (inputs / "rollout.json").write_text("{}")
    monkeypatch.setenv("PASSED_IN", "yes")
    monkeypatch.setenv("NOT_PASSED", "secret")
    options = SandboxOptions(sandbox=mode, pass_env=["PASSED_IN"], env={"EXTRA": "1"})
    command = (
        'echo "$RSI_WORKDIR $RSI_INPUTS $RSI_ROLLOUT $PASSED_IN $EXTRA ${NOT_PASSED:-unset}"'
        ' && cat "$RSI_ROLLOUT" && touch made.txt'
    )
    res, use = run_command(
        command, work, options=options, env={}, timeout=30, inputs=inputs,
        input_files={"RSI_ROLLOUT": "rollout.json"},
    )  # fmt: skip
    assert failure(res, 30, options) is None, tail(res)
    workdir, indir, rollout, passed, extra, not_passed = res.stdout.decode().split()[:6]
    assert rollout == f"{indir}/rollout.json" and (passed, extra, not_passed) == (
        "yes",
        "1",
        "unset",
    )
    if mode == "bwrap":  # the folders as the command sees them, not the host's
        assert (workdir, indir) == ("/rsi/work", "/rsi/in")
    assert (work / "made.txt").exists()
    assert use.isolation.split()[0] == use.requested == mode and use.passed_env == ["PASSED_IN"]


def test_why_a_command_failed(tmp_path: Path) -> None:
    options = SandboxOptions(sandbox="process", output_cap_bytes=1000)
    res, _ = run_command("exit 3", tmp_path, options=options, env={}, timeout=30)
    assert failure(res, 30, options) == "exited with 3"
    res, _ = run_command("sleep 5", tmp_path, options=options, env={}, timeout=0.5)
    assert failure(res, 0.5, options) == "timed out after 0.5s"
    res, _ = run_command("yes", tmp_path, options=options, env={}, timeout=30)  # a flood
    assert failure(res, 30, options) == "output exceeded 1000 bytes"


def test_a_string_is_a_shell_command_and_a_list_is_argv(tmp_path: Path) -> None:
    assert argv_of("echo $X") == ["sh", "-c", "echo $X"]
    assert argv_of(["echo", "$X"]) == ["echo", "$X"]
    options = SandboxOptions(sandbox="process")
    res, _ = run_command(["echo", "$X"], tmp_path, options=options, env={"X": "1"}, timeout=30)
    assert res.stdout.decode().strip() == "$X"  # no shell: no expansion
    long, _ = run_command("seq 1 3000", tmp_path, options=options, env={}, timeout=30)
    assert tail(long, 20).endswith("2999\n3000") and len(tail(long, 20)) == 20
