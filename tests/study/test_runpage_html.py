"""rsiframe.study.runpage_html: the page is self-contained, and a run's own text (a
candidate's description, diff, model answer; the recipe name) reaches it only as data."""

from __future__ import annotations

import base64
import hashlib
import json
import re

from rsiframe.study.runpage import Node, Panel, RunPage, Verification
from rsiframe.study.runpage_html import json_for_script, render

EVIL = "</script><script>window.__pwned=1</script><img src=x onerror=alert(1)>&amp;<!--"


def _page(verified: bool = True) -> RunPage:
    seed = Node("c0000", [], 0, "admitted", {"train": 0.1, "gate": 0.2, "sealed": 0.3}, EVIL, "")
    child = Node("c0001", ["c0000"], 1, "declined", {"train": 0.5, "gate": None}, EVIL, EVIL)
    panel = Panel(
        rewards={"train": {EVIL: 1.0}},
        errors={},
        diffs=[{"against": "c0000", "path": EVIL, "kind": "modified", "text": EVIL}],
        calls=[
            {
                "seq": 1,
                "slot": "mutate",
                "model": EVIL,
                "status": 200,
                "cached": False,
                "tokens": 3,
                "cost_usd": 0.0,
                "error": None,
                "prompt": EVIL,
                "answer": EVIL,
            }
        ],
        decision={"admit": False, "reason": EVIL},
        certificates=[],
    )
    return RunPage(
        verification=Verification(
            verified,
            False,
            "ok" if verified else "failed",
            "k" * 64,
            "12:abc",
            [],
            [] if verified else [EVIL],
        ),
        header={
            "name": EVIL,
            "run_id": "r1",
            "method_digest": "m",
            "recipe_digest": "d",
            "taskset_fingerprint": "t",
            "evaluator_fingerprint": "e",
            "isolation": "bwrap",
            "state": "finished",
            "reason": EVIL,
            "budget": {"used": {"evaluations": 2}, "limits": {"evaluations": None}},
            "counts": {"admitted": 1},
            "wall_seconds": 3.0,
            "model_tokens": 3,
            "cost_usd": 0.0,
            "model_calls": 1,
            "seed": "c0000",
            "champion": "c0000",
            "seed_to_champion": {"gate": [0.2, 0.2]},
            "warnings": [EVIL],
            "notes": [EVIL],
        },
        nodes=[seed, child],
        panels={"c0000": panel, "c0001": panel},
        curve=[{"evaluations": 1, "task_runs": 2, "cost": 0.0, "best_gate": 0.2}],
    )


def test_hostile_text_never_becomes_markup() -> None:
    page = render(_page())
    # the only script elements are the page's own two (data, code)
    assert len(re.findall(r"<script\b", page, flags=re.I)) == 2
    assert len(re.findall(r"</script", page, flags=re.I)) == 2
    assert "<img" not in page and "window.__pwned=1</script>" not in page
    assert "&lt;/script&gt;&lt;script&gt;window.__pwned=1" in page  # the escaped header
    data = re.search(r"id='run-data'>(.*?)</script>", page, flags=re.S)
    assert data is not None
    parsed = json.loads(data.group(1))
    assert parsed["nodes"][1]["description"] == EVIL  # the same text, as data
    assert parsed["panels"]["c0001"]["calls"][0]["answer"] == EVIL


def test_json_for_script_cannot_close_its_block() -> None:
    text = json_for_script({"a": "</script><!-- \u2028 &"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"a": "</script><!-- \u2028 &"}


def test_the_page_fetches_nothing() -> None:
    page = render(_page())
    assert "default-src 'none'" in page  # the CSP forbids any fetch
    # and runs only the page's own script, named by its hash
    policy = re.search(r'Content-Security-Policy\' content="([^"]*)"', page)
    assert policy is not None
    script = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
    assert len(script) == 1
    digest = base64.b64encode(hashlib.sha256(script[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy.group(1)
    assert "unsafe-inline'; img" in policy.group(1) and "script-src 'unsafe" not in policy.group(1)
    assert not re.search(r"(src|href)\s*=\s*['\"]?(https?:)?//", page, flags=re.I)
    assert "@import" not in page and "url(" not in page


def test_an_unverified_page_says_so_everywhere() -> None:
    page = render(_page(verified=False))
    assert "NOT VERIFIED" in page.split("<body", 1)[0]  # the title
    assert "class='banner bad'" in page and "<body class='unverified'>" in page
    assert page.count("NOT VERIFIED") >= 3  # title, banner, heading
    ok = render(_page(verified=True))
    assert "NOT VERIFIED" not in ok and "Verified: every check" in ok
