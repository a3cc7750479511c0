"""Bad input gets a clear exception, and nothing is sent for it."""
import array
import asyncio
import contextlib
import ctypes
import os
import threading
import time

import pytest

import voicecat
from voicecat import ErrorCode, StreamKind, _lib

from conftest import _start_server, joined, needs_numpy, numpy, unique


@pytest.fixture(scope="module")
def talker(server):
    with joined(server, "err-talker") as client:  # packets_out counts voice frames
        client.set_input_mode(voicecat.InputMode.CONTINUOUS)
        yield client


@pytest.fixture
def mic(talker):
    with talker.start_stream() as stream:
        yield stream


def _refused(talker, mic, pcm, error, match, **kwargs):
    before = talker.connection_stats().packets_out
    with pytest.raises(error, match=match):
        mic.feed(pcm, **kwargs)
    assert talker.connection_stats().packets_out == before, "nothing was sent"


def test_byte_buffers_with_the_wrong_size_or_item_type_are_refused(talker, mic):
    _refused(talker, mic, b"\0" * 1921, ValueError, "odd byte count")
    _refused(talker, mic, bytearray(3), ValueError, "odd byte count")
    _refused(talker, mic, memoryview(b"\0" * 7), ValueError, "odd byte count")
    _refused(talker, mic, array.array("f", [0.0] * 960), ValueError, "format 'f'")
    _refused(talker, mic, memoryview(array.array("f", [0.0] * 960)), ValueError, "format 'f'")
    _refused(talker, mic, array.array("i", [0] * 960), ValueError, "format 'i'")
    _refused(talker, mic, array.array("d", [0.0] * 960), ValueError, "item size 8")
    _refused(talker, mic, b"\0" * 1922, ValueError, "961 samples do not divide into 2 channels", channels=2)
    _refused(talker, mic, b"\0" * 1920, ValueError, "channels must be 1 or 2", channels=3)
    _refused(talker, mic, b"\0" * 1920, TypeError, "channels must be an int, 1 or 2, not float", channels=1.0)
    _refused(talker, mic, b"\0" * 1920, TypeError, "channels must be an int, 1 or 2, not str", channels="1")
    _refused(talker, mic, memoryview(b"\0" * 1920).cast("h", (320, 3)), ValueError, "channel count")
    _refused(talker, mic, "not audio", TypeError, "cannot feed str")
    _refused(talker, mic, [0] * 960, TypeError, "cannot feed list")
    _refused(talker, mic, 12, TypeError, "cannot feed int")


@needs_numpy
def test_numpy_integers_are_channel_counts(talker):
    # A channel count read from an array's shape or a numpy config is a numpy integer:
    # start_stream took it, and every feed then refused it as not an int.
    with talker.start_stream(channels=numpy.int64(2)) as stream:
        assert stream.channels == 2 and type(stream.channels) is int
        assert stream.feed(numpy.zeros((960, 2), dtype=numpy.int16)) == 960
        assert stream.feed(b"\0" * 3840, channels=numpy.int32(2)) == 960


@needs_numpy
def test_numpy_arrays_with_the_wrong_type_or_shape_are_refused(talker, mic):
    for dtype in (numpy.int32, numpy.uint8, numpy.int8, numpy.uint16, numpy.complex64, numpy.float16):
        _refused(talker, mic, numpy.zeros(960, dtype=dtype), ValueError, "dtype")
    _refused(talker, mic, numpy.zeros((960, 3), dtype=numpy.int16), ValueError, r"shape \(960, 3\)")
    _refused(talker, mic, numpy.zeros((10, 96, 2), dtype=numpy.int16), ValueError, r"shape \(10, 96, 2\)")
    _refused(talker, mic, numpy.zeros(961, dtype=numpy.int16), ValueError, "do not divide", channels=2)
    bad = numpy.zeros(960, dtype=numpy.float32)
    bad[5] = numpy.nan
    _refused(talker, mic, bad, ValueError, "NaN")
    bad[5] = numpy.inf
    _refused(talker, mic, bad, ValueError, "NaN or infinity")
    # 2**32 frames or more cannot be said in one C call (the count is 32 bits); zeros
    # from calloc: 8 GiB of address space that is never touched.
    huge = numpy.zeros(2**32 + 960, dtype=numpy.int16)
    _refused(talker, mic, huge, ValueError, "at most 4294967295")
    del huge
    # ...checked before the array is copied or scanned: a zero-stride view of 16 GiB
    # (a copy) or a float one (the NaN scan) is refused at once.
    _refused(talker, mic, numpy.broadcast_to(numpy.zeros(1, numpy.int16), (2**32 + 10, 2)), ValueError,
             "at most 4294967295")
    _refused(talker, mic, numpy.broadcast_to(numpy.zeros(1, numpy.float32), (2**32 + 10,)), ValueError,
             "at most 4294967295")
    # A 2-D block names its channel count; a channels= argument must agree with it.
    _refused(talker, mic, numpy.zeros((480, 1), dtype=numpy.int16), ValueError, "channels=2 was passed", channels=2)
    assert mic.feed(numpy.zeros((480, 2), dtype=numpy.int16), channels=2) == 480


