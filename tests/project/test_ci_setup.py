"""The set-up scripts on a fresh machine: the Debian mirror read from whichever apt source
files exist (a fresh Debian 12 has only a deb822 file), apt's lock waited for, and the
uncached base-image path (e2e, under its own image name so the shared one is kept)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.aptsources import DEB822, MIRROR
from tests.support.paths import CI_SETUP, REPO

APT = REPO / "scripts" / "apt-get.sh"


def _mirror(etc: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(CI_SETUP), "mirror"],
        capture_output=True,
        text=True,
        env={**os.environ, "RSIFRAME_APT_ETC": str(etc)},
        timeout=30,
    )


@pytest.mark.parametrize(
    "files",
    [
        {"sources.list.d/debian.sources": DEB822},
        {"sources.list": f"deb {MIRROR} bookworm main\n"},
        {"sources.list.d/mirror.list": f"# a comment\ndeb [arch=amd64] {MIRROR}/ bookworm main\n"},
    ],
    ids=["deb822-only", "sources.list-only", "dot-list-only"],
)
def test_the_mirror_is_read_from_whichever_source_files_exist(
    tmp_path: Path, files: dict[str, str]
) -> None:
    (tmp_path / "sources.list.d").mkdir()
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    res = _mirror(tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == MIRROR


def test_no_configured_mirror_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "other.list.disabled").write_text(f"deb {MIRROR} x main\n")
    res = _mirror(tmp_path)
    assert res.returncode == 1
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "no Debian mirror configured" in lines[0], res.stderr


LOCKED_APT = """#!/bin/bash
# a stand-in apt-get: the lock is held for the first {n} calls
count={counter}
n=$(cat "$count" 2>/dev/null || echo 0); echo $((n + 1)) > "$count"
echo "$@" >> {counter}.args
if [ "$n" -lt {n} ]; then
  echo "E: Could not get lock /var/lib/apt/lists/lock." \
    "It is held by process 4242 (unattended-upgr)" >&2
  exit 100
fi
echo done
"""


def _stand_in(tmp_path: Path, held_for: int) -> Path:
    script = tmp_path / "apt-get"
    script.write_text(LOCKED_APT.format(n=held_for, counter=tmp_path / "count"))
    script.chmod(0o755)
    return script


def _apt(stand_in: Path, timeout_s: int, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "RSIFRAME_APT_GET": str(stand_in),
        "RSIFRAME_APT_LOCK_TIMEOUT": str(timeout_s),
    }
    return subprocess.run([str(APT), *args], capture_output=True, text=True, env=env, timeout=60)


def test_apt_waits_for_a_held_lock_and_says_so_once(tmp_path: Path) -> None:
    res = _apt(_stand_in(tmp_path, held_for=2), 30, "update", "-qq")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "done"
    assert res.stderr.count("waiting for the apt lock") == 1
    assert "held by process 4242 (unattended-upgr)" in res.stderr
    args = (tmp_path / "count.args").read_text().splitlines()
    assert len(args) == 3 and all("DPkg::Lock::Timeout=30" in a for a in args)


def test_apt_gives_up_on_a_lock_held_past_its_bound(tmp_path: Path) -> None:
    res = _apt(_stand_in(tmp_path, held_for=1000), 3, "install", "-y", "bubblewrap")
    assert res.returncode == 100
    assert "Could not get lock" in res.stderr


def test_other_apt_errors_are_not_retried(tmp_path: Path) -> None:
    script = tmp_path / "apt-get"
    script.write_text(
        f"#!/bin/bash\necho x >> {tmp_path / 'n'}\n"
        "echo 'E: Unable to locate package nope' >&2\nexit 100\n"
    )
    script.chmod(0o755)
    res = _apt(script, 30, "install", "nope")
    assert res.returncode == 100 and "Unable to locate package" in res.stderr
    assert (tmp_path / "n").read_text().count("x") == 1


SCRIPTS = [
    *sorted((REPO / "scripts").glob("*.sh")),
    *sorted((REPO / ".ci").iterdir()),
    REPO / "Makefile",
]
IMPORT = re.compile(r"from (rsiframe[\w.]*) import (\w+)|python3? -m (rsiframe[\w.]*)")


def test_every_rsiframe_name_the_scripts_import_exists() -> None:
    """The set-up scripts run Python snippets against the package; a module that moved in a
    restructuring must not surface only on a fresh machine (CI failed so once)."""
    found = []
    for script in SCRIPTS:
        for match in IMPORT.finditer(script.read_text()):
            module, name, main = match.groups()
            target = importlib.import_module(module or main)
            found.append(match.group(0))
            if name:
                assert hasattr(target, name) or importlib.util.find_spec(f"{module}.{name}"), (
                    f"{script.name}: {match.group(0)}"
                )
    assert len(found) >= 2  # ci-setup's Harbor venv and the image preflight
