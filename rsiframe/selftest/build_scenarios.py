"""Self-test scenarios for the D/T/H build: the contamination audit and the build cache.

They drive :class:`rsiframe.dth.build.Builder` directly with a data step of a few lines and a
train step that must never be reached (or exits at once), so they need no torch and a
trial takes seconds. What passing means is in each docstring.
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path
from typing import TYPE_CHECKING

from rsiframe.dth.build import Builder, BuildRejected
from rsiframe.dth.contamination import Item, audit
from rsiframe.recipe.evaluator import BuildConfig, ContaminationConfig
from rsiframe.sandbox.bwrap import ProcessSandbox, make_sandbox
from rsiframe.util.digest import sha256_file, sha256_json

if TYPE_CHECKING:
    from rsiframe.selftest.common import Trial

#: the data step: rows from data/rows.json, plus what data/plant.json says to hide where
GENERATE = r"""import json, os
out = os.environ["RSI_DATASET_OUT"]
rows = json.load(open("rows.json"))
plant = json.load(open("plant.json"))
with open(os.path.join(out, "train.jsonl"), "w") as f:
    for r in rows:
        f.write(json.dumps({"prompt": r, "completion": r[::-1]}) + "\n")
    if plant.get("where") == "meta":
        meta = {"hidden": [{"q": w, "a": w[::-1]} for w in plant["words"]]}
        f.write(json.dumps({"prompt": "ab", "completion": "ba", "meta": meta}) + "\n")
if plant.get("where") == "side_file":
    firsts = {w[0] for w in plant["words"]}  # escaped in one pass: the text never holds them
    text = "".join("\\u%04x" % ord(c) if c in firsts else c for c in json.dumps(plant["words"]))
    open(os.path.join(out, "notes.json"), "w").write(text)
