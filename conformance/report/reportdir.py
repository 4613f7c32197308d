"""The report directory of a run (``--report-dir``): held by one run at a time, and replaced whole or not at all.

- **Lock.** The run that writes the report (a serial run, or the pytest-xdist controller) holds
  ``<dir>/.conformance.lock`` from configuration to the end: an exclusive ``flock`` on the file, with the run's pid, host
  and start time in it. A second run into the same directory is refused while the lock is held. A lock file that no live
  process holds (its run was killed) is taken over, and the run says so.
- **Staging.** Everything the run leaves in the report directory is written into a staging directory first: the tests'
  ``artifacts/`` and ``loadgen/`` logs as they run, then ``results.json``, the rendered files and the plots at the end.
  The previous report is not touched until the new one is complete.
- **Swap.** The staging directory is created beside the report directory (``.<name>.conformance-staging-*`` in its
  parent) and exchanged with it in one rename (``renameat2(RENAME_EXCHANGE)``): a kill leaves either the previous set or
  the new one. Files of the report directory that are not part of a report (``junit.xml``, notes) are carried into the
  new set as hard links (copies where a link cannot be made). Where the parent cannot be written, the report directory is
  a mount point, holds directories that are not part of a report, is the working directory or one of its parents, or
  the file system cannot exchange two directories, the entries are moved in one at a time instead: the previous
  ``results.json`` first, the new ``results.json`` last, so a directory with a ``results.json`` always holds a whole set
  (:attr:`ReportDirectory.mode` says which way was used).
- **An interrupted run.** A run interrupted (Ctrl-C, SIGTERM) before any of its tests finished has nothing to
  report: its staged set does not replace a report already in the directory (:meth:`ReportDirectory.commit` keeps
  the previous one, its logs and plots too). One interrupted later never replaces a complete report (one of a run that
  was not interrupted): its partial set is put beside it, in ``<dir>.interrupted`` (replacing an earlier partial set
  there), and the complete one stays where it was. Where the directory holds no complete report, the interrupted run's
  set is put in place.
- **What is on disk.** An interrupt (``KeyboardInterrupt``) may arrive at any step of the swap; the caller then asks
  :meth:`ReportDirectory.placed` where the new set is (by the identity of its ``results.json``), so that what it says
  is what the disk holds. A move entry by entry that is interrupted puts the previous set back.
- **Leftovers** of a killed run (its staging directory, a previous set not yet removed) are removed by the next run that
  takes the lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import signal
import socket
import stat
import tempfile
import threading
from datetime import datetime, timezone
from pathlib import Path

from conformance.fileio import exchange_paths

LOCK_FILE = ".conformance.lock"
PREFIX = ".conformance-"  # the run's own entries inside the report directory (staging, previous set)
PROBE_PREFIX = ".write-check."  # the writability probe of the report directory
STAGING_MARK = ".conformance-staging-"  # beside the report directory: .<name>.conformance-staging-*
REPORT_ENTRIES = ("results.json", "compliance.md", "results.csv", "results.html", "plots", "artifacts", "loadgen")
RESULTS_ENTRY = "results.json"
INTERRUPTED_SUFFIX = ".interrupted"  # beside the report directory: the partial set of an interrupted run
MAX_STAGED_BYTES = 256 << 20  # the run's own staged results.json, read to see whether it reports anything
# errors of an exchange that mean "not here", not "broken": the entries are then moved one at a time
_CANNOT_EXCHANGE = {errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EBUSY,
                    errno.EPERM, errno.EACCES}


class ReportDirBusy(Exception):
    """Another running run holds the report directory."""


def _holder_text() -> str:
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                       "started": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}) + "\n"


def _read_holder(fd: int) -> dict | None:
    """What a lock file says about its holder: None when empty, ``{"raw": text}`` when it is not the suite's format."""
    text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    if not text:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return {"raw": text[:80]}
    return data if isinstance(data, dict) and isinstance(data.get("pid"), int) else {"raw": text[:80]}


def _describe(holder: dict | None) -> str:
    if holder is None:
        return "pid unknown: the lock file is empty"
    if "raw" in holder:
        return f"unrecognised contents {holder['raw']!r}"
    return f"pid {holder['pid']} on {holder.get('host', '?')}, since {holder.get('started', '?')}"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _lock(path: Path) -> int:
    """An fd holding the exclusive flock of the file ``path`` names (created if missing); BlockingIOError (with the fd
    closed) when another process holds it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        try:  # the file may have been removed or replaced between open and flock: lock the one the path names
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _remove(path: Path) -> None:
    """Remove a file, symlink or directory tree, as far as possible (what cannot be removed is left)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass


