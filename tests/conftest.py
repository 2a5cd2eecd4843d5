"""Fixtures every test folder may use: a private key folder per test (autouse), the mini
project, and the larger fixtures several folders share (built once per module or session).
Helpers that are not fixtures live in tests/support/; no test imports this file."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.mini import Mini, make_mini

if TYPE_CHECKING:
    from tests.support.grid import Grid
    from tests.support.modelsrig import Rig
    from tests.support.runlog import SignedRun


# A shell without job control starts a background command ('make test &') with SIGINT
# ignored, and that is inherited by every run the tests start: the Ctrl-C tests would then
# see a run that cannot be interrupted (as rsiframe rightly keeps an ignored SIGINT).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _private_keys(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Never touch the user's real key folder."""
    monkeypatch.setenv("RSIFRAME_KEY_DIR", str(tmp_path_factory.mktemp("keys")))
    monkeypatch.delenv("RSIFRAME_FAULT", raising=False)


@pytest.fixture(scope="module")
def module_keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One key folder for a module's module-scoped fixtures (and, with ``use_module_keys``,
    its tests): builds that share a cache share the host key that signs its manifests."""
    keys = tmp_path_factory.mktemp("module-keys")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RSIFRAME_KEY_DIR", str(keys))
        yield keys


@pytest.fixture
def use_module_keys(module_keys: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test uses its module's key folder instead of one of its own."""
    monkeypatch.setenv("RSIFRAME_KEY_DIR", str(module_keys))
    return module_keys


@pytest.fixture
def mini(tmp_path: Path) -> Mini:
    return make_mini(tmp_path / "proj")


@pytest.fixture
def signed_run(tmp_path: Path) -> SignedRun:
    """A run's event log written by hand, signed, chained and folded as the engine's writer
    does (tests/support/runlog.py): the engine's steps tested without a run."""
    from tests.support.runlog import SignedRun

    return SignedRun(tmp_path / "run")


#: what makes a mini project's recipe, the one thing ``RSIFRAME_TEST_CANDIDATES`` changes
_MINI = {"make_mini", "run_mini", "merge_mini"}
_NAME = re.compile(r"\b[A-Za-z_]\w*\b")
_LOCAL_IMPORT = re.compile(r"from (tests(?:\.\w+)+) import ([\w, ]+)")


def _makes_minis(func: object, memo: dict[object, bool]) -> bool:
    """Whether a test, fixture or helper makes a mini project, itself or through a test
    helper it calls (followed through the names its source uses)."""
    if func in memo:
        return memo[func]
    memo[func] = False  # a cycle adds nothing
    try:
        source = inspect.getsource(func)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return False
    names = set(_NAME.findall(source))
    scope = dict(getattr(func, "__globals__", {}))
    for module, imported in _LOCAL_IMPORT.findall(source):  # imports inside the function
        found = importlib.import_module(module)
        scope.update({n: getattr(found, n, None) for n in re.findall(r"\w+", imported)})
    found = bool(names & _MINI) or any(
        inspect.isfunction(helper := scope.get(name))
        and helper.__module__.startswith("tests")
        and _makes_minis(helper, memo)
        for name in names
    )
    memo[func] = found
    return found


def _uses_minis(item: pytest.Item, memo: dict[object, bool]) -> bool:
    """Whether a test or one of its fixtures (transitively) makes a mini project."""
    if _makes_minis(getattr(item, "function", None), memo):
        return True
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info else ()
    return any(_makes_minis(d[-1].func, memo) for d in defs)


#: where candidates in flight change what a test checks: the run loop and what it drives
#: (the engine, the archive's fold, slots and operators' calls, executors, the gateway's
#: metering, verify); elsewhere a mini run is only a fixture (the CLI's output, recipe
#: loading, compare and the viewer over finished runs) and runs as in ``make test``
CONCURRENT = ("engine", "archive", "slots", "executors", "gateway", "audit")


def _in_flight_matters(item: pytest.Item, cache: dict[object, bool]) -> bool:
    folder = Path(str(item.fspath)).relative_to(Path(__file__).parent).parts[0]
    return folder in CONCURRENT and _uses_minis(item, cache)


#: test files that share something outside their tmp folders, run by one worker in turn
#: under ``pytest -n`` (``--dist loadgroup``): Ray finds "the cluster `ray start` left on
#: this host", so a local Ray and a two-node cluster must not overlap
SHARED = {"ray": ("tests/e2e/test_ray.py", "tests/e2e/test_ray_cluster.py")}

