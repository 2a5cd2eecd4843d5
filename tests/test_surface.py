"""rsiframe.surface: glob semantics of the mutation surface."""

from __future__ import annotations

import pytest

from rsiframe.surface import Surface, glob_matches


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        # * stays inside one segment
        ("*.py", "a.py", True),
        ("*.py", "d/a.py", False),
        ("*.py", "a.pyc", False),
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/sub/a.py", False),
        ("*", "anything", True),
        ("a*c", "abbbc", True),
        ("a*c", "ab/c", False),
        # ? is exactly one character of one segment
        ("file?.txt", "file1.txt", True),
        ("file?.txt", "file12.txt", False),
        ("file?.txt", "file.txt", False),
        ("a?b", "a/b", False),
        # literal characters are not regex metacharacters
        ("a.py", "axpy", False),
        ("a+b", "a+b", True),
        ("a+b", "aab", False),
        ("(x)", "(x)", True),
    ],
)
def test_single_segment_wildcards(pattern: str, path: str, expected: bool) -> None:
    assert glob_matches(pattern, path) is expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("a/b", True),  # ** spans zero segments
        ("a/x/b", True),
        ("a/x/y/z/b", True),  # and many
        ("a/xb", False),
        ("ab", False),
        ("c/a/b", False),
        ("a/x/b/c", True),  # a directory named by the pattern covers what is below it
    ],
)
def test_double_star_in_the_middle(path: str, expected: bool) -> None:
    assert glob_matches("a/**/b", path) is expected


def test_leading_double_star_matches_at_any_depth() -> None:
    assert glob_matches("**/*.md", "README.md")
    assert glob_matches("**/*.md", "docs/README.md")
    assert glob_matches("**/*.md", "a/b/c/x.md")
    assert not glob_matches("**/*.md", "a/b/c/x.mdx")


def test_trailing_double_star_and_bare_double_star() -> None:
    assert glob_matches("src/**", "src/a")
    assert glob_matches("src/**", "src/a/b/c.py")
    assert not glob_matches("src/**", "srcx/a")
    assert not glob_matches("src/**", "other/src/a")
    assert glob_matches("**", "x")
    assert glob_matches("**", "x/y/z")


def test_trailing_slash_means_everything_below() -> None:
    assert glob_matches("prompts/", "prompts/a.txt")
    assert glob_matches("prompts/", "prompts/deep/er/b.txt")
    assert not glob_matches("prompts/", "prompts.txt")
    assert not glob_matches("prompts/", "x/prompts/a.txt")
    # a trailing slash asks for a directory: the file of that name is not covered
    assert not glob_matches("a.py/", "a.py")


def test_pattern_naming_a_directory_covers_everything_below() -> None:
    assert glob_matches("agent", "agent/main.py")
    assert glob_matches("agent", "agent/lib/util.py")
    assert glob_matches("agent/lib", "agent/lib/util.py")
    assert not glob_matches("agent/lib", "agent/libx/util.py")
    assert not glob_matches("agent", "agentx/main.py")
    assert glob_matches("ag*", "agent/lib/util.py")  # the directory "agent" matches ag*


def test_leading_slash_and_whitespace_are_ignored() -> None:
    assert glob_matches("/src/*.py", "src/a.py")
    assert glob_matches("  src/*.py ", "src/a.py")


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("file[0-9].txt", "file7.txt", True),
        ("file[0-9].txt", "filex.txt", False),
        ("[abc].py", "b.py", True),
        ("[abc].py", "d.py", False),
        ("[!abc].py", "d.py", True),
        ("[!abc].py", "a.py", False),
        ("x[", "x[", True),  # an unclosed bracket is a literal
        ("x[", "xa", False),
    ],
)
def test_character_classes(pattern: str, path: str, expected: bool) -> None:
    assert glob_matches(pattern, path) is expected


def test_negated_character_class_stays_inside_one_segment() -> None:
    # like * and ?, a bracket expression matches one character of a single segment,
    # never the separator: "a[!x]b" must not reach into the directory "a"
    assert not glob_matches("a[!x]b", "a/b")
    assert not glob_matches("a[!x]b", "a/b/secret.txt")


def test_exclude_wins_over_include() -> None:
    s = Surface(include=("agent/**",), exclude=("agent/secret/", "**/*.key"))
    assert s.allows("agent/main.py")
    assert s.allows("agent/lib/x.py")
    assert not s.allows("agent/secret/token")
    assert not s.allows("agent/secret/deep/token")
    assert not s.allows("agent/lib/id.key")
    assert not s.allows("other/main.py")


def test_empty_include_allows_nothing() -> None:
    s = Surface(include=())
    assert not s.allows("a")
    assert not s.allows("a/b")


def test_matching_filters_and_keeps_order() -> None:
    s = Surface(include=("*.py", "docs/"), exclude=("docs/private/",))
    paths = ["z.py", "a.txt", "docs/a.md", "d/x.py", "docs/private/p.md", "b.py"]
    assert s.matching(paths) == ["z.py", "docs/a.md", "b.py"]
