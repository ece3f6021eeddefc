"""A notebook's forkserver, forked from its kernel right after the import cell instead of started
as a new Python that imports torch all over again.

multiprocessing starts its forkserver as a new interpreter that imports what it is told to
preload: torch takes 1.7 s of a quiet 2-core machine, and ``torch._dynamo`` (for the optimizers,
:mod:`commlab.preload_dynamo`) 1.7 s more, so a notebook's first run in the cell after its import
cell (Run All) waited 3.5 s or more. The kernel has just imported torch; forked from it at that
moment, the forkserver has it at once, and the first run's ranks are forked from it within
milliseconds. What it preloads beyond that (:data:`commlab.processes.PRELOAD_LATER`) it imports
right after it has forked those first ranks: they, and they alone, import ``torch._dynamo``
themselves if they need it (a chapter's first run needs no optimizer), and those still waiting
once it is done are replaced (:func:`when_preloaded`).

A fork takes the kernel as it is; the forkserver keeps none of what made it a kernel:

- threads: only the forking one comes along (the kernel's main thread, between two cells);
  nothing here uses what the others served (the frontend's sockets, the history), and the
  forkserver, like every rank, ends with ``os._exit``: no finalizer or exit handler of the
  kernel's runs in it;
- file descriptors: all closed but stdin, stdout and stderr (which a new interpreter would
  inherit too) and the forkserver's socket and pipe; the garbage collector is frozen first, so
  no object of the kernel's is ever finalized onto a descriptor closed or used again;
- the kernel's streams and hooks: ``sys.stdout`` and ``sys.stderr``, ``input``, ``getpass``,
  ``display``, the exception and display hooks and every signal handler are Python's own
  again (``display`` prints, ``input`` finds no input), SIGINT is ignored (the stop button,
  see :func:`commlab.processes.mp_context`), and ``__main__`` is an empty module, as in a new
  interpreter;
- torch's C++ log level, which torch reads from ``TORCH_CPP_LOG_LEVEL`` only when imported,
  is set to ERROR (unless the variable names one), as the new interpreter's would be.

It is not forked where that would be wrong or can't work: outside Linux, outside the main
thread, in a kernel that has started CUDA, even only to ask whether there is a GPU (a child of
a process that has can't use it), or when a forkserver already runs;
:func:`commlab.processes.mp_context` then starts one the usual way.
"""

from __future__ import annotations

import builtins
import ctypes
import gc
import getpass
import io
import os
import selectors
import signal
import socket
import sys
import threading
import types
import warnings
from collections.abc import Callable
from typing import Any

# what ps and top call the forkserver and its ranks (their command line is the kernel's)
PROCESS_NAME = "forkserver"
_ERROR = 2  # c10's log level for errors (TORCH_CPP_LOG_LEVEL=ERROR)
_PR_SET_NAME = 15  # <linux/prctl.h>


