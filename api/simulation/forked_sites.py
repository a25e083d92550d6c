"""Site daemons forked from one process that has already imported them.

Started as ``python -m privadapt.client.daemon.main``, every site pays a new
interpreter and its imports (grpc, numpy, cryptography, scipy.special: about
0.7 s of CPU each), so ten sites on two cores took about 10 s to come up.
Instead a fork server (this module run as a program) imports the daemon once
and forks each site from it: a site then starts in milliseconds, running the
same ``main`` on the same configuration file, its output in its own log.

The server has a single thread (a fork copies only the calling thread, so
a lock another thread held would stay held in the child for ever) and reads
requests on stdin, one JSON line each, answering ``started PID`` on stdout;
it reaps its children itself and reports ``exit PID CODE`` (the code as
``subprocess`` gives it: negative for a signal). When its stdin closes (this
process ended, however), it stops every site still running: SIGTERM, then
SIGKILL after :data:`STOP_TIMEOUT_S`.

A fork is safe here because nothing a site must keep secret or unique exists
at import time: noise draws a fresh ``os.urandom`` key on every call
(:class:`~privadapt.common.noise.floating.SecureRandomBits`), round keys come
from OpenSSL, whose generator reseeds in a forked child, and each site opens
its own sockets, ledger and log after the fork (the tests draw from several
forked sites and find no two draws alike). A test of the daemon's command
line itself still starts the program (``local_processes.start_site(...,
fork=False)``).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from privadapt.common.blas_threads import SINGLE_THREADED_BLAS

SITE_MODULE = "privadapt.client.daemon.main"
#: The exit code a site reports when it ended after its fork server did, so
#: that nobody was left to read its real one (as a shell's 255: unknown).
UNREPORTED_EXIT = 255
STOP_TIMEOUT_S = 10.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
#: How often the server looks for children that ended while no request came.
_REAP_INTERVAL_S = 0.05


class ForkServer:
    """The client side: starts the server program, asks it for sites, and
    keeps each site's exit code as the server reports it."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **SINGLE_THREADED_BLAS})
        self._lock = threading.Lock()  # one request and its answer at a time
        self._changed = threading.Condition()
        self._started: list[int] = []
        self._exits: dict[int, int] = {}
        self._reader = threading.Thread(target=self._read, name="fork-server", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            word, *numbers = line.decode().split()
            with self._changed:
                if word == "started":
                    self._started.append(int(numbers[0]))
                elif word == "exit":
                    self._exits[int(numbers[0])] = int(numbers[1])
                self._changed.notify_all()
        with self._changed:  # the server is gone: no answer will come
            self._changed.notify_all()

    def fork(self, argv: Sequence[str], log: Path) -> int:
        """The pid of a new site daemon running ``main(argv)``."""
        request = json.dumps({"argv": list(argv), "log": str(log)}) + "\n"
        with self._lock:
            assert self._process.stdin is not None
            self._process.stdin.write(request.encode())
            self._process.stdin.flush()
            with self._changed:
                if not self._changed.wait_for(
                        lambda: self._started or self._process.poll() is not None):
                    raise RuntimeError("the site fork server did not answer")
                if not self._started:
                    raise RuntimeError("the site fork server ended "
                                       f"(exit code {self._process.returncode})")
                return self._started.pop(0)

    @property
    def pid(self) -> int:
        """The server program's pid."""
        return self._process.pid

    @property
    def alive(self) -> bool:
        """Whether the server can still report exits (its output is open)."""
        return self._reader.is_alive()

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            return self._exits.get(pid)

    def wait(self, pid: int, timeout: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits or not self._reader.is_alive(),
                                   timeout)
            return self._exits.get(pid)


_server: ForkServer | None = None
_server_lock = threading.Lock()


def fork_server() -> ForkServer:
    """This process's fork server, started on first use (once, whichever
    threads ask first at the same moment)."""
    global _server
    with _server_lock:
        if _server is None:
            _server = ForkServer()
        return _server


class ForkedSite:
    """A forked site daemon, driven like the ``subprocess.Popen`` of the
    program (poll, send_signal, wait, kill, pid, returncode), so code that
    stops processes need not know how they were started."""

    def __init__(self, pid: int, server: ForkServer) -> None:
        self.pid = pid
        self._server = server
        # A handle on this very process (not its number): once the server has
        # reaped it, a signal through the handle cannot reach another process
        # that reuses the pid; os.kill by number is the fallback.
        try:
            self._handle: int | None = os.pidfd_open(pid)
        except OSError:
            self._handle = None
        # Closing the handle and signalling through it exclude each other: a
        # poll in one thread and a terminate in another closed it twice, or
        # signalled a closed descriptor (or one the number was reused for).
        self._handle_lock = threading.Lock()
        self._unreported = False  # ended after its server: known once seen

    @property
    def returncode(self) -> int | None:
        code = self._server.exit_code(self.pid)
        if (code is None and not self._server.alive
                and (self._unreported or self._ended(0.0))):
            self._unreported = True
            code = UNREPORTED_EXIT
        if code is not None:
            with self._handle_lock:
                if self._handle is not None:
                    os.close(self._handle)
                    self._handle = None
        return code

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, signal_number: int) -> None:
        with self._handle_lock:
            if self._server.exit_code(self.pid) is not None:
                return
            with contextlib.suppress(ProcessLookupError):  # ended; its exit is on its way
                if self._handle is not None:
                    signal.pidfd_send_signal(self._handle, signal_number)
                else:
                    os.kill(self.pid, signal_number)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._server.wait(self.pid, timeout) is None and not self._server.alive:
            # The server is gone: no exit will be reported, but the process's
            # own handle still says when it ends.
            self._ended(None if deadline is None else max(0.0, deadline - time.monotonic()))
        code = self.returncode
        if code is None:
            raise subprocess.TimeoutExpired(f"site daemon {self.pid}", timeout or 0.0)
        return code

    def _ended(self, timeout: float | None) -> bool:
        """Whether the process has ended, waiting up to ``timeout`` (None: for
        ever) on its handle; without one, by probing its pid."""
        with self._handle_lock:
            handle = self._handle
        if handle is not None:
            with contextlib.suppress(OSError, ValueError):  # closed meanwhile: it ended
                return bool(select.select([handle], [], [], timeout)[0])
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(_REAP_INTERVAL_S)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork_site(config: Path, log: Path, *extra_args: str) -> ForkedSite:
    """A site daemon for ``config`` forked from the fork server, its stdout
    and stderr appended to ``log`` (module docstring)."""
    server = fork_server()
    return ForkedSite(server.fork(["--config", str(config), *extra_args], log), server)


