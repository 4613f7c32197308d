"""Threads that call into LoadGen, kept for the life of the process.

LoadGen gives every thread that logs through it (one that calls ``QuerySamplesComplete`` or ``StartTest``) a
thread-local logger, which it hands over to its IO thread when that thread exits; the hand-over races with the IO
thread (a known LoadGen race, mlcommons/inference#440, whose maintainers' advice is not to let such threads exit while
LoadGen is in use). A process that runs many scenarios, each with threads of its own, then crashes now and then in a
LoadGen thread (measured: a segmentation fault in about one of ten runs of the SUT fault tests, 96 LoadGen runs each).
So the system under test's threads, and whatever else calls LoadGen from a thread other than the main one, run as
tasks on resident threads: started when first needed, reused by every later run, never exiting.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable

_lock = threading.Lock()
_idle: list["_Resident"] = []
_started = 0


class Task:
    """A callable running on a resident thread; :meth:`join` waits for it as ``Thread.join`` does."""

    def __init__(self, target: Callable[[], object], name: str):
        self.target = target
        self.name = name
        self.error: BaseException | None = None  # what the target raised (it is not re-raised anywhere)
        self._done = threading.Event()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the task has returned (at most ``timeout`` s); whether it has."""
        return self._done.wait(timeout)

    def is_alive(self) -> bool:
        return not self._done.is_set()


class _Resident:
    def __init__(self, number: int):
        self.tasks: queue.SimpleQueue[Task] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=f"loadgen-resident-{number}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        own_name = self.thread.name
        while True:
            task = self.tasks.get()
            self.thread.name = f"{own_name} ({task.name})"
            try:
                task.target()
            except BaseException as exc:  # noqa: BLE001 - the thread must live on (see the module docstring)
                task.error = exc
            finally:
                self.thread.name = own_name
                with _lock:
                    _idle.append(self)
                task._done.set()


def start(target: Callable[[], object], name: str) -> Task:
    """Run ``target`` on an idle resident thread (a new one when none is idle); the task to join."""
    global _started
    task = Task(target, name)
    with _lock:
        resident = _idle.pop() if _idle else None
        if resident is None:
            _started += 1
            resident = _Resident(_started)
    resident.tasks.put(task)
    return task


def started() -> int:
    """How many resident threads this process has started (they are reused: runs in sequence need two or three)."""
    return _started
