"""Callbacks fail loudly and stay alive while C can call them; library log lines reach
the logging module."""
import gc
import logging
import threading
import time
import weakref

import pytest

import voicecat
from voicecat import EventType, LogLevel

from conftest import joined, tone, unique, wait_until


def _failure_records(caplog, which):
    return [r for r in caplog.records if r.name == "voicecat" and which in r.getMessage()]


def test_a_sink_that_raises_is_logged_once_disabled_and_raised_from_the_next_call(server, caplog):
    calls = []

    def sink(pcm, frames):
        calls.append(frames)
        if len(calls) == 3:
            raise ZeroDivisionError("sink broke")

    with joined(server, "cb-sink") as client:
        client.set_sink(sink)
        assert wait_until(lambda: len(calls) >= 3)
        # The mixer keeps running every 20 ms; the sink is not called again.
        assert not wait_until(lambda: len(calls) > 3, seconds=0.3)
        with pytest.raises(voicecat.CallbackError) as e:
            client.connection_stats()
        assert isinstance(e.value.__cause__, ZeroDivisionError) and e.value.original is e.value.__cause__
        assert "mixed-output sink raised ZeroDivisionError: sink broke" in str(e.value)
        client.connection_stats()  # reported once; the client works on
        records = _failure_records(caplog, "mixed-output sink")
        assert len(records) == 1 and records[0].levelno == logging.ERROR
        assert records[0].exc_info[0] is ZeroDivisionError, "logged with its traceback"
        client.set_sink(sink)  # setting it again enables it again
        assert wait_until(lambda: len(calls) > 3)
        client.set_sink(None)


def test_an_event_handler_that_raises_surfaces_from_the_next_call(server, caplog):
    def handler(event):
        if event.type == EventType.CHANNEL_JOINED:
            raise KeyError(event.text)

    with voicecat.Client() as client:
        client.set_event_handler(handler)
        client.connect("127.0.0.1", server.port, unique("cb-event"))
        client.join("Lobby")
        assert wait_until(lambda: _failure_records(caplog, "event handler"))  # logged: now it is pending
        with pytest.raises(voicecat.CallbackError) as e:
            client.join("Lobby")  # not performed: the failure is raised instead
        assert isinstance(e.value.__cause__, KeyError) and "'Lobby'" in str(e.value)
        assert len(_failure_records(caplog, "event handler")) == 1
        client.join("Lobby")


def test_a_failure_left_unreported_is_raised_by_close(server):
    client = joined(server, "cb-close")
    failed = threading.Event()

    def sink(pcm, frames):
        failed.set()
        raise RuntimeError("late")

    client.set_sink(sink)
    assert failed.wait(10)
    with pytest.raises(voicecat.CallbackError, match="late"):
        client.close()
    assert client.closed


def test_a_log_handler_that_raises_surfaces_from_the_next_call_and_lines_reach_logging(server, caplog):
    lines = []

    def handler(level, message):
        lines.append((level, message))
        raise ValueError("log handler broke")

    with voicecat.Client() as client:
        caplog.set_level(logging.DEBUG, logger="voicecat.library")
        with pytest.raises(voicecat.StateError):
            client.join("Lobby")  # not connected: the library logs the failure at debug level
        assert ("voicecat.library", logging.DEBUG, "not connected") in caplog.record_tuples
        voicecat.set_log_handler(handler)
        try:
            with pytest.raises(voicecat.StateError):
                client.join("Lobby")
            assert lines == [(LogLevel.DEBUG, "not connected")]
            with pytest.raises(voicecat.CallbackError) as e:
                client.connection_stats()
            assert isinstance(e.value.__cause__, ValueError)
            with pytest.raises(voicecat.StateError):
                client.join("Lobby")
            assert len(lines) == 1, "disabled after it raised"
        finally:
            voicecat.set_log_handler(None)
        client.connect("127.0.0.1", server.port, unique("cb-log"))
        assert any(name == "voicecat.library" and level == logging.INFO and "connected to" in text
                   for name, level, text in caplog.record_tuples)


