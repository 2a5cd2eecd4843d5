"""rsiframe.gateway.ledger: one durable line per metered call, numbered in order, evidence
content-addressed beside it; a reopened ledger has the same totals and cache, so a restarted
gateway never pays twice."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from rsiframe.gateway.ledger import Entry, Ledger


def _entry(digest: str, status: int = 200, response: str | None = "r", **kw: object) -> Entry:
    return Entry(
        seq=0, ts=1.0, path="/v1/chat/completions", model="m", consumer="mutate:c1",
        candidate="c1", slot="mutate", digest=digest, status=status, response=response,
        **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_entries_are_numbered_totalled_cached_and_reloaded(tmp_path: Path) -> None:
    recorded: list[int] = []
    ledger = Ledger(tmp_path, on_record=lambda e: recorded.append(e.seq))
    ledger.append(_entry("a", prompt_tokens=10, completion_tokens=5, cost_usd=0.5))
    ledger.append(_entry("b", status=429, response=None, code="max_cost"))  # refused: no cache
    ledger.append(_entry("a", cached=True))  # served from the ledger at no cost
    assert recorded == [1, 2, 3]
    assert (ledger.totals.tokens, ledger.totals.cost_usd, ledger.totals.calls) == (15, 0.5, 3)
    assert set(ledger.cache) == {"a"} and ledger.cache["a"].seq == 1
    again = Ledger(tmp_path)
    assert (again.seq, again.totals, set(again.cache)) == (3, ledger.totals, {"a"})
    assert again.append(_entry("c")).seq == 4


def test_a_torn_last_line_is_skipped_on_reload(tmp_path: Path) -> None:
    Ledger(tmp_path).append(_entry("a", prompt_tokens=3))
    with (tmp_path / "ledger.jsonl").open("a") as f:
        f.write('{"seq": 2, "digest": "b", "sta')
    again = Ledger(tmp_path)
    assert (again.seq, again.totals.tokens) == (1, 3)


def test_concurrent_appends_get_distinct_numbers_in_file_order(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path, fsync=False)
    threads = [
        threading.Thread(target=lambda i=i: ledger.append(_entry(f"d{i}"))) for i in range(16)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seqs = [json.loads(x)["seq"] for x in ledger.path.read_text().splitlines()]
    assert seqs == list(range(1, 17))


def test_evidence_is_content_addressed_and_checked_on_read(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    digest = ledger.put(b'{"messages": []}')
    assert ledger.put(b'{"messages": []}') == digest and ledger.get(digest) == b'{"messages": []}'
    (tmp_path / "evidence" / digest).write_bytes(b"edited")
    with pytest.raises(ValueError, match="does not match its digest"):
        ledger.get(digest)
