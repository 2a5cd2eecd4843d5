"""Issue 13's number: the tokens and cost of one llm-hill-climb generation against the stub,
by the run's own count (the gateway's ledger as signed ``model_call`` events), equal the
stub's own count exactly; retries (a 500, a block that did not apply) included. The same
measurement is ``bench/llm_generation.py``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.e2e


def _bench():
    spec = importlib.util.spec_from_file_location("bench_llm", REPO / "bench" / "llm_generation.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_llm"] = mod
    spec.loader.exec_module(mod)
    return mod


# one generation of the real recipe on four pyfix tasks: ~30 s here
def test_one_generation_costs_what_the_stub_counted(tmp_path: Path) -> None:
    # the seed agent is replaced so that evaluations call no model (their calls would be
    # counted on both sides too); sampled mutations make the four children differ
    sets = ["evaluator.config.agent=exit 0", "slots.mutate.config.temperature=0.7"]
    m = _bench().measure(tmp_path / "run", small=True, sets=sets)
    stub, run = m["stub"], m["run_count"]
    assert m["state"] == "finished" and m["candidates"] == 5
    assert stub["requests"] == stub["answered"] + 1  # the 500, retried by the gateway
    assert run["paid_calls"] == stub["answered"] == 6  # 4 mutations + 1 fed-back retry + reflect
    assert (run["prompt_tokens"], run["completion_tokens"]) == (
        stub["prompt_tokens"],
        stub["completion_tokens"],
    )
    assert run["tokens"] == stub["tokens"]
    assert run["cost_usd"] == pytest.approx(stub["cost_usd"], abs=1e-12)
    assert run["status_cost_usd"] == round(stub["cost_usd"], 6)
    assert m["tokens_match"] and m["cost_match"]
