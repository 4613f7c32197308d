"""Whether Graphcore's PopRT can be used here: the ``poprt`` module comes with the Poplar SDK (or its docker image), not
with this distribution, so the backend installs without it and says what is missing when it is chosen."""

from __future__ import annotations

from conformance.hardware import runtime_problem

MODULE = "poprt"
# what the engine (ipu_poprt.engine) uses of PopRT's documented Python API
API = ("Pass.get_pass", "converter.Converter", "compiler.Compiler", "compiler.CompilerOptions", "runtime.Runner",
       "runtime.DeviceManager")
HOW_TO_GET = (
    "PopRT comes with Graphcore's Poplar SDK: run inside the graphcorecn/poprt docker image (gc-docker -- ... "
    "graphcorecn/poprt:1.4.0), or install the Poplar SDK 3.3, `source <sdk>/enable`, and `pip install poprt-*.whl` "
    "from github.com/graphcore/PopRT releases; see plugins/ipu-poprt/README.md"
)


class PoprtMissing(ImportError):
    """The ``poprt`` module cannot be imported (not installed, the SDK not enabled, a broken install) or lacks the API
    the backend uses."""


def missing() -> str | None:
    """Why PopRT cannot be used here (whatever its import raised, or the part of its API it lacks, and how to get
    PopRT); None when ``poprt`` imports with the API the engine uses."""
    problem = runtime_problem(MODULE, API)
    if problem is None:
        return None
    return f"hardware 'poprt' needs the Python module {MODULE!r} (Graphcore PopRT), which {problem}. {HOW_TO_GET}"


def require() -> None:
    """A :class:`PoprtMissing` saying what is missing and how to get it, unless ``poprt`` imports."""
    reason = missing()
    if reason is not None:
        raise PoprtMissing(reason)