def why_not_fork() -> str | None:
    """Why this process can't be the forkserver's parent now (None: it can)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return "not Linux"
    if threading.current_thread() is not threading.main_thread():
        return "not the main thread"
    torch = sys.modules.get("torch")
    if torch is None:
        return "torch is not imported here"
    if torch.cuda.is_initialized() or _cuda_driver_loaded():
        return "CUDA is started in this process"
    from multiprocessing import forkserver

    if forkserver._forkserver._forkserver_pid is not None:
        return "a forkserver runs already"
    return None


def _cuda_driver_loaded() -> bool:
    """Whether CUDA's driver library is loaded here: CUDA's runtime loads it on its first call
    (``torch.cuda.is_available()`` makes one), after which a forked child can't start CUDA,
    though torch has started nothing it knows of."""
    try:
        with open("/proc/self/maps") as maps:
            return any("/libcuda.so" in line for line in maps)
    except OSError:
        return False


def start(preload_now: list[str], preload_later: list[str], first_forks: int) -> bool:
    """Start multiprocessing's forkserver as a fork of this process, which first imports
    ``preload_now`` and, once it has forked ``first_forks`` processes, ``preload_later``
    (:func:`preloaded` says when it has). False (and nothing started) where
    :func:`why_not_fork` says it can't be."""
    if why_not_fork() is not None:
        return False
    from multiprocessing import connection, forkserver, resource_tracker, util

    server = forkserver._forkserver
    with server._lock:
        resource_tracker.ensure_running()
        with socket.socket(socket.AF_UNIX) as listener:
            address = connection.arbitrary_address("AF_UNIX")
            listener.bind(address)
            if not util.is_abstract_socket_namespace(address):
                os.chmod(address, 0o600)
            listener.listen()
            # every client holds the write end: when the last one is gone, the server ends
            alive_r, alive_w = os.pipe()
            preloaded_r, preloaded_w = os.pipe()  # the server closes its end once preloaded
            collecting = gc.isenabled()
            gc.disable()  # until the child has frozen what it inherits (see _serve)
            # and the stop button held off until the child ignores it
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                with warnings.catch_warnings():
                    # Python 3.12 warns of forking a process with threads: see above for what
                    # the child does about them
                    warnings.simplefilter("ignore", DeprecationWarning)
                    pid = os.fork()
                if pid == 0:
                    _serve(listener.fileno(), alive_r, preloaded_w,
                           preload_now, preload_later, first_forks)
            except BaseException:
                os.close(alive_w)
                os.close(preloaded_r)
                raise
            finally:
                os.close(alive_r)
                os.close(preloaded_w)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
                if collecting:
                    gc.enable()
        server._forkserver_address = address
        server._forkserver_alive_fd = alive_w
        server._forkserver_pid = pid
        server._preload_modules = preload_now + preload_later
        _preloaded.clear()
        threading.Thread(target=_watch_preload, args=(preloaded_r,), daemon=True,
                         name="commlab-preload-watch").start()
    return True


# set while no forkserver forked from here is still preloading
_preloaded = threading.Event()
_preloaded.set()
_when_preloaded: list[Callable[[], None]] = []
_calls_lock = threading.Lock()


def preloaded(timeout: float = 0.0) -> bool:
    """Whether the forkserver has preloaded everything (waiting up to ``timeout`` seconds):
    always, unless it was forked from here and is still importing (or has yet to start: it
    imports after its first forks). A rank forked before then imports ``torch._dynamo`` itself
    if it needs it."""
    return _preloaded.wait(timeout)


def when_preloaded(call: Callable[[], None]) -> None:
    """Have ``call()`` called once the forkserver has preloaded everything: by a thread of this
    module's, before :func:`preloaded` says so (here and now, if it has already)."""
    with _calls_lock:
        if not _preloaded.is_set():
            _when_preloaded.append(call)
            return
    call()


def _watch_preload(preloaded_r: int) -> None:
    """Wait, in a thread, for the end of the pipe the forkserver closes once it has preloaded
    (or once it is gone: the next one is a new interpreter that preloads all before serving)."""
    try:
        os.read(preloaded_r, 1)
    finally:
        os.close(preloaded_r)
        while True:
            with _calls_lock:  # the last look and the event in one hold: no call is missed
                calls, _when_preloaded[:] = list(_when_preloaded), []
                if not calls:
                    _preloaded.set()
                    break
            for call in calls:
                try:
                    call()
                except Exception:  # noqa: BLE001 - a caller's business: nothing here to undo
                    pass