def test_an_empty_block_sends_nothing_and_a_valid_one_still_works(talker, mic):
    before = talker.connection_stats().packets_out
    assert mic.feed(b"") == 0
    assert talker.connection_stats().packets_out == before
    assert mic.feed(array.array("h", [1000] * 960)) == 960
    mic.drain(timeout=2)
    assert talker.connection_stats().packets_out == before + 1


def test_an_empty_block_still_checks_its_stream(talker):
    # (vc_stream_feed_pcm of 0 frames returned VC_OK for any stream id: helper-95.)
    stream = talker.start_stream()
    assert stream.feed(b"") == 0
    stream.stop()
    with pytest.raises(voicecat.NotFound):
        stream.feed(b"")


def test_a_drain_that_times_out_says_the_callers_timeout_and_what_is_left(talker, mic):
    mic.feed(array.array("h", [1000] * 48000))            # one second, sent at real time
    with pytest.raises(voicecat.Timeout, match=r"still has \d+ ms queued after 0.2 s"):
        mic.drain(timeout=0.2)
    assert mic.queued_ms > 0
    mic.flush()
    assert mic.queued_ms == 0
    mic.drain(timeout=1)


@pytest.mark.parametrize("timeout", [10, None])
def test_a_drain_cut_short_by_the_server_going_away_says_so(timeout):
    # The server dies with seconds of audio queued: the drain raises NetworkError
    # saying the session was lost and how much was not sent (it raised NotFound
    # "no stream N" from its own queue watch; with no time limit the library's wait
    # overflowed and stopped the process), and DISCONNECTED is already queued.
    proc, info = _start_server([])
    try:
        with joined(info, "lost-drainer") as c:
            c.set_input_mode(voicecat.InputMode.CONTINUOUS)
            s = c.start_stream()
            s.feed(array.array("h", [1000]) * (48000 * 5))
            threading.Timer(0.5, proc.kill).start()
            with pytest.raises(voicecat.NetworkError, match=r"the session was lost \(.+\) with \d+ ms of the audio fed not sent"):
                s.drain(timeout=timeout)
            types = [e.type for e in c.events(timeout=0)]
            assert voicecat.EventType.DISCONNECTED in types, types
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_arguments_are_checked_before_they_reach_c(server):
    with voicecat.Client() as c:
        with pytest.raises(ValueError, match="host is required"):
            c.connect(None, server.port, "x")
        with pytest.raises(TypeError, match="username must be str or bytes, not int"):
            c.connect("127.0.0.1", server.port, 42)
        with pytest.raises(ValueError, match="port must be in 0..65535"):
            c.connect("127.0.0.1", 70000, "x")
        with pytest.raises(ValueError, match="NUL"):
            c.connect("127.0.0.1", server.port, "a\0b")
        with pytest.raises(ValueError, match="timeout"):
            c.connect("127.0.0.1", server.port, "x", timeout=-1)
        with pytest.raises(TypeError, match="ssrc must be an integer"):
            c.stream_stats("1")
        c.connect(b"127.0.0.1", server.port, unique("bytes-user").encode())  # bytes are fine
        c.join(b"Lobby")


