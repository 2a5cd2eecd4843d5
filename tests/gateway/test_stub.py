"""The scripted stub endpoint: answers, errors, timeouts, slow streams, and its own count."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from rsiframe.gateway.stub import (
    Answer,
    Script,
    ServerThread,
    StubLLM,
    ToolCall,
    Variant,
    count_tokens,
)

MSG = [{"role": "user", "content": "fix the bug"}]
#: the pyfix grid's scripted model (recipes/stub/, written by scripts/pyfix_grid_answers.py)
GRID_SCRIPT = Path(__file__).parents[2] / "recipes/stub/pyfix-grid-answers.yaml"


def _serve(*answers: Answer, default: Answer | None = None) -> tuple[StubLLM, ServerThread]:
    stub = StubLLM(Script(answers=list(answers), default=default))
    return stub, ServerThread(stub.app).start()


def _client(srv: ServerThread, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0, **kw)


def test_answers_in_order_and_counts_requests_and_tokens() -> None:
    stub, srv = _serve(Answer(content="first answer"), Answer(content="second"))
    try:
        c = _client(srv)
        a = c.chat.completions.create(model="m", messages=MSG)
        b = c.chat.completions.create(model="m", messages=MSG)
        assert [a.choices[0].message.content, b.choices[0].message.content] == [
            "first answer",
            "second",
        ]
        assert a.usage.prompt_tokens == count_tokens("fix the bug")
        assert a.usage.completion_tokens == count_tokens("first answer")
        stats = httpx.get(srv.url.removesuffix("/v1") + "/stub/stats").json()
        assert stats["requests"] == 2 and stats["answered"] == 2
        assert stats["completion_tokens"] == count_tokens("first answer") + count_tokens("second")
        # exhausted without a default: 503, counted but not billed
        with pytest.raises(openai.InternalServerError):
            c.chat.completions.create(model="m", messages=MSG)
        assert stub.stats.requests == 3 and stub.stats.answered == 2
    finally:
        srv.stop()


def _asker(c: Any) -> Callable[[str], str | None]:
    """Ask the stub one user message through the OpenAI client; its answer's text."""

    def ask(text: str) -> str | None:
        msgs = [{"role": "user", "content": text}]
        return c.chat.completions.create(model="m", messages=msgs).choices[0].message.content

    return ask


def test_when_picks_by_last_message_and_repeat_is_not_consumed() -> None:
    _stub, srv = _serve(Answer(content="B", when="task b"), Answer(content="any", repeat=True))
    try:
        ask = _asker(_client(srv))
        assert ask("task a") == "any"
        assert ask("task b") == "B"
        assert ask("task b") == "any"
    finally:
        srv.stop()


def test_a_list_of_whens_needs_every_text_in_the_last_message() -> None:
    both = Answer(content="both", when=["task b", "with care"], repeat=True)
    _stub, srv = _serve(both, Answer(content="other", repeat=True))
    try:
        ask = _asker(_client(srv))
        assert ask("task b") == "other"
        assert ask("with care") == "other"
        assert ask("task b, with care") == "both"
    finally:
        srv.stop()


def test_variants_are_picked_from_the_message_and_its_count_the_same_way_twice() -> None:
    variants = [Variant(content=f"v{i}") for i in range(8)]
    tool = Variant(tool_calls=[ToolCall(name="run", arguments={"command": "ls"})])

    def answers(stub_variants: list[Variant]) -> list[tuple[str, int]]:
        answer = Answer(when="propose", repeat=True, variants=stub_variants)
        _stub, srv = _serve(answer)
        try:
            c = _client(srv)
            out = []
            for text in ["propose a", "propose a", "propose b", "propose a", "propose b"] * 3:
                msgs = [{"role": "user", "content": text}]
                msg = c.chat.completions.create(model="m", messages=msgs).choices[0].message
                out.append((msg.content or "", len(msg.tool_calls or [])))
            return out
        finally:
            srv.stop()

    first = answers(variants)
    assert first == answers(variants)  # a fresh stub, the same requests: the same answers
    said = [text for text, _ in first]
    assert len(set(said)) > 2  # the same prompt asked again gets other variants
    assert answers([tool]) == [("", 1)] * 15  # a variant's tool calls are answered


