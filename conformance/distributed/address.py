"""A cluster's address as ``--cluster`` takes it, read without importing Dask (the options are checked on every run)."""

from __future__ import annotations

import re

from conformance.distributed.engine import EngineError

_ADDRESS = re.compile(r"^(?:(tcp|tls|ucx|inproc)://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})$", re.ASCII)


def check_address(address: str) -> str:
    """``address`` as a scheduler address (``[tcp://]HOST:PORT``, ``tls://HOST:PORT``); an EngineError naming it
    otherwise."""
    match = _ADDRESS.match(str(address).strip())
    if match is None or not 0 < int(match.group(3)) < 65536:
        raise EngineError(f"--cluster {address!r}: not a Dask scheduler address; expected [tcp://]HOST:PORT, e.g. "
                          "tcp://10.0.0.5:8786 (what `dask scheduler` prints)")
    scheme = match.group(1) or "tcp"
    return f"{scheme}://{match.group(2)}:{match.group(3)}"