def test_library_errors_raise_the_subclass_of_their_code_with_the_reason(server):
    with voicecat.Client() as c:
        with pytest.raises(voicecat.StateError) as e:
            c.join("Lobby")
        assert e.value.code == ErrorCode.STATE and "not connected" in str(e.value)
        with pytest.raises(voicecat.StateError):
            c.fingerprint
        c.connect("127.0.0.1", server.port, unique("err"))
        with pytest.raises(voicecat.NotFound) as e:
            c.join("Nowhere")
        assert e.value.code == ErrorCode.NOT_FOUND and isinstance(e.value, voicecat.VoiceCatError)
        c.join("Lobby")
        with pytest.raises(voicecat.NotFound):
            c.stream_stats(424242)
        with pytest.raises(voicecat.NotFound):
            c.set_remote_stream(424242, gain=0.5)
        # A bad value is said before an unknown ssrc, as the C call orders them.
        with pytest.raises(TypeError):
            c.set_remote_stream(424242, gain="x")   # type: ignore[arg-type]
        with pytest.raises(voicecat.InvalidArgument):
            c.set_remote_stream(424242, gain=9.0)
        with pytest.raises(TypeError, match="RemoteStreamSettings"):
            c.set_remote_stream(424242, "notsettings")   # type: ignore[arg-type]
        with pytest.raises(voicecat.InvalidArgument):
            c.start_stream(channels=3)
        with pytest.raises(voicecat.DeviceError):
            c.start_stream(device="vc_py_no_such_device")
        with c.start_stream() as mic:
            mic.set_send_processing(noise_suppression=True, agc=True)
            assert mic.send_processing == voicecat.SendProcessing(noise_suppression=True, agc=True)
            with pytest.raises(voicecat.InvalidArgument):
                mic.set_send_processing(agc_level=5.0)
        with c.start_stream(StreamKind.SCREEN_AUDIO) as screen:
            with pytest.raises(voicecat.InvalidArgument):
                screen.set_send_processing(noise_suppression=True)
        with pytest.raises(voicecat.NotFound):
            mic.feed(b"\0\0" * 960)  # stopped when its with block ended
        with c.start_stream(device="null") as captured:
            with pytest.raises(voicecat.StateError, match="cannot be fed"):
                captured.feed(b"\0\0" * 960)


def test_a_refused_config_or_global_call_says_which_argument_and_why():
    with pytest.raises(voicecat.InvalidArgument) as e:
        voicecat.Client(event_queue_size=0)
    assert e.value.detail == "vc_client_create: event_queue_size must be 1..65536 (got 0)"
    assert "event_queue_size must be 1..65536" in str(e.value)
    with pytest.raises(voicecat.InvalidArgument, match="max_remote_streams must be 1..1024"):
        voicecat.Client(max_remote_streams=0)
    with pytest.raises(voicecat.InvalidArgument, match="loss_report_ms must be 0 or 100..60000"):
        voicecat.Client(loss_report_ms=50)
    with pytest.raises(voicecat.InvalidArgument, match=r"resampler_quality must be within 0\.\.10 \(got 11\)"):
        voicecat.Client(resampler_quality=11)
    with pytest.raises(ValueError, match="resampler_quality"):
        voicecat.Client(resampler_quality=-1)
    with pytest.raises(voicecat.InvalidArgument) as e:
        voicecat.set_alsa_config("pcm.broken { type")
    assert e.value.detail.startswith("vc_set_alsa_config: ") and len(e.value.detail) > 20


def test_a_closed_client_says_so(server):
    c = voicecat.Client()
    c.close()
    c.close()  # idempotent
    assert c.closed
    with pytest.raises(voicecat.StateError, match="closed"):
        c.connect("127.0.0.1", server.port, "x")
    assert c.poll_event(0.1) is None
    with pytest.raises(voicecat.StateError, match="closed"):
        c.wait_event(timeout=5)


def test_a_connect_cancelled_by_close_says_so():
    # A server that accepts the TCP connection and never answers: the connect waits;
    # close() from another thread ends it at once, with a reason.
    import socket
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    c = voicecat.Client(known_servers_path="")
    outcome = []

    def connect():
        start = time.monotonic()
        try:
            c.connect("127.0.0.1", silent.getsockname()[1], unique("cancel"), allow_unverified=True, timeout=10)
        except voicecat.VoiceCatError as e:
            outcome.append((e, time.monotonic() - start))

    t = threading.Thread(target=connect)
    t.start()
    time.sleep(0.3)
    c.close()
    t.join(5)
    silent.close()
    assert not t.is_alive() and outcome, "connect still waits after close()"
    error, took = outcome[0]
    assert isinstance(error, voicecat.StateError) and took < 3, outcome
    assert error.detail == "the client was closed during vc_connect", error.detail