def test_scripted_errors_malformed_and_timeouts() -> None:
    stub, srv = _serve(
        Answer(status=429),
        Answer(status=500),
        Answer(malformed=True),
        Answer(content="late", delay_s=1.0),
    )
    try:
        c = _client(srv)
        with pytest.raises(openai.RateLimitError):
            c.chat.completions.create(model="m", messages=MSG)
        with pytest.raises(openai.InternalServerError):
            c.chat.completions.create(model="m", messages=MSG)
        r = httpx.post(srv.url + "/chat/completions", json={"model": "m", "messages": MSG})
        assert r.status_code == 200
        with pytest.raises(ValueError):
            r.json()
        with pytest.raises(openai.APITimeoutError):
            _client(srv, timeout=0.2).chat.completions.create(model="m", messages=MSG)
        assert stub.stats.requests == 4 and stub.stats.answered == 0
    finally:
        srv.stop()


def test_streams_chat_and_text_with_usage_and_slow_chunks() -> None:
    text = "a somewhat longer answer that streams"
    _stub, srv = _serve(Answer(content=text, chunk_delay_s=0.1), Answer(content="plain text"))
    try:
        c = _client(srv)
        t0 = time.monotonic()
        chunks = list(
            c.chat.completions.create(
                model="m", messages=MSG, stream=True, stream_options={"include_usage": True}
            )
        )
        assert time.monotonic() - t0 >= 0.35  # four pieces, 0.1 s apart
        got = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        assert got == text
        assert chunks[-1].usage.completion_tokens == count_tokens(text)
        out = list(c.completions.create(model="m", prompt="p", stream=True))
        assert "".join(ch.choices[0].text for ch in out if ch.choices) == "plain text"
    finally:
        srv.stop()


def test_models_completions_responses_messages_and_tool_calls() -> None:
    from rsiframe.gateway.stub import ToolCall

    _stub, srv = _serve(
        Answer(content="done"),
        Answer(content="r"),
        Answer(content="m"),
        Answer(tool_calls=[ToolCall(name="write_file", arguments={"path": "a.py"})]),
    )
    try:
        c = _client(srv)
        assert [m.id for m in c.models.list()] == ["stub"]
        assert c.completions.create(model="m", prompt="x").choices[0].text == "done"
        base = srv.url
        r = httpx.post(base + "/responses", json={"model": "m", "input": "hi"}).json()
        assert r["output"][0]["content"][0]["text"] == "r" and r["usage"]["input_tokens"] == 1
        m = httpx.post(base + "/messages", json={"model": "m", "messages": MSG}).json()
        assert m["content"][0]["text"] == "m" and m["usage"]["output_tokens"] == 1
        call = c.chat.completions.create(model="m", messages=MSG).choices[0].message
        assert call.tool_calls[0].function.name == "write_file"
    finally:
        srv.stop()