#: the slowest files first (``make test-e2e --durations``), so the two workers finish together
SLOW_FIRST = (
    "tests/e2e/test_quickstart.py",
    "tests/e2e/test_concurrency.py",
    "tests/e2e/test_ablate.py",
    "tests/e2e/test_taskaudit.py",
    "tests/e2e/test_first_hour.py",
)


def _file(item: pytest.Item) -> str:
    """The test's file, as the tables above name it."""
    return Path(str(item.fspath)).relative_to(Path(__file__).parent.parent).as_posix()


def _group(item: pytest.Item) -> str:
    """A test's worker group under ``pytest -n``: its file (module fixtures are built once),
    or the :data:`SHARED` group its file is in."""
    path = _file(item)
    return next((name for name, files in SHARED.items() if path in files), path)


def _order(item: pytest.Item) -> int:
    path = _file(item)
    return SLOW_FIRST.index(path) if path in SLOW_FIRST else len(SLOW_FIRST)


@pytest.hookimpl(tryfirst=True)  # before xdist's worker names the groups in the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``pytest -n N --dist loadgroup`` (``make test``) every test is in its file's
    worker group, slow files first. ``make test-k4`` (``RSIFRAME_TEST_CANDIDATES=4``) runs
    only the tests whose runs it changes where candidates in flight matter
    (:data:`CONCURRENT`): those that make a mini project (its recipe gets the concurrency);
    the rest would run as in ``make test``."""
    if config.getoption("dist", "no") == "loadgroup":
        items.sort(key=_order)  # stable: the files' own order otherwise
        for item in items:
            item.add_marker(pytest.mark.xdist_group(_group(item)))
    if not os.environ.get("RSIFRAME_TEST_CANDIDATES"):
        return
    cache: dict[object, bool] = {}
    keep = [item for item in items if _in_flight_matters(item, cache)]
    dropped = [item for item in items if not _in_flight_matters(item, cache)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_sessionstart(session: pytest.Session) -> None:
    """CI sets RSIFRAME_REQUIRE_BWRAP so sandbox tests cannot silently skip there."""
    if os.environ.get("RSIFRAME_REQUIRE_BWRAP"):
        from rsiframe.sandbox.bwrap import bwrap_works

        if not bwrap_works():
            raise pytest.UsageError("RSIFRAME_REQUIRE_BWRAP is set but bubblewrap does not work")


@pytest.fixture
def models_rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    """The mini project and a scripted stub provider, for runs whose models go through the
    run's gateway (tests/gateway/test_runmodels.py and its e2e part)."""
    from rsiframe.gateway.stub import Script, ServerThread, StubLLM
    from tests.support.modelsrig import Rig

    mini = make_mini(tmp_path / "proj", generations=1, children=2)
    stub = StubLLM(Script())
    srv = ServerThread(stub.app).start()
    monkeypatch.delenv("LLM_API_KEY", raising=False)
    try:
        yield Rig(mini.root, mini.recipe, stub, srv)
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Path]:
    """One small local Ray for the module (``usefixtures``): 2 logical CPUs, no dashboard,
    small object store."""
    ray = pytest.importorskip("ray", reason="the cluster extra (ray) is not installed")
    temp = tempfile.mkdtemp(prefix="rsr-")  # short: Ray's socket paths have a length limit
    # the workers inherit this process's environment: their D/T/H build cache is private
    cache = os.environ.get("RSIFRAME_CACHE_DIR")
    os.environ["RSIFRAME_CACHE_DIR"] = os.path.join(temp, "cache")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=80 << 20,
        _node_ip_address="127.0.0.1",
        _temp_dir=temp,
        log_to_driver=False,
    )
    if cache is None:
        del os.environ["RSIFRAME_CACHE_DIR"]
    else:
        os.environ["RSIFRAME_CACHE_DIR"] = cache
    try:
        yield Path(temp)
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="session")
def merge_run(tmp_path_factory: pytest.TempPathFactory) -> Mini:
    """One real mini run with merges (uniform select, every child admitted), read by the
    engine's and the viewer's tests."""
    from tests.support.merge import merge_mini, run_and_verify

    root = tmp_path_factory.mktemp("merge")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RSIFRAME_KEY_DIR", str(root / "keys"))
        mini = merge_mini(root)
        run_and_verify(mini)
    return mini


@pytest.fixture(scope="session")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Grid:
    """A 2 operators x 2 repeats ablation grid, read by ablate's, compare's and the
    viewer's tests (tests/support/grid.py)."""
    from tests.support.grid import build_grid

    return build_grid(tmp_path_factory.mktemp("cmp"))