def test_ctrl_c_cancels_a_connect_at_once(caplog):
    # Ctrl-C (SIGINT) during a connect that waits on a silent server: KeyboardInterrupt at
    # once, not the timeout. (It reached only the package's log callback, which ran on
    # the main thread inside the connect: ctypes dropped it and the connect went on.)
    import signal
    import socket
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    c = voicecat.Client(known_servers_path="")
    try:
        start = time.monotonic()
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            c.connect("127.0.0.1", silent.getsockname()[1], unique("ctrl-c"), allow_unverified=True, timeout=10)
        assert time.monotonic() - start < 3
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
        silent.close()
    with pytest.raises(voicecat.StateError, match="not connected"):
        c.join("Lobby")
    c.close()


def test_ctrl_c_before_the_connect_starts_leaves_no_session(server):
    # Ctrl-C that comes before the library has begun the connect (nothing to cancel
    # yet): the connect that goes on is undone, so the program is not left connected.
    import signal
    lib = _lib.get()
    real = lib.vc_connect

    def slow_connect(*args):
        time.sleep(0.4)
        return real(*args)

    name = unique("ctrl-c-early")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.1, lambda: os.kill(os.getpid(), signal.SIGINT))
    c = voicecat.Client(known_servers_path="")
    lib.vc_connect = slow_connect
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            c.connect("127.0.0.1", server.port, name, password=server.password, allow_unverified=True)
    finally:
        lib.vc_connect = real
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    with joined(server, "ctrl-c-watch") as watch:
        time.sleep(0.5)
        assert all(u.username != name for u in watch.users()), "left connected"
    c.close()


@contextlib.contextmanager
def slowed_connect(seconds):
    """The library's vc_connect reached `seconds` late, as by a connect still on its
    way there (its thread starting, its arguments converted); yields an Event set when
    a connect gets to the library."""
    lib = _lib.get()
    real = lib.vc_connect
    entered = threading.Event()

    def slow_connect(*args):
        entered.set()
        time.sleep(seconds)
        return real(*args)

    lib.vc_connect = slow_connect
    try:
        yield entered
    finally:
        lib.vc_connect = real


def threading_with(thread_class):
    """A stand-in for the threading module (for voicecat._client) whose Thread is
    `thread_class`."""
    class Threading:
        Thread = thread_class

        def __getattr__(self, name):
            return getattr(threading, name)

    return Threading()


def test_ctrl_c_while_the_connect_thread_starts_leaves_no_session(server, monkeypatch):
    # Ctrl-C landing in Thread.start() of the connect's own thread (helper-88: 6 in 100
    # interrupted connects): that thread runs on, so the connect is cancelled as from
    # within the wait. (start() sat before the try: the connect went on and the
    # program, told KeyboardInterrupt, was left connected.)
    from voicecat import _client

    class InterruptedStart(threading.Thread):
        def start(self):
            super().start()
            raise KeyboardInterrupt   # as Ctrl-C in start()'s wait for the thread

    name = unique("ctrl-c-start")
    c = voicecat.Client(known_servers_path="")
    monkeypatch.setattr(_client, "threading", threading_with(InterruptedStart))
    try:
        with slowed_connect(0.2), pytest.raises(KeyboardInterrupt):   # the library gets it after the Ctrl-C
            c.connect("127.0.0.1", server.port, name, password=server.password, allow_unverified=True)
    finally:
        monkeypatch.undo()
    with pytest.raises(voicecat.StateError, match="not connected"):
        c.join("Lobby")
    with joined(server, "ctrl-c-start-watch") as watch:
        time.sleep(0.5)
        assert all(u.username != name for u in watch.users()), "left connected"
    c.close()


