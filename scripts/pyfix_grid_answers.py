"""Write recipes/stub/pyfix-grid-answers.yaml: the stub model behind the pyfix methods grid.

The seed agent's model (the same stub) solves a task only when the agent's prompt carries
the line that unlocks the task's family; mutators propose one line per child, picked among
good, harmful and neutral lines by the stub's ``variants`` (a hash of the prompt and of how
often it was asked). Run ``python scripts/pyfix_grid_answers.py`` after changing a line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tasks" / "pyfix"))
from specs import SPECS  # noqa: E402  (the task specs live beside the tasks)

OUT = REPO / "recipes" / "stub" / "pyfix-grid-answers.yaml"
ANCHOR = "and it will be written to the file the task names."
FAIL = "```python\npass\n```"

#: line -> the functions it unlocks (G4 only together with G1: an interaction)
FAMILIES = {
    "Clamp with care: check every bound.": [
        "clamp", "binary_search", "second_largest", "chunk", "rotate",
    ],
    "Mind case and characters.": [
        "is_palindrome", "count_vowels", "capitalize_words", "word_count", "caesar",
    ],
    "Check the order of your branches.": [
        "fizzbuzz", "is_leap_year", "roman_to_int", "balanced", "is_prime",
    ],
    "Handle the empty input first.": [
        "flatten", "dedupe", "merge_sorted", "running_sum", "longest_common_prefix",
    ],
}  # fmt: skip
NEEDS = {"Handle the empty input first.": "Clamp with care: check every bound."}
#: a trade-off: unlocks the numeric family, breaks mean and the case family
TRADE = "Answer with the fenced block only."
TRADE_UNLOCKS = ["factorial", "fib", "gcd", "digit_sum", "to_binary"]
TRADE_BREAKS = ["mean", *FAMILIES["Mind case and characters."]]
HARM_ALL = "Be brief: answer in one word."  # breaks every task
HARM_MEAN = "Never run the tests."  # breaks mean, the one task the seed solves
NEUTRAL = [
    "Think step by step.",
    "Use descriptive variable names.",
    "Prefer the standard library.",
    "Write docstrings.",
    "Keep functions short.",
]
PROPOSALS = [*FAMILIES, TRADE, HARM_ALL, HARM_MEAN, *NEUTRAL]


def task(name: str) -> str:
    return f"The function `{name}`"


def solution(name: str) -> str:
    spec = next(s for s in SPECS if s.name == name)
    return f"```python\n{spec.solution}```"


def edit(line: str) -> str:
    """A SEARCH/REPLACE that appends ``line`` after the seed prompt's last line."""
    return (
        f"Add the line '{line}' to the prompt.\nprompt.md\n```\n<<<<<<< SEARCH\n{ANCHOR}\n"
        f"=======\n{ANCHOR}\n{line}\n>>>>>>> REPLACE\n```"
    )


def append_call(line: str) -> dict:
    """DGM's self-improving agent: one shell call that appends ``line`` to prompt.md."""
    cmd = f"printf '%s\\n' '{line}' >> prompt.md"
    call = {"name": "run", "arguments": {"command": cmd}}
    return {"content": f"I add the line '{line}'.", "tool_calls": [call]}


#: the prompts of DGM's two steps (dgm_entry's diagnosis, the seed's self_improve.md)
DIAGNOSE = "find ONE improvement to the agent itself"
SELF_IMPROVE = "You are a coding agent improving your own code"
#: how a diagnosis names its line; the self-improvement keys on it (never in prompt.md)
NAMES = "Add this exact line to prompt.md: "


def diagnosis(line: str) -> str:
    """DGM's diagnosis JSON whose implementation suggestion names ``line``."""
    fields = {
        "log_summarization": "the agent fails most tasks",
        "potential_improvements": ["a line in the prompt"],
        "improvement_proposal": f"add the line '{line}' to prompt.md",
        "implementation_suggestion": f"{NAMES}{line}",
        "problem_description": "The agent solves few tasks.",
    }
    return f"```json\n{json.dumps(fields)}\n```"


