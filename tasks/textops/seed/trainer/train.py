#!/usr/bin/env python3
"""Train the textops model: character tokenizer + GPT-2 from config, trl SFTTrainer.

Run with cwd = this folder. Reads ``config.yaml`` and ``$RSI_DATASET/train.jsonl``
(``{"prompt", "completion"}`` rows), honours ``$RSI_THREADS`` (torch threads, default 1),
and writes a Hugging Face model folder to ``$RSI_MODEL_OUT``: ``config.json``,
``model.safetensors``, the tokenizer files and ``train_metrics.json``. Nothing is
downloaded: the tokenizer and the model are built in code. Deterministic for a fixed
config, dataset and thread count.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import string
import sys
import tempfile
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
SPECIALS = ["<pad>", "<unk>", "<eos>"]
# Always in the vocabulary, so a prompt the data never showed still tokenizes.
BASE_CHARS = string.ascii_lowercase + string.digits + " +=~\n"
SCHEDULES = {"cosine", "linear", "constant"}


class ConfigError(ValueError):
    """config.yaml or the dataset is unusable."""


def load_config(path: Path) -> dict:
    cfg = yaml.safe_load(path.read_text())
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model"), dict):
        raise ConfigError("config.yaml needs model: and train: mappings")
    m, t = cfg["model"], cfg.get("train") or {}
    for key in ("d_model", "layers", "heads", "context"):
        if not isinstance(m.get(key), int) or m[key] < 1:
            raise ConfigError(f"model.{key} must be a positive integer")
    if m.get("arch", "gpt2") not in ("gpt2", "llama"):
        raise ConfigError("model.arch must be gpt2 or llama")
    if m["d_model"] % m["heads"]:
        raise ConfigError("model.d_model must be a multiple of model.heads")
    for key in ("epochs", "batch_size", "max_steps"):
        if not isinstance(t.get(key), int | float) or t[key] <= 0:
            raise ConfigError(f"train.{key} must be positive")
    if not isinstance(t.get("lr"), int | float) or not 0 < t["lr"] < 1:
        raise ConfigError("train.lr must be in (0, 1)")
    if t.get("schedule", "cosine") not in SCHEDULES:
        raise ConfigError(f"train.schedule must be one of {', '.join(sorted(SCHEDULES))}")
    cfg["train"] = t
    return cfg


def read_rows(path: Path) -> list[dict[str, str]]:
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path.name} line {n}: not JSON ({exc.msg})") from None
            if not (
                isinstance(row, dict)
                and isinstance(row.get("prompt"), str)
                and isinstance(row.get("completion"), str)
                and row["completion"]
            ):
                raise ConfigError(f"{path.name} line {n}: needs string prompt and completion")
            rows.append({"prompt": row["prompt"], "completion": row["completion"]})
    if not rows:
        raise ConfigError(f"{path.name} is empty")
    return rows


def build_tokenizer(rows: list[dict[str, str]]):
    """One token per character (WordLevel), ``<eos>`` ends every completion."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = set(BASE_CHARS)
    for row in rows:
        chars.update(row["prompt"], row["completion"])
    vocab = {tok: i for i, tok in enumerate(SPECIALS + sorted(chars))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        unk_token="<unk>",
        eos_token="<eos>",
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=1024,
    )


def build_model(cfg: dict, tokenizer):
    """GPT-2 (learned absolute positions) or Llama (rotary, relative positions), from config."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    m = cfg["model"]
    if m.get("arch", "gpt2") == "llama":
        return LlamaForCausalLM(
            LlamaConfig(
                vocab_size=len(tokenizer),
                hidden_size=m["d_model"],
                intermediate_size=4 * m["d_model"],
                num_hidden_layers=m["layers"],
                num_attention_heads=m["heads"],
                num_key_value_heads=m["heads"],
                max_position_embeddings=m["context"],
                tie_word_embeddings=True,
                bos_token_id=tokenizer.eos_token_id,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )
        )
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=m["context"],
        n_embd=m["d_model"],
        n_layer=m["layers"],
        n_head=m["heads"],
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return GPT2LMHeadModel(config)


def train(cfg: dict, rows: list[dict[str, str]], out: Path) -> dict:
    import torch

    threads = int(os.environ.get("RSI_THREADS", "1") or 1)
    torch.set_num_threads(max(1, threads))
    seed = int(cfg.get("seed", 0))
    random.seed(seed)
    torch.manual_seed(seed)

    from datasets import Dataset
    from transformers import set_seed
    from trl import SFTConfig, SFTTrainer

    set_seed(seed)
    t = cfg["train"]
    tokenizer = build_tokenizer(rows)
    model = build_model(cfg, tokenizer)
    params = sum(p.numel() for p in model.parameters())
    steps_per_epoch = -(-len(rows) // int(t["batch_size"]))
    max_steps = min(int(t["max_steps"]), max(1, round(steps_per_epoch * float(t["epochs"]))))
    scratch = tempfile.mkdtemp(prefix="textops-train-")
    args = SFTConfig(
        output_dir=scratch,
        max_steps=max_steps,
        per_device_train_batch_size=int(t["batch_size"]),
        learning_rate=float(t["lr"]),
        lr_scheduler_type=t.get("schedule", "cosine"),
        warmup_steps=round(max_steps * float(t.get("warmup_ratio", 0.0))),
        weight_decay=float(t.get("weight_decay", 0.0)),
        completion_only_loss=bool(t.get("completion_only_loss", True)),
        max_length=int(cfg["model"]["context"]),
        pad_to_multiple_of=None,
        bf16=False,
        fp16=False,
        activation_checkpointing=False,
        report_to=[],
        save_strategy="no",
        logging_steps=max(1, max_steps // 20),
        disable_tqdm=True,
        seed=seed,
        data_seed=seed,
        dataloader_num_workers=0,
        use_cpu=True,
    )

    class Trainer(SFTTrainer):
        def _get_train_sampler(self, *a, **k):  # shuffle: false keeps the data's order
            if t.get("shuffle", True):
                return super()._get_train_sampler(*a, **k)
            return torch.utils.data.SequentialSampler(self.train_dataset)

    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    start = time.perf_counter()
    try:
        result = trainer.train()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # nothing is saved there (save_strategy no)
    seconds = time.perf_counter() - start
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    metrics = {
        "steps": int(result.global_step),
        "examples": len(rows),
        "parameters": params,
        "first_loss": losses[0] if losses else None,
        "final_loss": losses[-1] if losses else float(result.training_loss),
        "train_loss": float(result.training_loss),
        "seconds": round(seconds, 3),
        "threads": torch.get_num_threads(),
    }
    (out / "train_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


def main() -> int:
    dataset, out = os.environ.get("RSI_DATASET"), os.environ.get("RSI_MODEL_OUT")
    if not dataset or not out:
        print("RSI_DATASET and RSI_MODEL_OUT must be set", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        cfg = load_config(HERE / "config.yaml")
        rows = read_rows(Path(dataset) / "train.jsonl")
    except (ConfigError, yaml.YAMLError, OSError) as exc:
        print(f"trainer: {exc}", file=sys.stderr)
        return 2
    metrics = train(cfg, rows, Path(out))
    print(json.dumps(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