def test_disconnect_cancels_a_connect_that_has_not_reached_the_library(server):
    # disconnect() on another thread while connect() is on its way into the library (a
    # thread starting, arguments converted): the connect is cancelled, not left to
    # connect after disconnect() said "not connected" (helper-88: 3 in 300 races).
    name = unique("disconnect-early")
    c = voicecat.Client(known_servers_path="")
    outcome = []

    def connect():
        try:
            c.connect("127.0.0.1", server.port, name, password=server.password, allow_unverified=True)
            outcome.append("connected")
        except voicecat.VoiceCatError as e:
            outcome.append(e)

    with slowed_connect(0.3) as entered:
        t = threading.Thread(target=connect)
        t.start()
        assert entered.wait(5)
        c.disconnect()   # no StateError: there was a connect to cancel
        t.join(10)
    assert not t.is_alive()
    # Cancelled in the library, or (once it had got through) ended: never left connected.
    assert outcome == ["connected"] or (len(outcome) == 1 and isinstance(outcome[0], voicecat.StateError)), outcome
    with pytest.raises(voicecat.StateError, match="not connected"):
        c.join("Lobby")
    with pytest.raises(voicecat.StateError, match="not connected"):
        c.disconnect()   # and now there is nothing to cancel
    c.close()


def test_disconnect_inside_a_callback_during_a_connect_is_refused_at_once(server):
    # vc_disconnect is refused inside any callback: that is said at once (StateError),
    # not taken for a connect that has not reached the library yet, waited on (the
    # callback blocked until the connect ended) and then reported as done while the
    # client stayed connected (helper-89).
    watcher = voicecat.Client(known_servers_path="", external_playback=True)
    other = voicecat.Client(known_servers_path="", external_playback=True)
    watcher.connect("127.0.0.1", server.port, unique("cb-watch"), password=server.password, allow_unverified=True)
    outcome = {}

    def connect_other():
        try:
            other.connect("127.0.0.1", server.port, unique("cb-other"), password=server.password, allow_unverified=True)
        except voicecat.VoiceCatError as e:
            outcome["connect"] = e

    with slowed_connect(0.5) as entered:
        t = threading.Thread(target=connect_other)
        t.start()
        assert entered.wait(5)

        def handler(event):
            if event.type == voicecat.EventType.CHANNEL_JOINED and "disconnect" not in outcome:
                start = time.monotonic()
                try:
                    other.disconnect()
                    outcome["disconnect"] = "returned"
                except voicecat.StateError as e:
                    outcome["disconnect"] = e
                outcome["took"] = time.monotonic() - start

        watcher.set_event_handler(handler)
        watcher.join("Lobby")
        t.join(10)
    assert isinstance(outcome.get("disconnect"), voicecat.StateError), outcome
    assert "inside a callback" in str(outcome["disconnect"]) and outcome["took"] < 0.2, outcome
    watcher.close()
    other.close()


def test_disconnect_returns_when_the_connects_thread_cannot_start(monkeypatch):
    # connect() on the main thread runs the library's connect on a thread of its own;
    # one that cannot be started ends the connect too, so a disconnect() waiting for it
    # returns (it asked the library every 5 ms for ever, helper-89).
    from voicecat import _client

    class NoThread(threading.Thread):
        def start(self):
            time.sleep(0.3)
            raise RuntimeError("can't start new thread")

    c = voicecat.Client(known_servers_path="", external_playback=True)
    result = []

    def disconnect():
        time.sleep(0.1)
        try:
            c.disconnect()
            result.append("returned")
        except voicecat.VoiceCatError as e:
            result.append(e)

    t = threading.Thread(target=disconnect, daemon=True)
    t.start()
    monkeypatch.setattr(_client, "threading", threading_with(NoThread))
    try:
        with pytest.raises(RuntimeError, match="can't start new thread"):
            c.connect("127.0.0.1", 1, unique("no-thread"), allow_unverified=True)
    finally:
        monkeypatch.undo()
    t.join(5)
    assert result == ["returned"], result
    c.close()


def test_async_events_maxsize_is_checked():
    c = voicecat.Client(known_servers_path="")

    async def subscribe(maxsize):
        return c.async_events(maxsize=maxsize)

    for bad, error in ((0, ValueError), (-1, ValueError), (1_000_001, ValueError), ("x", TypeError), (2.5, TypeError)):
        with pytest.raises(error, match="maxsize"):
            asyncio.run(subscribe(bad))
    asyncio.run(subscribe(1)).close()
    c.close()