def mutator_answers() -> list[dict]:
    edits = [{"content": edit(line)} for line in PROPOSALS]
    return [
        {"when": "Propose ONE focused change", "repeat": True, "variants": edits},
        {"when": "Rewrite the program", "repeat": True, "variants": [dict(e) for e in edits]},
        # DGM: the diagnosis names one of the 12 lines (a variant per call) ...
        {
            "when": DIAGNOSE,
            "repeat": True,
            "variants": [{"content": diagnosis(line)} for line in PROPOSALS],
        },
        # ... and the self-improving agent adds the line its problem statement names
        *[
            {"when": [SELF_IMPROVE, f"{NAMES}{line}"], "repeat": True, **append_call(line)}
            for line in PROPOSALS
        ],
        {  # a problem statement naming no line (not one this script's diagnoses write)
            "when": SELF_IMPROVE,
            "repeat": True,
            "variants": [append_call(line) for line in PROPOSALS],
        },
        {"when": "Lessons", "repeat": True, "content": "- one line of advice at a time"},
    ]


def agent_answers() -> list[dict]:
    """The seed agent's model: failures first (the first matching answer wins)."""
    out: list[dict] = [{"when": HARM_ALL, "repeat": True, "content": FAIL}]
    out += [{"when": [TRADE, task(n)], "repeat": True, "content": FAIL} for n in TRADE_BREAKS]
    out.append({"when": [HARM_MEAN, task("mean")], "repeat": True, "content": FAIL})
    out.append({"when": task("mean"), "repeat": True, "content": solution("mean")})
    for line, names in FAMILIES.items():
        need = [line, *([NEEDS[line]] if line in NEEDS else [])]
        out += [{"when": [*need, task(n)], "repeat": True, "content": solution(n)} for n in names]
    out += [
        {"when": [TRADE, task(n)], "repeat": True, "content": solution(n)} for n in TRADE_UNLOCKS
    ]
    return out


HEADER = """\
# Scripted answers for `rsiframe stub-llm` behind the pyfix methods grid (issue 32 §5:
# recipes/pyfix/grid.yaml). Written by scripts/pyfix_grid_answers.py: edit that, not this.
#
# The seed agent's model solves `mean` always and a task of another family only when the
# agent's prompt.md carries the family's line (a list `when` needs every text):
#   'Clamp with care: check every bound.'  clamp, binary_search, second_largest, chunk, rotate
#   'Mind case and characters.'            is_palindrome, count_vowels, capitalize_words,
#                                          word_count, caesar
#   'Check the order of your branches.'    fizzbuzz, is_leap_year, roman_to_int, balanced, is_prime
#   'Handle the empty input first.'        flatten, dedupe, merge_sorted, running_sum,
#                                          longest_common_prefix; only WITH the clamp line
#   'Answer with the fenced block only.'   factorial, fib, gcd, digit_sum, to_binary, but it
#                                          breaks mean and the case family (a trade-off)
#   'Be brief: answer in one word.'        breaks every task
#   'Never run the tests.'                 breaks mean
#   five neutral lines                      no effect
# A task is keyed by "The function `NAME`", which only the 'fix' tasks' instructions say;
# a 'write' task ("Implement the function ...": caesar, is_prime, balanced,
# longest_common_prefix, fib, digit_sum, to_binary) is never solved, whatever the prompt.
# The grid of docs/methods-comparison.md ran with exactly this script (in its split only
# the sealed task caesar is such a task).
# Every mutator (llm_edit, OpenEvolve's and Shinka's prompts, DGM's self-improving agent)
# proposes one of these 12 lines per child, appended to prompt.md: the stub's `variants`,
# picked by a hash of the prompt and of how often this prompt was asked (deterministic for
# the same sequence of requests; no clock). DGM's line is picked by its diagnosis
# (dgm_entry: "Add this exact line to prompt.md: LINE", a variant per call); its
# self-improving agent then appends the line its problem statement names.
"""


def main() -> None:
    script = {"answers": [*mutator_answers(), *agent_answers()], "default": {"content": FAIL}}
    OUT.write_text(HEADER + yaml.safe_dump(script, sort_keys=False, width=100))
    print(f"wrote {OUT.relative_to(REPO)}: {len(script['answers'])} answers")


if __name__ == "__main__":
    main()
