"""The client: a session on a voicecat-server, its streams, its events and its mix."""
from __future__ import annotations

import array
import asyncio
import atexit
import ctypes
import math
import numbers
import operator
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Dict, Iterator, List, Optional, Set, Type, Union

from . import _lib, _pcm
from ._callbacks import (FailureBox, Guarded, global_failures, in_callback, in_callback_of, in_render_callback,
                         raise_interrupt, require_callable)
from ._enums import ErrorCode, EventType, InputMode, StreamKind
from ._errors import (InvalidArgument, NotFound, StateError, Timeout, Unsupported, VoiceCatError, error_for,
                      global_detail)
from ._types import (AudioConfig, Channel, ConnectionStats, Event, InputLevel, OutputFormat, PlaybackStats,
                     RemoteStreamInfo, RemoteStreamSettings, SendProcessing, SendStats, SpeakerBlock, StreamStats, User,
                     UserStream, _flag, _real)

if TYPE_CHECKING:
    from types import TracebackType

    import numpy.typing as npt

#: The server's default port (``vc_connect_params.port`` 0 means it too).
DEFAULT_PORT = 47800
#: The default sample rate of the PCM at the API (streams take others with
#: ``start_stream(sample_rate=...)``, output with :meth:`Client.set_output_format`).
SAMPLE_RATE = 48000

#: A mixed-output sink: ``fn(pcm, frames)`` with ``pcm`` the block in the output format
#: (bytes, or a read-only numpy view of shape (frames, channels) when set with ``numpy=True``).
SinkFn = Callable[[Any, int], None]
#: A per-speaker sink: ``fn(block)``, one call per remote stream per rendered block.
SpeakerSinkFn = Callable[[SpeakerBlock], None]
#: An event handler: ``fn(event)``, on the client's network thread.
EventHandler = Callable[[Event], None]
#: What :meth:`Client.read_mix` returns: numpy (frames, channels) int16 or float32, or
#: array('h') / array('f') without numpy.
MixBlock = Union["npt.NDArray[Any]", "array.array[int]", "array.array[float]"]

# ---- Argument checks -------------------------------------------------------------------


def _cstr(value: Union[str, bytes, None], what: str) -> bytes:
    if value is None:
        raise ValueError(f"{what} is required")
    return _optional_cstr(value, what) or b""


def _optional_cstr(value: Union[str, bytes, None], what: str) -> Optional[bytes]:
    if value is None:
        return None
    if isinstance(value, str):
        raw = value.encode("utf-8")
    elif isinstance(value, (bytes, bytearray)):
        raw = bytes(value)
    else:
        raise TypeError(f"{what} must be str or bytes, not {type(value).__name__}")
    if b"\0" in raw:
        raise ValueError(f"{what} contains a NUL character")
    return raw


def _uint(value: int, what: str, high: int = 0xFFFFFFFF, low: int = 0, valid: Optional[str] = None) -> int:
    """``value`` as an int in low..high; the messages state ``valid`` as the range when
    given (the range the library checks, where low..high is only what C can hold)."""
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}") from None
    if not low <= number <= high:
        raise ValueError(f"{what} must be in {valid or f'{low}..{high}'}, not {number}")
    return number