def _interrupted(staging: Path) -> bool:
    """Whether the staged results.json is that of an interrupted run."""
    try:
        with open(staging / RESULTS_ENTRY, "rb") as fh:
            results = json.loads(fh.read(MAX_STAGED_BYTES + 1))
    except (OSError, ValueError):
        return False
    return isinstance(results, dict) and results.get("interrupted") is True


def _interrupted_before_a_test_finished(staging: Path) -> bool:
    """Whether the staged results.json is that of a run interrupted before any of its tests finished."""
    try:
        with open(staging / RESULTS_ENTRY, "rb") as fh:
            results = json.loads(fh.read(MAX_STAGED_BYTES + 1))
    except (OSError, ValueError):
        return False
    return isinstance(results, dict) and results.get("interrupted") is True and not results.get("tests")


def _complete_report(directory: Path) -> bool:
    """Whether ``directory`` holds the results.json of a run that was not interrupted (a complete report)."""
    try:
        with open(directory / RESULTS_ENTRY, "rb") as fh:
            results = json.loads(fh.read(MAX_STAGED_BYTES + 1))
    except (OSError, ValueError):
        return False
    return isinstance(results, dict) and results.get("interrupted") is False and isinstance(results.get("tests"), list)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        found = os.lstat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM received inside the block are delivered to their handlers when it ends (main thread only;
    a handler not set from Python is left alone)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if handler is not None:
            previous[signum] = signal.signal(signum, lambda number, frame: received.append(number))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)


