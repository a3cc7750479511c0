"""Running Python code on the library's threads without losing its exceptions, and
routing the library's log lines to the ``logging`` module.

A callback that raises (any exception: KeyboardInterrupt and SystemExit too) is logged
once (``logging.getLogger("voicecat")``, with its traceback) and disabled: it is not
called again until it is set again. The exception
is kept in the owner's :class:`FailureBox` and raised, as a :class:`CallbackError`
whose ``__cause__`` it is, from the next call the program makes on that client (the
log handler, which is global, from the next call on any client or of any module
function). ctypes would otherwise print "Exception ignored" and carry on. The one
exception: Ctrl-C landing in a callback that runs on the main thread during a call of
the program (a log line) is not the callback's failure; that call raises the
KeyboardInterrupt when it returns.
"""
from __future__ import annotations

import atexit
import ctypes
import logging
import sys
import threading
from typing import Any, Callable, List, Optional

from . import _lib
from ._enums import LogLevel
from ._errors import CallbackError

logger = logging.getLogger("voicecat")
logger.addHandler(logging.NullHandler())
#: Where the library's own log lines go (levels ERROR, WARNING, INFO, DEBUG).
library_logger = logging.getLogger("voicecat.library")

_local = threading.local()


def in_callback() -> bool:
    """True on a thread that is running one of this package's callbacks right now."""
    return bool(getattr(_local, "owners", None))


def in_callback_of(box: "FailureBox") -> bool:
    """True on a thread that is running a callback of the owner of ``box`` right now (a
    client's callbacks report to its box, the log handler to :data:`global_failures`)."""
    return box in getattr(_local, "owners", ())


def in_render_callback() -> bool:
    """True inside a sink (mixed or per-speaker): the library calls those while it
    renders, holding its render lock."""
    return bool(getattr(_local, "render_depth", 0))


