"""rsiframe.certs.records: the in-toto statement a run signs for each evaluation, read back
only when it is ours; the score is the mean reward."""

from __future__ import annotations

import pytest

from rsiframe.certs.records import (
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    EvaluationPredicate,
    aggregate,
    make_statement,
    parse_statement,
)


def _predicate(**over: object) -> EvaluationPredicate:
    base = dict(
        run_id="r",
        candidate="c0001",
        parent_commit="p" * 40,
        recipe_digest="d" * 64,
        evaluator_fingerprint="e" * 64,
        taskset_fingerprint="t" * 64,
        split="gate",
        attempt=2,
        rewards={"g1": 1.0, "g2": 0.0},
        score=0.5,
        isolation="bwrap",
        framework_version="0.1.0",
        started_at=1.0,
        finished_at=2.0,
    )
    return EvaluationPredicate.model_validate({**base, **over})


def test_a_statement_round_trips_with_its_subject() -> None:
    p = _predicate()
    statement = make_statement("a" * 40, "b" * 40, p)
    assert statement["_type"] == STATEMENT_TYPE and statement["predicateType"] == PREDICATE_TYPE
    assert statement["subject"] == [
        {"name": "candidate/c0001", "digest": {"gitCommit": "a" * 40, "gitTree": "b" * 40}}
    ]
    assert "evaluator" not in statement["predicate"]  # records without an engine part
    rec = parse_statement(statement)
    assert (rec.commit, rec.tree, rec.predicate) == ("a" * 40, "b" * 40, p)
    with_part = make_statement("a" * 40, "b" * 40, _predicate(evaluator={"harbor": "1"}))
    assert parse_statement(with_part).predicate.evaluator == {"harbor": "1"}


def test_only_our_statements_and_declared_fields_are_read() -> None:
    statement = make_statement("a" * 40, "b" * 40, _predicate())
    for key, value in (("_type", "x"), ("predicateType", "https://other/v1")):
        with pytest.raises(ValueError, match="not an rsiframe evaluation statement"):
            parse_statement({**statement, key: value})
    smuggled = {**statement, "predicate": {**statement["predicate"], "admitted": True}}
    with pytest.raises(ValueError, match="admitted"):
        parse_statement(smuggled)
    with pytest.raises(ValueError):  # frozen: a record cannot be changed once read
        parse_statement(statement).predicate.score = 1.0  # type: ignore[misc]


def test_the_score_is_the_mean_reward() -> None:
    assert aggregate({"a": 1.0, "b": 0.0, "c": 0.5}) == 0.5
    assert aggregate({}) == 0.0