def test_last_error_tells_why_a_connect_failed():
    import socket
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    c = voicecat.Client(known_servers_path="")
    with pytest.raises(voicecat.StateError):
        c.join("Lobby")
    with pytest.raises(voicecat.NetworkError) as raised:
        c.connect("127.0.0.1", port, unique("refused"), allow_unverified=True)
    assert c.last_error() == raised.value.detail and "refused" in c.last_error(), c.last_error()
    c.close()


def test_a_wait_for_an_event_ends_when_another_thread_closes_the_client(server):
    c = joined(server, "err-wait")
    with pytest.raises(ValueError, match="timeout"):
        c.wait_event(timeout=-1)
    outcome = []

    def wait():
        start = time.monotonic()
        try:
            c.wait_event(voicecat.EventType.TALK_START, timeout=20)
        except Exception as e:  # noqa: BLE001 - the outcome is what is checked
            outcome.append((type(e), time.monotonic() - start))

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)
    c.close()
    waiter.join(5)
    assert not waiter.is_alive(), "wait_event still waits after close()"
    assert outcome and outcome[0][0] is voicecat.StateError and outcome[0][1] < 3, outcome


def test_every_entry_point_refuses_null_and_unknown_handles():
    lib = _lib.get()
    bad = ctypes.c_void_p(0xdead0)
    for h in (None, bad):
        assert lib.vc_disconnect(h) == -1
        assert lib.vc_join_channel(h, b"Lobby") == -1
        assert lib.vc_stream_stop(h, 1) == -1
        assert lib.vc_read_mixed_pcm(h, None, 10) == -1
        assert lib.vc_poll_event(h, None, 0) == -1
        lib.vc_client_destroy(h)


def test_a_wrong_fingerprint_is_an_auth_error_that_reports_the_real_one(server):
    with voicecat.Client() as c:
        with pytest.raises(voicecat.AuthError, match="does not match"):
            c.connect("127.0.0.1", server.port, unique("pin"), fingerprint="ab" * 32)
        assert c.fingerprint == server.fingerprint
        c.connect("127.0.0.1", server.port, unique("pin"), fingerprint=server.fingerprint)


def test_a_wrong_password_is_an_auth_error(password_server):
    with voicecat.Client() as c:
        with pytest.raises(voicecat.AuthError):
            c.connect("127.0.0.1", password_server.port, unique("pw"), password="wrong")
        c.connect("127.0.0.1", password_server.port, unique("pw"), password=password_server.password)


def test_a_taken_username_is_rejected(server):
    name = unique("taken")
    with voicecat.Client() as first, voicecat.Client() as second:
        first.connect("127.0.0.1", server.port, name)
        with pytest.raises(voicecat.Rejected):
            second.connect("127.0.0.1", server.port, name)


def test_an_unknown_code_from_a_newer_library_still_raises():
    error = voicecat._errors.error_for(-99, "detail")
    assert type(error) is voicecat.VoiceCatError and error.code == -99 and error.code.name == "UNKNOWN_-99"
    assert voicecat.strerror(-99) == "unknown error"


def test_leaving_a_stream_block_after_the_session_ended_is_quiet(server):
    with joined(server, "err-gone") as c:
        with c.start_stream() as mic:
            c.disconnect()  # the library stops every stream
        assert mic.stopped
        with pytest.raises((voicecat.NotFound, voicecat.StateError)):
            c.start_stream().stop()


def test_a_stream_that_ended_by_itself_says_it_is_stopped(server):
    with joined(server, "err-ended") as c:
        mic = c.start_stream()
        assert not mic.stopped
        c.join("Music")  # streams announced for another channel's audio end
        assert mic.stopped
        with pytest.raises(voicecat.NotFound, match=r"no stream \d+: it ended when the session moved to another channel"):
            mic.feed(bytes(1920))
        other = c.start_stream(channels=2)
    assert other.stopped  # the client is closed
    other.stop()  # and stop() does nothing, as stopped says (it raised StateError)
    mic.stop()


