"""``rsiframe export RUN --mlflow URI``: a verified run as an MLflow run (the ``mlflow`` extra).

What goes where: the resolved recipe as params (dotted keys), each admitted candidate's
verified scores as metrics stepped by the evaluations spent when it was admitted (and the
best admitted gate score so far), the seed's and the champion's scores, the method digest,
fingerprints, chain head and key as tags, the champion's files and the report page as
artifacts. A folder of runs (an ``ablate`` grid) becomes one parent run with a child per
run.

Exporting twice updates, never duplicates: a run is found again by its ``rsiframe.run_id``
tag, metric points already logged are not logged again, params are immutable (a run's
recipe never changes) and artifacts are overwritten in place. The run folder is only read.
The champion's symbolic links are listed, never followed: a candidate's link to a host file
must not upload that file.
"""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rsiframe.archive.loader import LoadedRun, load_run
from rsiframe.errors import RsiError
from rsiframe.repo.candidates import CandidateRepo
from rsiframe.repo.gittree import MODE_EXEC, MODE_LINK
from rsiframe.study import runpage, runpage_html
from rsiframe.study.compare import _is_run, find_runs, method_digest

#: MLflow's limits: a param value's length, entries per log_batch call
PARAM_CHARS = 6000
BATCH = 100
RUN_TAG = "rsiframe.run_id"
GRID_TAG = "rsiframe.grid"


class ExportError(RsiError):
    """The tracking store cannot be reached or refuses what is logged, or mlflow is missing."""


@dataclass
class Exported:
    run_id: str
    mlflow_run_id: str
    created: bool
    metrics_logged: int
    params: int
    artifacts: list[str]


@dataclass
class ExportResult:
    experiment_id: str
    runs: list[Exported]
    parent: str | None = None
    refused: list[dict[str, str]] = field(default_factory=list)

    def data(self) -> dict[str, Any]:
        return asdict(self)


def _client(uri: str) -> Any:
    # the store's own INFO lines (creating tables, migrations) are not ours to print
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as exc:
        raise ExportError("export needs MLflow: pip install 'rsiframe[mlflow]'") from exc
    return MlflowClient(tracking_uri=uri)