def _seconds(seconds: Optional[float], what: str) -> Optional[float]:
    """A timeout checked: None for no limit (None or infinity), else seconds >= 0.
    TypeError for what is not a number, ValueError for NaN or a negative number."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        raise TypeError(f"{what} must be a number of seconds (None or float('inf'): no limit), "
                        f"not {type(seconds).__name__} {seconds!r}")
    try:
        value = float(seconds)
    except OverflowError:  # an int beyond float's range
        value = math.inf if seconds > 0 else -math.inf
    if math.isnan(value) or value < 0:
        raise ValueError(f"{what} must be a non-negative number of seconds (None or float('inf'): no limit), "
                         f"not {seconds!r}")
    return None if value == math.inf else value


def _millis(seconds: Optional[float], what: str) -> int:
    """A timeout as whole milliseconds for C: None or infinity = forever = -1; else at
    most 0x7FFFFFFF (about 24.8 days). Checked as :func:`_seconds` does."""
    value = _seconds(seconds, what)
    if value is None:
        return -1
    return int(round(min(value * 1000, 0x7FFFFFFF)))


# ---- The part of a client that C-side callbacks and the finalizer hold -----------------


class _Core:
    """Handle, callback objects and pending callback failure of one client.

    Callbacks reference this, never the :class:`Client`, so an unreferenced client can be
    collected (its finalizer then destroys the C client). Every ctypes callback object
    stays referenced here until ``vc_client_destroy`` has returned.
    """

    def __init__(self, handle: int) -> None:
        self.handle: Optional[int] = handle
        #: A handle closed for the program's calls, left to the reaper (see destroy).
        self.parked: Optional[int] = None
        self.failures = FailureBox()
        self.lock = threading.Lock()
        #: The program's event handler, held by its Client (``Client._guards``): the core
        #: is held by the client's finalizer, so nothing it holds may lead back to the
        #: client, or a client whose callback refers to it (a bound method of the object
        #: that owns the client) would never be collected, nor closed.
        self.event_handler: "Optional[weakref.ReferenceType[Guarded]]" = None
        self.subscribers: Set["AsyncEvents"] = set()
        self.event_installed = False
        #: The C trampolines of the sinks, by setter: every one C may hold (the one it
        #: was handed last, and one a call interrupted before it could say), kept alive.
        self.cfuncs: Dict[str, List[Any]] = {}
        self.sink_lock = threading.Lock()
        #: What vc_set_output_format was last told (the library has no getter).
        self.output_format = OutputFormat()
        #: Held across vc_set_output_format and every pull, so a pull's buffer is sized
        #: for the format the library renders it in (a format changed by another thread
        #: in between would have it write past the buffer). Never taken inside a sink
        #: (the library holds its render lock there, which a pull holding this lock
        #: waits for): set_output_format and pulls refuse from a sink first, as the
        #: library does.
        self.format_lock = threading.RLock()
        self.event_cfunc: Any = _lib.EVENT_FN(Guarded("event dispatcher", self._dispatch_event, self.failures))

    def _dispatch_event(self, _user: Optional[int], pointer: Any) -> None:
        event = Event._from_c(pointer.contents)
        for subscriber in list(self.subscribers):
            subscriber._push(event)
        ref = self.event_handler
        handler = ref() if ref is not None else None
        if handler is not None:
            handler(event)

    def destroy(self) -> None:
        """Destroys the C client, then lets go of the callbacks (idempotent). Inside a
        callback the client is closed for the program's calls at once and destroyed by a
        reaper thread (see below)."""
        with self.lock:
            handle, self.handle = self.handle, None
            if handle is None:
                handle, self.parked = self.parked, None
        if handle is None:
            return
        if in_callback():
            # vc_client_destroy ignores a call from inside the client's own callback (the
            # finalizer may run there), and from another client's callback it would hold
            # that client's thread until this one's threads stopped (two clients closing
            # each other there would wait for each other forever): a thread of the
            # package destroys it, once the callback has returned (vc_client_destroy
            # waits for it).
            with self.lock:
                self.parked = handle
            _orphans.append(self)
            try:
                reaper = threading.Thread(target=_reap_orphans, name="voicecat-reaper", daemon=True)
                reaper.start()
                _reapers.add(reaper)
            except RuntimeError:
                pass  # the interpreter is shutting down: the atexit hook reaps it
            return
        _lib.get().vc_client_destroy(handle)
        for subscriber in list(self.subscribers):
            subscriber.close()
        self.cfuncs.clear()
        self.event_handler = None


#: Cores whose destruction was asked for from inside a callback (see _Core.destroy); a
#: reaper thread started then destroys them (so does the next Client() or close() outside
#: callbacks, or the exit, whichever comes first).
_orphans: List[_Core] = []


def _refuse_in_sink(what: str) -> None:
    """A pull from inside a sink: refused before the format lock (the library refuses it
    too: a sink runs while the library renders)."""
    if in_render_callback():
        raise StateError(ErrorCode.STATE, f"{what} cannot be called from inside a sink (the library is rendering)")


def _refuse_wait_in_callback(what: str, wait_ms: int) -> None:
    """A wait for events from inside a callback: refused at once (the library does not
    wait there, so the package's loop would hold the library's thread, spinning, for
    the whole timeout). Not waiting (timeout 0) is allowed."""
    if wait_ms != 0 and in_callback():
        raise StateError(ErrorCode.STATE, f"{what} cannot wait inside a callback (it would hold the library's "
                                          "thread); use timeout=0 there, or wait on one of your threads")


def _reap_orphans() -> None:
    while not in_callback():
        try:
            core = _orphans.pop()
        except IndexError:  # none left (another thread may have taken the last)
            return
        core.destroy()


#: Reaper threads started (a daemon thread is cut off at exit: the exit hook waits for
#: one still destroying a client, so its recordings are finished).
_reapers: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()


def _reap_at_exit() -> None:
    _reap_orphans()
    for reaper in list(_reapers):
        reaper.join(10)


atexit.register(_reap_at_exit)


def _raise_pending(core: Optional[_Core]) -> None:
    global_failures.raise_pending()
    if core is not None:
        core.failures.raise_pending()


# ---- Streams ------------------------------------------------------------------------------


class Stream:
    """A stream this client publishes, from :meth:`Client.start_stream`.

    A context manager: leaving the ``with`` block stops it. ``feed()`` sends PCM on the
    calling thread (external-feed streams); calls for one stream are serialized.
    """

    def __init__(self, client: "Client", stream_id: int, kind: StreamKind, channels: int,
                 device: Optional[str], sample_rate: int = SAMPLE_RATE) -> None:
        self._client = client
        self._feed_lock = threading.Lock()
        self._stopped = False
        #: The library's id for this stream.
        self.id = stream_id
        #: MIC, SCREEN_AUDIO or AUX_DEVICE.
        self.kind = kind
        #: Channels of the PCM fed (1-D input) or captured.
        self.channels = channels
        #: The capture device, or None for an external-feed stream.
        self.device = device
        #: The rate of the PCM fed (external feed) or asked of the capture device.
        self.sample_rate = sample_rate

    @property
    def external_feed(self) -> bool:
        """True when the program feeds the PCM (no capture device)."""
        return self.device is None

    @property
    def stopped(self) -> bool:
        """True after :meth:`stop`, once the client is closed, and once the stream
        ended by itself (the server withdrew it; the session, or its channel, ended):
        :meth:`feed` then raises NotFound saying how (StateError once the client is
        closed)."""
        handle = self._client._core.handle
        if self._stopped or handle is None:
            return True
        # Asked of the library directly: a property does not raise a callback's
        # pending error (the next call does).
        rc = int(_lib.get().vc_stream_queued_ms(handle, self.id, ctypes.byref(ctypes.c_uint32())))
        return rc == ErrorCode.NOT_FOUND or self._client.closed

    def __repr__(self) -> str:
        source = f"device={self.device!r}" if self.device else "external feed"
        return f"<voicecat.Stream {self.id} {self.kind.name} {self.channels} ch {self.sample_rate} Hz, {source}>"

    def feed(self, pcm: _pcm.PcmInput, channels: Optional[int] = None) -> int:
        """Queues PCM of any length at the stream's :attr:`sample_rate` for sending;
        returns the sample frames taken.

        ``pcm`` is a numpy array (int16, or float32/float64 in [-1, 1]; shape (frames,)
        or (frames, channels)), or bytes / bytearray / memoryview / array('h') of native
        int16 samples. int16 goes to the library as it is (``vc_stream_feed_pcm``), float
        as float32 (``vc_stream_feed_pcm_f32``; float64 is cast, float32 is passed
        without a copy when contiguous). 1-D input is interleaved with ``channels``
        (default: the stream's) channels; 2-D input names its own, and a ``channels``
        passed with it must agree (ValueError). The library resamples a stream whose rate is
        not 48 kHz. It sends it in talkspurts paced at real time: audio fed in
        real time goes out at once (blocks that are not whole frames, such as 30 ms or
        512 samples on 20 ms frames, hold a talkspurt's first frame by their
        unevenness, at most about a frame, so every frame leaves in its slot; see
        ``vc_stream_feed_pcm``), a whole file fed at once is heard at real time (see
        :attr:`queued_ms`, :meth:`drain`, :meth:`flush`); a pause in feeding ends the
        talkspurt. Never blocks. Raises TypeError for an object that is not PCM or a
        ``channels`` that is not an int, ValueError for a wrong sample type, shape or
        byte count, or a float array holding NaN or infinity (taken for a bug here:
        ``vc_stream_feed_pcm_f32`` itself plays NaN as silence and clips the rest),
        StateError for a device stream, NotFound once the stream is stopped (an empty
        block too: it feeds nothing, but is checked like any other), NoMemory when the
        queue (``max_queue_ms``) cannot take the whole block (nothing of it is queued).
        """
        block = _pcm.pcm_block(pcm, self.channels if channels is None else channels, explicit=channels is not None)
        # (An empty block goes to C too: it feeds nothing, but a stopped stream says so.)
        name = "vc_stream_feed_pcm_f32" if block.f32 else "vc_stream_feed_pcm"
        with self._feed_lock:
            self._client._call(name, self.id, block.pointer, block.frames, block.channels)
        return block.frames

    @property
    def level(self) -> InputLevel:
        """The stream's input level now (``vc_get_input_level``): RMS and peak in dBFS of
        the last frame that went through the send path, after send processing and
        before the input gate (so a gated MIC still reads its level). -120 for silence
        and when nothing was sent in the last 250 ms (audio fed ahead is measured when
        it is sent, at real time). NotFound once stopped."""
        rms, peak = ctypes.c_float(), ctypes.c_float()
        self._client._call("vc_get_input_level", self.id, ctypes.byref(rms), ctypes.byref(peak))
        return InputLevel(rms_dbfs=rms.value, peak_dbfs=peak.value)

    @property
    def queued_ms(self) -> int:
        """How much fed audio waits to be sent, in ms (queued frames plus the partial one)."""
        out = ctypes.c_uint32()
        self._client._call("vc_stream_queued_ms", self.id, ctypes.byref(out))
        return out.value

    def _queued_or_zero(self) -> int:
        try:
            return self.queued_ms
        except NotFound:
            return 0

    def drain(self, timeout: Optional[float] = None) -> None:
        """Waits until everything fed has been sent, the last partial frame included (it
        goes out when the talkspurt ends); at most ``timeout`` seconds (None or
        ``float('inf')``: no limit), then Timeout; ValueError for a negative or NaN
        timeout, TypeError for one that is not a number. NetworkError when the queue emptied but some of the audio fed
        since it was last empty came due while the connection was down (an automatic
        reconnect's gap) and was dropped, not sent, or was sent while the media path was
        lost (between VOICE_DISCONNECTED and VOICE_RECONNECTED) and most likely reached
        nobody: the message says how many ms of each (:meth:`send_stats`
        ``frames_dropped`` and ``frames_sent_path_lost`` count every such frame), and when the
        session was lost while audio was still queued (the message says why and how
        many ms were not sent; DISCONNECTED is queued for :meth:`Client.poll_event` by
        then). NotFound when the stream was stopped, or the session ended by
        :meth:`Client.disconnect` (StateError when the client was closed: by
        :meth:`Client.close`, from another thread during the wait, or before)."""
        wait = _millis(timeout, "timeout")
        deadline = None if wait < 0 else time.monotonic() + wait / 1000
        # Ask the library first without waiting: from inside a callback it refuses at
        # once (StateError), where the wait below would hold the library's thread for
        # as long as the queue lasts; an empty queue returns (or raises) here.
        try:
            self._client._call("vc_stream_drain", self.id, 0)
            return
        except Timeout:
            pass
        # Watch the queue from here first, so that Ctrl-C reaches a program waiting.
        # A stream that ended meanwhile (stopped, or with a lost session) is left to
        # the library's drain below, which says how it ended.
        while self._queued_or_zero() > 0 and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.02)
        left = -1 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
        try:
            self._client._call("vc_stream_drain", self.id, left)
        except Timeout:
            # The library only saw the time left after the wait above: say the caller's.
            raise Timeout(ErrorCode.TIMEOUT, f"stream {self.id} still has {self._queued_or_zero()} ms queued after "
                          f"{timeout} s") from None

    def flush(self) -> None:
        """Drops the audio queued on the stream (barge-in) and ends its talkspurt."""
        self._client._call("vc_stream_flush", self.id)

    def stop(self) -> None:
        """Stops the stream: audio still queued is dropped (:meth:`drain` first to have it
        sent), the last frame is flagged, then the server is told. Idempotent, also
        once the stream ended by itself (:attr:`stopped`: the server withdrew it, the
        session or its channel ended) and once the client is closed, when there is
        nothing left to stop."""
        if self._stopped or self._client.closed:
            self._stopped = True
            return
        try:
            self._client._call("vc_stream_stop", self.id)
        except NotFound:
            pass  # it ended by itself: stopped already
        self._stopped = True
        self._client._started.pop(self.id, None)

    def set_capture_device(self, name: str) -> None:
        """Moves a device stream's capture to another ALSA PCM (``vc_set_capture_device``),
        keeping the stream: id, ssrc and channel stay, listeners hear only the new sound.
        When the new device cannot be opened the previous one is reopened and
        DeviceError raised (with ALSA's reason). While audio is suspended the name is
        kept for :meth:`Client.restart_audio`. StateError for an external-feed stream,
        InvalidArgument for an empty name, NotFound once stopped."""
        self._client._call("vc_set_capture_device", self.id, _cstr(name, "name"))
        self.device = name

    def set_capture_channels(self, channels: int) -> None:
        """Reopens a device stream's capture with 1 or 2 channels (``vc_set_capture_channels``).
        On a stream you feed it sets :attr:`channels`, the channel count a 1-D ``feed``
        is read as (interleaved): 1-D mono fed after ``set_capture_channels(2)`` is
        taken for stereo. DeviceError keeps the previous capture; NotFound once stopped."""
        self._client._call("vc_set_capture_channels", self.id, _uint(channels, "channels", valid="1..2"))
        self.channels = channels

    def set_send_processing(self, processing: Optional[SendProcessing] = None, **changes: Any) -> None:
        """Sets the talker-side processing of a MIC stream: a :class:`SendProcessing`,
        or keywords (``noise_suppression``, ``agc``, ``echo_cancellation``, ``agc_level``)
        changing the current settings."""
        base = processing if processing is not None else self.send_processing
        if changes:
            base = SendProcessing(**{**base.__dict__, **changes})
        settings = base._to_c()
        self._client._call("vc_set_send_processing", self.id, ctypes.byref(settings))

    @property
    def send_processing(self) -> SendProcessing:
        """The stream's send processing as the library has it."""
        out = _lib.vc_send_processing()
        self._client._call("vc_get_send_processing", self.id, ctypes.byref(out))
        return SendProcessing._from_c(out)

    def set_state(self, muted: bool = False, hold: bool = False) -> None:
        """Publishes this stream's state for the others' user interfaces: listeners in
        the channel get STREAM_STATE_UPDATE, every client sees it in :meth:`Client.users`
        (USER_UPDATED). The audio itself is not touched: stop feeding (or use
        push-to-talk) to stop sending. With ``auto_reconnect``, a state set while the
        client reconnects is kept and published once it is back."""
        self._client._call("vc_set_stream_state", self.id, int(_flag(muted, "muted")), int(_flag(hold, "hold")))

    def send_stats(self) -> SendStats:
        """What the stream sent and the loss protection it runs with now (FEC, the
        expected loss its encoder is told, the last loss feedback). NotFound once stopped."""
        out = _lib.vc_send_stats()
        self._client._call("vc_get_send_stats", self.id, ctypes.byref(out))
        return SendStats._from_c(out)

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: "Optional[TracebackType]") -> None:
        if self._stopped or self._client.closed:
            return
        try:
            self.stop()
        except (NotFound, StateError):
            self._stopped = True  # gone already: the session ended or the channel changed
        except Exception:
            if exc is None:
                raise  # else the exception in flight wins


# ---- Events into asyncio ------------------------------------------------------------------


class AsyncEvents:
    """The client's events delivered into an asyncio loop, from :meth:`Client.async_events`.

    Events are taken from the moment it is created; ``async for event in it`` or
    ``await it.get()`` / ``await it.wait_for(...)`` read them. Up to ``maxsize`` wait
    unread (older ones are dropped past it, counted in :attr:`dropped`). ``close()`` (or
    leaving ``async with``) ends it; closing the client ends it too.
    """

    _CLOSED = object()

    def __init__(self, core: _Core, loop: asyncio.AbstractEventLoop, maxsize: int) -> None:
        self._core = core
        self._loop = loop
        self._queue: "asyncio.Queue[Any]" = asyncio.Queue(maxsize)
        self._closed = False
        #: Events dropped because ``maxsize`` were waiting unread.
        self.dropped = 0

    def _push(self, item: Any) -> None:
        """From any thread: hands ``item`` to the loop."""
        try:
            self._loop.call_soon_threadsafe(self._put, item)
        except RuntimeError:  # the loop is closed
            self._core.subscribers.discard(self)

    def _put(self, item: Any) -> None:
        if self._queue.full():
            self._queue.get_nowait()
            self.dropped += 1
        self._queue.put_nowait(item)

    async def get(self, timeout: Optional[float] = None) -> Event:
        """The next event; TimeoutError after ``timeout`` seconds (None or
        ``float('inf')``: no limit), EOFError once closed. The timeout is checked as
        :meth:`Client.poll_event` does."""
        timeout = _seconds(timeout, "timeout")
        if self._closed and self._queue.empty():
            raise EOFError("the event subscription is closed")
        try:
            item = await asyncio.wait_for(self._queue.get(), timeout)
        except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
            raise TimeoutError(f"no event within {timeout} s") from None
        if item is AsyncEvents._CLOSED:
            self._closed = True
            raise EOFError("the event subscription is closed")
        assert isinstance(item, Event)
        return item

    async def wait_for(self, *types: EventType, timeout: Optional[float] = None,
                       where: Optional[Callable[[Event], bool]] = None) -> Event:
        """The next event of one of ``types`` (any type if none) for which ``where`` holds;
        other events are skipped. TimeoutError after ``timeout`` seconds, EOFError once
        closed (the subscription or the client) before such an event came."""
        timeout = _seconds(timeout, "timeout")
        deadline = None if timeout is None else self._loop.time() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - self._loop.time())
            try:
                event = await self.get(left)
            except TimeoutError:
                names = ", ".join(t.name for t in types) or "any event"
                raise TimeoutError(f"no {names} within {timeout} s") from None   # as Client.wait_event says it
            if (not types or event.type in types) and (where is None or where(event)):
                return event

    def close(self) -> None:
        """Stops taking events; readers get what is queued, then the end."""
        if self in self._core.subscribers:
            self._core.subscribers.discard(self)
            _update_event_callback(self._core)
            self._push(AsyncEvents._CLOSED)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        try:
            return await self.get()
        except EOFError:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> "AsyncEvents":
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: "Optional[TracebackType]") -> None:
        self.close()


