"""``rsiframe report`` on one run, or on a folder of runs (an ``ablate`` grid): each run's
report page, and an index page linking them and the compare tables."""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rsiframe.errors import RsiError, RunNotVerified
from rsiframe.study import runpage, runpage_html
from rsiframe.study.compare import _is_run, compare, find_runs
from rsiframe.study.compare_html import write_html


@dataclass
class Written:
    """One report page: where, of which run, whether it verified."""

    path: str
    run: str
    run_id: str
    verified: bool
    candidates: int
    bytes: int


@dataclass
class ReportResult:
    pages: list[Written]
    index: str | None = None
    compare: str | None = None
    #: runs of a folder left out: {"run": path, "error": why}
    refused: list[dict[str, str]] = field(default_factory=list)
    compare_error: str | None = None

    def data(self) -> dict[str, object]:
        return asdict(self)


def write_run(root: Path, out: Path, *, force: bool) -> Written:
    page = runpage.build_page(root, force=force)
    runpage_html.write(page, out)
    return Written(
        path=str(out),
        run=str(Path(root).resolve()),
        run_id=page.header["run_id"],
        verified=page.verification.verified,
        candidates=len(page.nodes),
        bytes=out.stat().st_size,
    )


def report(path: Path, out: Path, *, force: bool = False) -> ReportResult:
    """A run's page at ``out``; for a folder of runs, ``out`` is the index and each run's
    page is written beside it (``NAME.html``, NAME the run folder's name)."""
    if _is_run(Path(path)):
        return ReportResult(pages=[write_run(path, out, force=force)])
    runs = find_runs([path])  # a one-line error when it is neither
    result = ReportResult(pages=[], index=str(out))
    for run in runs:
        try:
            result.pages.append(write_run(run, out.parent / f"{run.name}.html", force=force))
        except RsiError as exc:
            result.refused.append({"run": str(run), "error": exc.message})
    written = [Path(w.run) for w in result.pages]
    try:  # the runs whose pages were written: compare reads fewer checks than verify
        if not written:
            raise RunNotVerified("no run of the folder verifies")
        comparison = compare(written, by="recipe", force=force, include_unfinished=force)
        result.compare = str(write_html(comparison, out.parent / f"{out.stem}-compare.html"))
    except RsiError as exc:
        result.compare_error = exc.message
    out.write_text(index_html(path, result, out), encoding="utf-8")
    return result


def index_html(folder: Path, result: ReportResult, out: Path) -> str:
    rows = "".join(
        f"<tr><td><a href='{html.escape(Path(w.path).name, quote=True)}'>"
        f"{html.escape(Path(w.run).name)}</a></td><td>{html.escape(w.run_id)}</td>"
        f"<td>{'verified' if w.verified else 'NOT VERIFIED'}</td><td>{w.candidates}</td></tr>"
        for w in result.pages
    )
    refused = "".join(
        f"<li>{html.escape(Path(r['run']).name)}: {html.escape(r['error'])}</li>"
        for r in result.refused
    )
    compare_part = (
        f"<p><a href='{html.escape(Path(result.compare).name, quote=True)}'>compare tables</a></p>"
        if result.compare
        else f"<p class='note'>no compare tables: {html.escape(result.compare_error or '')}</p>"
    )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{runpage_html.csp()}\">"
        f"<title>rsiframe report: {html.escape(Path(folder).name)}</title>"
        f"<style>{runpage_html.asset('runpage.css')}</style></head><body>"
        f"<h1>rsiframe report: {html.escape(str(folder))}</h1>{compare_part}"
        "<table><tr><th>run</th><th>id</th><th>verify</th><th>candidates</th></tr>"
        f"{rows}</table>"
        + (f"<h2>left out (do not verify)</h2><ul>{refused}</ul>" if refused else "")
        + "</body></html>\n"
    )
