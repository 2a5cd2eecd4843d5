"""The build step: turn a candidate's data and trainer into a model, in the sandbox, cached.

Two steps, each run by the evaluator in the sandbox with only its own inputs:

1. **data** — a read-only copy of the candidate's ``data/`` subtree (the working
   directory) and a writable ``$RSI_DATASET_OUT``; must write ``train.jsonl`` rows
   ``{"prompt", "completion"}``. Then the contamination audit (see
   :mod:`rsiframe.dth.contamination`) runs on the dataset.
2. **train** — a read-only copy of ``trainer/`` (the working directory), the dataset's
   canonical ``{prompt, completion}`` rows (no other key, no side file) read-only at
   ``$RSI_DATASET`` and a writable ``$RSI_MODEL_OUT``; must write a safetensors model
   folder (GPT-2 or Llama) with its tokenizer. The audit before it reads the whole dataset
   and ``trainer/``, a superset of what training gets.

No network, ``HOME=/tmp``, ``RSI_THREADS`` threads, the host's kernel-path variables
(:data:`rsiframe.dth.hostfacts.KERNEL_ENV`). Outputs are cached,
content-addressed, in ``$RSIFRAME_CACHE_DIR`` (default ``~/.cache/rsiframe``): the
dataset by (data subtree digest, command, threads, framework), the model by (dataset
digest, trainer subtree digest, command, threads, framework), both also by the sandbox's
isolation level and the host facts that decide numerics (:mod:`rsiframe.dth.hostfacts`), so
an entry built unconfined or on other numerics is never reused. Each manifest carries an
HMAC under a host key kept in the key folder (masked in every sandbox): an entry is
re-hashed against its manifest, and the manifest checked against its HMAC, before every
use (and against what this run saw before); one that fails is rebuilt, so a model edited
in the cache with its manifest rewritten to match is never reused. A child that changed
only its harness reuses its parent's model without training. A candidate whose step
crashes, times out or writes bad output raises :class:`BuildRejected` (its fault, not the
infrastructure's).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsiframe import __version__
from rsiframe.certs.keys import key_dir
from rsiframe.dth.contamination import AuditResult, build_texts
from rsiframe.dth.hostfacts import host_facts, kernel_env
from rsiframe.dth.serving import ModelRefused, check_model_dir
from rsiframe.recipe.evaluator import BuildConfig
from rsiframe.sandbox.bwrap import Mount, ProcResult, Sandbox
from rsiframe.util import faults
from rsiframe.util.digest import sha256_bytes, sha256_file, sha256_json
from rsiframe.util.safefile import is_regular

TAIL = 4000


class BuildRejected(Exception):
    """The candidate's build failed by its own fault; ``stage`` says where."""

    def __init__(self, stage: str, reason: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{stage}: {reason}")
        self.stage = stage
        self.reason = reason
        self.details = details or {}


def cache_root() -> Path:
    configured = os.environ.get("RSIFRAME_CACHE_DIR")
    root = Path(configured).expanduser() if configured else Path.home() / ".cache" / "rsiframe"
    return root / "builds"


def cache_secret() -> bytes:
    """The host's key for build-cache manifests, in the key folder (masked in every
    sandbox); made on first use."""
    path = key_dir() / "build-cache.key"
    with contextlib.suppress(FileNotFoundError):
        secret = path.read_bytes()
        if len(secret) == 32:
            return secret
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".build-cache-{uuid.uuid4().hex[:8]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(32))
    try:
        os.link(tmp, path)  # first writer wins; a racing process reads the winner's key
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_bytes()


def _mac(secret: bytes, meta: dict[str, Any]) -> str:
    body = {k: v for k, v in meta.items() if k != "mac"}
    return hmac.new(secret, sha256_json(body).encode(), hashlib.sha256).hexdigest()


def tree_digest(path: Path) -> str:
    """Paths, bytes, executable bits and symlink targets of a folder."""
    entries: dict[str, Any] = {}
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path).as_posix()
        if p.is_symlink():
            entries[rel] = ["link", os.readlink(p)]
        elif p.is_file():
            entries[rel] = ["file", sha256_file(p), os.access(p, os.X_OK)]
    return sha256_json(entries)


