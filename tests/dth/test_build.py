"""The build step: real data generation and real (tiny) trl training in the sandbox, cached.

The default run builds one tiny model (a few seconds of training plus imports) and checks
the cache around it; the end-to-end runs (``-m e2e``) drive the whole engine: records,
events, token metering, the budget and the bad-input cases.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsiframe.dth.build import Builder, BuildRejected
from rsiframe.recipe.evaluator import BuildConfig
from rsiframe.sandbox.bwrap import make_sandbox
from rsiframe.util.digest import sha256_file, sha256_json
from tests.support.dth import BUILD, write_seed

#: the builds of this module share one cache, so they share the host key that signs its
#: manifests (conftest.py gives every other test a key folder of its own)
pytestmark = pytest.mark.usefixtures("use_module_keys")


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
def built(tmp_path_factory: pytest.TempPathFactory, module_keys: Path):  # type: ignore[no-untyped-def]
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


def test_a_key_built_side_by_side_is_built_once(tmp_path: Path) -> None:
    """The seed's train, gate and sealed evaluations run side by side and each builds the
    seed's model: the step runs once, the others wait and reuse its cache entry."""
    import threading
    import time

    from rsiframe.sandbox.bwrap import ProcResult

    b = builder(tmp_path)
    runs: list[int] = []

    def run() -> tuple[Path, ProcResult, Path]:
        runs.append(1)
        stage = tmp_path / f"stage-{len(runs)}"
        (stage / "out").mkdir(parents=True)
        (stage / "out" / "weights.bin").write_bytes(b"w" * 64)
        time.sleep(0.5)  # a build the others arrive during
        return stage / "out", ProcResult(0, False, 0.5, b"", b""), stage

    got = []
    threads = [
        threading.Thread(target=lambda: got.append(b._step("train", "k1", run, 60, lambda _: None)))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(runs) == 1
    assert sorted(r.cached for r in got) == [False, True, True]
    assert len({r.digest for r in got}) == 1
    # another key is not held back by this one
    b._step("train", "k2", run, 60, lambda _: None)
    assert len(runs) == 2
