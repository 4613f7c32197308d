"""Shared test configuration: the pytester fixture for testing the plugin, and a cache directory of the test run's own."""

import os
import shutil
import sys
import tempfile

if sys.version_info < (3, 12):
    # Dask (the distributed engine) imports the importlib_metadata backport on Python < 3.12, which deletes the
    # standard library's distribution finder for good. Imported here, before any in-process pytest run (pytester)
    # snapshots sys.meta_path and sys.modules, so that every later run still finds the suite's pytest11 entry point.
    import importlib_metadata  # noqa: F401

from conformance.datasets.cache import CACHE_VARIABLE, WEIGHT_CACHE_VARIABLE

pytest_plugins = ["pytester"]

import pytest  # noqa: E402

from conformance.numerics import arrays  # noqa: E402

# The array libraries the numerics tests run against: each test using ``array_library`` runs once per library, and
# skips with the reason where the library or its device is missing (torch not installed, no CUDA device).
# ``torch:cpu-as-gpu`` is torch:cpu taking the paths a GPU takes (no view of host memory, no compiled host kernels, no
# check that waits for the device), so that CI, which has no GPU, runs them.
ARRAY_LIBRARIES = ("numpy", "torch:cpu", "torch:cpu-as-gpu", "torch:cuda")
AS_GPU = "-as-gpu"


@pytest.fixture(params=ARRAY_LIBRARIES)
def array_library(request):
    """The numerics compute on this library for the test (:func:`conformance.numerics.arrays.use`); a test marked
    ``numpy_only`` (of the numpy path's own machinery: its worker threads) runs on numpy alone."""
    if request.param != "numpy" and request.node.get_closest_marker("numpy_only"):
        pytest.skip("a test of the numpy path's own machinery")
    spec = request.param.removesuffix(AS_GPU)
    try:
        arrays.load(spec)
    except arrays.ArrayLibraryError as exc:
        pytest.skip(str(exc))
    if request.param.endswith(AS_GPU):
        request.getfixturevalue("monkeypatch").setattr(arrays.ArrayLibrary, "on_host",
                                                       property(lambda self: self.device is None))
    with arrays.use(spec) as library:
        yield library

def pytest_configure(config):
    """Every run of the suite inside the tests (pytester, the CLI as a subprocess) caches into a directory of this test
    run, removed at its end: never the user's cache, and the same start (empty) on every machine. Seeded weights are
    cached there (built once per test run, the same bits as building them).

    A pytest-xdist worker is given the controller's terminal width as ``COLUMNS``; the tests' rendered reports assume
    none (a pipe's width, as in a serial run), so a worker drops it: ``pytest tests/ -n 2`` checks what a serial run
    checks (tests of ``COLUMNS`` itself set it)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.pop("COLUMNS", None)
    directory = tempfile.mkdtemp(prefix="ipu-conformance-tests-")
    os.environ[CACHE_VARIABLE] = directory
    os.environ.pop(WEIGHT_CACHE_VARIABLE, None)
    config.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))


NO_HYPOTHESIS = "-p no:hypothesispytest"
# the options of every run the tests start: what the tests that look at figures ask for again (``plots_drawn``)
CHILD_OPTIONS = f"{NO_HYPOTHESIS} --no-plots"


@pytest.fixture(scope="session", autouse=True)
def _torch_compiler_imported_once():
    """torch's compiler registers operator libraries in C++ once per process: an in-process pytest run that imported
    it first would drop the modules when it restores sys.modules, and the next import would register them again (an
    error). Imported before the first test, the modules stay. Not at import (3 s): the processes that run no test
    (the xdist controller, ``pytest --help``) never import it."""
    try:
        import torch._dynamo  # noqa: F401
    except ImportError:  # torch is an optional extra
        pass


@pytest.fixture(scope="session", autouse=True)
def _children_start_fast():
    """The runs of pytest that tests start as subprocesses (the suite's CLI, end to end) start in about half the time:

    - they do not load Hypothesis's pytest plugin, which they never use (its import costs about 0.6 s of CPU per run);
    - they write their reports without figures (``--no-plots``: matplotlib's import and the figures cost about 1 s
      per report), but where a test looks at them (:func:`plots_drawn`);
    - where ``PYTHONDONTWRITEBYTECODE`` is set (container images set it), each child would compile every module of the
      project and rewrite the asserts of every pytest plugin's package again (about 1 s per run): the children write
      their bytecode into this test run's own directory instead (``PYTHONPYCACHEPREFIX``, removed with it), never
      beside the sources.

    Set where the tests run (an xdist worker, after it started), so only the processes the tests start see it."""
    previous = {name: os.environ.get(name) for name in ("PYTEST_ADDOPTS", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    os.environ["PYTEST_ADDOPTS"] = " ".join(filter(None, [previous["PYTEST_ADDOPTS"], CHILD_OPTIONS]))
    if previous["PYTHONDONTWRITEBYTECODE"]:
        del os.environ["PYTHONDONTWRITEBYTECODE"]
        os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(os.environ[CACHE_VARIABLE], "bytecode")
    yield
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def pytester(pytester, monkeypatch, request):
    """pytester, whose runs (in process and as subprocesses) take the options of the tests' other children: pytester
    drops ``PYTEST_ADDOPTS`` as it starts, and an in-process run would import Hypothesis afresh for its summary
    line."""
    monkeypatch.setenv("PYTEST_ADDOPTS", NO_HYPOTHESIS if "plots_drawn" in request.fixturenames else CHILD_OPTIONS)
    return pytester


@pytest.fixture
def plots_drawn(monkeypatch):
    """The runs this test starts draw the report's figures, as a user's run does (the tests' other children leave
    them out)."""
    monkeypatch.setenv("PYTEST_ADDOPTS", NO_HYPOTHESIS)


def _clear_table_loaders() -> None:
    from conformance.hardware.ipu import policy
    from conformance.targets import accuracy, audit, performance, profiles

    for loader in (accuracy._load_targets, performance.load_performance_targets, profiles.load_profiles,
                   profiles.reference_samples, policy.load_precisions, audit.load_audit_config):
        loader.cache_clear()


@pytest.fixture
def edited_model_table(tmp_path, monkeypatch):
    """``edit(model, kind, old, new)``: for the test, the model's own ``<kind>.toml`` (in its spec's ``tables`` folder)
    is a copy with ``old`` changed to ``new``; returns the copy's path. The table loaders' caches are cleared before and
    after."""
    from models import model_spec
    from models.spec import ModelSpec

    replaced = {}
    table = ModelSpec.table
    monkeypatch.setattr(ModelSpec, "table", lambda self, kind: replaced.get((self.name, kind)) or table(self, kind))

    def edit(model: str, kind: str, old: str, new: str):
        source = table(model_spec(model), kind)
        text = source.read_text()
        assert old in text, f"{old!r} is not in {source}"
        copy = tmp_path / "tables" / model / source.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(text.replace(old, new, 1))
        replaced[(model, kind)] = copy
        _clear_table_loaders()
        return copy

    yield edit
    _clear_table_loaders()
