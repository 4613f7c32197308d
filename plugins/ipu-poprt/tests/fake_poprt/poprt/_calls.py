"""The call log: one JSON object a line, appended to the file named by ``FAKE_POPRT_CALLS`` (nothing without it)."""

from __future__ import annotations

import json
import os
import threading

VARIABLE = "FAKE_POPRT_CALLS"
_lock = threading.Lock()


def record(call: str, **what) -> None:
    path = os.environ.get(VARIABLE)
    if not path:
        return
    line = json.dumps({"call": call, **what}, sort_keys=True)
    with _lock, open(path, "a", encoding="utf-8") as log:
        log.write(line + "\n")