def test_ctrl_c_in_the_log_handler_during_a_module_call_is_raised_by_that_call():
    """A Ctrl-C that lands in the log handler while a module function runs on the main
    thread (set_alsa_config logs why a text does not parse) is raised by that function,
    and nothing is left for a later call. It was kept until an unrelated client call
    raised it, seconds later, or never raised at all."""
    import os
    import signal
    interrupted = []

    def handler(level, message):
        if threading.current_thread() is threading.main_thread() and not interrupted:
            interrupted.append(message)
            os.kill(os.getpid(), signal.SIGINT)   # Ctrl-C while the handler runs
            time.sleep(0.2)

    voicecat.set_log_handler(handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            voicecat.set_alsa_config("pcm.broken {")
        assert interrupted, "the library logged on the calling thread"
        voicecat.set_alsa_config(None)   # nothing held back from the first call
        with voicecat.Client() as client:
            client.set_input_mode(voicecat.InputMode.VAD)
    finally:
        voicecat.set_log_handler(None)


def test_callback_objects_stay_alive_while_c_can_call_them(server):
    counts = [0]

    def install(client):
        # Nothing but the client keeps these lambdas and their ctypes trampolines.
        client.set_sink(lambda pcm, frames: counts.__setitem__(0, counts[0] + 1))
        client.set_event_handler(lambda event: None)

    with joined(server, "cb-alive") as client:
        install(client)
        for _ in range(5):
            gc.collect()
            before = counts[0]
            assert wait_until(lambda: counts[0] > before + 2)
        client.set_sink(None)


def test_an_unreferenced_client_is_closed_when_collected(server):
    counts = [0]

    def make():
        client = joined(server, "cb-gc")
        client.set_sink(lambda pcm, frames: counts.__setitem__(0, counts[0] + 1))
        assert wait_until(lambda: counts[0] > 2)
        return weakref.ref(client)

    ref = make()
    gc.collect()
    assert ref() is None
    stopped = counts[0]
    assert not wait_until(lambda: counts[0] > stopped + 1, seconds=0.3), "its threads stopped: destroyed"


def test_a_client_whose_callbacks_refer_back_to_it_is_closed_when_collected(server):
    """An object that owns a client and hands it its own bound methods as sink, speaker
    sink and event handler: a cycle, which the collector frees (the client's finalizer
    once held the callbacks strongly, so the client stayed alive and on the server)."""
    class Owner:
        def __init__(self) -> None:
            self.blocks = 0
            self.client = joined(server, "cb-cycle")
            self.name = next(u.username for u in self.client.users() if u.is_self)
            self.client.set_sink(self.on_mix)
            self.client.set_speaker_sink(self.on_speaker)
            self.client.set_event_handler(self.on_event)

        def on_mix(self, pcm, frames):
            self.blocks += 1

        def on_speaker(self, block):
            pass

        def on_event(self, event):
            pass

    owner = Owner()
    assert wait_until(lambda: owner.blocks > 2)
    ref, name = weakref.ref(owner.client), owner.name
    del owner
    # (A library thread inside the sink right now holds the owner for that moment.)
    assert wait_until(lambda: gc.collect() >= 0 and ref() is None), "the client is still referenced"
    with joined(server, "cb-cycle-watch") as watch:
        assert wait_until(lambda: all(u.username != name for u in watch.users())), "still on the server"


def test_a_sink_c_holds_stays_alive_whatever_interrupts_or_refuses_its_setting(server):
    """C holds the trampoline it was handed last; the package keeps that one alive. A
    Ctrl-C caught by a callback during vc_set_mixed_output_sink is raised when the call
    returns, after C took the new sink (it was raised before the package kept it: C
    called a freed trampoline, a crash); a set_sink the library refuses (from inside a
    callback) leaves the previous sink running (it was dropped: the sink went silent)."""
    from voicecat import _callbacks
    counts = {"a": 0, "b": 0}
    with joined(server, "cb-handover") as client:
        _callbacks._local.interrupt = KeyboardInterrupt()   # as a log callback on this thread would leave it
        with pytest.raises(KeyboardInterrupt):
            client.set_sink(lambda pcm, frames: counts.__setitem__("a", counts["a"] + 1))
        gc.collect()
        assert wait_until(lambda: counts["a"] > 10), "the sink C holds runs"
        refused = []

        def sink_b(pcm, frames):
            counts["b"] += 1
            if counts["b"] == 3:
                try:
                    client.set_sink(lambda pcm, frames: None)
                except voicecat.StateError as e:
                    refused.append(e)

        client.set_sink(sink_b)
        assert wait_until(lambda: refused)
        gc.collect()
        before = counts["b"]
        assert wait_until(lambda: counts["b"] > before + 10), "the sink survives a refused replacement"
        client.set_sink(None)


@pytest.mark.parametrize("whose", ["another client's", "its own"])
def test_a_client_dropped_inside_a_callback_is_destroyed_after_it(server, whose):
    """The finalizer of a client whose last reference goes inside a callback cannot destroy
    it there; it is destroyed once that callback has returned, with nothing else called
    (it stayed on the server until the next Client() or close() of the program)."""
    from voicecat import _client
    counts = [0]
    victim = [joined(server, "cb-orphan")]
    name = next(u.username for u in victim[0].users() if u.is_self)
    ref = weakref.ref(victim[0])
    dropped = threading.Event()

    def drop(pcm, frames):
        if victim:
            victim.clear()  # the last reference: the finalizer runs here, on a mixer thread
            dropped.set()

    def count(pcm, frames):
        counts[0] += 1

    def on_server():
        return any(u.username == name for u in host.users())

    with joined(server, "cb-orphan-host") as host:
        assert wait_until(on_server)
        if whose == "its own":
            victim[0].set_sink(lambda pcm, frames: (count(pcm, frames), drop(pcm, frames)))
        else:
            victim[0].set_sink(count)
            host.set_sink(drop)
        assert dropped.wait(10)
        assert wait_until(lambda: ref() is None)
        # Its program is gone, so is its sink (nothing holds it), and so is the client
        # on the server, without the program calling anything.
        assert wait_until(lambda: not on_server()), "destroyed once the callback returned"
        assert _client._orphans == []
        stopped = counts[0]
        assert not wait_until(lambda: counts[0] > stopped, seconds=0.3), "the sink of a collected client"
        host.set_sink(None)


def test_drain_inside_a_callback_is_refused_at_once(server):
    """Stream.drain from a sink is refused (StateError) at once, not after waiting on
    the library's thread for as long as the queue lasts."""
    with joined(server, "cb-drain") as client:
        mic = client.start_stream()
        mic.feed(tone(300, 3.0))                       # three seconds queued, sent at real time
        seen = []

        def sink(pcm, frames):
            if not seen:
                t0 = time.monotonic()
                try:
                    mic.drain()
                    seen.append(("returned", time.monotonic() - t0))
                except voicecat.StateError as e:
                    seen.append((e, time.monotonic() - t0))

        client.set_sink(sink)
        assert wait_until(lambda: seen)
        client.set_sink(None)
        what, took = seen[0]
        assert isinstance(what, voicecat.StateError), what
        assert took < 0.5, f"drain waited {took:.2f} s inside the sink before it was refused"
        assert mic.queued_ms > 1000
        mic.flush()


@pytest.mark.parametrize("raised", [KeyboardInterrupt, SystemExit])
def test_a_callback_that_raises_keyboard_interrupt_or_system_exit_is_disabled_and_surfaces(server, caplog, raised):
    """KeyboardInterrupt and SystemExit raised by a callback on a library thread follow the
    documented path (disabled, logged, CallbackError from the next call); a
    KeyboardInterrupt was silently dropped there and the callback kept being called."""
    calls = []

    def sink(pcm, frames):
        calls.append(frames)
        raise raised()

    with joined(server, "cb-base-exc") as client:
        client.set_sink(sink)
        assert wait_until(lambda: calls)
        assert not wait_until(lambda: len(calls) > 1, seconds=0.3), "disabled after it raised"
        with pytest.raises(voicecat.CallbackError) as e:
            client.connection_stats()
        assert isinstance(e.value.__cause__, raised)
        assert len(_failure_records(caplog, "mixed-output sink")) == 1
        client.set_sink(None)


def test_a_callback_may_close_another_client_but_not_its_own(server):
    """close() of another client from inside a callback closes it (for the program's
    calls at once, on the server once the reaper thread destroyed it); closing the
    client whose callback runs stays refused. Two clients closing each other from their
    callbacks do not wait for each other."""
    other = joined(server, "cb-close-other")
    name = next(u.username for u in other.users() if u.is_self)
    outcome = []

    with joined(server, "cb-close-host") as host:
        def sink(pcm, frames):
            if outcome:
                return
            try:
                host.close()
                outcome.append("closed its own client")
            except voicecat.StateError:
                outcome.append("own refused")
            try:
                other.close()
                outcome.append("other closed")
            except Exception as e:  # noqa: BLE001 - the outcome is what is checked
                outcome.append(e)

        host.set_sink(sink)
        assert wait_until(lambda: len(outcome) == 2)
        host.set_sink(None)
        assert outcome == ["own refused", "other closed"], outcome
        assert other.closed and not host.closed
        assert wait_until(lambda: all(u.username != name for u in host.users())), "still on the server"

    a, b = joined(server, "cb-close-a"), joined(server, "cb-close-b")
    done = threading.Event()
    closes = []
    # Both sinks meet inside their callbacks before either closes: otherwise the first to
    # run could close the other before its sink ever ran (CI: "closed 1 of 2").
    both_inside = threading.Barrier(2)

    def closer(whom):
        met = []

        def sink(pcm, frames):
            if whom.closed:
                return
            if not met:
                met.append(True)
                both_inside.wait(10)
            whom.close()
            closes.append(whom)
            if len(closes) == 2:
                done.set()
        return sink

    a.set_sink(closer(b))
    b.set_sink(closer(a))
    assert done.wait(10), f"closed {len(closes)} of 2"
    assert a.closed and b.closed


def test_waiting_for_events_inside_a_callback_is_refused_at_once(server):
    """wait_event, poll_event and events with a wait, called from a callback, raise
    StateError at once (as Stream.drain does) instead of holding the library's thread;
    poll_event(0) stays allowed."""
    with joined(server, "cb-wait") as client:
        seen = []

        def handler(event):
            if seen:
                return
            for name, call in [("wait_event", lambda: client.wait_event(EventType.TALK_START, timeout=1)),
                               ("wait_event(None)", lambda: client.wait_event(EventType.TALK_START, timeout=None)),
                               ("poll_event", lambda: client.poll_event(1)),
                               ("poll_event(None)", lambda: client.poll_event(None)),
                               ("events", lambda: next(client.events(timeout=1), None))]:
                t0 = time.monotonic()
                try:
                    call()
                    seen.append((name, "returned", time.monotonic() - t0))
                except voicecat.StateError:
                    seen.append((name, "refused", time.monotonic() - t0))
                except Exception as e:  # noqa: BLE001 - the outcome is what is checked
                    seen.append((name, type(e).__name__, time.monotonic() - t0))
            client.poll_event(0)  # not waiting: allowed
            seen.append(("poll_event(0)", "returned", 0.0))

        client.set_event_handler(handler)
        other = joined(server, "cb-wait-other")   # events for the handler
        assert wait_until(lambda: len(seen) == 6), seen
        client.set_event_handler(None)
        other.close()
        assert [(name, what) for name, what, _ in seen] == [
            ("wait_event", "refused"), ("wait_event(None)", "refused"), ("poll_event", "refused"),
            ("poll_event(None)", "refused"), ("events", "refused"), ("poll_event(0)", "returned")], seen
        assert all(took < 0.5 for _, _, took in seen), seen
