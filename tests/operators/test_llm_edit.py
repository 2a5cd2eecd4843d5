"""The llm_edit operator against the scripted stub, through the real gateway and client."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from rsiframe.gateway.stub import Answer
from rsiframe.operators.llm_edit import EditRejected, LlmEdit, LlmEditConfig
from tests.support.llmops import Models, mctx, scripted, work_tree

EDIT = (
    "Divide by the length.\nagent.py\n```\n<<<<<<< SEARCH\nn - 1\n=======\nn\n>>>>>>> REPLACE\n```"
)


@scripted(
    Answer(content="agent.py\n<<<<<<< SEARCH\nnot there\n=======\nx\n>>>>>>> REPLACE"),
    Answer(content=EDIT),
)
def test_llm_edit_feeds_a_failed_block_back_then_applies(models: Models, tmp_path: Path) -> None:
    work = work_tree(tmp_path, {"agent.py": "d = n - 1\n", "README.txt": "not in the surface"})
    # the run-wide lessons are shown only when the recipe asks for them (issue 31)
    shown = {"lessons": True}
    op = LlmEdit(LlmEditConfig(model="proposer", notes="be brief", context=shown))  # type: ignore[arg-type]
    m = op.mutate(mctx(work))
    assert (work / "agent.py").read_text() == "d = n\n"
    assert m.description == "Divide by the length."
    assert m.details["failed_attempts"][0]["error"].startswith("block 1: the SEARCH text")
    first, second = models.stub.requests
    prompt = first["messages"][0]["content"]
    assert "d = n - 1" in prompt and "AssertionError in mean" in prompt
    assert "keep prompts short" in prompt and "be brief" in prompt
    assert "not in the surface" not in prompt  # only surface files are shown
    assert "Your edit was not applied" in second["messages"][-1]["content"]
    assert models.gw.ledger.totals.calls == 2  # every call metered by the gateway


@scripted(Answer(content="no edits here", repeat=True))
def test_llm_edit_rejects_the_child_after_its_retries(models: Models, tmp_path: Path) -> None:
    work = work_tree(tmp_path, {"agent.py": "x = 1\n"})
    with pytest.raises(EditRejected, match="no applicable edit after 2 answers"):
        LlmEdit(LlmEditConfig(model="proposer", retries=1)).mutate(mctx(work))
    assert models.stub.stats.requests == 2
    # a whole-file answer for a file over whole_file_max_bytes is refused too
    (work / "agent.py").write_text("x = 1  # a different prompt, so no cached answer\n")
    models.stub.remaining.insert(0, Answer(content="agent.py\n```\nx = 2\n```\n"))
    cfg = LlmEditConfig(model="proposer", retries=0, whole_file_max_bytes=2)
    with pytest.raises(EditRejected, match="too large to replace whole"):
        LlmEdit(cfg).mutate(mctx(work))
    assert models.stub.stats.requests == 3
    assert (work / "agent.py").read_text().startswith("x = 1  #")


@scripted(
    Answer(content="```\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n```"),
    Answer(content="other.txt\n```\nwritten outside the surface\n```"),
)
def test_llm_edit_single_file_pathless_and_outside_surface_left_to_guardrail(
    models: Models, tmp_path: Path
) -> None:
    work = work_tree(tmp_path, {"agent.py": "x = 1\n"})
    LlmEdit(LlmEditConfig(model="proposer")).mutate(mctx(work, ("agent.py",)))
    assert (work / "agent.py").read_text() == "x = 2\n"
    m = LlmEdit(LlmEditConfig(model="proposer")).mutate(mctx(work, ("agent.py",)))
    assert m.details["changed"] == ["other.txt"]  # applied; the guardrail rejects it
    assert (work / "other.txt").read_text() == "written outside the surface\n"


def test_a_template_with_a_syntax_error_is_one_validation_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.j2"
    bad.write_text("Hello {{ files ")
    with pytest.raises(ValidationError, match="line 1"):
        LlmEditConfig(model="proposer", template=bad)
    good = tmp_path / "good.j2"
    good.write_text("{{ files | length }} files; fix it")
    assert LlmEditConfig(model="p", template=good).render("llm_edit.md.j2", files=[1]) == (
        "1 files; fix it"
    )
