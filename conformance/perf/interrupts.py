"""Interrupts (SIGINT, SIGTERM) of a run that may be inside MLPerf LoadGen.

LoadGen runs its issue loop on the thread that called ``StartTest`` (the main thread) and calls the SUT's
``issue_queries`` and the QSL's load and unload there. Python runs signal handlers on the main thread between
bytecodes, so the default SIGINT handler raises ``KeyboardInterrupt`` inside one of those callbacks: it unwinds through
LoadGen's C++ frames and leaves its state half torn down (its logger thread running, queries the SUT still completes
into freed memory), and the process later dies of a segmentation fault or a ``std::bad_alloc`` abort. While the main
thread waits inside LoadGen (an Offline query being served), no Python handler runs at all.

:func:`deferred_interrupts` is the cure, around a LoadGen run: a signal only wakes a watcher thread (through
:func:`signal.set_wakeup_fd`, which works while the main thread is in C++), which calls ``on_signal`` once: the SUT then
completes every outstanding query and answers every later one at once with an empty response, so that LoadGen reaches
the end of its run (Offline at once, SingleStream and MultiStream when the generated queries or the minimum duration run
out, Server at the end of its schedule). When LoadGen has returned, the signal is delivered again to the handler that
was there before (``KeyboardInterrupt`` for SIGINT), in the main thread. A second signal while LoadGen is finishing ends
the process at once with exit status 2, without a report (the previous report stays).

:func:`terminate_as_interrupt` makes SIGTERM behave like SIGINT for a whole run, so that a terminated run stops as an
interrupted one does (pytest's exit status 2, the report written).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
FORCED_EXIT_STATUS = 2  # pytest's "interrupted"


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")


def terminate_as_interrupt() -> Callable[[], None]:
    """SIGTERM raises ``KeyboardInterrupt`` in the main thread from now on; returns the function that puts the previous
    handler back. Off the main thread (where handlers cannot be set) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)

    def restore() -> None:
        if signal.getsignal(signal.SIGTERM) is _raise_interrupt:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    return restore


def _deliver(signum: int, handler) -> None:
    """What the signal would have done under ``handler``, now, in the main thread."""
    if handler is signal.SIG_IGN:
        return
    if callable(handler):
        handler(signum, None)
    elif signum == signal.SIGINT:  # SIG_DFL or a handler set outside Python: Python's own default
        raise KeyboardInterrupt
    else:
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)


class DeferredSignals:
    """The signals received during a :func:`deferred_interrupts` block (their numbers, in order)."""

    def __init__(self, on_signal: Callable[[int], None]):
        self.on_signal = on_signal
        self.received: list[int] = []
        self.callback_error: BaseException | None = None

    def _watch(self, reader: socket.socket) -> None:
        while True:
            try:
                data = reader.recv(64)
            except OSError:
                return
            if not data:  # the write end was closed: the block has ended
                return
            for signum in data:
                if signum not in SIGNALS:
                    continue
                self.received.append(signum)
                if len(self.received) == 1:
                    try:
                        self.on_signal(signum)
                    except BaseException as exc:  # noqa: BLE001 - kept and raised in the main thread
                        self.callback_error = exc
                else:
                    sys.stderr.write(f"conformance: second {signal.Signals(signum).name} while LoadGen finishes its "
                                     f"run: exiting now (status {FORCED_EXIT_STATUS}), no report written\n")
                    sys.stderr.flush()
                    os._exit(FORCED_EXIT_STATUS)


def _ignore(signum, frame) -> None:
    """The Python-level handler during a LoadGen run: the watcher thread acts on the signal, nothing is raised here."""


@contextmanager
def deferred_interrupts(on_signal: Callable[[int], None]) -> Iterator[DeferredSignals | None]:
    """Within the block, SIGINT and SIGTERM call ``on_signal(signum)`` once from a watcher thread instead of raising in
    the main thread; after it, the first signal received is delivered to the previous handler (see the module
    docstring). Off the main thread signals cannot reach the block's code: nothing changes (yields None)."""
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    state = DeferredSignals(on_signal)
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    # an ignored signal stays ignored (SIGINT of a background job of a non-interactive shell)
    previous = {signum: signal.signal(signum, _ignore) for signum in SIGNALS
                if signal.getsignal(signum) is not signal.SIG_IGN}
    try:
        old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    except (ValueError, OSError):
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        reader.close()
        writer.close()
        raise
    watcher = threading.Thread(target=state._watch, args=(reader,), name="interrupt-watcher", daemon=True)
    watcher.start()
    try:
        yield state
    finally:
        signal.set_wakeup_fd(old_fd)
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        writer.close()
        watcher.join()
        reader.close()
        if state.received:  # the interrupt wins over an error of the block (which stays chained to it)
            _deliver(state.received[0], previous[state.received[0]])
    if state.callback_error is not None:
        raise state.callback_error