class FailureBox:
    """Holds the first unreported callback failure of one owner."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: Optional[CallbackError] = None

    def store(self, error: CallbackError) -> None:
        """Keeps ``error`` unless an earlier one is still unreported."""
        with self._lock:
            if self._pending is None:
                self._pending = error

    def take(self) -> Optional[CallbackError]:
        """The unreported failure, if any, which is then reported."""
        with self._lock:
            error, self._pending = self._pending, None
        return error

    def raise_pending(self) -> None:
        """Raises the unreported failure, if any."""
        error = self.take()
        if error is not None:
            raise error from error.original


#: Failures of the (global) log handler.
global_failures = FailureBox()


def require_callable(fn: object, what: str) -> None:
    """TypeError now for a callback that cannot be called (not at its first call, on a
    library thread, far from the mistake)."""
    if not callable(fn):
        raise TypeError(f"{what}: fn must be callable or None, not {type(fn).__name__}")


class Guarded:
    """Calls ``fn`` from a library thread; the first exception disables it (see module doc)."""

    def __init__(self, which: str, fn: Callable[..., None], box: FailureBox, renders: bool = False) -> None:
        self.which = which
        self.fn = fn
        self.box = box
        self.failed = False
        self.renders = renders

    def __call__(self, *args: Any) -> None:
        if self.failed:
            return
        owners = getattr(_local, "owners", None)
        if owners is None:
            owners = _local.owners = []
        owners.append(self.box)
        _local.render_depth = getattr(_local, "render_depth", 0) + self.renders
        try:
            self.fn(*args)
        except BaseException as e:  # noqa: B902 - nothing may escape into C
            if isinstance(e, KeyboardInterrupt) and threading.get_ident() == threading.main_thread().ident:
                # Ctrl-C reached Python code running in a callback on the main thread (a
                # log line during a call the program made): it cannot cross C, and it is
                # not the callback's failure. The package raises it when that call
                # returns (raise_interrupt), once what C now holds is kept. (Delivered
                # again with _thread.interrupt_main instead, it would land at the start of
                # the next callback on this thread, outside any guard, and be lost.) On a
                # library thread no Ctrl-C lands: a KeyboardInterrupt there is the
                # callback's own, a failure like any other (nothing would raise it).
                _local.interrupt = e
                return
            self.failed = True
            self.box.store(CallbackError(self.which, e))  # before the log line: who sees it can rely on it
            logger.error("the %s raised %s; it is disabled, and the error is raised from the next call",
                         self.which, type(e).__name__, exc_info=e)
        finally:
            owners.pop()
            _local.render_depth -= self.renders


def raise_interrupt() -> None:
    """Raises the KeyboardInterrupt a callback on this thread caught, if any."""
    e = getattr(_local, "interrupt", None)
    if e is not None:
        _local.interrupt = None
        raise e


def _keep_interrupt_at_trampoline_entry(unraisable: Any) -> None:
    """``sys.unraisablehook``: Ctrl-C can also land as a trampoline of this package
    starts, before its Guarded runs (Python handles a pending signal on entering a
    function); ctypes would then print "Exception ignored" and drop it, and the call the
    program made (a join whose failure is logged, say) would return as if nothing
    happened. On the main thread it is kept, like one a Guarded catches, and the call
    raises it when it returns. Anything else goes to the hook installed before."""
    if (unraisable.exc_type is KeyboardInterrupt
            and str(getattr(unraisable.object, "__module__", "")).startswith("voicecat.")
            and threading.get_ident() == threading.main_thread().ident):
        _local.interrupt = unraisable.exc_value if unraisable.exc_value is not None else KeyboardInterrupt()
        return
    _previous_unraisablehook(unraisable)


_previous_unraisablehook = sys.unraisablehook
sys.unraisablehook = _keep_interrupt_at_trampoline_entry


# ---- Library log lines -----------------------------------------------------------------

_LEVELS = {LogLevel.ERROR: logging.ERROR, LogLevel.WARNING: logging.WARNING, LogLevel.INFO: logging.INFO,
           LogLevel.DEBUG: logging.DEBUG}


def route_to_logging(level: LogLevel, message: str) -> None:
    """The default log handler: the line goes to ``logging.getLogger("voicecat.library")``."""
    library_logger.log(_LEVELS.get(level, logging.DEBUG), "%s", message)


_log_lock = threading.Lock()
_log_handler: Optional[Guarded] = None
_log_cfunc: Any = None
#: Log trampolines replaced from inside a log callback: C may still be running them.
_retired: List[Any] = []


def _make_log_cfunc(handler: Guarded) -> Any:
    def trampoline(_user: Optional[int], level: int, message: Optional[bytes]) -> None:
        text = message.decode("utf-8", errors="replace") if message is not None else ""
        handler(LogLevel(level), text)
    return _lib.LOG_FN(trampoline)


def set_log_handler(fn: Optional[Callable[[LogLevel, str], None]]) -> None:
    """Sends the library's log lines to ``fn(level, message)``; None restores the default,
    :func:`route_to_logging`. Global for the process.

    ``fn`` runs on whichever thread logs (library threads included), as a callback of
    every client: inside it, calls that are not callback-safe raise StateError (as in
    any callback), and so does ``read_mix``. If it raises, it is disabled and the
    exception is raised, as :class:`CallbackError`, from the next call on any client or
    of any module function.
    """
    global _log_handler, _log_cfunc
    if fn is not None:
        require_callable(fn, "set_log_handler")
    lib = _lib.get()
    handler = Guarded("log handler", fn if fn is not None else route_to_logging, global_failures)
    cfunc = _make_log_cfunc(handler)
    with _log_lock:
        # Returns once every running call of the previous trampoline has returned, except
        # from inside one (then that one may still run: keep it alive).
        lib.vc_set_log_callback(cfunc, None)
        if in_callback() and _log_cfunc is not None:
            _retired.append(_log_cfunc)
        _log_handler, _log_cfunc = handler, cfunc


def _install_default(lib: ctypes.CDLL) -> None:
    if _log_cfunc is None:
        set_log_handler(None)
        # At exit (after the clients' finalizers have destroyed them) the trampoline goes:
        # nothing may call into an interpreter that is shutting down.
        atexit.register(lib.vc_set_log_callback, _lib.LOG_FN(), None)


_lib.on_load.append(_install_default)