def _update_event_callback(core: _Core) -> None:
    """Installs the C event callback while someone listens, and removes it otherwise (each
    event then costs the network thread nothing in Python)."""
    with core.lock:
        wanted = (core.event_handler is not None and core.event_handler() is not None) or bool(core.subscribers)
        if wanted == core.event_installed or core.handle is None:
            return
        fn = core.event_cfunc if wanted else _lib.EVENT_FN()
        rc = int(_lib.get().vc_set_event_callback(core.handle, fn, None))
        if rc < 0:
            raise error_for(rc, _last_error(core.handle))
        core.event_installed = wanted


def _last_error(handle: int) -> str:
    buf = ctypes.create_string_buffer(512)
    if int(_lib.get().vc_last_error(handle, buf, len(buf))) != 0:
        return ""
    return buf.value.decode("utf-8", errors="replace")


# ---- The client ---------------------------------------------------------------------------


class Client:
    """One libvoicecat client: a session on a server, the streams it publishes and the
    mix of what it receives. Several may exist in one process.

    A context manager: leaving the ``with`` block closes it (disconnects, stops its
    threads, frees it). An unreferenced client is closed when it is collected.

    Errors: a failing call raises the :class:`VoiceCatError` subclass of its code, with
    the library's reason. A callback of yours that raises is logged once and disabled,
    and a :class:`CallbackError` carrying its exception is raised (instead of doing the
    call) from the next call on this client, or by ``close()``.
    """

    def __init__(self, client_name: str = "python", *, external_playback: bool = False,
                 playback_device: Optional[str] = None, keepalive_ms: Optional[int] = None,
                 max_remote_streams: Optional[int] = None, event_queue_size: Optional[int] = None,
                 talk_hangover_ms: Optional[int] = None, known_servers_path: Optional[str] = None,
                 auto_reconnect: bool = False, loss_report_ms: Optional[int] = None,
                 resampler_quality: Optional[int] = None) -> None:
        """Creates the client.

        ``external_playback=True`` opens no playback device (take the mix with
        :meth:`set_sink` or :meth:`read_mix`); otherwise ``playback_device`` (an ALSA PCM,
        default "default") plays it.

        Trust on first use: a connect without a pinned fingerprint checks the server
        against the known-servers file, ``known_servers_path`` (None: the per-user
        ``$XDG_CONFIG_HOME/voicecat/known_servers``; "": none, then connect needs a
        fingerprint or ``allow_unverified``), recording it the first time and refusing
        (AuthError) a server whose identity changed. ``auto_reconnect=True`` reconnects
        after a lost control connection (RECONNECTING, then RECONNECTED: channel
        re-joined, streams re-announced under the same ids; its ``channel_id`` is 0 when
        the channel could not be joined again, an ERROR event after it says why and the
        streams are stopped). Each failed attempt is logged as a warning with its reason
        (to ``logging.getLogger("voicecat.library")``, or to :func:`set_log_handler`'s).

        The others override the library's defaults: keepalive 5000 ms (TCP ping and idle
        UDP keepalive; 0.5 s while streams are active), 32 remote streams, 256 queued
        events, TALK_STOP 300 ms after a talkspurt's last frame was played, a loss report
        to the server every 1000 ms (``loss_report_ms``, 100..60000; 0: never, then this
        listener's loss does not size its publishers' FEC), resampler quality 4
        (``resampler_quality``, 0..10: SpeexDSP's, for every rate conversion of this
        client: streams fed or captured at another rate than 48 kHz, :meth:`set_output_format`,
        devices that do not run at 48 kHz; higher is cleaner and costs more CPU;
        ValueError below 0, InvalidArgument above 10).
        """
        _raise_pending(None)
        _reap_orphans()
        lib = _lib.get()
        cfg = lib.vc_client_config_default()
        name = _cstr(client_name, "client_name")
        device = _optional_cstr(playback_device, "playback_device")
        cfg.client_name = name
        cfg.playback_device = device
        cfg.external_playback = int(_flag(external_playback, "external_playback"))
        if keepalive_ms is not None:
            cfg.keepalive_ms = _uint(keepalive_ms, "keepalive_ms", valid="50..4294967295")
        if max_remote_streams is not None:
            cfg.max_remote_streams = _uint(max_remote_streams, "max_remote_streams", valid="1..1024")
        if event_queue_size is not None:
            cfg.event_queue_size = _uint(event_queue_size, "event_queue_size", valid="1..65536")
        if talk_hangover_ms is not None:
            cfg.talk_hangover_ms = _uint(talk_hangover_ms, "talk_hangover_ms", valid="0..5000")
        known = _optional_cstr(known_servers_path, "known_servers_path")
        cfg.known_servers_path = known
        cfg.auto_reconnect = int(_flag(auto_reconnect, "auto_reconnect"))
        if loss_report_ms is not None:
            cfg.loss_report_ms = _uint(loss_report_ms, "loss_report_ms", valid="0 or 100..60000")
        if resampler_quality is not None:
            # Above 10 the library refuses it (InvalidArgument, with its reason).
            cfg.resampler_quality = _uint(resampler_quality, "resampler_quality", high=0x7FFFFFFF, valid="0..10")
        handle = ctypes.c_void_p()
        rc = int(lib.vc_client_create(ctypes.byref(cfg), ctypes.byref(handle)))
        if rc < 0:
            raise error_for(rc, global_detail())
        assert handle.value is not None
        self._core = _Core(handle.value)
        #: The program's callbacks (event handler, sinks): held here, reached by the
        #: core's C trampolines through weak references (see _Core.event_handler); a
        #: sink's list as its setter's in _Core.cfuncs.
        self._guards: Dict[str, List[Optional[Guarded]]] = {}
        self._event_guard: Optional[Guarded] = None
        #: What the last failed call of each thread said (Client.last_error).
        self._errors = threading.local()
        self._finalizer = weakref.finalize(self, self._core.destroy)
        #: The streams started, by id: the program's Stream object (weakly: a Stream
        #: refers to its client) and what makes another one (Client.streams).
        self._started: Dict[int, Any] = {}
        #: Connects under way (set when each ends): disconnect() cancels them.
        self._connects: Set[threading.Event] = set()
        self._connects_lock = threading.Lock()

    # -- plumbing --

    def _call(self, name: str, *args: Any) -> int:
        core = self._core
        _raise_pending(core)
        handle = core.handle
        if handle is None:
            raise StateError(ErrorCode.STATE, "the client is closed")
        rc = int(getattr(_lib.get(), name)(handle, *args))
        raise_interrupt()   # Ctrl-C during the call, caught by a callback on this thread
        if rc < 0:
            if core.handle is None:
                # Closed by another thread during the call (a connect it cancelled, a
                # pull it cut short): the client, and its reason, are gone. Whatever the
                # library's code (a destroyed handle reads as an invalid argument), to the
                # program it is the closed client's StateError.
                raise StateError(ErrorCode.STATE, f"the client was closed during {name}")
            detail = _last_error(handle)
            self._errors.detail = detail
            raise error_for(rc, detail)
        return rc

    def _hand_over(self, setter: str, cfunc: Any, guard: Optional[Guarded]) -> None:
        """Hands C a sink's trampoline (``setter``; a NULL one clears), keeping alive every
        trampoline C may hold, and its guard: C may call the new one as soon as it has
        it, and the previous one until the call returns; a call that fails leaves C the
        previous one, and one interrupted (Ctrl-C) after C took the new one leaves both."""
        # One hand-over at a time, so each knows what C holds; not waited for inside a
        # callback (the library refuses the setters inside any client's callback), where
        # the thread holding it may be waiting for that callback to return.
        locked = self._core.sink_lock.acquire(blocking=not in_callback())
        try:
            cfuncs = self._core.cfuncs.setdefault(setter, [])
            guards = self._guards.setdefault(setter, [])
            cfuncs.append(cfunc)
            guards.append(guard)
            try:
                self._call(setter, cfunc, None)
            except VoiceCatError:
                cfuncs.remove(cfunc)
                guards.remove(guard)
                raise
            # C has the new one, and no call of the previous is running.
            del cfuncs[:-1]
            del guards[:-1]
        finally:
            if locked:
                self._core.sink_lock.release()

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._core.handle is None

    def close(self) -> None:
        """Disconnects if connected, stops the client's threads and frees it; idempotent.

        Raises a :class:`CallbackError` a callback left unreported (after closing).
        StateError from inside one of this client's own callbacks, or the log handler
        (which may run on this client's threads): ``vc_client_destroy`` cannot be
        called there. From a callback of another client it is closed at once for your
        calls (:attr:`closed`) and destroyed by a thread of the package as soon as the
        callback has returned (waiting there for this client's threads could deadlock:
        two clients closing each other from their callbacks).
        """
        if (in_callback_of(self._core.failures) or in_callback_of(global_failures)) and self._core.handle is not None:
            raise StateError(ErrorCode.STATE, "a client cannot be closed from inside its own callbacks or the log "
                                              "handler (close it from one of your threads, or another client's "
                                              "callback)")
        self._finalizer.detach()
        self._core.destroy()
        _reap_orphans()
        raise_interrupt()
        _raise_pending(self._core)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: "Optional[TracebackType]") -> None:
        if exc is None:
            self.close()
            return
        self._finalizer()  # the exception in flight wins over a pending callback failure

    def __repr__(self) -> str:
        return f"<voicecat.Client {'closed' if self.closed else hex(self._core.handle or 0)}>"

    def last_error(self) -> str:
        """Why the last failed call this thread made on this client failed
        (``vc_last_error``; kept per thread, so another thread's failures do not replace it)."""
        handle = self._core.handle
        if handle is None:
            return ""
        return str(getattr(self._errors, "detail", "")) or _last_error(handle)

    # -- session --

    def connect(self, host: str, port: int, username: str, *, password: Optional[str] = None,
                fingerprint: Optional[str] = None, timeout: Optional[float] = 5.0,
                allow_unverified: bool = False) -> None:
        """Connects: TCP, handshake, Hello, then the UDP media path; blocks until the
        session is accepted or fails (at most ``timeout`` seconds; None or
        ``float('inf')``: no limit, in practice the longest the library takes, about 24.8
        days; ValueError for a negative or NaN timeout, TypeError for one that is not a
        number).

        ``port`` 0 means 47800; ``username`` is 1..64 bytes of UTF-8 without control
        characters. ``fingerprint`` pins the server's key (64 hex digits); without it the
        known-servers file decides (trust on first use, see :class:`Client`), and
        ``allow_unverified=True`` connects even with no file (the identity is then not
        checked). The password is sent only after the identity was checked. Raises
        NetworkError, Timeout, AuthError (wrong password, another fingerprint than the
        pinned or known one: :attr:`fingerprint` shows the server's), Rejected (username
        taken, server full), VersionMismatch, ProtocolError, InvalidArgument. On the
        main thread Ctrl-C cancels it at once (KeyboardInterrupt; not connected).
        """
        params = _lib.get().vc_connect_params_default()
        params.host = _cstr(host, "host")
        params.port = _uint(port, "port", 0xFFFF)
        params.username = _cstr(username, "username")
        params.password = _optional_cstr(password, "password")
        params.server_fingerprint = _optional_cstr(fingerprint, "fingerprint")
        wait = _millis(timeout, "timeout")
        params.timeout_ms = 0x7FFFFFFF if wait < 0 else max(1, wait)  # 0 would mean the default, 5 s
        params.allow_unverified = int(_flag(allow_unverified, "allow_unverified"))
        # Until it has ended, the connect is this client's to cancel (disconnect()), even
        # before the library has it.
        done = threading.Event()
        with self._connects_lock:
            self._connects.add(done)
        try:
            if threading.current_thread() is not threading.main_thread() or in_callback():
                self._call("vc_connect", ctypes.byref(params))
                return
            self._connect_interruptibly(params, done)
        finally:
            # Also when its thread could not be started: a disconnect() waiting for this
            # connect to end must not wait for ever.
            done.set()
            with self._connects_lock:
                self._connects.discard(done)

    def _connect_interruptibly(self, params: Any, done: threading.Event) -> None:
        # Ctrl-C reaches only the main thread, and not while it is blocked in C: the
        # connect runs on a thread of its own while the main thread waits, and Ctrl-C
        # cancels it (vc_disconnect cancels a connect in progress) at once, not after
        # the timeout.
        failure: List[BaseException] = []
        started = threading.Event()

        def run() -> None:
            started.set()
            try:
                self._call("vc_connect", ctypes.byref(params))
            except BaseException as e:  # noqa: B902 - handed to the caller's thread
                failure.append(e)
            finally:
                done.set()

        try:
            # Inside the try: Ctrl-C while the thread starts (it may then be running).
            threading.Thread(target=run, name="voicecat-connect", daemon=True).start()
            done.wait()
        except KeyboardInterrupt:
            # A thread that was never started never ends the connect: Ctrl-C came
            # before the thread existed (a started one runs within milliseconds, or a
            # few seconds on a machine that is very busy).
            if started.wait(10.0):
                self._cancel_connect(done)
                if not failure:   # it got through before it could be cancelled
                    self._end_quietly()
            raise
        if failure:
            error = failure[0]
            if isinstance(error, VoiceCatError):
                self._errors.detail = error.detail   # last_error() on this thread
            raise error

    def disconnect(self) -> None:
        """Leaves the server (streams stop; DISCONNECTED is the session's last event).
        A :meth:`connect` of this client under way on another thread is cancelled
        instead, even one that has not reached the library yet: it raises StateError
        (or NetworkError when the server had closed the connection already), or, when
        it got through before the cancel reached it, returns normally and its session
        is then ended here. Either way the client is not connected when this returns.
        StateError when not connected and no connect is under way."""
        with self._connects_lock:
            pending = [d for d in self._connects if not d.is_set()]
        if not pending or in_callback():
            # (Inside a callback the library refuses vc_disconnect: that is said at once,
            # not taken for a connect that has not reached the library yet.)
            self._call("vc_disconnect")
            return
        for done in pending:
            self._cancel_connect(done)
        self._end_quietly()   # a connect that got through before it could be cancelled
        if self._core.handle is None:
            raise StateError(ErrorCode.STATE, "the client was closed during disconnect")

    def _cancel_connect(self, done: threading.Event) -> None:
        """Cancels a connect of this client until it has ended: vc_disconnect cancels
        one the library has; one on its way there (a thread starting, arguments
        converted) finds the client idle, so it is asked again until the connect ends."""
        while True:
            handle = self._core.handle
            if handle is not None and int(_lib.get().vc_disconnect(handle)) == 0 and done.is_set():
                return
            if done.wait(0.005 if handle is not None else 0.05):
                return

    def _end_quietly(self) -> None:
        """Ends the session, if there is one, without an error when there is none."""
        handle = self._core.handle
        if handle is not None:
            _lib.get().vc_disconnect(handle)

    @property
    def fingerprint(self) -> str:
        """The server's key fingerprint (64 hex digits), available after a handshake,
        even one that failed with AuthError. StateError before any handshake."""
        buf = ctypes.create_string_buffer(65)
        self._call("vc_get_server_fingerprint", buf, len(buf))
        return buf.value.decode("ascii")

    def join(self, channel: str) -> None:
        """Joins a channel by name; blocks until the server answers (at most 5 s: Timeout).
        Streams published in the previous channel are withdrawn (joining the channel the
        client is in keeps them). NotFound for an unknown channel; NetworkError when the
        connection ends before the answer. Ctrl-C during it is raised when it returns
        (the library cannot cancel a join: it would leave the channel state unknown)."""
        self._call("vc_join_channel", _cstr(channel, "channel"))

    def channel_audio(self) -> AudioConfig:
        """The joined channel's Opus configuration. StateError when in no channel."""
        out = _lib.vc_audio_config()
        self._call("vc_get_channel_audio", ctypes.byref(out))
        return AudioConfig._from_c(out)

    # -- publishing --

    def start_stream(self, kind: StreamKind = StreamKind.MIC, channels: int = 1, device: Optional[str] = None, *,
                     max_queue_ms: Optional[int] = None, sample_rate: Optional[int] = None) -> Stream:
        """Publishes a stream in the joined channel and returns it once it has its ssrc.

        Without ``device`` the program feeds it (:meth:`Stream.feed`), and at most
        ``max_queue_ms`` (default 10000, up to 600000) of fed audio waits to be sent;
        with one, a capture thread reads that ALSA PCM. ``sample_rate`` (default 48000;
        8000..192000) is the rate of the PCM fed, or the rate asked of the device (one
        that runs at another rate is converted from that); the library resamples
        anything but 48 kHz (a few ms more delay). MIC streams pass the input gate
        (:meth:`set_input_mode`). InvalidArgument for channels not 1 or 2 or a rate out
        of range, DeviceError when the device cannot be opened.
        """
        kind = StreamKind(kind)
        desc = _lib.get().vc_stream_desc_default()
        desc.kind = int(kind)
        desc.external_feed = 0 if device is not None else 1
        desc.device = _optional_cstr(device, "device")
        desc.channels = _uint(channels, "channels", valid="1..2")
        if max_queue_ms is not None:
            desc.max_queue_ms = _uint(max_queue_ms, "max_queue_ms", valid="0..600000")
        if sample_rate is not None:
            desc.sample_rate = _uint(sample_rate, "sample_rate", valid="0 or 8000..192000")
        sid = ctypes.c_uint32()
        try:
            self._call("vc_stream_start", ctypes.byref(desc), ctypes.byref(sid))
            stream = Stream(self, sid.value, kind, int(channels), device, desc.sample_rate or SAMPLE_RATE)
            _ = self.streams   # forgets the ones that ended (ids are never used again)
            self._started[stream.id] = (weakref.ref(stream), (kind, int(channels), device, stream.sample_rate))
            return stream
        except KeyboardInterrupt:
            # Ctrl-C after the stream started: the program has no handle to it, so it
            # is not left published.
            handle = self._core.handle
            if sid.value and handle is not None:
                _lib.get().vc_stream_stop(handle, sid.value)
            raise

    @property
    def streams(self) -> List[Stream]:
        """The streams this client started that still run (not stopped, not ended by
        themselves), oldest first: the program's own :class:`Stream` objects, or, for
        one it no longer holds (a stream stays published until stopped, whoever holds
        its object), a new object for it. Empty once closed."""
        live: List[Stream] = []
        for sid, (ref, (kind, channels, device, rate)) in list(self._started.items()):
            stream = ref()
            if stream is None:
                stream = Stream(self, sid, kind, channels, device, rate)
                self._started[sid] = (weakref.ref(stream), (kind, channels, device, rate))
            if stream.stopped:
                self._started.pop(sid, None)
            else:
                live.append(stream)
        return live

    def set_input_mode(self, mode: InputMode) -> None:
        """How MIC streams are gated: VAD (default), PTT or CONTINUOUS."""
        self._call("vc_set_input_mode", int(InputMode(mode)))

    def set_vad(self, threshold: float = 0.025, hang_ms: int = 300) -> None:
        """Voice activation: frame RMS threshold as a fraction of full scale (0..1), and
        how long the gate stays open after the last loud frame (0..10000 ms)."""
        self._call("vc_set_vad", _real(threshold, "threshold"), _uint(hang_ms, "hang_ms", valid="0..10000"))

    def set_push_to_talk(self, active: bool) -> None:
        """The push-to-talk key state (used in PTT mode)."""
        self._call("vc_set_push_to_talk", int(_flag(active, "active")))

    # -- users, channels and administration --

    def _list(self, name: str, struct: Any, *args: Any) -> List[Any]:
        """Calls a vc_list_* function until one call holds the whole list."""
        count = ctypes.c_size_t()
        while True:
            self._call(name, *args, None, 0, ctypes.byref(count))
            cap = count.value
            arr = (struct * max(1, cap))()
            self._call(name, *args, arr, cap, ctypes.byref(count))
            if count.value <= cap:  # else the list grew between the two calls: again
                return [arr[i] for i in range(count.value)]

    def users(self) -> List[User]:
        """Every user on the server, by user id, this client included (``is_self``), each
        with the channel it is in, its server mute state and the streams it publishes.

        The server keeps the list up to date (USER_CONNECTED / USER_UPDATED /
        USER_DISCONNECTED events); a join, a stream or an admin call of this client
        shows in it when the call returns. StateError when not connected, Unsupported
        when the server sends no user list.
        """
        streams: Dict[int, List[UserStream]] = {}
        for s in self._list("vc_list_user_streams", _lib.vc_user_stream, 0):
            streams.setdefault(s.user_id, []).append(UserStream._from_c(s))
        return [User._from_c(u, tuple(streams.get(u.user_id, ())))
                for u in self._list("vc_list_users", _lib.vc_user_info)]

    def channels(self) -> List[Channel]:
        """The server's channels in the server's order, each with its AudioConfig and the
        user ids of the users in it (CHANNELS_CHANGED when a server reload changes them).
        StateError when not connected."""
        members: Dict[int, List[int]] = {}
        try:
            everyone = self.users()
        except Unsupported:  # a server that sends no user list: channels without members
            everyone = []
        for u in everyone:
            if u.channel_id is not None:
                members.setdefault(u.channel_id, []).append(u.user_id)
        return [Channel._from_c(c, tuple(members.get(c.channel_id, ())))
                for c in self._list("vc_list_channels", _lib.vc_channel_info)]

    def admin_set_server_mute(self, user_id: int, muted: bool, deafened: bool = False, *, admin_password: str) -> None:
        """Server-mutes (the server drops the user's audio) and / or deafens (sends it
        none) any user, with the server's admin password; returns once the server did it
        (everyone gets USER_UPDATED). AuthError for a wrong password (the server then
        slows down this client's next admin requests), NotFound for an unknown user."""
        self._call("vc_admin_set_server_mute", _uint(user_id, "user_id"), int(_flag(muted, "muted")),
                   int(_flag(deafened, "deafened")), _cstr(admin_password, "admin_password"))

    def admin_kick(self, user_id: int, *, admin_password: str, reason: Optional[str] = None) -> None:
        """Removes a user from the server with the admin password; ``reason`` (up to 256
        bytes) is shown to them. Its session ends (DISCONNECTED, code REJECTED, no
        automatic reconnect). AuthError, NotFound, Rejected for this client itself."""
        self._call("vc_admin_kick", _uint(user_id, "user_id"), _optional_cstr(reason, "reason"),
                   _cstr(admin_password, "admin_password"))

    def set_jitter_bounds(self, ssrc: int = 0, min_ms: int = 0, max_ms: int = 0) -> None:
        """Bounds a remote stream's target playout depth (``StreamStats.target_depth_ms``)
        to [min_ms, max_ms] in whole frames; ``ssrc`` 0: every stream, now and later.
        0 = no bound; (0, 0) lifts them. The buffered audio stays within max_ms too (500
        ms with no max): a backlog beyond it by more than two frames (a server that stopped
        and then delivered what it held) is dropped at once as late frames, not played
        behind. InvalidArgument for min above max or above 10000."""
        self._call("vc_set_jitter_bounds", _uint(ssrc, "ssrc"), _uint(min_ms, "min_ms"), _uint(max_ms, "max_ms"))

    # -- receiving --

    def remote_streams(self) -> List[RemoteStreamInfo]:
        """The remote streams being received now."""
        count = ctypes.c_size_t()
        while True:
            self._call("vc_list_remote_streams", None, 0, ctypes.byref(count))
            cap = count.value
            arr = (_lib.vc_remote_stream_info * max(1, cap))()
            self._call("vc_list_remote_streams", arr, cap, ctypes.byref(count))
            if count.value <= cap:  # else a stream came between the two calls: again
                return [RemoteStreamInfo._from_c(arr[i]) for i in range(count.value)]

    def stream_stats(self, ssrc: int) -> StreamStats:
        """Receive statistics of one remote stream. NotFound for an unknown ssrc."""
        out = _lib.vc_stream_stats()
        self._call("vc_get_stream_stats", _uint(ssrc, "ssrc"), ctypes.byref(out))
        return StreamStats._from_c(out)

    def connection_stats(self) -> ConnectionStats:
        """Connection statistics (RTTs, bytes and packets, voice path state)."""
        out = _lib.vc_connection_stats()
        self._call("vc_get_connection_stats", ctypes.byref(out))
        return ConnectionStats._from_c(out)

    def playback_stats(self) -> PlaybackStats:
        """The playback device's underruns, failures and fill: whether audio was lost on
        this machine rather than on the network."""
        out = _lib.vc_playback_stats()
        self._call("vc_get_playback_stats", ctypes.byref(out))
        return PlaybackStats._from_c(out)

    def set_remote_stream(self, ssrc: int, settings: Optional[RemoteStreamSettings] = None, **changes: Any) -> None:
        """Sets this listener's gain (0..4), mute and noise reduction for a remote stream:
        a :class:`RemoteStreamSettings`, or keywords changing the current settings."""
        if settings is not None:
            if not isinstance(settings, RemoteStreamSettings):
                raise TypeError(f"settings must be a RemoteStreamSettings or None, not {type(settings).__name__}")
            base = settings
        else:
            try:
                base = self.remote_stream_settings(ssrc)
            except NotFound:
                # The library says which comes first: a bad value (TypeError here,
                # InvalidArgument from the call) before an unknown ssrc (NotFound).
                base = RemoteStreamSettings()
        if changes:
            base = RemoteStreamSettings(**{**base.__dict__, **changes})
        value = base._to_c()
        self._call("vc_set_remote_stream", _uint(ssrc, "ssrc"), ctypes.byref(value))

    def remote_stream_settings(self, ssrc: int) -> RemoteStreamSettings:
        """This listener's settings for a remote stream."""
        out = _lib.vc_remote_stream()
        self._call("vc_get_remote_stream", _uint(ssrc, "ssrc"), ctypes.byref(out))
        return RemoteStreamSettings._from_c(out)

    # -- output --

    def set_playback_device(self, name: str) -> None:
        """Plays on another ALSA PCM from now on, without leaving the channel
        (``vc_set_playback_device``). When the device plays the mix now it is switched
        at once, and if the new one cannot be opened the previous one keeps playing and
        DeviceError is raised with the reason; otherwise the name is kept for when the
        device next opens. InvalidArgument for an empty name."""
        self._call("vc_set_playback_device", _cstr(name, "name"))

    def set_external_playback(self, enabled: bool) -> None:
        """True: no playback device (take the mix with a sink or :meth:`read_mix`).
        False while connected opens the device now (DeviceError if it cannot), also a
        device that already plays the mix but is away (it failed): it is tried at once
        and, if it still cannot open, retried on its backoff as before."""
        self._call("vc_set_external_playback", int(_flag(enabled, "enabled")))

    def set_sink(self, fn: Optional[SinkFn], *, numpy: bool = False) -> None:
        """Sets (or clears, with None) the sink of the final mix, in the output format
        (48 kHz stereo unless :meth:`set_output_format` says otherwise).

        ``fn(pcm, frames)`` is called once per 20 ms of audio (or per 10 ms: see
        :meth:`set_sink_block_ms`) on an audio thread of the
        library (see ``vc_set_mixed_output_sink``): ``pcm`` is ``bytes`` of
        ``frames`` * channels int16 samples, or with ``numpy=True`` a read-only numpy
        view of shape (frames, channels) valid only during the call (copy what you
        keep). At rates that are not a multiple of 50 Hz ``frames`` varies by one from
        block to block; at a multiple every block is whole, the first one too (320
        frames at 16 kHz). A sink set or replaced while the mix plays gets its first
        5 ms faded in. It must not block. Returns once a running call of the previous
        sink has returned. TypeError when ``fn`` is not callable.
        """
        if fn is None:
            self._hand_over("vc_set_mixed_output_sink", _lib.SINK_FN(), None)
            return
        require_callable(fn, "set_sink")
        if numpy:
            _pcm.require_numpy("set_sink(numpy=True)")
        def deliver(pointer: Any, frames: int, channels: int) -> None:
            if numpy:
                fn(_pcm.pcm_view(pointer, frames, channels), frames)
            else:
                fn(ctypes.string_at(pointer, frames * channels * 2), frames)

        guarded = Guarded("mixed-output sink", deliver, self._core.failures, renders=True)
        ref = weakref.ref(guarded)   # not the sink itself: see _Core.event_handler

        def trampoline(_user: Optional[int], pointer: Any, frames: int, channels: int) -> None:
            g = ref()
            if g is not None:
                g(pointer, frames, channels)

        self._hand_over("vc_set_mixed_output_sink", _lib.SINK_FN(trampoline), guarded)

    def set_sink_block_ms(self, ms: int) -> None:
        """The length of the blocks the sink gets: 20 ms (the default) or 10 ms
        (``vc_set_mixed_output_block_ms``). 10 ms is for channels of 10 ms frames: each
        block is then played as soon as its frame has arrived, not both frames of a
        20 ms block at its start. It applies to the sinks this client's own thread
        feeds (the mix sink, and the per-speaker sink and recordings beside it); a
        playback device and :meth:`read_mix` keep theirs. InvalidArgument for any
        other value (ValueError below 0, TypeError for a non-integer), StateError from a
        callback."""
        self._call("vc_set_mixed_output_block_ms", _uint(ms, "ms"))

    def set_output_format(self, sample_rate: int = SAMPLE_RATE, channels: int = 2) -> None:
        """The format of every PCM this client hands out from now on: the mix sink,
        :meth:`read_mix`, the per-speaker sink and recordings started afterwards
        (``vc_set_output_format``). ``sample_rate`` 8000..192000; ``channels`` 1 (stereo
        averaged) or 2 (mono streams L = R). Default 48000 Hz stereo. The client still
        mixes at 48 kHz and converts each block; the playback device is not affected.
        InvalidArgument for a rate or channel count out of range, StateError while a
        recording runs (its file keeps the format of its start) or from a callback."""
        rate, ch = _uint(sample_rate, "sample_rate", valid="8000..192000"), _uint(channels, "channels", valid="1..2")
        if in_callback():
            raise StateError(ErrorCode.STATE, "set_output_format cannot be called from inside a callback")
        with self._core.format_lock:
            self._call("vc_set_output_format", rate, ch)
            self._core.output_format = OutputFormat(rate, ch)

    @property
    def output_format(self) -> OutputFormat:
        """The output format set with :meth:`set_output_format` (48000 Hz, 2 channels
        until then)."""
        return self._core.output_format

    def read_mix(self, frames: int, dtype: "Union[str, npt.DTypeLike]" = "int16") -> MixBlock:
        """Pull mode: renders ``frames`` frames of the mix in the output format now and
        returns them: a numpy array of shape (frames, channels) of ``dtype`` "int16"
        (``vc_read_mixed_pcm``) or "float32" (full scale ±1.0, ``vc_read_mixed_pcm_f32``),
        or without numpy an ``array('h')`` / ``array('f')`` of interleaved samples.
        ``dtype`` is a name, or with numpy also a dtype or scalar type
        (``numpy.float32``, ``numpy.dtype("int16")``).
        Call it at the rate the audio is consumed: each call advances the playout clock
        by what it rendered. ValueError for another dtype; StateError unless in pull
        mode (external playback and no mix sink; a per-speaker sink or a recording may
        run) or when called from the per-speaker sink."""
        n = _uint(frames, "frames")
        name = dtype if isinstance(dtype, str) else _pcm.dtype_name(dtype)
        if name not in ("int16", "float32"):
            raise ValueError(f"read_mix: dtype must be 'int16' or 'float32' (or numpy.int16 / numpy.float32), "
                             f"not {dtype!r}")
        _refuse_in_sink("read_mix")
        with self._core.format_lock:
            channels = self._core.output_format.channels
            result: MixBlock
            if _pcm.has_numpy():
                np = _pcm.require_numpy("read_mix")
                result = np.zeros((n, channels), dtype=np.float32 if name == "float32" else np.int16)
            elif name == "float32":
                result = array.array("f", bytes(4 * n * channels))
            else:
                result = array.array("h", bytes(2 * n * channels))
            self.read_mix_into(result)
        return result

    def read_mix_into(self, out: Any, frames: Optional[int] = None) -> int:
        """Pull mode without allocating: renders ``frames`` (default: as many as fit)
        frames of the output format into ``out`` and returns the frames rendered.
        ``out`` is a writable C-contiguous numpy array of int16 or float32 (full scale
        ±1.0), shaped (frames, channels) or (channels * frames,); a bytearray (int16);
        or an array('h') / array('f') / writable memoryview of int16 or float32.
        TypeError for an object that is not a buffer; ValueError for a buffer of
        another type, or a size that is not whole frames."""
        _refuse_in_sink("read_mix_into")
        with self._core.format_lock:
            block = _pcm.pcm_out(out, self._core.output_format.channels, "read_mix_into")
            n = block.frames if frames is None else _uint(frames, "frames")
            if n > block.frames:
                raise ValueError(f"read_mix_into: the buffer holds {block.frames} frames, {n} asked")
            self._call("vc_read_mixed_pcm_f32" if block.f32 else "vc_read_mixed_pcm", block.pointer, n)
        return n

    def set_speaker_sink(self, fn: Optional[SpeakerSinkFn], *, numpy: bool = False) -> None:
        """Sets (or clears, with None) the per-speaker sink (``vc_set_remote_stream_sink``).

        ``fn(block)`` is called with a :class:`SpeakerBlock` for every rendered block
        (20 ms, or the size a pull renders), once per remote stream: its ssrc, user id,
        kind and decoded PCM after this listener's noise reduction, before gain, mute
        and mixing, in the output format. ``block.pcm`` is ``bytes``, or with
        ``numpy=True`` a read-only int16 view of shape (frames, channels) valid only
        during the call. A silent stream still delivers its blocks, so each stream's
        PCM keeps its own timeline. It runs on the thread that renders the mix (the
        playback thread, the mix sink's thread, a background thread of the client when
        nothing else renders, or your thread inside :meth:`read_mix`) under the
        client's render lock: it must not block and must not call :meth:`read_mix`.
        An exception in it is handled as in :meth:`set_sink` (logged once, the sink
        disabled, CallbackError from the next call). Returns once a running call of the
        previous sink has returned. TypeError when ``fn`` is not callable.
        """
        if fn is None:
            self._hand_over("vc_set_remote_stream_sink", _lib.STREAM_SINK_FN(), None)
            return
        require_callable(fn, "set_speaker_sink")
        if numpy:
            _pcm.require_numpy("set_speaker_sink(numpy=True)")

        def deliver(ssrc: int, user_id: int, kind: int, pointer: Any, frames: int, channels: int) -> None:
            pcm = (_pcm.pcm_view(pointer, frames, channels) if numpy
                   else ctypes.string_at(pointer, frames * channels * 2))
            fn(SpeakerBlock(ssrc=ssrc, user_id=user_id, kind=StreamKind(kind), pcm=pcm, frames=frames,
                            channels=channels))

        guarded = Guarded("per-speaker sink", deliver, self._core.failures, renders=True)
        ref = weakref.ref(guarded)   # not the sink itself: see _Core.event_handler

        def trampoline(_user: Optional[int], ssrc: int, user_id: int, kind: int, pointer: Any, frames: int,
                       channels: int) -> None:
            g = ref()
            if g is not None:
                g(ssrc, user_id, kind, pointer, frames, channels)

        self._hand_over("vc_set_remote_stream_sink", _lib.STREAM_SINK_FN(trampoline), guarded)

    def start_recording(self, path: "Union[str, bytes, os.PathLike[str], os.PathLike[bytes]]", ssrc: int = 0) -> None:
        """Records to a WAV file (16-bit PCM in the output format of now; an existing
        file is replaced): the final mix when ``ssrc`` is 0, else the remote stream
        ``ssrc`` as the per-speaker sink gets it (``vc_start_recording``). A writer
        thread of the library writes the file; the header is kept valid every second,
        so a crash leaves a readable file. While it runs the client renders by itself
        if nothing else does. At most one recording per ssrc and 8 at once; stop it
        with :meth:`stop_recording` (closing the client stops it too). InvalidArgument
        when the file cannot be created (the reason says why), NotFound for an unknown
        ssrc, StateError when that source is already recorded or another recording of
        this client writes ``path``, NoMemory for a ninth. A refused start leaves the file
        at ``path`` untouched."""
        raw = os.fsencode(path)
        if not raw or b"\0" in raw:
            raise ValueError(f"start_recording: path {path!r} is empty or contains a NUL character")
        self._call("vc_start_recording", raw, _uint(ssrc, "ssrc"))

    def stop_recording(self, ssrc: int = 0) -> None:
        """Stops the recording of ``ssrc`` (0 = the mix): writes what is buffered,
        completes the WAV header and closes the file before returning. NotFound when
        that source is not being recorded; DeviceError (after closing the file) when a
        write had failed, such as on a full disk: the message says how much the file
        holds (an ERROR event said so when it failed)."""
        self._call("vc_stop_recording", _uint(ssrc, "ssrc"))

    def suspend_audio(self) -> None:
        """Closes every audio device, keeping the session and streams."""
        self._call("vc_audio_suspend")

    def restart_audio(self) -> None:
        """Reopens the devices closed by :meth:`suspend_audio` (DeviceError if one cannot)."""
        self._call("vc_audio_restart")

    # -- events --

    def set_event_handler(self, fn: Optional[EventHandler]) -> None:
        """Calls ``fn(event)`` for every event, on the client's network thread, in order
        (None clears). It must not block (media waits meanwhile), and only callback-safe
        calls may be made from it. Events are also queued for :meth:`poll_event` either way.
        TypeError when ``fn`` is not callable. From inside a per-speaker sink, the log
        handler or a callback of another client it may raise StateError (the library
        cannot wait there for a running event handler: that handler may be waiting for
        the calling thread); the previous handler then stays."""
        _raise_pending(self._core)
        if self.closed:
            raise StateError(ErrorCode.STATE, "the client is closed")
        if fn is not None:
            require_callable(fn, "set_event_handler")
        handler = Guarded("event handler", fn, self._core.failures) if fn is not None else None
        previous = (self._event_guard, self._core.event_handler)
        self._event_guard = handler
        self._core.event_handler = weakref.ref(handler) if handler is not None else None
        try:
            _update_event_callback(self._core)
        except BaseException:
            self._event_guard, self._core.event_handler = previous
            raise

    def poll_event(self, timeout: Optional[float] = 0.0) -> Optional[Event]:
        """The oldest queued event, waiting up to ``timeout`` seconds (None or
        ``float('inf')``: until one comes or the client is closed); None when none came,
        and once the client is closed (so :meth:`events` ends; :meth:`wait_event` raises
        StateError then). ValueError for a negative or NaN timeout, TypeError for one
        that is not a number. From inside a callback only ``timeout=0`` (StateError at
        once otherwise: the wait would hold the library's thread)."""
        out = _lib.vc_event()
        wait = _millis(timeout, "timeout")
        _refuse_wait_in_callback("poll_event", wait)
        deadline = None if wait < 0 else time.monotonic() + wait / 1000
        while not self.closed:
            # Wait in slices so that Ctrl-C reaches a program blocked here.
            left = 200 if deadline is None else min(200, max(0, int((deadline - time.monotonic()) * 1000)))
            try:
                got = self._call("vc_poll_event", ctypes.byref(out), left)
            except (StateError, InvalidArgument):
                if self.closed:  # closed by another thread meanwhile
                    return None
                raise
            if got == 1:
                return Event._from_c(out)
            if deadline is not None and time.monotonic() >= deadline:
                return None
        return None

    def events(self, timeout: Optional[float] = None) -> Iterator[Event]:
        """Iterates over queued events as they come; ends after ``timeout`` seconds
        without one (None or ``float('inf')``: when the client is closed). The timeout is
        checked as :meth:`poll_event` does; from inside a callback only ``timeout=0``
        (StateError at once otherwise)."""
        _refuse_wait_in_callback("events", _millis(timeout, "timeout"))
        while True:
            event = self.poll_event(timeout)
            if event is None:
                return
            yield event

    def wait_event(self, *types: EventType, timeout: Optional[float] = 10.0,
                   where: Optional[Callable[[Event], bool]] = None) -> Event:
        """Takes queued events until one of ``types`` (any if none given) for which
        ``where`` holds arrives, and returns it; TimeoutError after ``timeout`` seconds
        (None or ``float('inf')``: no limit), StateError once the client is closed (by
        another thread too), ValueError for a negative or NaN timeout, TypeError for one
        that is not a number. From inside a callback only ``timeout=0`` (StateError at
        once otherwise: the wait would hold the library's thread, as for
        :meth:`Stream.drain`). The events taken that do not match are discarded; when
        the queue (``event_queue_size``) had dropped some meanwhile (EVENTS_DROPPED),
        the TimeoutError says how many: the one waited for may have been among them."""
        wait = _millis(timeout, "timeout")
        _refuse_wait_in_callback("wait_event", wait)
        deadline = None if wait < 0 else time.monotonic() + wait / 1000
        dropped = 0
        while True:
            event = self.poll_event(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if event is not None and (not types or event.type in types) and (where is None or where(event)):
                return event
            if event is not None:
                dropped += event.dropped
            if event is None and self.closed:
                raise StateError(ErrorCode.STATE, "the client is closed")
            if deadline is not None and time.monotonic() >= deadline:
                names = ", ".join(t.name for t in types) or "any event"
                lost = (f" ({dropped} event{'s were' if dropped != 1 else ' was'} dropped meanwhile: the queue was full)"
                        if dropped else "")
                raise TimeoutError(f"no {names} within {timeout} s{lost}")

    def async_events(self, maxsize: int = 1024) -> AsyncEvents:
        """Events for asyncio, taken from now on (call it from a coroutine, before the
        action whose events you want)::

            async with client.async_events() as events:
                await loop.run_in_executor(None, client.join, "Lobby")
                joined = await events.wait_for(EventType.CHANNEL_JOINED, timeout=5)

        ``maxsize`` (1..1000000) is how many may wait unread; past it the oldest are
        dropped (counted in :attr:`AsyncEvents.dropped`). TypeError when it is not an
        integer, ValueError outside that range.
        """
        maxsize = _uint(maxsize, "maxsize", high=1_000_000, low=1)
        loop = asyncio.get_running_loop()
        _raise_pending(self._core)
        if self.closed:
            raise StateError(ErrorCode.STATE, "the client is closed")
        subscription = AsyncEvents(self._core, loop, maxsize)
        self._core.subscribers.add(subscription)
        _update_event_callback(self._core)
        return subscription
