"""Whether Graphcore's PopRT can be used here: the ``poprt`` module comes with the Poplar SDK (or its docker image), not
with this distribution, so the backend installs without it and says what is missing when it is chosen."""

from __future__ import annotations

import importlib

MODULE = "poprt"
HOW_TO_GET = (
    "PopRT comes with Graphcore's Poplar SDK: run inside the graphcorecn/poprt docker image (gc-docker -- ... "
    "graphcorecn/poprt:1.4.0), or install the Poplar SDK 3.3, `source <sdk>/enable`, and `pip install poprt-*.whl` "
    "from github.com/graphcore/PopRT releases; see plugins/ipu-poprt/README.md"
)


class PoprtMissing(ImportError):
    """The ``poprt`` module cannot be imported (not installed, or the SDK not enabled)."""


def missing() -> str | None:
    """Why PopRT cannot be used here (the import error and how to get PopRT); None when ``poprt`` imports."""
    try:
        importlib.import_module(MODULE)
    except ImportError as exc:  # not installed, or installed without the SDK's libraries enabled
        return (f"hardware 'poprt' needs the Python module {MODULE!r} (Graphcore PopRT), which cannot be imported "
                f"({type(exc).__name__}: {exc}). {HOW_TO_GET}")
    return None


def require() -> None:
    """A :class:`PoprtMissing` saying what is missing and how to get it, unless ``poprt`` imports."""
    reason = missing()
    if reason is not None:
        raise PoprtMissing(reason)