"""


def _word(rng: random.Random, n: int = 8) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(n))


def _candidate(root: Path, rng: random.Random, plant: dict[str, object]) -> Path:
    cand = root / "candidate"
    (cand / "data").mkdir(parents=True)
    (cand / "trainer").mkdir()
    (cand / "data" / "generate.py").write_text(GENERATE)
    (cand / "data" / "rows.json").write_text(json.dumps([_word(rng, 5) for _ in range(20)]))
    (cand / "data" / "plant.json").write_text(json.dumps(plant))
    notes = plant.get("trainer_notes")
    (cand / "trainer" / "config.json").write_text(json.dumps({"notes": notes or []}))
    return cand


def _builder(root: Path, sandbox: str | ProcessSandbox) -> Builder:
    cfg = BuildConfig(
        data="python3 generate.py", train="echo the train step ran >&2; exit 3", data_timeout_s=60
    )
    sb = sandbox if isinstance(sandbox, ProcessSandbox) else make_sandbox(sandbox)
    (root / "work").mkdir(parents=True, exist_ok=True)
    return Builder(cfg, sb, root / "work", root / "cache")


def contamination_everywhere(t: Trial) -> list[str]:
    """The data step hides gate items (with answers) under a `meta` key, in a JSON-escaped
    side file of the dataset, or in trainer/: the audit rejects it before training."""
    rng = t.rng
    words = [_word(rng) for _ in range(3)]
    gate = [Item("gate", "g", str(i), w) for i, w in enumerate(words)]
    sealed = [Item("sealed", "s", "0", _word(rng))]
    where = rng.choice(["meta", "side_file", "trainer"])
    plant: dict[str, object] = {"where": where, "words": words}
    if where == "trainer":
        plant["trainer_notes"] = words
    cand = _candidate(t.root, rng, plant)
    b = _builder(t.root, t.sandbox)
    cfg = ContaminationConfig()
    try:
        b.build(cand, lambda data: "", lambda texts: audit(texts, gate + sealed, cfg))
    except BuildRejected as exc:
        if exc.stage != "contamination":
            return [f"{where}: the build went on to {exc.stage!r}: {exc.reason}"]
        if f"{len(words)} gate item(s)" not in exc.reason:
            return [f"{where}: the audit found only part of it: {exc.reason}"]
        return []
    return [f"{where}: the build finished"]


def cache_isolation(t: Trial) -> list[str]:
    """A dataset built unconfined (`sandbox: process`) with the same cache is not reused by
    a bubblewrap build: it is built again, confined."""
    if make_sandbox("auto").kind != "bwrap":
        return ["bubblewrap is not usable here: no confined build to compare with"]
    cand = _candidate(t.root, t.rng, {})
    for sb in (ProcessSandbox(), "bwrap"):
        try:
            _builder(t.root, sb).build(cand, lambda data: "")
        except BuildRejected as exc:
            if exc.stage != "train":
                return [f"{sb}: the build failed at {exc.stage}: {exc.reason}"]
    entries = sorted(p.name for p in (t.root / "cache" / "data").iterdir())
    if len(entries) != 2:
        return [f"the bubblewrap build reused the process build's dataset ({entries})"]
    return []


def cache_forged_manifest(t: Trial) -> list[str]:
    """A cached dataset is edited between runs and its manifest rewritten to match: the next
    build refuses the entry and builds it again."""
    cand = _candidate(t.root, t.rng, {})
    for attempt in (1, 2):
        b = _builder(t.root, t.sandbox)  # a fresh builder: nothing remembered in memory
        try:
            b.build(cand, lambda data: "")
        except BuildRejected as exc:
            if exc.stage != "train":
                return [f"build {attempt} failed at {exc.stage}: {exc.reason}"]
        (entry,) = (t.root / "cache" / "data").iterdir()
        out = entry / "out"
        if attempt == 2:
            rows = (out / "train.jsonl").read_text()
            if "planted" in rows:
                return ["the edited dataset was reused"]
            return []
        with (out / "train.jsonl").open("a") as f:
            f.write(json.dumps({"prompt": "planted", "completion": "answer"}) + "\n")
        files = {p.relative_to(out).as_posix(): sha256_file(p) for p in sorted(out.rglob("*"))}
        manifest = json.loads((entry / "manifest.json").read_text())
        manifest.update(files=files, digest=sha256_json(files))
        (entry / "manifest.json").write_text(json.dumps(manifest))
    return ["unreachable"]


#: a train step that needs no torch: a "model" the model check accepts, its weights a
#: digest of the dataset (so a rebuild gives the same bytes), and a count of its runs
TRAIN = r"""import hashlib, json, os
out = os.environ["RSI_MODEL_OUT"]
data = open(os.path.join(os.environ["RSI_DATASET"], "train.jsonl"), "rb").read()
open(os.path.join(out, "model.safetensors"), "wb").write(hashlib.sha256(data).digest() * 64)
json.dump({"model_type": "gpt2"}, open(os.path.join(out, "config.json"), "w"))
json.dump({"version": "1.0"}, open(os.path.join(out, "tokenizer.json"), "w"))
"""


def cache_edited_model(t: Trial) -> list[str]:
    """A cached model's weights are edited between runs and its manifest rewritten to
    match: the next build refuses the entry, names why, and trains the model again."""
    cand = _candidate(t.root, t.rng, {})
    (cand / "trainer" / "train.py").write_text(TRAIN)
    cfg = BuildConfig(data="python3 generate.py", train="python3 train.py", data_timeout_s=60)
    sb = make_sandbox(t.sandbox)
    (t.root / "work").mkdir(parents=True, exist_ok=True)
    first = Builder(cfg, sb, t.root / "work", t.root / "cache").build(cand, lambda data: "")
    weights = first.model.dir / "model.safetensors"
    original = weights.read_bytes()
    edited = bytearray(original)
    edited[t.rng.randrange(len(edited))] ^= 1 << t.rng.randrange(8)
    weights.write_bytes(bytes(edited))
    entry = first.model.dir.parent
    files = {
        p.relative_to(first.model.dir).as_posix(): sha256_file(p)
        for p in sorted(first.model.dir.rglob("*"))
        if p.is_file()
    }
    manifest = json.loads((entry / "manifest.json").read_text())
    manifest.update(files=files, digest=sha256_json(files))
    (entry / "manifest.json").write_text(json.dumps(manifest))
    # a fresh builder, as in the next run: nothing remembered in memory
    again = Builder(cfg, sb, t.root / "work", t.root / "cache").build(cand, lambda data: "")
    problems = []
    if again.model.cached or again.model.dir.joinpath("model.safetensors").read_bytes() != original:
        problems.append("the edited model was reused")
    if "failed verification" not in again.model.note:
        problems.append(f"the rebuild does not say why: {again.model.note!r}")
    return problems


BUILD_SCENARIOS = {
    "contamination_everywhere": contamination_everywhere,
    "cache_isolation": cache_isolation,
    "cache_forged_manifest": cache_forged_manifest,
    "cache_edited_model": cache_edited_model,
}