def _serve(listener_fd: int, alive_r: int, preloaded_w: int, preload_now: list[str],
           preload_later: list[str], first_forks: int) -> None:
    """The forked child: shed the kernel, then serve as multiprocessing's forkserver until the
    kernel is gone. Never returns."""
    code = 1
    try:
        gc.freeze()
        gc.enable()
        _close_descriptors_but({0, 1, 2, listener_fd, alive_r, preloaded_w})
        _shed_the_kernel()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # ignored now
        _call_it(PROCESS_NAME)
        _cpp_log_level_error()
        _import_after_forks(preload_later, first_forks, preloaded_w)
        from multiprocessing import forkserver

        # the kernel's lock (held while it forked), fresh: a rank may start a forkserver of its own
        forkserver._forkserver._lock = threading.Lock()
        forkserver.main(listener_fd, alive_r, preload_now)
    except SystemExit:
        code = 0  # the kernel is gone
    except BaseException:  # noqa: BLE001 - never back into the kernel's code
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _call_it(name: str) -> None:
    """The name ``ps`` and ``top`` show (not a second kernel's), which its ranks inherit."""
    try:
        ctypes.CDLL(None).prctl(_PR_SET_NAME, name.encode(), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _close_descriptors_but(keep: set[int]) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, gone already


def _shed_the_kernel() -> None:
    """Python's own streams, hooks, signal handlers and ``__main__`` again (see above)."""
    for number in range(1, signal.NSIG):
        try:
            signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL, SIGSTOP, and numbers that are no signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.set_wakeup_fd(-1)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
    sys.excepthook, sys.displayhook = sys.__excepthook__, sys.__displayhook__
    shell_module = sys.modules.get("IPython.core.interactiveshell")
    if shell_module is not None:
        shell = shell_module.InteractiveShell._instance
        kernel = getattr(shell, "kernel", None)
        builtins.input = getattr(kernel, "_sys_raw_input", None) or builtins.input
        getpass.getpass = getattr(kernel, "_save_getpass", None) or getpass.getpass
        if shell is not None:
            type(shell).clear_instance()
    sys.modules["__main__"] = types.ModuleType("__main__")


def _cpp_log_level_error() -> None:
    """What ``TORCH_CPP_LOG_LEVEL=ERROR`` does at torch's import, done after it."""
    if "TORCH_CPP_LOG_LEVEL" in os.environ:
        return
    import torch

    library = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so")
    try:
        ctypes.c_int.in_dll(ctypes.CDLL(library), "FLAGS_caffe2_log_level").value = _ERROR
    except (OSError, ValueError):
        pass  # another build: its warnings reach the ranks' stderr, nothing worse


def _import_after_forks(modules: list[str], forks: int, preloaded_w: int) -> None:
    """Have the forkserver import ``modules`` once it has forked ``forks`` processes, in a
    thread, serving meanwhile all but new forks.

    multiprocessing's forkserver makes its selector once, after its preloads, and waits on it
    between requests. Its listening socket is the one socket registered, readable once per
    request; while the modules are imported it is left out of the selection, and the server goes
    on telling the ranks' launcher when they exit (their ``join``) but forks nothing: a process
    forked while another thread imports would inherit that thread's locks, held. The class is
    put back at once, so that no rank inherits the change.
    """
    _preloaded_w_open.append(preloaded_w)
    os.register_at_fork(after_in_child=_close_preloaded_w_in_child)
    if not modules:
        _import_all(modules, preloaded_w)
    given = selectors.DefaultSelector
    importer = threading.Thread(target=_import_all, args=(modules, preloaded_w),
                                name="commlab-preload")

    class ImportingSelector(given):  # type: ignore[misc, valid-type]
        requests = 0
        paused: Any = None  # the listening socket, while the modules are imported

        def select(self, timeout: float | None = None) -> list[Any]:
            if modules and importer.ident is None and self.requests >= forks:
                self.paused = _the_socket(self)  # the last request's fork is done by now
                self.unregister(self.paused)
                importer.start()
            if self.paused is not None:
                if importer.is_alive():
                    return super().select(_POLL)  # [] when it times out: the server asks again
                importer.join()
                self.register(self.paused, selectors.EVENT_READ)
                self.paused = None
            events = super().select(timeout)
            self.requests += sum(isinstance(key.fileobj, socket.socket) for key, _ in events)
            return events

    def make() -> selectors.BaseSelector:
        selectors.DefaultSelector = given
        return ImportingSelector()

    selectors.DefaultSelector = make  # type: ignore[assignment, misc]


# seconds between two looks at whether the preload thread is done
_POLL = 0.02


def _the_socket(selector: selectors.BaseSelector) -> socket.socket:
    return next(key.fileobj for key in selector.get_map().values()
                if isinstance(key.fileobj, socket.socket))


def _import_all(modules: list[str], preloaded_w: int) -> None:
    for name in modules:
        _import(name)
    _preloaded_w_open.clear()  # no fork happens meanwhile: the listener is paused
    os.close(preloaded_w)  # the ranks forked from now on have them all (see preloaded())


# whether this forkserver still holds the end of the pipe that says it has preloaded all, which
# the ranks it forks close (only the server may hold it, so that its close reads as the end)
_preloaded_w_open: list[int] = []


def _close_preloaded_w_in_child() -> None:
    for fd in _preloaded_w_open:
        os.close(fd)
    _preloaded_w_open.clear()


def _import(name: str) -> None:
    try:
        __import__(name)
    except ImportError:
        pass  # as multiprocessing does with a preload it can't import