def test_cli_serves_a_script_and_rejects_a_bad_one(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("answers: [{content: x, colour: red}]\n")
    r = subprocess.run(
        [sys.executable, "-m", "rsiframe.cli.main", "stub-llm", "--script", str(bad)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "answers.0.colour" in r.stderr


def test_the_models_check_is_answered_apart_and_takes_no_scripted_answer() -> None:
    from rsiframe.gateway.modelcheck import PING, PING_MAX_TOKENS

    stub, srv = _serve(Answer(content="for the run"))
    try:
        c = _client(srv)
        ok = c.chat.completions.create(model="m", messages=PING, max_tokens=PING_MAX_TOKENS)
        assert ok.choices[0].message.content == "ok"
        run = c.chat.completions.create(model="m", messages=MSG)
        assert run.choices[0].message.content == "for the run"
        check_tokens = ok.usage.prompt_tokens + ok.usage.completion_tokens
        assert (stub.stats.checks, stub.stats.check_tokens) == (1, check_tokens)
        assert (stub.stats.requests, stub.stats.answered, len(stub.requests)) == (1, 1, 1)
    finally:
        srv.stop()
    scripted = StubLLM(Script(default=Answer(status=401)), checks_apart=False)
    srv = ServerThread(scripted.app).start()
    try:
        with pytest.raises(openai.AuthenticationError):
            _client(srv).chat.completions.create(model="m", messages=PING)
        assert scripted.stats.checks == 0 and scripted.stats.requests == 1
    finally:
        srv.stop()


def test_embeddings_are_deterministic_unit_vectors_or_one_vector_when_scripted_same() -> None:
    stub, srv = _serve(Answer(content="a chat answer stays in the script"))
    try:
        texts = ["def mean(xs): return sum(xs)", "def mean(xs): return sum(xs)", "print(1)"]
        r = _client(srv).embeddings.create(model="emb", input=texts)
        vecs = [d.embedding for d in r.data]
        assert vecs[0] == vecs[1] and vecs[0] != vecs[2]
        assert all(abs(sum(v * v for v in vec) - 1) < 1e-9 for vec in vecs)
        assert r.usage.prompt_tokens == sum(map(count_tokens, texts))
        assert stub.stats.prompt_tokens == r.usage.prompt_tokens and stub.remaining  # not used
        assert httpx.post(srv.url + "/embeddings", json={"input": [1, 2]}).status_code == 400
    finally:
        srv.stop()
    same = StubLLM(Script(embeddings="same"))
    srv = ServerThread(same.app).start()
    try:
        r = _client(srv).embeddings.create(model="emb", input=["one program", "another"])
        assert r.data[0].embedding == r.data[1].embedding
    finally:
        srv.stop()


def test_the_pyfix_grid_script_unlocks_a_family_only_with_its_line() -> None:
    script = Script.load(GRID_SCRIPT)
    stub = StubLLM(script)

    def solves(name: str, *lines: str) -> bool:
        prompt = "\n".join([f"The function `{name}` in `/app/{name}.py` has a bug.", *lines])
        answer = stub.next_answer(prompt)
        return answer is not None and f"def {name}(" in answer.content

    clamp, case = "Clamp with care: check every bound.", "Mind case and characters."
    empty, trade = "Handle the empty input first.", "Answer with the fenced block only."
    assert solves("mean") and not solves("clamp") and solves("clamp", clamp)
    assert solves("count_vowels", case) and not solves("count_vowels", clamp)
    assert not solves("dedupe", empty) and solves("dedupe", empty, clamp)  # needs both
    assert solves("factorial", trade) and not solves("mean", trade)  # a trade-off
    assert not solves("count_vowels", case, trade)
    assert not solves("mean", "Be brief: answer in one word.")
    assert not solves("mean", "Never run the tests.") and solves("mean", "Think step by step.")
    # every mutator proposes one of the 12 lines, varying between calls
    said = {stub.next_answer("Propose ONE focused change").content for _ in range(40)}
    assert len(said) > 6 and all(">>>>>>> REPLACE" in s for s in said)


def test_the_pyfix_grid_script_diagnoses_name_lines_the_self_improving_agent_adds(
    tmp_path: Path,
) -> None:
    """DGM in the grid: each diagnosis names one of the 12 lines (varying between calls),
    and the seed agent improving itself on that problem statement appends that line."""
    import shutil

    from rsiframe.operators.dgm_entry import parse_diagnosis, problem_statement

    repo = Path(__file__).parents[2]
    sys.path.insert(0, str(repo / "scripts"))
    try:
        from pyfix_grid_answers import PROPOSALS  # the 12 lines every mutator proposes
    finally:
        sys.path.remove(str(repo / "scripts"))
    script = Script.load(GRID_SCRIPT)
    stub = StubLLM(script)
    ask = "Your task: find ONE improvement to the agent itself. Entry: clamp."
    statements = [
        problem_statement(parse_diagnosis(stub.next_answer(ask).content)) for _ in range(40)
    ]
    lines = [[ln for ln in PROPOSALS if ln in s] for s in statements]
    assert all(len(found) == 1 for found in lines), statements[0]  # each names one line
    named = [found[0] for found in lines]
    assert len(set(named)) >= 6  # not one fixed diagnosis

    srv = ServerThread(stub.app).start()
    try:
        for line in dict.fromkeys(named[:4]):  # a few distinct lines, each end to end
            agent = tmp_path / str(len(list(tmp_path.iterdir())))
            shutil.copytree(repo / "tasks/pyfix/seed", agent)
            statement = next(s for s, n in zip(statements, named, strict=True) if n == line)
            before = len(stub.requests)
            env = {"OPENAI_BASE_URL": srv.url, "OPENAI_API_KEY": "x", "RSI_MODEL": "m",
                   "PATH": "/usr/bin:/bin"}  # fmt: skip
            cmd = [sys.executable, "agent.py", "--self-improve", "--problem", statement,
                   "--temperature", "0.8"]  # fmt: skip
            subprocess.run(cmd, cwd=agent, env=env, check=True, capture_output=True, timeout=60)
            prompt = (agent / "prompt.md").read_text()
            assert prompt.splitlines()[-1] == line, (line, prompt[-200:])
            sent = stub.requests[before:]
            assert sent and {r["temperature"] for r in sent} == {0.8}  # as it was told
    finally:
        srv.stop()
