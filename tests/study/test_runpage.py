"""rsiframe.study.runpage: what the report page of a real run holds (verified scores only,
every candidate, diffs, certificates, the champion's path), and a run that fails verify
refused unless forced."""

from __future__ import annotations

import shutil

import pytest

from rsiframe.archive.state import Candidate
from rsiframe.errors import RunNotVerified
from rsiframe.study.runpage import _twin, build_page
from tests.support.cli import status_json
from tests.support.mini import Mini, run_mini


def test_the_page_of_a_run_holds_its_verified_story(mini: Mini) -> None:
    out = run_mini(mini)
    st = status_json(out)
    page = build_page(out)
    assert page.verification.verified and page.verification.verdict == "ok"
    assert page.verification.head == st["head"] and len(page.verification.keyid) == 64
    assert [n.id for n in page.nodes] == [c["id"] for c in st["candidates"]]
    by_id = {c["id"]: c for c in st["candidates"]}
    for n in page.nodes:
        assert n.scores == by_id[n.id]["scores"] and n.state == by_id[n.id]["state"]
    h = page.header
    assert h["champion"] == st["champion"] and h["seed"] == st["seed"]
    assert h["seed_to_champion"]["sealed"][0] == by_id[st["seed"]]["scores"]["sealed"]
    # the champion's path runs from the champion back to the seed
    path = {n.id for n in page.nodes if n.champion_path}
    assert {st["champion"], st["seed"]} <= path
    for n in page.nodes:
        if n.champion_path and n.parents:
            assert n.parents[0] in path
    # children carry their diff against the parent; certified attempts what they bind
    child = next(n for n in page.nodes if n.parents and n.state in ("admitted", "declined"))
    panel = page.panels[child.id]
    assert panel.diffs and any(d["text"].startswith("--- a/") for d in panel.diffs)
    cert = next(c for c in panel.certificates if c["status"] == "certified")
    assert cert["signature"].startswith("verified") and cert["binds"]["candidate"] == child.id
    assert set(panel.rewards) == {"train", "gate"} and panel.rewards["gate"]
    assert page.curve and page.curve[-1]["best_gate"] == by_id[st["champion"]]["scores"]["gate"]


def test_a_run_that_fails_verify_is_refused_unless_forced(mini: Mini) -> None:
    out = run_mini(mini)
    shutil.rmtree(out / "artifacts")  # evidence gone: verify fails
    with pytest.raises(RunNotVerified, match="does not verify"):
        build_page(out)
    page = build_page(out, force=True)
    assert not page.verification.verified and page.verification.forced
    assert page.verification.problems


def _cand(cid: str, tree: str | None, rejected: dict | None = None) -> Candidate:
    c = Candidate(id=cid, parent="c0000", generation=1, index=int(cid[1:]), tree=tree)
    c.rejected = rejected
    return c


def test_a_duplicate_names_whose_duplicate_it_is() -> None:
    first: dict[str, str] = {"t1": "c0001"}
    assert _twin(_cand("c0002", "t1"), first) == "c0001"
    assert _twin(_cand("c0001", "t1"), first) is None  # the first holder is no duplicate
    novelty = {"stage": "novelty", "reasons": ["tree identical to candidate c0007"]}
    assert _twin(_cand("c0003", None, novelty), first) == "c0007"
    assert _twin(_cand("c0004", "t2"), first) is None
