"""Events: typed values, the blocking iterator with its timeout, and asyncio."""
import asyncio
import threading

import pytest

import voicecat
from voicecat import EventType, InputMode, StreamKind

from conftest import joined, pace, tone, unique


def test_the_event_iterator_yields_typed_events_and_stops_after_its_timeout(server):
    with voicecat.Client(external_playback=True) as c:
        c.connect("127.0.0.1", server.port, unique("ev-iter"))
        c.join("Lobby")
        events = list(c.events(timeout=0.5))
        types = [e.type for e in events]
        assert types[0] == EventType.CONNECTED and EventType.CHANNEL_JOINED in types
        joined_event = next(e for e in events if e.type == EventType.CHANNEL_JOINED)
        assert joined_event.text == "Lobby" and joined_event.channel_id > 0
        assert isinstance(joined_event.type, EventType) and "channel_joined" in str(joined_event)
        assert c.poll_event(0) is None
        with pytest.raises(TimeoutError, match="TALK_START"):
            c.wait_event(EventType.TALK_START, timeout=0.3)


def test_wait_event_skips_other_events_and_filters(server):
    with joined(server, "ev-listen") as listener, joined(server, "ev-talk") as talker:
        talker.set_input_mode(InputMode.CONTINUOUS)
        with talker.start_stream(StreamKind.AUX_DEVICE) as aux:
            added = listener.wait_event(EventType.REMOTE_STREAM_ADDED, timeout=10)
            assert added.kind == StreamKind.AUX_DEVICE and isinstance(added.kind, StreamKind)
            pace([tone(440, 0.02)] * 10, aux.feed)
            talk = listener.wait_event(EventType.TALK_START, timeout=10, where=lambda e: e.ssrc == added.ssrc)
            assert talk.user_id == added.user_id
        removed = listener.wait_event(EventType.REMOTE_STREAM_REMOVED, timeout=10)
        assert removed.ssrc == added.ssrc


def test_a_closed_client_ends_a_blocking_iterator(server):
    client = joined(server, "ev-close")
    list(client.events(timeout=0.2))
    done = []
    thread = threading.Thread(target=lambda: done.extend(client.events()))  # no timeout: until closed
    thread.start()
    client.close()
    thread.join(10)
    assert not thread.is_alive()


def test_asyncio_awaits_events_from_another_client(server):
    async def main():
        loop = asyncio.get_running_loop()
        with joined(server, "ev-async-listener") as listener:
            async with listener.async_events() as events:
                talker = await loop.run_in_executor(None, lambda: joined(server, "ev-async-talker"))
                with talker:
                    arrived = await events.wait_for(EventType.USER_JOINED, timeout=10)
                    assert arrived.text.startswith("ev-async-talker")
                    talker.set_input_mode(InputMode.CONTINUOUS)
                    mic = await loop.run_in_executor(None, talker.start_stream)
                    feeding = loop.run_in_executor(None, pace, [tone(500, 0.02)] * 25, mic.feed)
                    talk = await events.wait_for(EventType.TALK_START, timeout=10,
                                                 where=lambda e: e.user_id == arrived.user_id)
                    await feeding
                    with pytest.raises(TimeoutError, match=r"^no CHANNEL_JOINED within 0\.2 s$"):   # as wait_event says it
                        await events.wait_for(EventType.CHANNEL_JOINED, timeout=0.2)
                assert talk.ssrc > 0
            # Closing the client ends an async iteration over its events.
            events = listener.async_events()
            collected = []

            async def drain():
                async for event in events:
                    collected.append(event)

            task = asyncio.ensure_future(drain())
            await asyncio.sleep(0.1)
        await asyncio.wait_for(task, 10)
        with pytest.raises(EOFError):
            await events.get()

    asyncio.run(main())


def test_a_user_updated_event_holds_its_change_bits_as_user_change_not_an_error_code():
    import typing
    from voicecat import ErrorCode, Event, UserChange, _lib
    updated = Event._from_c(_lib.vc_event(type=int(EventType.USER_UPDATED), code=5))
    assert isinstance(updated.code, UserChange) and not isinstance(updated.code, ErrorCode), repr(updated.code)
    assert updated.code == UserChange.CHANNEL | UserChange.STREAMS == updated.changes
    failed = Event._from_c(_lib.vc_event(type=int(EventType.ERROR), code=-4))
    assert failed.code is ErrorCode.NETWORK and failed.changes == UserChange(0)
    # EVENTS_DROPPED's code is a count (24 read as ErrorCode.UNKNOWN_24 and as a failure).
    dropped = Event._from_c(_lib.vc_event(type=int(EventType.EVENTS_DROPPED), code=24))
    assert type(dropped.code) is int and dropped.code == dropped.dropped == 24 and failed.dropped == 0
    assert set(typing.get_args(typing.get_type_hints(Event)["code"])) == {ErrorCode, UserChange, int}
