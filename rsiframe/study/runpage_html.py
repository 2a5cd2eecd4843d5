"""The report page of one run as one self-contained HTML file: styles, script and data
inline, nothing fetched when it is viewed (a Content-Security-Policy forbids it too).

Everything a candidate could have written reaches the page only as data: the header is
escaped here with :func:`html.escape`, and the run's data rides in a
``<script type="application/json">`` block with ``<``, ``>`` and ``&`` written as JSON
escapes (so no ``</script>`` can close it), which the page's own script puts on screen
with ``textContent`` only, never as markup.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import time
from importlib import resources
from pathlib import Path
from typing import Any

from rsiframe.study.runpage import SPLITS, RunPage

#: no network at view time: inline styles, images from data: URLs, and only the scripts
#: whose hashes are named (the page's own), so a script that escaped escaping would not run
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; connect-src 'none'"


def csp(*scripts: str) -> str:
    hashes = " ".join(
        f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'"
        for s in scripts
    )
    return f"{CSP}; script-src {hashes}" if scripts else f"{CSP}; script-src 'none'"


def asset(name: str) -> str:
    return (resources.files("rsiframe.study") / "assets" / name).read_text(encoding="utf-8")


def json_for_script(value: Any) -> str:
    """JSON that cannot end its ``<script>`` block or open a comment in it."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False, default=str)
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _e(value: object) -> str:
    return html.escape("—" if value is None else str(value), quote=True)


def _score(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def banner(page: RunPage) -> str:
    v = page.verification
    if v.verified:
        drift = (
            " Files on disk differ from the run's locks (drift)." if v.verdict == "drift" else ""
        )
        return (
            "<div class='banner ok' id='verified'>Verified: every check of <code>rsiframe "
            f"verify</code> passed on this run's folder.{drift} Chain head "
            f"<code>{_e(v.head)}</code>; public key fingerprint <code>{_e(v.keyid)}</code>.</div>"
        )
    first = _e(v.problems[0] if v.problems else v.verdict)
    return (
        "<div class='banner bad' id='verified'>NOT VERIFIED (written with --force): "
        f"this run fails <code>rsiframe verify</code>: {first}. Chain head "
        f"<code>{_e(v.head)}</code>; key <code>{_e(v.keyid)}</code>.</div>"
    )


def _kv(rows: list[tuple[str, object]]) -> str:
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f"<table class='kv'>{body}</table>"


def header_html(page: RunPage) -> str:
    h = page.header
    used, limits = h["budget"].get("used", {}), h["budget"].get("limits", {})
    budget = ", ".join(
        f"{k} {used[k]:.0f}" + (f"/{limits[k]}" if limits.get(k) is not None else "")
        if isinstance(used[k], int | float)
        else f"{k} {used[k]}"
        for k in used
    )
    rows: list[tuple[str, object]] = [
        ("recipe", h["name"]),
        ("run", h["run_id"]),
        ("state", h["state"] + (f" ({h['reason']})" if h.get("reason") else "")),
        ("method digest", h["method_digest"]),
        ("recipe digest", h["recipe_digest"]),
        ("task-set fingerprint", h["taskset_fingerprint"]),
        ("evaluator fingerprint", h["evaluator_fingerprint"]),
        ("isolation", h["isolation"]),
        ("operators", ", ".join(f"{k}: {v}" for k, v in h.get("operators", {}).items())),
        ("budget used", budget),
        ("candidates", ", ".join(f"{n} {s}" for s, n in h["counts"].items())),
        ("wall time", f"{h['wall_seconds']:.0f} s"),
        ("models", f"{h['model_tokens']} tokens, ${h['cost_usd']:.4f}, {h['model_calls']} calls"),
    ]
    splits = "".join(
        f"<tr><th>{s}</th><td>{_score(a)}</td><td>{_score(b)}</td></tr>"
        for s, (a, b) in h["seed_to_champion"].items()
        if s in SPLITS
    )
    table = (
        f"<table class='scores'><tr><th>split</th><th>seed {_e(h['seed'])}</th>"
        f"<th>champion {_e(h['champion'])}</th></tr>{splits}</table>"
    )
    notes = "".join(f"<p class='note'>{_e(n)}</p>" for n in h["warnings"] + h["notes"])
    return f"<section id='header'>{_kv(rows)}{table}{notes}</section>"


def render(page: RunPage) -> str:
    v = page.verification
    title = f"{page.header['name']} ({page.header['run_id']})"
    mark = "" if v.verified else "NOT VERIFIED · "
    made = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    script = asset("runpage.js")
    return "".join(
        [
            "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
            f"<meta http-equiv='Content-Security-Policy' content=\"{csp(script)}\">",
            "<meta name='viewport' content='width=device-width, initial-scale=1'>",
            f"<title>{_e(mark + 'rsiframe report: ' + title)}</title>",
            f"<style>{asset('runpage.css')}</style></head>",
            f"<body class='{'verified' if v.verified else 'unverified'}'>",
            banner(page),
            f"<h1>{_e(mark)}rsiframe report: {_e(title)}</h1>",
            header_html(page),
            "<section id='lineage-section'><h2>Lineage</h2>",
            "<p class='note'>Drag to pan, wheel to zoom, click a candidate for its panel. "
            "Thick outline: the champion's path. Dashed edge: a merge's second parent.</p>",
            "<div id='legend'></div><svg id='lineage' role='img'></svg></section>",
            "<section id='panel'><p class='note'>Click a candidate.</p></section>",
            "<section id='curve-section'><h2>Best admitted gate score</h2>",
            "<div id='curve-axes'></div><svg id='curve'></svg></section>",
            f"<p class='note'>Made {_e(made)} by rsiframe report. "
            "Scores are verified, signed records only.</p>",
            f"<script type='application/json' id='run-data'>{json_for_script(page.data())}",
            "</script>",
            f"<script>{script}</script>",
            "</body></html>\n",
        ]
    )


def write(page: RunPage, out: Path) -> Path:
    """Write the page atomically (a partial file never stands in for a report)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(render(page), encoding="utf-8")
    tmp.replace(out)
    return out