def files_of(path: Path) -> dict[str, str]:
    """sha256 of every regular file under ``path`` (symlinks are refused elsewhere)."""
    return {
        p.relative_to(path).as_posix(): sha256_file(p)
        for p in sorted(path.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@dataclass
class StepResult:
    step: str
    key: str
    digest: str  # of the output's file manifest
    dir: Path  # the verified output folder in the cache
    files: dict[str, str]
    cached: bool
    seconds: float  # spent building now (0 for a cache hit)
    built_seconds: float  # what building it took when it was built
    note: str = ""

    def info(self) -> dict[str, Any]:
        out = {
            "key": self.key,
            "digest": self.digest,
            "cached": self.cached,
            "seconds": round(self.seconds, 3),
            "built_seconds": round(self.built_seconds, 3),
        }
        if self.note:
            out["note"] = self.note
        return out


@dataclass
class Built:
    """A built (or reused) model with everything the record needs."""

    dataset: StepResult
    model: StepResult
    inputs: dict[str, Any]
    contamination: dict[str, Any]
    train_metrics: dict[str, Any] = field(default_factory=dict)
    manifest: str = ""  # artifact digest of the build manifest
    host: dict[str, Any] = field(default_factory=dict)  # hostfacts.host_facts()
    isolation: str = ""

    @property
    def model_name(self) -> str:
        return f"model-{self.model.digest[:16]}"

    def record(self) -> dict[str, Any]:
        """The ``model`` field of the certified record (and the model_built event)."""
        return {
            "name": self.model_name,
            "model_digest": self.model.digest,
            "weights_digest": self.model.files.get("model.safetensors", ""),
            "config_digest": self.model.files.get("config.json", ""),
            "dataset_digest": self.dataset.digest,
            "build_inputs_digest": sha256_json(self.inputs),
            "build_manifest": self.manifest,
            "steps": {"data": self.dataset.info(), "train": self.model.info()},
            "training_seconds": round(self.model.seconds, 3),
            "train_metrics": self.train_metrics,
            "contamination": self.contamination,
            "isolation": self.isolation,
            "host": self.host,
        }


Put = Callable[[bytes], str]
Audit = Callable[[Iterable[str]], AuditResult]


class Builder:
    """Runs and caches the two build steps of a candidate."""

    def __init__(
        self, config: BuildConfig, sandbox: Sandbox, work_root: Path, root: Path | None = None
    ) -> None:
        self.config = config
        self.sandbox = sandbox
        self.work_root = work_root
        self.root = root or cache_root()
        self._seen: dict[tuple[str, str], str] = {}  # (step, key) -> digest, this process
        self._stored: dict[str, str] = {}  # build inputs digest -> manifest artifact
        self._audits: dict[str, AuditResult] = {}
        self._secret: bytes | None = None
        # one build of a step's key at a time in this process: the seed's three splits (or
        # two children with the same inputs) evaluated side by side build it once, not thrice
        self._building: dict[tuple[str, str], threading.Lock] = {}
        self._building_lock = threading.Lock()

    @property
    def models_root(self) -> Path:
        return self.root / "train"

    def _env(self) -> dict[str, str]:
        t = str(self.config.threads)
        return {
            "HOME": "/tmp",
            "RSI_THREADS": t,
            "OMP_NUM_THREADS": t,
            "MKL_NUM_THREADS": t,
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HOME": "/tmp/hf",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "XDG_CACHE_HOME": "/tmp/cache",
            "MPLCONFIGDIR": "/tmp/mpl",
            "WANDB_DISABLED": "true",
            "WANDB_MODE": "disabled",
            **kernel_env(),  # the host's choice of kernel paths (recorded in the host facts)
        }

    @property
    def host(self) -> dict[str, Any]:
        return host_facts(self.config.threads)

    @property
    def secret(self) -> bytes:
        if self._secret is None:
            self._secret = cache_secret()
        return self._secret

    def _key(self, step: str, **parts: Any) -> str:
        return sha256_json(
            {
                "step": step,
                "framework": __version__,
                "threads": self.config.threads,
                "command": self.config.data if step == "data" else self.config.train,
                "isolation": self.sandbox.isolation,
                "host": self.host,
                **parts,
            }
        )

    # -- cache ----------------------------------------------------------------------

    def _lookup(self, step: str, key: str) -> tuple[StepResult | None, str]:
        entry = self.root / step / key
        manifest = entry / "manifest.json"
        if not manifest.is_file():
            return None, ""
        try:
            meta = json.loads(manifest.read_text())
            ok = hmac.compare_digest(str(meta.get("mac", "")), _mac(self.secret, meta))
            ok = ok or faults.off("cache_mac")  # the self-test's proof only (faults.off)
            files = files_of(entry / "out")
            ok = ok and files == meta["files"] and sha256_json(files) == meta["digest"]
            seen = self._seen.get((step, key))
            ok = ok and (seen is None or seen == meta["digest"])
        except (OSError, ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            shutil.rmtree(entry, ignore_errors=True)
            return None, "the cache entry failed verification and was rebuilt"
        self._seen[(step, key)] = meta["digest"]
        result = StepResult(
            step, key, meta["digest"], entry / "out", files, True, 0.0, meta.get("seconds", 0.0)
        )
        return result, ""

    def _store(self, step: str, key: str, out: Path, seconds: float) -> StepResult:
        entry = self.root / step / key
        tmp = self.root / step / f".tmp-{key[:16]}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        shutil.move(str(out), tmp / "out")
        files = files_of(tmp / "out")
        digest = sha256_json(files)
        meta: dict[str, Any] = {
            "step": step,
            "key": key,
            "files": files,
            "digest": digest,
            "seconds": seconds,
        }
        meta["mac"] = _mac(self.secret, meta)
        (tmp / "manifest.json").write_text(json.dumps(meta, indent=1))
        try:
            tmp.rename(entry)
        except OSError:  # another process stored the same key first: use theirs
            shutil.rmtree(tmp, ignore_errors=True)
            found, _ = self._lookup(step, key)
            if found is not None:
                return found
            raise
        self._seen[(step, key)] = digest
        return StepResult(step, key, digest, entry / "out", files, False, seconds, seconds)

    # -- steps ----------------------------------------------------------------------

    def _run(
        self,
        step: str,
        command: str,
        candidate_dir: Path,
        inputs: list[str],
        extra: list[Mount],
        env: dict[str, str],
        out_var: str,
        timeout: float,
    ) -> tuple[Path, ProcResult, Path]:
        stage = self.work_root / f"build-{step}-{uuid.uuid4().hex[:8]}"
        mounts = []
        for name in inputs:  # each one checked by _input_digest before the build started
            dst = stage / "in" / name
            shutil.copytree(candidate_dir / name, dst, symlinks=True)
            mounts.append(Mount(dst, f"/build/{name}"))
        out = stage / "out"
        out.mkdir(parents=True)
        m_out = Mount(out, "/build/out", writable=True)
        sb = self.sandbox
        full_env = {**self._env(), **env, out_var: sb.view(m_out)}
        res = sb.run(
            ["sh", "-c", command],
            mounts=[*mounts, *extra, m_out],
            cwd=mounts[0],
            env=full_env,
            timeout=timeout,
            network=False,
            output_limit=1 << 20,
            memory_mb=self.config.memory_mb,
        )
        return out, res, stage

    @staticmethod
    def _failure(step: str, res: ProcResult, timeout: float) -> BuildRejected:
        tail = (res.stderr or res.stdout)[-TAIL:].decode(errors="replace").strip()
        last = tail.splitlines()[-1] if tail else "no output"
        if res.timed_out:
            why = f"timed out after {timeout:g}s"
        else:
            why = f"exited with status {res.exit_code}: {last}"
        return BuildRejected(step, why, {"stderr_tail": tail[-TAIL:]})

    @staticmethod
    def _check_output(step: str, out: Path, max_mb: float, noun: str) -> None:
        """No symlinks or special files (a FIFO would hang the host's reads) in a step's
        output, and no more than ``max_mb`` MiB of files."""
        links = sorted(p.name for p in out.rglob("*") if p.is_symlink())
        if links:
            raise BuildRejected(step, f"symlinks in {noun}: {', '.join(links[:3])}")
        special = sorted(p.name for p in out.rglob("*") if not (p.is_dir() or is_regular(p)))
        if special:
            raise BuildRejected(step, f"special files in {noun}: {', '.join(special[:3])}")
        size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        if size > max_mb * (1 << 20):
            raise BuildRejected(step, f"{noun} is {size >> 20} MiB, over the limit")

    def _check_dataset(self, out: Path) -> None:
        path = out / "train.jsonl"
        if not path.is_file():
            raise BuildRejected("data", "the data step wrote no train.jsonl")
        self._check_output("data", out, self.config.max_dataset_mb, "the dataset")
        rows = 0
        with path.open("rb") as f:
            for n, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    row = json.loads(raw)
                except ValueError:
                    raise BuildRejected("data", f"train.jsonl line {n} is not JSON") from None
                if not (
                    isinstance(row, dict)
                    and isinstance(row.get("prompt"), str)
                    and isinstance(row.get("completion"), str)
                ):
                    raise BuildRejected(
                        "data", f"train.jsonl line {n} is not a {{prompt, completion}} object"
                    )
                rows += 1
        if rows == 0:
            raise BuildRejected("data", "train.jsonl is empty")

    def _check_model(self, out: Path) -> None:
        self._check_output("train", out, self.config.max_model_mb, "the model folder")
        try:
            check_model_dir(out)
        except ModelRefused as exc:
            raise BuildRejected("train", f"the model is refused: {exc}") from exc

    def _step(
        self,
        step: str,
        key: str,
        run: Callable[[], tuple[Path, ProcResult, Path]],
        timeout: float,
        check: Callable[[Path], None],
    ) -> StepResult:
        with self._building_lock:
            once = self._building.setdefault((step, key), threading.Lock())
        with once:  # a second build of this key waits, then finds the first one's entry
            found, note = self._lookup(step, key)
            if found is not None:
                return found
            t0 = time.perf_counter()
            out, res, stage = run()
            try:
                if not res.ok:
                    raise self._failure(step, res, timeout)
                check(out)
                result = self._store(step, key, out, time.perf_counter() - t0)
            finally:
                shutil.rmtree(stage, ignore_errors=True)
        result.note = note
        return result

    def build(self, candidate_dir: Path, put: Put, audit: Audit | None = None) -> Built:
        """Build (or reuse) the candidate's dataset and model; audit new datasets."""
        cfg = self.config
        data_inputs = {n: _input_digest("data", candidate_dir, n) for n in cfg.data_inputs}
        dkey = self._key("data", inputs=data_inputs)
        dataset = self._step(
            "data",
            dkey,
            lambda: self._run(
                "data",
                cfg.data,
                candidate_dir,
                cfg.data_inputs,
                [],
                {},
                "RSI_DATASET_OUT",
                cfg.data_timeout_s,
            ),
            cfg.data_timeout_s,
            self._check_dataset,
        )
        train_inputs = {n: _input_digest("train", candidate_dir, n) for n in cfg.train_inputs}
        contamination: dict[str, Any] = {}
        if audit is not None:  # everything the train step could be handed, read whole
            memo = sha256_json([dataset.digest, train_inputs])
            result = self._audits.get(memo)
            if result is None:
                result = audit(
                    build_texts(dataset.dir, [candidate_dir / n for n in cfg.train_inputs])
                )
                self._audits[memo] = result
            contamination = result.summary(cfg.contamination.max_examples)
            if result.contaminated and cfg.contamination.policy == "reject":
                raise BuildRejected("contamination", result.reason(), {"audit": contamination})
        mkey = self._key("train", dataset=dataset.digest, inputs=train_inputs)
        canonical = self.work_root / f"dataset-{uuid.uuid4().hex[:8]}"
        m_data = Mount(canonical, "/build/dataset")

        def train() -> tuple[Path, ProcResult, Path]:
            _canonical_dataset(dataset.dir / "train.jsonl", canonical)
            return self._run(
                "train",
                cfg.train,
                candidate_dir,
                cfg.train_inputs,
                [m_data],
                {"RSI_DATASET": self.sandbox.view(m_data)},
                "RSI_MODEL_OUT",
                cfg.train_timeout_s,
            )

        try:
            model = self._step("train", mkey, train, cfg.train_timeout_s, self._check_model)
        finally:
            shutil.rmtree(canonical, ignore_errors=True)
        inputs = {
            "data": data_inputs,
            "train": train_inputs,
            "data_key": dkey,
            "train_key": mkey,
            "framework": __version__,
            "build_config": cfg.model_dump(mode="json", exclude={"serve"}),
        }
        metrics: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            raw = json.loads((model.dir / "train_metrics.json").read_text())
            if isinstance(raw, dict):
                metrics = {k: v for k, v in raw.items() if isinstance(v, int | float | str)}
        built = Built(
            dataset,
            model,
            inputs,
            contamination,
            metrics,
            host=self.host,
            isolation=self.sandbox.isolation,
        )
        built.manifest = self._store_artifacts(built, put)
        return built

    def _store_artifacts(self, built: Built, put: Put) -> str:
        """The dataset, the model files and the build inputs, as run artifacts."""
        ident = sha256_json([built.inputs, built.dataset.digest, built.model.digest])
        if ident in self._stored:
            return self._stored[ident]
        manifest: dict[str, Any] = {"inputs": built.inputs}
        for name, res in (("dataset", built.dataset), ("model", built.model)):
            refs = {}
            for rel in res.files:
                data = (res.dir / rel).read_bytes()
                if sha256_bytes(data) != res.files[rel]:
                    raise BuildRejected(name, f"{rel} changed in the cache while being stored")
                refs[rel] = put(data)
            manifest[name] = {"digest": res.digest, "files": refs, **res.info()}
        ref = put(json.dumps(manifest, sort_keys=True, indent=1).encode())
        self._stored[ident] = ref
        return ref


def _canonical_dataset(train_jsonl: Path, out: Path) -> None:
    """What the train step gets: only the ``{prompt, completion}`` of each row (checked by
    ``_check_dataset``), no other key and no other file of the data step's output."""
    out.mkdir(parents=True)
    with train_jsonl.open("rb") as src, (out / "train.jsonl").open("w") as dst:
        for raw in src:
            if raw.strip():
                row = json.loads(raw)
                dst.write(json.dumps({"prompt": row["prompt"], "completion": row["completion"]}))
                dst.write("\n")


def _input_digest(step: str, candidate_dir: Path, name: str) -> str:
    """Digest of the input subtree ``name`` of ``step``; a missing one is the candidate's fault."""
    path = candidate_dir / name
    if not path.is_dir():
        raise BuildRejected(step, f"no {name}/ folder")
    return tree_digest(path)
