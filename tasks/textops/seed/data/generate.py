#!/usr/bin/env python3
"""Write the textops training set: ``$RSI_DATASET_OUT/train.jsonl`` from ``config.yaml``.

Run with cwd = this folder (``python3 data/generate.py`` from the candidate root also
works). Each row is ``{"prompt": ..., "completion": ...}``, the exact text the model
trains on: ``rev abc=`` -> ``cba``, ``sort cab=`` -> ``abc``, ``12+345=`` -> ``357``,
every completion ending with a newline (the harness stops there). ``format`` changes
how problems and answers are written (see config.yaml); the harness reads the same
keys, so prompts at test time match the training data.
"""

from __future__ import annotations

import json
import os
import random
import string
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
KINDS = ("reverse", "sort", "add")
ADD_FORMATS = ("plain", "padded", "reversed")
LETTER_FORMATS = ("plain", "spaced")


class ConfigError(ValueError):
    """config.yaml asks for something the generator cannot do."""


def load_config(path: Path) -> dict:
    return load_config_dict(yaml.safe_load(path.read_text()))


def load_config_dict(cfg: object) -> dict:
    """``cfg`` checked: raises :class:`ConfigError` naming the first bad key."""
    if not isinstance(cfg, dict):
        raise ConfigError("config.yaml must be a mapping")
    count = cfg.get("count")
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 200_000:
        raise ConfigError("count must be an integer in 1..200000")
    mix = cfg.get("mix") or {}
    if not isinstance(mix, dict) or set(mix) - set(KINDS):
        raise ConfigError(f"mix may only name {', '.join(KINDS)}")
    if any(not isinstance(v, int | float) or v < 0 for v in mix.values()) or not any(mix.values()):
        raise ConfigError("mix shares must be non-negative numbers, not all zero")
    for key, low in (("letters", 1), ("digits", 1)):
        rng = cfg.get(key) or {}
        lo, hi = rng.get("min"), rng.get("max")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi)):
            raise ConfigError(f"{key}.min and {key}.max must be integers")
        if not low <= lo <= hi <= 20:
            raise ConfigError(f"{key} must satisfy {low} <= min <= max <= 20")
    fmt = cfg.get("format") or {}
    if fmt.get("add", "plain") not in ADD_FORMATS:
        raise ConfigError(f"format.add must be one of {', '.join(ADD_FORMATS)}")
    if fmt.get("letters", "plain") not in LETTER_FORMATS:
        raise ConfigError(f"format.letters must be one of {', '.join(LETTER_FORMATS)}")
    if cfg.get("order", "shuffled") not in ("shuffled", "easy_first"):
        raise ConfigError("order must be shuffled or easy_first")
    return cfg


# -- rendering (kept in step with harness/run.py's copy) ------------------------------


def render_letters(kind: str, word: str, style: str) -> tuple[str, str]:
    answer = word[::-1] if kind == "reverse" else "".join(sorted(word))
    if style == "spaced":
        word, answer = " ".join(word), " ".join(answer)
    tag = "rev" if kind == "reverse" else "sort"
    return f"{tag} {word}=", answer + "\n"


def render_add(a: int, b: int, style: str, width: int) -> tuple[str, str]:
    total = a + b
    if style == "plain":
        return f"{a}+{b}=", f"{total}\n"
    w = max(width, len(str(a)), len(str(b)))
    padded = f"{a:0{w}d}+{b:0{w}d}="
    answer = f"{total:0{w + 1}d}"
    return padded, (answer if style == "padded" else "~" + answer[::-1]) + "\n"


# -- drawing problems -----------------------------------------------------------------


def draw_word(rng: random.Random, lo: int, hi: int) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(lo, hi)))


def draw_number(rng: random.Random, lo: int, hi: int) -> int:
    digits = rng.randint(lo, hi)
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def kind_counts(cfg: dict) -> dict[str, int]:
    """Split ``count`` over the kinds by their shares (largest remainder, stable order)."""
    shares = {k: float(cfg["mix"].get(k, 0)) for k in KINDS}
    total = sum(shares.values())
    exact = {k: cfg["count"] * s / total for k, s in shares.items()}
    counts = {k: int(v) for k, v in exact.items()}
    left = cfg["count"] - sum(counts.values())
    for k in sorted(KINDS, key=lambda k: -(exact[k] - counts[k]))[:left]:
        counts[k] += 1
    return counts


def generate(cfg: dict) -> list[dict[str, str]]:
    rng = random.Random(cfg.get("seed", 0))
    fmt = cfg.get("format") or {}
    letters, digits = cfg["letters"], cfg["digits"]
    rows: list[tuple[int, dict[str, str]]] = []
    for kind, n in kind_counts(cfg).items():
        for _ in range(n):
            if kind == "add":
                a = draw_number(rng, digits["min"], digits["max"])
                b = draw_number(rng, digits["min"], digits["max"])
                prompt, completion = render_add(a, b, fmt.get("add", "plain"), digits["max"])
                size = max(len(str(a)), len(str(b)))
            else:
                word = draw_word(rng, letters["min"], letters["max"])
                prompt, completion = render_letters(kind, word, fmt.get("letters", "plain"))
                size = len(word)
            rows.append((size, {"prompt": prompt, "completion": completion}))
    rng.shuffle(rows)
    if cfg.get("order", "shuffled") == "easy_first":
        rows.sort(key=lambda r: r[0])  # stable: equal sizes keep their shuffled order
    return [row for _, row in rows]


def main() -> int:
    out = os.environ.get("RSI_DATASET_OUT")
    if not out:
        print("RSI_DATASET_OUT is not set", file=sys.stderr)
        return 2
    try:
        cfg = load_config(HERE / "config.yaml")
    except (ConfigError, yaml.YAMLError, OSError) as exc:
        print(f"data/config.yaml: {exc}", file=sys.stderr)
        return 2
    rows = generate(cfg)
    Path(out).mkdir(parents=True, exist_ok=True)
    with open(Path(out) / "train.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    counts = kind_counts(cfg)
    print(f"wrote {len(rows)} rows to {out}/train.jsonl: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
