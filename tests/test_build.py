"""The build step: real data generation and real (tiny) trl training in the sandbox, cached.

The default run builds one tiny model (a few seconds of training plus imports) and checks
the cache around it; the end-to-end runs (``-m e2e``) drive the whole engine: records,
events, token metering, the budget and the bad-input cases.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import cli_proc, events
from dth import BUILD, recipe, write_seed, write_tasks

from rsiframe.dth.build import Builder, BuildRejected
from rsiframe.dth.hostfacts import FACTS
from rsiframe.recipe.evaluator import BuildConfig
from rsiframe.sandbox.bwrap import make_sandbox
from rsiframe.util.digest import sha256_file, sha256_json


@pytest.fixture(scope="module")
def host_keys(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The builds of this module share one cache, so they share the host key that signs
    its manifests (conftest gives every test a key folder of its own)."""
    keys = tmp_path_factory.mktemp("build-keys")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RSIFRAME_KEY_DIR", str(keys))
        yield keys


@pytest.fixture(autouse=True)
def _one_host_key(host_keys: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RSIFRAME_KEY_DIR", str(host_keys))


def builder(tmp: Path, **over: object) -> Builder:
    (tmp / "work").mkdir(parents=True, exist_ok=True)
    cfg = BuildConfig.model_validate(BUILD | over)
    return Builder(cfg, make_sandbox("auto"), tmp / "work", tmp / "cache")


class Store:
    """A stand-in for the run's artifact store: content-addressed bytes."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        import hashlib

        ref = "sha256:" + hashlib.sha256(data).hexdigest()
        self.blobs[ref] = data
        return ref


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, host_keys: Path):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("build")
    seed = write_seed(tmp / "seed")
    b = builder(tmp)
    store = Store()
    return tmp, seed, b, store, b.build(seed, store.put)


def test_a_cold_build_trains_a_real_model(built) -> None:  # type: ignore[no-untyped-def]
    _tmp, _seed, _b, store, first = built
    rec = first.record()
    assert not first.dataset.cached and not first.model.cached
    assert rec["training_seconds"] > 0
    assert rec["train_metrics"]["steps"] == 40
    assert rec["train_metrics"]["final_loss"] < rec["train_metrics"]["first_loss"]
    files = set(first.model.files)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= files
    assert rec["weights_digest"] == first.model.files["model.safetensors"]
    assert rec["config_digest"] == first.model.files["config.json"]
    # the evidence: dataset, model files and build inputs are run artifacts
    manifest = json.loads(store.blobs[rec["build_manifest"]])
    assert manifest["inputs"]["train"]["trainer"] and manifest["inputs"]["data"]["data"]
    for part in ("dataset", "model"):
        for ref in manifest[part]["files"].values():
            assert ref in store.blobs
    assert (
        store.blobs[manifest["model"]["files"]["model.safetensors"]]
        == (first.model.dir / "model.safetensors").read_bytes()
    )


def test_a_harness_only_change_reuses_the_model_without_training(built) -> None:  # type: ignore[no-untyped-def]
    tmp, _seed, _b, _store, first = built
    child = tmp / "child"
    write_seed(child, harness={"temperature": 0.7})
    again = builder(tmp).build(child, Store().put)  # a fresh builder: the cache is on disk
    assert again.dataset.cached and again.model.cached
    assert again.record()["training_seconds"] == 0.0
    assert again.model.digest == first.model.digest
    assert again.record()["weights_digest"] == first.record()["weights_digest"]


def test_a_data_change_rebuilds_only_the_data_when_the_dataset_is_the_same(built) -> None:  # type: ignore[no-untyped-def]
    tmp, _seed, _b, _store, first = built
    child = tmp / "same-data"
    write_seed(child)
    (child / "data" / "README").write_text("a note that changes the subtree, not the rows\n")
    again = builder(tmp).build(child, Store().put)
    assert not again.dataset.cached  # new data/ digest: the generator ran again
    assert again.dataset.digest == first.dataset.digest  # ... and wrote the same dataset
    assert again.model.cached  # so the model is keyed the same and reused


def test_a_tampered_cache_entry_is_detected_and_rebuilt(built) -> None:  # type: ignore[no-untyped-def]
    tmp, seed, _b, _store, first = built
    train = first.dataset.dir / "train.jsonl"
    train.write_text(train.read_text() + json.dumps({"prompt": "x", "completion": "y"}) + "\n")
    b2 = builder(tmp)
    res, note = b2._lookup("data", first.dataset.key)
    assert res is None and "failed verification" in note
    rebuilt = b2._step("data", first.dataset.key, lambda: b2._run(
        "data", b2.config.data, seed, ["data"], [], {}, "RSI_DATASET_OUT", 60), 60,
        b2._check_dataset)  # fmt: skip
    assert not rebuilt.cached and rebuilt.digest == first.dataset.digest


def test_an_edited_model_with_its_manifest_rewritten_is_not_reused(built) -> None:  # type: ignore[no-untyped-def]
    """Edit the cached weights and rewrite the manifest so files and digest match again:
    without the host key the manifest's HMAC no longer does, so the entry is refused."""
    tmp, _seed, _b, _store, first = built
    entry = first.model.dir.parent
    manifest = json.loads((entry / "manifest.json").read_text())
    weights = first.model.dir / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    files = {
        p.relative_to(first.model.dir).as_posix(): sha256_file(p)
        for p in sorted(first.model.dir.rglob("*"))
        if p.is_file()
    }
    manifest.update(files=files, digest=sha256_json(files))
    (entry / "manifest.json").write_text(json.dumps(manifest))
    res, note = builder(tmp)._lookup("train", first.model.key)
    assert res is None and "failed verification" in note


def test_the_cache_key_holds_the_isolation_and_the_host_facts(tmp_path: Path) -> None:
    """A dataset built unconfined (process) is not reused by a bubblewrap build with the
    same cache; the build record names the isolation and the host facts."""
    from rsiframe.dth.hostfacts import FACTS
    from rsiframe.sandbox.bwrap import ProcessSandbox

    if make_sandbox("auto").kind != "bwrap":
        pytest.skip("platform limit: bubblewrap is not usable here, so no second isolation level")
    seed = write_seed(tmp_path / "seed", trainer={"mode": "crash"})  # stop after the data
    (tmp_path / "work").mkdir()
    cfg = BuildConfig.model_validate(BUILD)
    keys = []
    for sb in (ProcessSandbox(), make_sandbox("bwrap")):
        b = Builder(cfg, sb, tmp_path / "work", tmp_path / "cache")
        with pytest.raises(BuildRejected, match="train"):
            b.build(seed, Store().put)
        keys.append(b._key("data", inputs={"data": "x"}))
        assert set(b.host) == set(FACTS) and b.host["threads"] == 1
    assert keys[0] != keys[1]
    assert len(list((tmp_path / "cache" / "data").iterdir())) == 2  # two entries


def test_steps_see_only_their_inputs_and_no_network(tmp_path: Path) -> None:
    seed = write_seed(tmp_path / "seed", data={"mode": "probe"}, trainer={"mode": "crash"})
    b = builder(tmp_path)
    with pytest.raises(BuildRejected) as info:
        b.build(seed, Store().put)
    assert info.value.stage == "train"  # the probe's dataset was valid
    (entry,) = (tmp_path / "cache" / "data").iterdir()
    row = json.loads((entry / "out" / "train.jsonl").read_text().splitlines()[-1])
    assert row["completion"] == "down"
    if b.sandbox.kind == "bwrap":
        assert json.loads(row["prompt"]) == ["data", "out"]  # no trainer/, no harness/


@pytest.mark.parametrize(
    ("data", "trainer", "stage", "words"),
    [
        ({"mode": "crash"}, {}, "data", "deliberate crash"),
        ({"mode": "empty"}, {}, "data", "empty"),
        ({"mode": "malformed"}, {}, "data", "line 1 is not JSON"),
        ({}, {"mode": "crash"}, "train", "deliberate crash"),
    ],
)
def test_bad_inputs_are_the_candidates_fault(
    tmp_path: Path, data: dict, trainer: dict, stage: str, words: str
) -> None:
    seed = write_seed(tmp_path / "seed", data=data, trainer=trainer)
    with pytest.raises(BuildRejected) as info:
        builder(tmp_path).build(seed, Store().put)
    assert info.value.stage == stage and words in info.value.reason


def test_a_hanging_step_times_out(tmp_path: Path) -> None:
    seed = write_seed(tmp_path / "seed", data={"mode": "hang"})
    with pytest.raises(BuildRejected) as info:
        builder(tmp_path, data_timeout_s=1).build(seed, Store().put)
    assert info.value.reason == "timed out after 1s"


def test_missing_parts_are_rejected(tmp_path: Path) -> None:
    seed = write_seed(tmp_path / "seed")
    (seed / "trainer" / "train.py").unlink()
    (seed / "trainer" / "config.yaml").unlink()
    (seed / "trainer").rmdir()
    with pytest.raises(BuildRejected, match="no trainer/ folder"):
        builder(tmp_path).build(seed, Store().put)


def test_a_missing_data_input_is_rejected_at_the_data_step(tmp_path: Path) -> None:
    # the stage is the step that lists the input, not a guess from its name
    seed = write_seed(tmp_path / "seed")
    with pytest.raises(BuildRejected) as info:
        builder(tmp_path, data_inputs=["data", "extra"]).build(seed, Store().put)
    assert info.value.stage == "data" and info.value.reason == "no extra/ folder"
    assert not (tmp_path / "cache").exists()  # rejected before any step ran


# -- end to end through the engine ----------------------------------------------------------


def mini_run(tmp: Path, **kw: object) -> Path:
    write_seed(tmp / "seed")
    write_tasks(tmp / "tasks")
    (tmp / "recipe.yaml").write_text(recipe(**kw))  # type: ignore[arg-type]
    return tmp / "recipe.yaml"


@pytest.mark.e2e
def test_a_dth_run_builds_serves_meters_and_records(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RSIFRAME_CACHE_DIR", str(tmp_path / "cache"))
    r = mini_run(tmp_path)
    # one child changes only the harness: it must reuse the seed's model
    knobs = {"knobs": [{"file": "harness/config.yaml", "key": "temperature", "choices": [0, 0.7]}]}
    (tmp_path / "seed" / "knobs.yaml").write_text(yaml.safe_dump(knobs))
    out = tmp_path / "run"
    res = cli_proc("run", r, "--out", out, "--quiet", timeout=900)
    assert res.returncode == 0, res.stderr
    evs = events(out)
    built = [e["data"] for e in evs if e["type"] == "model_built"]
    assert built[0]["id"] == "c0000" and not built[0]["model"]["steps"]["train"]["cached"]
    child = [b for b in built if b["id"] != "c0000"]
    assert child and all(b["model"]["steps"]["train"]["cached"] for b in child)
    assert all(b["model"]["training_seconds"] == 0.0 for b in child)
    usage = [e["data"] for e in evs if e["type"] == "usage"]
    assert usage and all(u["tokens"] > 0 for u in usage)
    status = json.loads(cli_proc("status", out, "--json").stdout)
    assert status["budget"]["used"]["model_tokens"] == sum(u["tokens"] for u in usage)
    # the served model's requests count like any model call: totals = the sum of the slots
    evaluate = status["models_by_slot"]["evaluate"]
    requests = sum(u.get("requests") or 0 for u in usage)
    assert status["model_calls"] == evaluate["model_calls"] == requests
    assert status["model_tokens"] == evaluate["model_tokens"]
    seed = status["candidates"][0]
    assert seed["model"]["weights_digest"] and seed["model"]["dataset_digest"]
    assert seed["scores"]["sealed"] is not None
    # the certified record carries the model identity
    certs = [e for e in evs if e["type"] == "evaluation_certified"]
    import base64

    payload = json.loads(base64.b64decode(certs[0]["data"]["envelope"]["payload"]))
    model = payload["predicate"]["model"]
    assert model["weights_digest"] == seed["model"]["weights_digest"]
    assert model["tokens"]["total_tokens"] > 0
    assert model["isolation"] == make_sandbox("auto").isolation
    assert set(model["host"]) == set(FACTS) and model["host"]["threads"] == 1
    verify = json.loads(cli_proc("verify", out, "--json").stdout)
    assert verify["ok"], verify["problems"]
    # reproduced from the cache, then rebuilt from nothing: the same rewards on this host
    for flags, how in (([], "cache"), (["--rebuild"], "rebuilt")):
        res = cli_proc("verify", out, "--reproduce", *flags, "--json", timeout=900)
        rep = json.loads(res.stdout)
        assert rep["ok"], rep["problems"]
        assert rep["reproduce"]["build"] == how and rep["reproduce"]["max_deviation"] == 0
        assert any(how in n or "rebuilt" in n for n in rep["reproduce"]["notes"])


@pytest.mark.e2e
def test_bad_children_end_rejected_and_the_run_goes_on(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RSIFRAME_CACHE_DIR", str(tmp_path / "cache"))
    r = mini_run(tmp_path, children=4)
    knobs = {
        "knobs": [
            {"file": "data/config.yaml", "key": "mode", "choices": ["ok", "crash", "empty"]},
            {"file": "trainer/config.yaml", "key": "mode", "choices": ["ok", "crash"]},
            {"file": "harness/config.yaml", "key": "mode", "choices": ["ok", "hang", "garbage"]},
        ]
    }
    (tmp_path / "seed" / "knobs.yaml").write_text(yaml.safe_dump(knobs))
    text = r.read_text().replace("agent_timeout_s: 60", "agent_timeout_s: 10")
    r.write_text(text)
    out = tmp_path / "run"
    res = cli_proc("run", r, "--out", out, "--quiet", timeout=900)
    assert res.returncode == 0, res.stderr
    status = json.loads(cli_proc("status", out, "--json").stdout)
    assert status["state"] == "finished"
    children = status["candidates"][1:]
    for c in children:
        desc = c["description"]
        if "mode: ok -> crash" in desc or "mode: ok -> empty" in desc:
            assert c["state"] == "rejected", c
            assert c["reasons"] and c["reasons"][0].split(":")[0] in ("data", "train")
        elif "hang" in desc or "garbage" in desc:  # evaluated: zero, with the reason kept
            assert c["state"] in ("admitted", "declined") and c["scores"]["gate"] == 0.0
            if "hang" in desc:
                assert "agent timed out after 10s" in c["reasons"][0], c
    # with this run seed the four children are exactly the four bad cases
    stages = sorted(c["reasons"][0].split(":")[0] for c in children if c["state"] == "rejected")
    assert stages == ["data", "train"]
    descs = [c["description"] for c in children]
    assert any("garbage" in d for d in descs) and any("hang" in d for d in descs)


@pytest.mark.e2e
def test_the_token_budget_fails_closed(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RSIFRAME_CACHE_DIR", str(tmp_path / "cache"))
    r = mini_run(tmp_path, budget=", max_model_tokens: 100")
    out = tmp_path / "run"
    res = cli_proc("run", r, "--out", out, "--quiet", timeout=900)
    assert res.returncode == 0, res.stderr
    status = json.loads(cli_proc("status", out, "--json").stdout)
    assert status["state"] == "budget_exhausted"
    assert "model tokens" in status["reason"]
    # each request reserved its worst case first: the run never overdraws its allowance,
    # and a refused request ends the run as budget exhausted
    used = status["budget"]["used"]["model_tokens"]
    assert used <= 100


def test_a_fifo_in_the_model_is_rejected_without_hanging(tmp_path: Path) -> None:
    import threading

    seed = write_seed(tmp_path / "seed")
    train = 'mkfifo "$RSI_MODEL_OUT/config.json"; touch "$RSI_MODEL_OUT/model.safetensors"'
    outcome: list[BaseException] = []

    def build() -> None:
        try:
            builder(tmp_path, train=train).build(seed, Store().put)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=build, daemon=True)
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), "the build hung on a FIFO"
    assert isinstance(outcome[0], BuildRejected)
    assert outcome[0].stage == "train" and "special files" in outcome[0].reason
