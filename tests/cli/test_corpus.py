"""The malformed-input corpus: every bad recipe, task set and archive gets one clear line.

``tests/corpus/cases.yaml`` lists the cases: recipes (``recipes/*.yaml``), task sets
(``tasksets/<case>/recipe.yaml`` over a broken ``tasks/``), and archives (mutations of a
real tiny run, described in the manifest). For each command a case names, the CLI must
exit with the expected code, write exactly one line to stderr containing the expected
fragment, never a traceback, and leave every file of an existing run folder unchanged.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from rsiframe.certs.signing import Signer
from rsiframe.util.digest import canonical_json, sha256_bytes
from tests.support.cli import cli

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
MANIFEST = yaml.safe_load((CORPUS / "cases.yaml").read_text())
CASES: list[dict[str, Any]] = MANIFEST["cases"]


def digest(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "run.lock"
    }


def assert_one_line(res: Any, code: int, fragment: str, what: str) -> None:
    err = res.stderr.strip()
    assert "Traceback" not in res.stderr, f"{what}: traceback\n{res.stderr}"
    assert res.exit_code == code, f"{what}: exit {res.exit_code}, expected {code}: {err}"
    assert len(err.splitlines()) == 1, f"{what}: stderr is not one line:\n{err}"
    assert fragment in err, f"{what}: {fragment!r} not in {err!r}"


# -- the archive mutations --------------------------------------------------------------


def _events(run: Path) -> list[bytes]:
    return (run / "events.jsonl").read_bytes().split(b"\n")[:-1]


def _put_events(run: Path, lines: list[bytes]) -> None:
    (run / "events.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))


def _rechain(lines: list[bytes]) -> list[bytes]:
    out, prev = [], "0" * 64
    for i, line in enumerate(lines):
        ev = json.loads(line)
        ev["seq"], ev["prev"] = i, prev
        new = canonical_json(ev)
        prev = sha256_bytes(new)
        out.append(new)
    return out


def _index(lines: list[bytes], at: int | str) -> int:
    """A line number, or the first event of a type (``"type:candidate_gated"``)."""
    if isinstance(at, int):
        return at if at >= 0 else len(lines) + at
    kind = at.split(":", 1)[1]
    return next(i for i, line in enumerate(lines) if json.loads(line)["type"] == kind)


def mutate(run: Path, m: dict[str, Any]) -> None:
    op = m["op"]
    if op == "truncate":
        path = run / m["file"]
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * m["fraction"])])
    elif op == "flip_byte":
        lines = _events(run)
        i = _index(lines, m["line"])
        b = bytearray(lines[i])
        b[m["offset"]] ^= m.get("mask", 0x01)
        lines[i] = bytes(b)
        _put_events(run, lines)
    elif op == "delete_line":
        lines = _events(run)
        del lines[_index(lines, m["line"])]
        _put_events(run, lines)
    elif op == "swap_lines":
        lines = _events(run)
        a, b = (_index(lines, x) for x in m["lines"])
        lines[a], lines[b] = lines[b], lines[a]
        _put_events(run, lines)
    elif op == "replace_line":
        lines = _events(run)
        lines[_index(lines, m["line"])] = m["text"].encode()
        _put_events(run, lines)
    elif op == "edit_event":  # change one field of an event's data, then fix the chain
        lines = _events(run)
        i = _index(lines, m["line"])
        ev = json.loads(lines[i])
        for key, value in m["set"].items():
            if value is None:
                ev["data"].pop(key, None)
            else:
                ev["data"][key] = value
        if "type" in m:
            ev["type"] = m["type"]
        lines[i] = canonical_json(ev)
        _put_events(run, _rechain(lines) if m.get("rechain", True) else lines)
    elif op == "wrong_key":
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        (run / "pubkey.pem").write_bytes(Signer(Ed25519PrivateKey.generate()).public.pem())
    elif op == "write_file":
        (run / m["file"]).write_text(m["text"])
    elif op == "delete":
        target = run / m["file"]
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()
    else:
        raise AssertionError(f"unknown corpus mutation {op!r}")


# -- the tests --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One real finished run of the corpus fixture (and its key folder), copied by each case."""
    base = tmp_path_factory.mktemp("corpus")
    out, keys = base / "run", base / "keys"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RSIFRAME_KEY_DIR", str(keys))
        res = cli("run", CORPUS / "fixture" / "recipe.yaml", "--out", out, "--quiet")
    assert res.exit_code == 0, res.stderr
    return out, keys


def test_the_corpus_is_large_enough() -> None:
    kinds = [c["kind"] for c in CASES]
    assert len(CASES) >= 30
    assert {"recipe", "taskset", "archive"} <= set(kinds)
    assert len({c["name"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c["kind"] != "archive"], ids=lambda c: c["name"]
)
def test_bad_input(case: dict[str, Any], tmp_path: Path) -> None:
    path = CORPUS / case["path"]
    assert path.exists(), path
    code, fragment = case["exit"], case["message"]
    assert_one_line(cli("recipe", "check", path), code, fragment, "recipe check")
    out = tmp_path / "never"
    assert_one_line(cli("run", path, "--out", out, "--quiet"), code, fragment, "run")
    assert not out.exists(), "a run folder was created for bad input"


@pytest.mark.parametrize(
    "case", [c for c in CASES if c["kind"] == "archive"], ids=lambda c: c["name"]
)
def test_bad_archive(
    case: dict[str, Any],
    tiny_run: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run[0], run, symlinks=True)
    monkeypatch.setenv("RSIFRAME_KEY_DIR", str(tiny_run[1]))
    for m in case["mutations"]:
        mutate(run, m)
    before = digest(run)
    for cmd, (code, fragment) in case["expect"].items():
        res = cli(cmd, run)
        assert_one_line(res, code, fragment, cmd)
        assert digest(run) == before, f"{cmd} changed the run folder"
