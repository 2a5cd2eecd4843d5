"""rsiframe.yamlsafe: the one YAML loader refuses aliases and duplicate keys."""

from __future__ import annotations

import pytest
import yaml

from rsiframe import yamlsafe


def test_plain_yaml_loads() -> None:
    assert yamlsafe.load("a: [1, 2]\nb: {c: x}\n") == {"a": [1, 2], "b": {"c": "x"}}


def test_an_alias_bomb_is_refused_before_anything_expands() -> None:
    rows = ['l0: &l0 ["x","x","x","x","x","x","x","x","x","x"]']
    rows += [f"l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    with pytest.raises(yaml.YAMLError, match="aliases"):
        yamlsafe.load("\n".join(rows))
    with pytest.raises(yaml.YAMLError, match="aliases"):
        yamlsafe.load("a: &x 1\nb: *x\n")


def test_duplicate_keys_are_refused() -> None:
    with pytest.raises(yaml.YAMLError, match="duplicate key 'a'"):
        yamlsafe.load("a: 1\na: 2\n")


def test_unsafe_tags_are_refused() -> None:
    with pytest.raises(yaml.YAMLError):
        yamlsafe.load("!!python/object/apply:os.system ['true']")


def _bomb(levels: int = 9) -> str:
    """A nested-alias ``agent.yaml`` of ~450 bytes that means 10**levels strings."""
    rows = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    rows += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(rows) + f"\nprompt: *a{levels - 1}\n"


def test_deep_nesting_and_oversized_documents_are_refused() -> None:
    with pytest.raises(yaml.YAMLError, match="nested deeper than 64"):
        yamlsafe.load("[" * 100_000 + "]" * 100_000)
    assert yamlsafe.load("[" * 60 + "]" * 60) is not None
    with pytest.raises(yaml.YAMLError, match="over the 100-byte limit"):
        yamlsafe.load("a: " + "x" * 200, max_bytes=100)


def test_load_file_reads_regular_files_only_and_caps_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    big = tmp_path / "big.yaml"
    big.write_text("a: " + "x" * 5000)
    with pytest.raises(OSError, match="over the 1000-byte limit"):
        yamlsafe.load_file(big, max_bytes=1000)
    (tmp_path / "link.yaml").symlink_to(big)
    with pytest.raises(OSError, match="symlink"):
        yamlsafe.load_file(tmp_path / "link.yaml")
    assert yamlsafe.load_file(big) == {"a": "x" * 5000}


def test_a_candidates_harbor_agent_config_bomb_is_refused_in_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 20 item 6: a 455-byte nested-alias agent.yaml grew the driver to 750 MB."""
    from rsiframe.evaluators.harbor.engine import HarborEngine
    from rsiframe.recipe.evaluator import HarborEngineConfig

    cand = tmp_path / "candidate"
    cand.mkdir()
    (cand / "agent.yaml").write_text(_bomb())
    assert len(_bomb()) < 500
    cfg = HarborEngineConfig(harbor_agent="nop", agent_config="agent.yaml")
    engine = HarborEngine(cfg, tmp_path / "work")
    with pytest.raises(RuntimeError) as err:
        engine.job_config(cand, [], tmp_path / "jobs")
    assert "\n" not in str(err.value) and "aliases (*name) are not allowed" in str(err.value)
    (cand / "agent.yaml").write_text("prompt: hello\nmax_turns: 3\n")
    kwargs = engine.job_config(cand, [], tmp_path / "jobs")["agents"][0]["kwargs"]
    assert kwargs == {"prompt": "hello", "max_turns": 3}
