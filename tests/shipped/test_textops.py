"""The textops task set and its D/T/H seed: generation, checker, data, trainer, harness."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from rsiframe.tasks.taskset import TaskSet, file_rows
from tests.support.paths import REPO, TEXTOPS

SEED = TEXTOPS / "seed"


PY = sys.executable


def load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


datagen = load("textops_datagen", SEED / "data" / "generate.py")


harness = load("textops_harness", SEED / "harness" / "run.py")


def task_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.name.startswith("textops-"))


# -- the task set -----------------------------------------------------------------------


def test_generate_rewrites_the_shipped_tasks_byte_identically(tmp_path: Path) -> None:
    for out in (tmp_path / "a", tmp_path / "b"):
        res = subprocess.run(
            [PY, str(TEXTOPS / "generate.py"), "--out", str(out)], capture_output=True, text=True
        )
        assert res.returncode == 0, res.stderr
    shipped = {p.name: file_rows(p) for p in task_dirs(TEXTOPS)}
    assert len(shipped) == 60
    for out in (tmp_path / "a", tmp_path / "b"):
        assert {p.name: file_rows(p) for p in task_dirs(out)} == shipped


def test_gate_and_sealed_items_are_not_derivable_from_the_public_generator() -> None:
    """The shipped split's gate and sealed tasks hold stored items from a secret seed: the
    public generator's own draws for them (what a candidate could recompute) share no
    item with them, while every train task is exactly what the public seed draws."""
    import random

    from rsiframe.recipe.load import load as load_recipe
    from rsiframe.tasks.taskset import make_split

    gen = load("textops_gen", TEXTOPS / "generate.py")
    ids = sorted(p.name for p in task_dirs(TEXTOPS))
    split = load_recipe(REPO / "recipes" / "textops-base.yaml").recipe.tasks.split
    shipped = make_split(ids, ratios=split.ratios, seed=split.seed)
    assert gen.hidden_ids(ids) == set(shipped["gate"]) | set(shipped["sealed"])
    rng, seen, slot, public = random.Random(gen.RNG_SEED), set(), 0, {}
    for tid in ids:  # the public stream, as generate.py draws it
        for _ in range(gen.ITEMS):
            kind = gen.KINDS[slot % 3]
            slot += 1
            while (text := gen.draw_problem(rng, kind)) in seen:
                pass
            seen.add(text)
            public.setdefault(tid, []).append(text)
    for tid in ids:
        path = TEXTOPS / tid / "environment" / "items.jsonl"
        items = [json.loads(x)["prompt_text"] for x in path.open()]
        if tid in gen.hidden_ids(ids):
            assert not set(items) & seen, tid  # nothing the public stream draws anywhere
        else:
            assert items == public[tid]
    assert str(gen.RNG_SEED) in (TEXTOPS / "generate.py").read_text()


def test_every_task_parses_and_hides_its_answers() -> None:
    taskset = TaskSet.load(TEXTOPS)
    assert sorted(taskset.tasks) == [f"textops-{i:03d}" for i in range(1, 61)]
    kinds: dict[str, int] = {}
    texts: set[str] = set()
    for task in taskset.tasks.values():
        items = [json.loads(x) for x in (task.path / "environment" / "items.jsonl").open()]
        expected = [json.loads(x) for x in (task.path / "tests" / "expected.jsonl").open()]
        assert len(items) == 8 and [i["id"] for i in items] == [e["id"] for e in expected]
        assert all(set(i) == {"id", "kind", "prompt_text"} for i in items)
        assert not any(p.name == "expected.jsonl" for p in (task.path / "environment").rglob("*"))
        for item, exp in zip(items, expected, strict=True):
            kinds[item["kind"]] = kinds.get(item["kind"], 0) + 1
            texts.add(item["prompt_text"])
            p = item["prompt_text"]
            if item["kind"] == "add":
                truth = str(sum(int(x) for x in p.split("+")))
            else:
                truth = p[::-1] if item["kind"] == "reverse" else "".join(sorted(p))
            assert exp["answer"] == truth
        assert task.verifier_timeout > 0 and not task.agent_network
    assert kinds == {"reverse": 160, "sort": 160, "add": 160}
    assert len(texts) == 480  # no problem is stored twice


# -- the checker ------------------------------------------------------------------------


def verify(task: Path, app: Path, tmp: Path) -> tuple[float, str]:
    logs = tmp / "logs"
    shutil.rmtree(logs, ignore_errors=True)
    env = dict(os.environ, RSI_APP=str(app), RSI_TESTS=str(task / "tests"), RSI_LOGS=str(logs))
    res = subprocess.run(["bash", str(task / "tests" / "test.sh")], env=env, capture_output=True)
    assert res.returncode == 0
    return float((logs / "verifier" / "reward.txt").read_text()), res.stdout.decode()


def test_checker_scores_exact_matches(tmp_path: Path) -> None:
    task = TEXTOPS / "textops-001"
    expected = [json.loads(x) for x in (task / "tests" / "expected.jsonl").open()]
    app = tmp_path / "app"
    app.mkdir()
    answers = app / "answers.jsonl"

    def write(rows: list[dict[str, Any]]) -> None:
        answers.write_text("".join(json.dumps(r) + "\n" for r in rows))

    write(expected)
    assert verify(task, app, tmp_path)[0] == 1.0
    wrong = [dict(e, answer=e["answer"] + "x") for e in expected[:3]]
    write(wrong + expected[3:])  # 5/8 right
    assert verify(task, app, tmp_path)[0] == pytest.approx(5 / 8)
    write(expected[:2])  # the rest missing
    reward, out = verify(task, app, tmp_path)
    assert reward == pytest.approx(2 / 8) and "6 missing" in out
    answers.write_bytes(b'\x00\xffnot json\n[1, 2]\n{"id": 3}\n')
    assert verify(task, app, tmp_path)[0] == 0.0
    answers.unlink()
    reward, out = verify(task, app, tmp_path)
    assert reward == 0.0 and "no answers file" in out


# -- data -------------------------------------------------------------------------------


def seed_data_config() -> dict[str, Any]:
    return yaml.safe_load((SEED / "data" / "config.yaml").read_text())


@pytest.mark.parametrize("add_format", ["plain", "padded", "reversed"])
@pytest.mark.parametrize("letters_format", ["plain", "spaced"])
def test_data_rows_are_right_in_every_format(add_format: str, letters_format: str) -> None:
    cfg = seed_data_config()
    cfg.update(count=300, format={"add": add_format, "letters": letters_format})
    rows = datagen.generate(datagen.load_config_dict(cfg))
    assert len(rows) == 300
    fmt = {"add": add_format, "letters": letters_format, "width": cfg["digits"]["max"]}
    seen = set()
    for row in rows:
        prompt, completion = row["prompt"], row["completion"]
        assert completion.endswith("\n") and prompt.endswith("=")
        body = prompt[:-1]
        if body.startswith(("rev ", "sort ")):
            kind = "reverse" if body.startswith("rev ") else "sort"
            problem = body.split(" ", 1)[1].replace(" ", "")
            truth = problem[::-1] if kind == "reverse" else "".join(sorted(problem))
        else:
            kind = "add"
            a, b = body.split("+")
            problem, truth = f"{int(a)}+{int(b)}", str(int(a) + int(b))
        seen.add(kind)
        # the harness renders the same prompt and parses the completion back to the truth
        assert harness.render(kind, problem, fmt) == prompt
        assert harness.parse(kind, completion) == truth
    assert seen == {"reverse", "sort", "add"}


def test_data_generator_writes_jsonl_and_rejects_bad_config(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(SEED / "data", data)
    env = dict(os.environ, RSI_DATASET_OUT=str(tmp_path / "ds"))
    res = subprocess.run([PY, "generate.py"], cwd=data, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(x) for x in (tmp_path / "ds" / "train.jsonl").open()]
    assert len(rows) == seed_data_config()["count"]
    assert all(set(r) == {"prompt", "completion"} for r in rows)
    again = tmp_path / "ds2"
    env["RSI_DATASET_OUT"] = str(again)
    subprocess.run([PY, "generate.py"], cwd=data, env=env, check=True, capture_output=True)
    assert (again / "train.jsonl").read_bytes() == (tmp_path / "ds" / "train.jsonl").read_bytes()
    cfg = seed_data_config()
    cfg["format"]["add"] = "roman"
    (data / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = subprocess.run([PY, "generate.py"], cwd=data, env=env, capture_output=True, text=True)
    assert res.returncode == 2 and "format.add" in res.stderr


# -- trainer ----------------------------------------------------------------------------


TINY_TRAINER = {
    "seed": 0,
    "model": {"arch": "llama", "d_model": 32, "layers": 1, "heads": 2, "context": 24},
    "train": {
        "epochs": 4,
        "batch_size": 16,
        "lr": 0.005,
        "schedule": "constant",
        "warmup_ratio": 0.0,
        "completion_only_loss": True,
        "max_steps": 60,
    },
}


def test_tiny_trainer_trains_and_writes_a_loadable_model(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    ds.mkdir()
    cfg = seed_data_config()
    cfg.update(count=240)
    rows = datagen.generate(datagen.load_config_dict(cfg))
    (ds / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    trainer = tmp_path / "trainer"
    shutil.copytree(SEED / "trainer", trainer)
    (trainer / "config.yaml").write_text(yaml.safe_dump(TINY_TRAINER))
    out = tmp_path / "model"
    env = dict(
        os.environ,
        RSI_DATASET=str(ds),
        RSI_MODEL_OUT=str(out),
        RSI_THREADS="1",
        HOME=str(tmp_path),
        HF_HUB_OFFLINE="1",
    )
    res = subprocess.run([PY, "train.py"], cwd=trainer, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    metrics = json.loads((out / "train_metrics.json").read_text())
    assert metrics["steps"] == 60 and metrics["examples"] == 240
    assert metrics["final_loss"] < 0.8 * metrics["first_loss"]
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    assert not any(n.endswith((".bin", ".pt", ".pth", ".pkl")) for n in names)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    ids = tok("rev abc=\n")["input_ids"]
    assert len(ids) == 9 and tok.decode(ids) == "rev abc=\n"
    assert tok.convert_tokens_to_ids("<eos>") == tok.eos_token_id
    model = AutoModelForCausalLM.from_pretrained(out)
    assert sum(p.numel() for p in model.parameters()) == metrics["parameters"]

    # a broken dataset ends the build with a reason, not a traceback
    (ds / "train.jsonl").write_text('{"prompt": 1}\n')
    res = subprocess.run([PY, "train.py"], cwd=trainer, env=env, capture_output=True, text=True)
    assert res.returncode == 2 and "line 1" in res.stderr


# -- harness ----------------------------------------------------------------------------


def test_harness_renders_parses_and_validates() -> None:
    plain = {"add": "plain", "letters": "plain", "width": 3}
    assert harness.render("add", "123+45", plain) == "123+45="
    assert harness.render("add", "123+45", dict(plain, add="reversed")) == "123+045="
    assert harness.render("add", "1234+5", dict(plain, add="padded")) == "1234+0005="
    assert harness.render("reverse", "abc", dict(plain, letters="spaced")) == "rev a b c="
    assert harness.parse("add", "~8610\njunk") == "168"
    assert harness.parse("add", "0168") == "168"
    assert harness.parse("add", "~000") == "0"
    assert harness.parse("sort", " a b c ") == "abc"
    assert harness.valid("sort", "cab", "abc") and not harness.valid("sort", "cab", "acb")
    assert harness.valid("reverse", "cab", "bac") and not harness.valid("reverse", "cab", "bax")
    assert not harness.valid("add", "1+2", "") and harness.valid("add", "1+2", "3")
    assert harness.vote(["a", "b", "b", "a"]) == "a" and harness.vote([]) == ""


Reply = Callable[[dict[str, Any]], Any]


@pytest.fixture
def fake_server() -> Iterator[Callable[[Reply], tuple[str, list[dict[str, Any]]]]]:
    """A loopback server answering /v1/completions with ``reply(body)``; records bodies."""
    servers: list[ThreadingHTTPServer] = []

    def start(reply: Reply) -> tuple[str, list[dict[str, Any]]]:
        bodies: list[dict[str, Any]] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                bodies.append(body)
                out = reply(body)
                data = out if isinstance(out, bytes) else json.dumps(out).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1", bodies

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def oracle(body: dict[str, Any], spoil_sort: bool = True) -> dict[str, Any]:
    """A perfect model for the ``reversed`` add format, except (``spoil_sort``) that the
    first sample of every sort item is wrong."""
    choices = []
    for i, prompt in enumerate(body["prompt"]):
        head = prompt[:-1]
        if head.startswith(("rev ", "sort ")):
            word = head.split(" ", 1)[1]
            good = word[::-1] if head.startswith("rev") else "".join(sorted(word))
        else:
            a, b = head.split("+")
            good = "~" + f"{int(a) + int(b):04d}"[::-1]
        for j in range(body["n"]):
            spoil = spoil_sort and j == 0 and head.startswith("sort")
            text = good[::-1] + "zz" if spoil else good
            choices.append({"index": i * body["n"] + j, "text": text, "finish_reason": "stop"})
    return {"choices": choices, "usage": {}}


def run_harness(
    tmp: Path, url: str, harness_cfg: dict[str, Any], data_format: str = "reversed"
) -> tuple[subprocess.CompletedProcess[str], dict[str, str], float]:
    cand = tmp / "cand"
    shutil.rmtree(cand, ignore_errors=True)
    shutil.copytree(SEED, cand)
    (cand / "harness" / "config.yaml").write_text(yaml.safe_dump(harness_cfg))
    data_cfg = seed_data_config()
    data_cfg["format"]["add"] = data_format
    (cand / "data" / "config.yaml").write_text(yaml.safe_dump(data_cfg))
    app = tmp / "app"
    shutil.rmtree(app, ignore_errors=True)
    shutil.copytree(TEXTOPS / "textops-002" / "environment", app)
    env = dict(os.environ, RSI_APP=str(app), RSI_CANDIDATE=str(cand), OPENAI_BASE_URL=url)
    env["RSI_MODEL"] = "m"
    start = time.monotonic()
    res = subprocess.run(
        [PY, str(cand / "harness" / "run.py")], cwd=app, env=env, capture_output=True, text=True
    )
    seconds = time.monotonic() - start
    answers = {}
    if (app / "answers.jsonl").is_file():
        for line in (app / "answers.jsonl").read_text().splitlines():
            row = json.loads(line)
            answers[row["id"]] = row["answer"]
    return res, answers, seconds


def expected_of(task: str) -> dict[str, str]:
    rows = [json.loads(x) for x in (TEXTOPS / task / "tests" / "expected.jsonl").open()]
    return {r["id"]: r["answer"] for r in rows}


def harness_cfg(**changes: Any) -> dict[str, Any]:
    cfg = yaml.safe_load((SEED / "harness" / "config.yaml").read_text())
    for key, value in changes.items():
        node = cfg
        *parents, leaf = key.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return cfg


def test_harness_batches_votes_and_undoes_the_data_format(tmp_path: Path, fake_server) -> None:
    url, bodies = fake_server(oracle)
    cfg = harness_cfg(decoding__samples=3, decoding__temperature=0.0)
    res, answers, _ = run_harness(tmp_path, url, cfg)
    assert res.returncode == 0, res.stderr
    assert answers == expected_of("textops-002")  # 2 of 3 samples right: the vote wins
    assert len(bodies) == 1  # one batched request per task
    body = bodies[0]
    assert len(body["prompt"]) == 8 and body["n"] == 3 and body["model"] == "m"
    assert body["stop"] == ["\n"] and body["temperature"] == 0.0
    assert "381+678=" in body["prompt"]  # 3-digit operands: no padding needed at width 3

    # validation + retry: one sample, the first (bad) sort answer is retried and fixed
    calls: list[int] = []

    def flaky(body: dict[str, Any]) -> dict[str, Any]:
        calls.append(len(body["prompt"]))
        return oracle(body, spoil_sort=len(calls) == 1)

    url, _ = fake_server(flaky)
    res, answers, _ = run_harness(tmp_path, url, harness_cfg(validate=True, retries=1))
    assert res.returncode == 0 and answers == expected_of("textops-002")
    assert calls == [8, 2]  # textops-002 has 2 sort items; only they are asked again


def test_harness_survives_garbage_and_hanging_servers(tmp_path: Path, fake_server) -> None:
    for reply in (
        lambda body: b"<html>not json</html>",
        lambda body: {"choices": [{"index": 0, "text": "x"}]},  # too few choices
        lambda body: {"error": "boom"},
    ):
        url, _ = fake_server(reply)
        res, answers, _ = run_harness(tmp_path, url, harness_cfg())
        assert res.returncode == 1 and "harness:" in res.stderr
        assert len(answers) == 8 and set(answers.values()) == {""}

    # non-string texts count as empty answers, not a crash
    url, _ = fake_server(
        lambda body: {"choices": [{"index": i, "text": None} for i in range(len(body["prompt"]))]}
    )
    res, answers, _ = run_harness(tmp_path, url, harness_cfg())
    assert res.returncode == 0 and set(answers.values()) == {""}

    def hang(body: dict[str, Any]) -> dict[str, Any]:
        time.sleep(5)
        return oracle(body)

    url, _ = fake_server(hang)
    res, answers, seconds = run_harness(tmp_path, url, harness_cfg(request_timeout_s=1))
    assert res.returncode == 1 and "failed" in res.stderr
    assert len(answers) == 8 and seconds < 4.5

    # a dead endpoint: refused connection, same clean exit
    res, answers, _ = run_harness(tmp_path, "http://127.0.0.1:9/v1", harness_cfg())
    assert res.returncode == 1 and len(answers) == 8


@pytest.mark.parametrize("space_file", ["knobs.yaml", "knobs-quickstart.yaml"])
def test_every_knob_names_a_seed_value_that_can_move(space_file: str) -> None:
    import random

    from rsiframe.operators.knobs import KnobSpec, _get, _move

    space = yaml.safe_load((SEED / space_file).read_text())["knobs"]
    full = yaml.safe_load((SEED / "knobs.yaml").read_text())["knobs"]
    assert all(k in full for k in space)  # the focused space is a subset of the full one
    parts = {k["file"] for k in space}
    assert parts == {"data/config.yaml", "trainer/config.yaml", "harness/config.yaml"}
    rng = random.Random(0)
    for raw in space:
        knob = KnobSpec.model_validate(raw)
        current = _get(yaml.safe_load((SEED / knob.file).read_text()), knob.key)
        if knob.choices is not None:
            assert current in knob.choices, (knob.key, current)
        else:
            assert knob.range is not None and knob.range[0] <= current <= knob.range[1]
        for _ in range(5):
            assert _move(knob, current, rng, 3) != current
