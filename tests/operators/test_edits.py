"""SEARCH/REPLACE parsing and strict application: the edge cases models produce."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.operators.edits import Edit, EditError, apply_edits, parse_edits

BLOCK = """{path}
```python
<<<<<<< SEARCH
{old}
=======
{new}
>>>>>>> REPLACE
```
"""


def block(path: str, old: str, new: str) -> str:
    return BLOCK.format(path=path, old=old, new=new)


def test_aider_block_with_path_line_before_the_fence() -> None:
    (e,) = parse_edits("I fix it.\n\n" + block("pkg/a.py", "x = 1", "x = 2"))
    assert e == Edit("pkg/a.py", "x = 1\n", "x = 2\n")


@pytest.mark.parametrize("line", ["`a.py`", "**a.py**", "a.py:", "File: a.py", "  a.py  "])
def test_decorated_path_lines(line: str) -> None:
    assert parse_edits(block(line, "a", "b"))[0].path == "a.py"


def test_path_inside_the_fence_and_no_fence_at_all() -> None:
    inside = "```\na.py\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n```\n"
    bare = "b.py\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n"
    assert parse_edits(inside)[0].path == "a.py"
    assert parse_edits(bare)[0].path == "b.py"


def test_later_blocks_inherit_the_previous_path_and_crlf_is_normalised() -> None:
    text = block("a.py", "one", "1") + "<<<<<<< SEARCH\ntwo\n=======\n2\n>>>>>>> REPLACE\n"
    edits = parse_edits(text.replace("\n", "\r\n"))
    assert [(e.path, e.search, e.replace) for e in edits] == [
        ("a.py", "one\n", "1\n"),
        ("a.py", "two\n", "2\n"),
    ]


def test_pathless_block_needs_a_single_file_surface() -> None:
    text = "```\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n```"
    assert parse_edits(text, default_path="only.py")[0].path == "only.py"
    with pytest.raises(EditError, match="no file path"):
        parse_edits(text)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("a.py\n<<<<<<< SEARCH\na\n>>>>>>> REPLACE\n", "expected ======="),
        ("a.py\n<<<<<<< SEARCH\na\n", "no ======= line"),
        ("a.py\n<<<<<<< SEARCH\na\n=======\nb\n", "no >>>>>>> REPLACE"),
        ("a.py\n<<<<<<< SEARCH\na\n=======\nb\n=======\nc\n>>>>>>> REPLACE\n", "REPLACE"),
    ],
)
def test_malformed_blocks_say_what_is_missing(text: str, why: str) -> None:
    with pytest.raises(EditError, match=why):
        parse_edits(text)


def test_marker_lengths_and_empty_sides() -> None:
    text = "a.py\n<<<<<<<< SEARCH\nold\n========\n>>>>>>>> REPLACE\n"
    (e,) = parse_edits(text)
    assert (e.search, e.replace) == ("old\n", "")  # a deletion


def test_whole_files_and_plain_code_fences() -> None:
    text = "Here is the file.\n\nsmall.py\n```python\ndef f():\n    return 1\n```\n"
    (e,) = parse_edits(text)
    assert e == Edit("small.py", "", "def f():\n    return 1\n", whole=True)
    assert parse_edits("Example:\n```\nprint(1)\n```\n") == []  # no path: not an edit
    assert parse_edits(text, allow_whole=False) == []


def test_strict_apply_all_or_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\ny = 2\n")
    (tmp_path / "b.py").write_text("z = 3\n")
    good = Edit("a.py", "x = 1\n", "x = 10\n")
    bad = Edit("b.py", "nope\n", "z\n")
    with pytest.raises(EditError, match=r"does not match b\.py exactly"):
        apply_edits([good, bad], tmp_path)
    assert (tmp_path / "a.py").read_text() == "x = 1\ny = 2\n"  # nothing applied
    assert apply_edits([good, Edit("a.py", "y = 2\n", "y = 20\n")], tmp_path) == ["a.py"]
    assert (tmp_path / "a.py").read_text() == "x = 10\ny = 20\n"


def test_ambiguous_missing_and_empty_search(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("pass\npass\n")
    with pytest.raises(EditError, match="occurs 2 times"):
        apply_edits([Edit("a.py", "pass\n", "x\n")], tmp_path)
    with pytest.raises(EditError, match="does not exist"):
        apply_edits([Edit("new.py", "x\n", "y\n")], tmp_path)
    with pytest.raises(EditError, match="empty SEARCH"):
        apply_edits([Edit("a.py", "", "y\n")], tmp_path)
    assert apply_edits([Edit("sub/new.py", "", "y = 1\n")], tmp_path) == ["sub/new.py"]
    assert (tmp_path / "sub" / "new.py").read_text() == "y = 1\n"
    with pytest.raises(EditError, match="no edits found"):
        apply_edits([], tmp_path)


@pytest.mark.parametrize("path", ["../evil.py", "/etc/passwd", "a/../../b.py"])
def test_paths_must_stay_in_the_work_folder(tmp_path: Path, path: str) -> None:
    with pytest.raises(EditError, match="inside the work folder"):
        apply_edits([Edit(path, "", "x\n", whole=True)], tmp_path)


def test_a_link_is_never_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "link.py").symlink_to(outside)
    with pytest.raises(EditError, match="not a regular file"):
        apply_edits([Edit("link.py", "", "x\n", whole=True)], work)
    assert outside.read_text() == "keep\n"