def flat_params(value: Any, prefix: str = "") -> dict[str, str]:
    """A nested recipe as ``{dotted.key: value}``, each value cut to MLflow's limit."""
    if isinstance(value, dict) and value:
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(flat_params(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    text = str(value)
    return {prefix or "value": text if len(text) <= PARAM_CHARS else text[: PARAM_CHARS - 1] + "…"}


def metric_points(loaded: LoadedRun) -> list[tuple[str, float, int]]:
    """(key, value, step): each admitted candidate's train and gate scores and the best
    admitted gate score, at the evaluations spent when it was admitted; then the seed's
    and the champion's scores on every split (step: all evaluations)."""
    st = loaded.state
    evaluations, best = 0, None
    points = []
    for ev in loaded.events:
        if ev.type == "evaluation_started":
            evaluations += 1
        c = st.candidates.get(str(ev.data.get("id"))) if ev.type == "candidate_gated" else None
        if c is None or not ev.data.get("admit") or c.state != "admitted":
            continue
        points += [(s, v, evaluations) for s in ("train", "gate") if (v := c.score(s)) is not None]
        gate = c.score("gate")
        best = gate if best is None or (gate is not None and gate > best) else best
        if best is not None:
            points.append(("best_gate", best, evaluations))
    for who, champ in (("seed", st.seed), ("champion", st.champion())):
        scores = {s: champ.score(s) for s in runpage.SPLITS} if champ is not None else {}
        points += [(f"{who}.{s}", v, st.evaluations) for s, v in scores.items() if v is not None]
    return points


def tags_of(loaded: LoadedRun, resolved: dict[str, Any], head: str) -> dict[str, str]:
    st = loaded.state
    champ = st.champion()
    return {
        RUN_TAG: st.run_id,
        "rsiframe.name": st.name,
        "rsiframe.method_digest": method_digest(resolved),
        "rsiframe.recipe_digest": st.recipe_digest,
        "rsiframe.taskset_fingerprint": st.taskset_fingerprint,
        "rsiframe.evaluator_fingerprint": st.evaluator_fingerprint,
        "rsiframe.chain_head": head,
        "rsiframe.keyid": loaded.verifier.keyid,
        "rsiframe.state": loaded.run_state(),
        "rsiframe.champion": champ.id if champ else "",
        "rsiframe.verified": "true",
        "mlflow.runName": st.name,
    }


def write_champion(loaded: LoadedRun, dest: Path) -> list[str]:
    """The champion's regular files under ``dest``; its symbolic links listed in
    ``SYMLINKS.txt``, never created (an upload would follow them)."""
    champ = loaded.state.champion()
    if champ is None or champ.commit is None:
        return []
    repo = CandidateRepo(loaded.paths.repo)
    links = []
    try:
        for path, entry in sorted(repo.flat_tree(champ.commit).items()):
            data = repo.read(champ.commit, path)
            if entry.mode == MODE_LINK:
                links.append(f"{path} -> {data.decode(errors='replace')}")
                continue
            if entry.mode not in ("100644", MODE_EXEC):
                continue  # a submodule: nothing to upload
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    finally:
        repo.close()
    if links:
        (dest / "SYMLINKS.txt").write_text("\n".join(links) + "\n")
    return links


def _find_run(client: Any, experiment_id: str, key: str, value: str) -> Any | None:
    found = client.search_runs(
        [experiment_id], filter_string=f"tags.`{key}` = '{value}'", max_results=2
    )
    return found[0] if found else None


def _experiment(client: Any, name: str, artifacts: str | None) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return str(exp.experiment_id)
    return str(client.create_experiment(name, artifact_location=artifacts))


def _batches(items: list[Any]) -> list[list[Any]]:
    return [items[i : i + BATCH] for i in range(0, len(items), BATCH)]


def _log_new_metrics(client: Any, run_id: str, points: list[tuple[str, float, int]]) -> int:
    from mlflow.entities import Metric

    seen: set[tuple[str, float, int]] = set()
    for key in {k for k, _, _ in points}:
        seen |= {(key, m.value, m.step) for m in client.get_metric_history(run_id, key)}
    now = int(time.time() * 1000)
    new = [Metric(k, v, now, s) for k, v, s in points if (k, v, s) not in seen]
    for batch in _batches(new):
        client.log_batch(run_id, metrics=batch)
    return len(new)


def export_run(
    client: Any,
    experiment_id: str,
    root: Path,
    *,
    parent: str | None = None,
    page: runpage.RunPage | None = None,
) -> Exported:
    """One verified run into the experiment: created, or found by its tag and updated."""
    from mlflow.entities import Param, RunTag

    page = page or runpage.build_page(root)  # verify; refuses a run that fails
    loaded = load_run(root)
    resolved = loaded.paths.read_json(loaded.paths.recipe_lock).get("resolved", {})
    tags = tags_of(loaded, resolved, page.verification.head)
    if parent is not None:
        tags["mlflow.parentRunId"] = parent
    existing = _find_run(client, experiment_id, RUN_TAG, loaded.state.run_id)
    run = existing or client.create_run(experiment_id, tags=tags, run_name=loaded.state.name)
    run_id = run.info.run_id
    params = [Param(k, v) for k, v in sorted(flat_params(resolved).items())]
    for batch in _batches(params):
        client.log_batch(run_id, params=batch)
    for batch in _batches([RunTag(k, v) for k, v in tags.items()]):
        client.log_batch(run_id, tags=batch)
    logged = _log_new_metrics(client, run_id, metric_points(loaded))
    with tempfile.TemporaryDirectory(prefix="rsiframe-export-") as tmp:
        report = Path(tmp) / "report" / "report.html"
        runpage_html.write(page, report)
        client.log_artifacts(run_id, str(report.parent), "report")
        files = Path(tmp) / "champion"
        files.mkdir()
        write_champion(loaded, files)
        if any(files.iterdir()):
            client.log_artifacts(run_id, str(files), "champion")
    client.set_terminated(run_id, "FINISHED" if loaded.run_state() != "failed" else "FAILED")
    return Exported(
        run_id=loaded.state.run_id,
        mlflow_run_id=run_id,
        created=existing is None,
        metrics_logged=logged,
        params=len(params),
        artifacts=["report/report.html", "champion/"],
    )


def export(
    path: Path, uri: str, *, experiment: str = "rsiframe", artifacts: str | None = None
) -> ExportResult:
    """A run, or a folder of runs (one parent run, a child per run), into MLflow."""
    # verified (or refused) before the tracking store is touched
    page = runpage.build_page(path) if _is_run(Path(path)) else None
    runs = [] if page is not None else find_runs([path])
    client = _client(uri)
    try:  # MLflow's client prints links to its UI on stdout, which `export --json` owns
        with contextlib.redirect_stdout(io.StringIO()):
            exp = _experiment(client, experiment, artifacts)
            if page is not None:
                return ExportResult(exp, [export_run(client, exp, path, page=page)])
            return _export_grid(client, exp, Path(path), runs)
    except RsiError:
        raise
    except Exception as exc:  # the tracking store's own errors (connection, refusal)
        raise ExportError(f"MLflow at {uri}: {type(exc).__name__}: {exc}") from exc


def _export_grid(client: Any, exp: str, folder: Path, runs: list[Path]) -> ExportResult:
    name = folder.resolve().name
    parent = _find_run(client, exp, GRID_TAG, name)
    if parent is None:
        tags = {GRID_TAG: name, "mlflow.runName": name}
        parent = client.create_run(exp, tags=tags, run_name=name)
    result = ExportResult(exp, [], parent=parent.info.run_id)
    for run in runs:
        try:
            result.runs.append(export_run(client, exp, run, parent=result.parent))
        except RsiError as exc:
            if isinstance(exc, ExportError):
                raise
            result.refused.append({"run": str(run), "error": exc.message})
    client.set_terminated(result.parent, "FINISHED")
    return result