def test_trust_on_first_use_records_the_server_and_refuses_a_changed_identity(server, tmp_path):
    known = tmp_path / "known_servers"
    with voicecat.Client(known_servers_path=str(known)) as c:
        c.connect("127.0.0.1", server.port, unique("tofu"))
    recorded = known.read_text()
    assert server.fingerprint in recorded and str(server.port) in recorded
    known.write_text(recorded.replace(server.fingerprint, "ab" * 32))  # as if the server had changed
    with voicecat.Client(known_servers_path=str(known)) as c:
        with pytest.raises(voicecat.AuthError):
            c.connect("127.0.0.1", server.port, unique("tofu"))
        assert c.fingerprint == server.fingerprint
    with voicecat.Client(known_servers_path="") as c:  # no store: a pin, or allow_unverified
        with pytest.raises(voicecat.AuthError):
            c.connect("127.0.0.1", server.port, unique("tofu"))
        c.connect("127.0.0.1", server.port, unique("tofu"), allow_unverified=True)


def test_timeouts_take_infinity_as_no_limit_and_refuse_nan_negatives_and_non_numbers(server):
    inf = float("inf")
    with voicecat.Client() as c:
        c.connect("127.0.0.1", server.port, unique("inf"), timeout=inf)
        c.join("Lobby")
        assert c.poll_event(inf) is not None                  # CONNECTED is queued
        assert next(c.events(timeout=inf)) is not None
        threading.Timer(0.2, lambda: joined(server, "inf-other").close()).start()
        assert c.wait_event(voicecat.EventType.USER_CONNECTED, timeout=inf).type == voicecat.EventType.USER_CONNECTED
        with c.start_stream() as mic:
            mic.feed(bytes(1920 * 5))
            mic.drain(timeout=inf)
            calls = {"poll_event": lambda t: c.poll_event(t), "events": lambda t: next(c.events(timeout=t)),
                     "wait_event": lambda t: c.wait_event(timeout=t), "drain": lambda t: mic.drain(t),
                     "connect": lambda t: c.connect("127.0.0.1", server.port, unique("inf"), timeout=t)}
            for name, call in calls.items():
                for bad in (float("nan"), -1, -0.5, -inf):
                    with pytest.raises(ValueError, match="timeout must be"):
                        call(bad)
                for bad in ("1", b"1", [1]):
                    with pytest.raises(TypeError, match="timeout must be a number of seconds"):
                        call(bad)

        async def on_asyncio():
            async with c.async_events() as events:
                with pytest.raises(TypeError, match="timeout must be a number of seconds"):
                    await events.get("1")
                with pytest.raises(ValueError, match="timeout must be"):
                    await events.wait_for(timeout=float("nan"))
        asyncio.run(on_asyncio())


def test_stop_is_idempotent_after_the_stream_ended_by_itself(server):
    with joined(server, "err-stop-ended") as c:
        mic = c.start_stream()
        c.join("Music")  # the stream ends with the channel change
        assert mic.stopped
        mic.stop()       # was NotFound
        mic.stop()
        other = c.start_stream()
        c.disconnect()   # the session ends, and the stream with it
        assert other.stopped
        other.stop()


def test_resampler_quality_out_of_range_states_the_real_range():
    with pytest.raises(ValueError, match=r"resampler_quality must be in 0\.\.10, not -1"):
        voicecat.Client(resampler_quality=-1)   # said 0..2147483647 (what C can hold)
    with pytest.raises(voicecat.InvalidArgument, match=r"resampler_quality must be within 0\.\.10"):
        voicecat.Client(resampler_quality=11)
    voicecat.Client(resampler_quality=10).close()


def test_client_settings_out_of_range_state_the_real_range():
    # Each said 0..4294967295 (what C can hold), a range the library refuses most of.
    for name, valid in [("keepalive_ms", r"50\.\.4294967295"), ("max_remote_streams", r"1\.\.1024"),
                        ("event_queue_size", r"1\.\.65536"), ("talk_hangover_ms", r"0\.\.5000"),
                        ("loss_report_ms", r"0 or 100\.\.60000")]:
        with pytest.raises(ValueError, match=rf"{name} must be in {valid}, not -1"):
            voicecat.Client(**{name: -1})
    with pytest.raises(voicecat.InvalidArgument, match=r"keepalive_ms must be at least 50 \(got 10\)"):
        voicecat.Client(keepalive_ms=10)
