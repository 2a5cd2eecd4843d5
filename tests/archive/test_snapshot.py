"""Resume starts from a signed snapshot of the fold; a snapshot that does not match is ignored."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rsiframe.archive.loader import load_run
from rsiframe.archive.snapshot import SNAPSHOT, encode_state, save_snapshot
from rsiframe.audit.verify import verify
from rsiframe.certs.signing import load_signer
from rsiframe.engine.loop import Engine
from rsiframe.errors import ArchiveCorrupt
from tests.support.mini import make_mini


def _finished(root: Path, children: int = 2) -> Path:
    """A finished run (1 generation), closed: it leaves a snapshot."""
    mini = make_mini(root, generations=1, children=children, sandbox="process")
    engine = Engine.create(mini.recipe, None, mini.run_dir())
    engine.drive()
    engine.close()
    return mini.run_dir()


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return _finished(tmp_path / "proj")


def _lines(run: Path) -> list[bytes]:
    return (run / "events.jsonl").read_bytes().splitlines(keepends=True)


def test_resume_folds_from_the_snapshot_to_the_same_state(run: Path) -> None:
    assert (run / SNAPSHOT).exists()
    full = load_run(run)
    fast = load_run(run, snapshot=True)
    assert encode_state(fast.state) == encode_state(full.state)
    assert fast.state.candidates == full.state.candidates  # the records compare equal too
    assert fast.events == full.events[-1:]  # nothing before the snapshot's event was read
    assert fast.notes == []


def test_a_snapshot_stays_valid_as_the_archive_grows(run: Path, tmp_path: Path) -> None:
    """A snapshot of the first k events, then the rest folded on top: the full fold."""
    lines = _lines(run)
    k = len(lines) // 2
    early = tmp_path / "early"
    shutil.copytree(run, early)
    (early / "events.jsonl").write_bytes(b"".join(lines[:k]))
    st = load_run(early).state
    save_snapshot(early, st, load_signer(st.run_id, st.verifier.keyid))
    shutil.copy(early / SNAPSHOT, run / SNAPSHOT)
    fast = load_run(run, snapshot=True)
    assert fast.events[0].seq == k - 1 and len(fast.events) == len(lines) - k + 1
    assert encode_state(fast.state) == encode_state(load_run(run).state)


def _ignored(run: Path) -> str:
    fast = load_run(run, snapshot=True)
    assert encode_state(fast.state) == encode_state(load_run(run).state)
    assert len(fast.events) == len(_lines(run))  # every event was folded
    assert len(fast.notes) == 1 and fast.notes[0].startswith("state snapshot ignored")
    return fast.notes[0]


def test_an_edited_snapshot_is_ignored(run: Path) -> None:
    raw = (run / SNAPSHOT).read_bytes()
    (run / SNAPSHOT).write_bytes(raw.replace(b'"evaluations":', b'"evaluations":1', 1))
    assert "signature does not verify" in _ignored(run)


def test_another_runs_snapshot_is_ignored(run: Path, tmp_path: Path) -> None:
    other = _finished(tmp_path / "other", children=1)
    shutil.copy(other / SNAPSHOT, run / SNAPSHOT)
    assert "signature does not verify" in _ignored(run)


def test_a_snapshot_beyond_a_shortened_archive_is_ignored(run: Path) -> None:
    lines = _lines(run)
    (run / "events.jsonl").write_bytes(b"".join(lines[:-3]))
    assert "does not match" in _ignored(run) or "shorter" in _ignored(run)


def test_an_event_after_the_snapshot_is_still_checked(run: Path, tmp_path: Path) -> None:
    lines = _lines(run)
    early = tmp_path / "early"
    shutil.copytree(run, early)
    (early / "events.jsonl").write_bytes(b"".join(lines[:-4]))
    st = load_run(early).state
    save_snapshot(early, st, load_signer(st.run_id, st.verifier.keyid))
    shutil.copy(early / SNAPSHOT, run / SNAPSHOT)
    lines[-2] = lines[-2].replace(b'"type":"', b'"type":"x', 1)
    (run / "events.jsonl").write_bytes(b"".join(lines))
    with pytest.raises(ArchiveCorrupt, match="hash chain broken"):
        load_run(run, snapshot=True)


def test_an_edit_before_the_snapshot_breaks_the_chain_for_resume_and_verify(run: Path) -> None:
    lines = _lines(run)
    i = next(i for i, line in enumerate(lines) if b'"type":"candidate_gated"' in line)
    lines[i] = lines[i].replace(b'"reason":"', b'"reason":"edited ', 1)
    (run / "events.jsonl").write_bytes(b"".join(lines))
    assert not verify(run).ok
    with pytest.raises(ArchiveCorrupt, match=f"hash chain broken: event {i} "):
        load_run(run, snapshot=True)


def test_verify_never_trusts_the_snapshot(run: Path) -> None:
    """verify reads only the archive; an edited snapshot is ignored by resume too."""
    raw = (run / SNAPSHOT).read_bytes()
    (run / SNAPSHOT).write_bytes(raw.replace(b'"score":', b'"score":9', 1))
    assert verify(run).ok  # the snapshot is no evidence: verify reads only the archive
    assert "signature does not verify" in _ignored(run)


def test_the_state_indexes_agree_with_a_scan(run: Path) -> None:
    """What the engine and the operators read from indexes is what a scan over all finds."""
    st = load_run(run).state
    cands = list(st.candidates.values())
    assert st.admitted() == [c for c in cands if c.state == "admitted"]
    scored = [c for c in st.admitted() if c.score("gate") is not None]
    best = max(scored, key=lambda c: (c.score("gate"), -c.index))
    assert st.champion() is best and st.ranked()[0] is best
    assert set(st.tree_holders) == {c.tree for c in cands if c.tree and c.rejected is None}
    assert st.children() == sum(1 for c in cands if not c.is_seed)
    assert list(st.active) == []  # a finished run leaves nothing to do
    rebuilt = load_run(run, snapshot=True).state
    assert (rebuilt.admitted_ids, rebuilt.gate_ranking) == (st.admitted_ids, st.gate_ranking)
