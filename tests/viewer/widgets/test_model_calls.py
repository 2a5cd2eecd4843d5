"""The viewer in a run with models: the candidate screen's "Model calls" tab (prompt,
response, tokens, cost from ``model_call`` events and their artifacts) and the cost in the
run header. The run is bench/viewer.py's deterministic synthetic run plus a ``models:``
section and model calls (a stream, a cached call and a refused one among them).

Update the snapshot after an intended change with
``pytest tests/viewer/widgets/test_model_calls.py --snapshot-update``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from unittest import mock

import pytest

from rsiframe.viewer.app import ViewerApp
from tests.support.viewer import bench_module, plain, ready

MODELS = {
    "proposer": {
        "base_url_env": "LLM_BASE_URL",
        "api_key_env": "LLM_API_KEY",
        "model": "gpt-5-mini",
        "price": {"input_per_mtok": 0.25, "output_per_mtok": 2.0},
    }
}
EDIT = "solver.yaml\n```\n<<<<<<< SEARCH\nlevel: 1\n=======\nlevel: 2\n>>>>>>> REPLACE\n```"


def _call(b, seq: int, cid: str, slot: str, prompt: str, answer: str, **kw) -> dict:
    """One model_call event's data, its request and response stored as run artifacts."""
    request = {"model": "proposer", "messages": [{"role": "user", "content": prompt}]}
    if kw.pop("stream", False):
        chunks = [answer[: len(answer) // 2], answer[len(answer) // 2 :]]
        body = b"".join(
            b"data: " + json.dumps({"choices": [{"delta": {"content": c}}]}).encode() + b"\n\n"
            for c in chunks
        )
        response = b.archive.put(body + b"data: [DONE]\n\n")
    elif answer:
        message = {"role": "assistant", "content": answer}
        response = b.archive.put_json({"choices": [{"message": message}]})
    else:
        response = None
    p, c = len(prompt) // 4 + 1, len(answer) // 4 + 1
    data = {
        "seq": seq,
        "candidate": cid,
        "slot": slot,
        "consumer": f"{slot}:{cid}",
        "model": "proposer",
        "path": "/v1/chat/completions",
        "status": 200,
        "prompt_tokens": p,
        "completion_tokens": c if answer else 0,
        "cost_usd": (p * 0.25 + (c if answer else 0) * 2.0) / 1e6,
        "latency_ms": 120.0 + seq,
        "digest": f"{seq:064x}",
        "request": b.archive.put_json(request),
        "response": response,
    }
    data.update(kw)
    return data


def build_models_run(root: Path) -> Path:
    bench = bench_module()
    plain = bench._resolved

    def resolved(name: str) -> dict:
        return {**plain(name), "models": MODELS}

    clock = bench.Clock()
    with bench.fast_and_fixed(clock), mock.patch.object(bench, "_resolved", resolved):
        b = bench.Builder(root, "llm-run", 0, bytes([7]) * 32)
        b.start()
        b.archive.append("generation_started", {"generation": 1})
        for i in range(1, 5):
            b.child(i, 1)
        calls = [
            _call(b, 1, "c0001", "mutate", "Fix solver.yaml: raise the level.", EDIT),
            _call(b, 2, "c0001", "mutate", "The block did not match; again.", EDIT, stream=True),
            _call(b, 3, "c0002", "mutate", "Fix solver.yaml: raise the level.", EDIT, cached=True),
            _call(
                b,
                4,
                "c0002",
                "reflect",
                "Lessons so far?",
                "",
                status=429,
                error="cost budget exhausted ($0.990000 spent, $0.020000 asked, limit $1.0)",
                code="max_cost",
            ),
        ]
        for data in calls:
            b.archive.append("model_call", data)
        b.finish("finished")
    return root


@pytest.fixture(scope="module")
def models_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_models_run(tmp_path_factory.mktemp("models") / "run")


async def _open_calls(pilot, cid: str = "c0001") -> None:
    await ready(pilot)
    assert pilot.app.screen.query_one("#candidates").move_to(cid)
    await pilot.press("enter")
    await ready(pilot)
    await pilot.press("6")
    await ready(pilot)
    for _ in range(100):  # the chosen call's artifacts are read in a worker
        await pilot.pause()
        text = plain(pilot.app.screen.query_one("#model-call-text"))
        if "prompt" in text:
            break
        await asyncio.sleep(0.02)


def test_model_calls_tab(snap_compare, models_run: Path) -> None:
    assert snap_compare(ViewerApp(models_run), terminal_size=(120, 30), run_before=_open_calls)


def test_the_tab_shows_prompt_response_tokens_and_cost(models_run: Path) -> None:
    from rsiframe.viewer.screens.candidate import CandidateScreen

    async def drive() -> None:
        app = ViewerApp(models_run)
        async with app.run_test(size=(160, 40)) as pilot:
            await ready(pilot)
            header = plain(app.screen.query_one("#run-header"))
            # 4 calls; the cost is the gateway's count, per slot too
            assert "4 calls" in header and "mutate $" in header and "reflect $0.0000" in header
            await _open_calls(pilot, "c0001")
            screen = app.screen
            assert isinstance(screen, CandidateScreen)
            table = screen.query_one("#model-calls-table")
            assert table.row_count == 2  # c0001's own calls only
            text = plain(screen.query_one("#model-call-text"))
            assert "Fix solver.yaml: raise the level." in text
            assert "<<<<<<< SEARCH" in text and "level: 2" in text
            assert "$0.0000" in text or "$0.000" in text
            await pilot.press("down")  # the streamed call: its deltas joined
            for _ in range(100):
                await pilot.pause()
                text = plain(screen.query_one("#model-call-text"))
                if "did not match; again" in text:
                    break
                await asyncio.sleep(0.02)
            assert "The block did not match; again." in text and "level: 2" in text
            await pilot.press("escape")
            await _open_calls(pilot, "c0002")
            screen = app.screen
            await pilot.press("down")
            for _ in range(100):
                await pilot.pause()
                text = plain(screen.query_one("#model-call-text"))
                if "budget exhausted" in text:
                    break
                await asyncio.sleep(0.02)
            assert "cost budget exhausted" in text and "(none recorded)" in text

    asyncio.run(drive())


def test_a_run_without_models_has_no_model_calls_tab(tmp_path: Path) -> None:
    run = bench_module().build_run(tmp_path / "run", 6, per_generation=4)

    async def drive() -> None:
        app = ViewerApp(run)
        async with app.run_test(size=(120, 30)) as pilot:
            await ready(pilot)
            assert "models" not in plain(app.screen.query_one("#run-header"))
            await pilot.press("c", "enter")
            await ready(pilot)
            await pilot.press("6")
            await pilot.pause()
            tabs = app.screen.query_one("TabbedContent")
            assert tabs.active != "calls"

    asyncio.run(drive())