def _link_or_copy(source, target) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _carry(source: Path, target: Path) -> None:
    """Put ``source`` (a file, directory or symlink) at ``target`` without moving it: hard links where possible."""
    if source.is_symlink():
        os.symlink(os.readlink(source), target)
    elif source.is_dir():
        shutil.copytree(source, target, symlinks=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(source, target)


class ReportDirectory:
    def __init__(self, path):
        self.path = Path(path)  # as given: in messages and in the paths the report names
        self.real = Path(os.path.realpath(path))
        self.lock_path = self.real / LOCK_FILE
        self.staging: Path | None = None
        self.mode: str | None = None  # "swap" (one exchange) or "entries" (one rename per entry)
        self.notes: list[str] = []  # what the run should tell the user (a stale lock taken over, leftovers removed)
        self._fd: int | None = None
        self._new: tuple[int, int] | None = None  # the staged results.json (device, inode), once commit begins
        self._staged_fd: int | None = None  # the lock of the staged set while it is being swapped in

    @property
    def beside(self) -> Path:
        """Where the partial set of an interrupted run goes when the directory holds a complete report."""
        return self.path.with_name(self.path.name + INTERRUPTED_SUFFIX)

    def placed(self) -> str | None:
        """Where the set :meth:`commit` was putting in place is now: ``"report"`` (the report directory),
        ``"beside"`` (:attr:`beside`), or None (not in place: the previous set is where it was)."""
        if self._new is None:
            return None
        if _identity(self.real / RESULTS_ENTRY) == self._new:
            return "report"
        if _identity(self.real.parent / (self.real.name + INTERRUPTED_SUFFIX) / RESULTS_ENTRY) == self._new:
            return "beside"
        return None

    # ----- the lock -----------------------------------------------------------------------------------------------
    def acquire(self) -> None:
        """Take the lock; ReportDirBusy naming the holder when a running run holds it. A stale lock is taken over and
        the leftovers of its run are removed (both noted in :attr:`notes`)."""
        try:
            fd = _lock(self.lock_path)
        except BlockingIOError:
            with open(self.lock_path, "rb") as fh:
                holder = _read_holder(fh.fileno())
            raise ReportDirBusy(f"--report-dir {self.path}: another run is writing its report there "
                                f"({_describe(holder)}; lock {self.path / LOCK_FILE}); wait for it to finish or "
                                f"choose another directory") from None
        previous = _read_holder(fd)
        if previous is not None:
            gone = ("raw" not in previous and previous.get("host") == socket.gethostname()
                    and not _running(previous["pid"]))
            self.notes.append(f"--report-dir {self.path}: took over the stale lock {self.path / LOCK_FILE} "
                              f"({_describe(previous)}; {'no longer running' if gone else 'no longer holding it'})")
        os.ftruncate(fd, 0)
        os.pwrite(fd, _holder_text().encode(), 0)
        self._fd = fd
        self._remove_leftovers()

    def release(self) -> None:
        """Remove the lock file (while still holding it) and let go; the staging directory goes too."""
        self.discard()
        for fd in dict.fromkeys(fd for fd in (self._fd, self._staged_fd) if fd is not None):
            try:  # the lock file is the one it holds: also one an interrupted swap had already put in place
                if os.path.samestat(os.fstat(fd), os.stat(self.lock_path)):
                    os.unlink(self.lock_path)
            except OSError:
                pass
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fd = self._staged_fd = None

    def _leftovers(self) -> list[Path]:
        beside = list(self.real.parent.glob(f".{self.real.name}{STAGING_MARK}*"))
        inside = [p for p in self.real.iterdir() if p.name.startswith(PREFIX)]
        return sorted(beside + inside)

    def _remove_leftovers(self) -> None:
        found = self.tidy()
        if found:
            self.notes.append(f"--report-dir {self.path}: removed what an interrupted run left: "
                              f"{', '.join(str(p) for p in found)}")

    def tidy(self) -> list[Path]:
        """Remove the run's own temporary entries beside and inside the report directory (a staging directory, a
        previous set not yet removed); returns them."""
        found = self._leftovers()
        for path in found:
            _remove(path)
        return found

    # ----- staging and the swap -----------------------------------------------------------------------------------
    def stage(self) -> Path:
        """Create the staging directory the run writes into (beside the report directory where it can be exchanged
        with it, else inside it)."""
        if not os.path.ismount(self.real):
            try:
                staging = Path(tempfile.mkdtemp(prefix=f".{self.real.name}{STAGING_MARK}", dir=self.real.parent))
            except OSError:
                staging = None
            if staging is not None:
                if self._can_exchange(staging):
                    self.staging, self.mode = staging, "swap"
                    return staging
                shutil.rmtree(staging, ignore_errors=True)
        self.staging, self.mode = Path(tempfile.mkdtemp(prefix=f"{PREFIX}staging-", dir=self.real)), "entries"
        return self.staging

    def _can_exchange(self, staging: Path) -> bool:
        """Whether two directories beside the report directory can be exchanged (the file system supports it)."""
        try:
            probe = Path(tempfile.mkdtemp(prefix=f".{self.real.name}{STAGING_MARK}probe-", dir=self.real.parent))
        except OSError:
            return False
        try:
            exchange_paths(staging, probe)
            return True
        except OSError:
            return False
        finally:
            shutil.rmtree(probe, ignore_errors=True)

    def discard(self) -> None:
        """Drop the staging directory; the report directory is left as it was."""
        if self.staging is not None:
            _remove(self.staging)
            self.staging = None

    def commit(self) -> str:
        """:meth:`_commit` with SIGINT and SIGTERM held until it returns (then delivered): the swap's steps are not
        cut short by a signal; an interrupt that comes anyway is answered by :meth:`placed`."""
        with _signals_held():
            return self._commit()

    def _commit(self) -> str:
        """Put the staged set in place of the report directory's; returns the way it was done (``swap`` or
        ``entries``), ``kept`` when the staged set is that of a run interrupted before any test finished and the
        directory holds a report (the staged set is dropped), or ``beside`` when it is that of an interrupted run and
        the directory holds a complete report (the staged set goes to :attr:`beside`; ``dropped`` where it cannot,
        said in :attr:`notes`). An
        OSError leaves the previous set (``swap``) and the staging directory for :meth:`discard`."""
        if self.staging is None:
            raise RuntimeError("nothing staged")
        self._new = _identity(self.staging / RESULTS_ENTRY)
        if _interrupted_before_a_test_finished(self.staging) and os.path.lexists(self.real / RESULTS_ENTRY):
            self.discard()
            self.notes.append(f"--report-dir {self.path}: the run was interrupted before any test finished; the "
                              f"previous report there is unchanged")
            return "kept"
        if _interrupted(self.staging) and _complete_report(self.real):
            return self._put_beside()
        if self.mode == "swap" and self._swappable() and self._swap():
            return "swap"
        self.mode = "entries"
        self._move_entries()
        return "entries"

    def _put_beside(self) -> str:
        """The staged (interrupted) set to :attr:`beside`, replacing an earlier partial set there; ``dropped`` (said in
        :attr:`notes`) where it cannot go there."""
        target = self.real.parent / (self.real.name + INTERRUPTED_SUFFIX)
        staging = self.staging
        try:
            os.chmod(staging, stat.S_IMODE(os.stat(self.real).st_mode))
            if not os.path.lexists(target):
                os.rename(staging, target)
            elif target.is_dir() and not target.is_symlink() and (
                    not any(target.iterdir()) or (target / RESULTS_ENTRY).is_file()):
                exchange_paths(staging, target)  # the earlier partial set is now at the staging path
            else:
                raise OSError(errno.EEXIST, "exists and is not a report directory", str(self.beside))
        except OSError as exc:
            self.discard()
            where = f"{exc.filename}: " if exc.filename else ""
            self.notes.append(f"this interrupted run's partial report could not be put beside the complete one "
                              f"({where}{exc.strerror or exc})")
            return "dropped"
        self.discard()
        return "beside"

    def _foreign(self) -> list[str]:
        """Entries of the report directory that no report writes (kept across runs)."""
        return sorted(name for name in os.listdir(self.real)
                      if name not in REPORT_ENTRIES and name != LOCK_FILE
                      and not name.startswith((PREFIX, PROBE_PREFIX)))

    def _swappable(self) -> bool:
        """Whether the report directory may be replaced as a whole: it holds no directories of its own (those are
        left in place, not copied) and is not this process's working directory or one of its parents."""
        foreign_dirs = [n for n in self._foreign() if (self.real / n).is_dir() and not (self.real / n).is_symlink()]
        cwd = Path(os.path.realpath(os.getcwd()))
        return not foreign_dirs and cwd != self.real and self.real not in cwd.parents

    def _swap(self) -> bool:
        """Exchange the staging directory with the report directory; False when this file system cannot."""
        staging = self.staging
        carried = []
        for name in self._foreign():
            if not os.path.lexists(staging / name):
                _carry(self.real / name, staging / name)
                carried.append(name)
        os.chmod(staging, stat.S_IMODE(os.stat(self.real).st_mode))
        fd = self._staged_fd = _lock(staging / LOCK_FILE)  # the new set is locked before it takes the directory's place
        os.pwrite(fd, _holder_text().encode(), 0)
        try:
            exchange_paths(staging, self.real)
        except OSError as exc:
            os.unlink(staging / LOCK_FILE)
            os.close(fd)
            self._staged_fd = None
            for name in carried:
                _remove(staging / name)
            if exc.errno in _CANNOT_EXCHANGE:
                return False
            raise
        # the staging path now holds the previous set and the previous lock file
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self._staged_fd = fd, None
        self.discard()
        return True

    def _move_entries(self) -> None:
        """Move the staged entries in one at a time: the previous results.json out first, the new one in last."""
        staging = self.staging
        previous = Path(tempfile.mkdtemp(prefix=f"{PREFIX}previous-", dir=self.real))
        names = sorted((n for n in os.listdir(staging) if n != LOCK_FILE), key=lambda n: (n == RESULTS_ENTRY, n))
        old = [n for n in REPORT_ENTRIES if os.path.lexists(self.real / n)]
        try:
            for name in sorted(old, key=lambda n: n != RESULTS_ENTRY):  # results.json first: the old set is withdrawn
                if name == RESULTS_ENTRY or name not in names:
                    os.rename(self.real / name, previous / name)
            for name in names:
                target = self.real / name
                if os.path.lexists(target):
                    os.rename(target, previous / name)
                os.rename(staging / name, target)
        except BaseException:  # an error or an interrupt: put the previous set back as far as possible, results.json last
            # by what the disk holds (an interrupt may come between a rename and its note): a staged entry that is
            # gone from the staging directory is in the report directory; the previous directory holds what moved out
            for name in names:
                if not os.path.lexists(staging / name) and os.path.lexists(self.real / name):
                    with contextlib.suppress(OSError):
                        os.rename(self.real / name, staging / name)
            for name in sorted(os.listdir(previous), key=lambda n: n == RESULTS_ENTRY):
                with contextlib.suppress(OSError):
                    os.rename(previous / name, self.real / name)
            with contextlib.suppress(OSError):
                os.rmdir(previous)  # empty unless something could not be put back
            raise
        _remove(previous)
        self.discard()