# -- the server program ------------------------------------------------------------------


def _child(argv: list[str], log: str, parent: int) -> None:
    """In the forked child: default signals, stdin from /dev/null, output to
    ``log``, then the daemon's ``main``; never returns into the server loop."""
    code = 1
    try:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        _stop_with_parent()
        if os.getppid() != parent:  # the server died before the request above took
            return
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        output = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(null)
        os.close(output)
        from privadapt.client.daemon.main import main

        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # reported in the site's log, as the program would
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # exiting anyway
                stream.flush()
        os._exit(code)


def _stop_with_parent() -> None:
    """Ask Linux to send this process SIGTERM (a clean shutdown) when the
    fork server dies, however it dies: a site never outlives the server that
    would have stopped it. Elsewhere nothing is asked."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _reap(children: set[int]) -> None:
    """Report every child that ended, without blocking."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _report(f"exit {pid} {os.waitstatus_to_exitcode(status)}")


def _report(line: str) -> None:
    """Tell the parent ``line``; once the parent is gone (a closed pipe) the
    report is dropped: the server still has its sites to stop, and an
    exception here ended it after the first site it reaped, before the
    SIGKILL that a site slow to stop needs."""
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # Nothing more reaches the parent: later reports, and the
        # interpreter's own flush at exit, go to /dev/null instead of raising.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- kept open until exit


def _stop_all(children: set[int]) -> None:
    for pid in children:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while children and time.monotonic() < deadline:
        _reap(children)
        time.sleep(_REAP_INTERVAL_S)
    for pid in children:
        os.kill(pid, signal.SIGKILL)


def serve() -> None:
    """The server loop (module docstring)."""
    import privadapt.client.daemon.main  # noqa: F401 -- the point: imported once, before forks

    children: set[int] = set()
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    pending = b""
    while True:
        if selector.select(_REAP_INTERVAL_S):
            chunk = os.read(0, 65536)  # raw reads: a buffered reader would hide lines from select
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                request = json.loads(line)
                server = os.getpid()
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    _child(request["argv"], request["log"], server)
                children.add(pid)
                _report(f"started {pid}")
        _reap(children)
    _stop_all(children)


if __name__ == "__main__":
    serve()
