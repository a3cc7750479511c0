"""The control plane: users and channels as the server has them, admin mute and kick,
a stream's published state, jitter bounds, and what each failure says."""
import time

import pytest

import voicecat
from voicecat import EventType, StreamKind, UserChange

from conftest import joined, pace, tone, unique


def _wait(client, what, timeout=5.0, **fields):
    """The first event of type `what` whose attributes match `fields`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        e = client.poll_event(0.05)
        if e is not None and e.type == what and all(getattr(e, k) == v for k, v in fields.items()):
            return e
    raise AssertionError(f"no {what.name} with {fields} within {timeout} s")


def _until(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.01)


def test_users_and_channels_follow_the_server(admin_server):
    with joined(admin_server, "ann") as ann, joined(admin_server, "bo", "Music") as bo:
        me = next(u for u in ann.users() if u.is_self)
        other = next(u for u in bo.users() if u.is_self)
        assert isinstance(me, voicecat.User) and me.username.startswith("ann-")
        lobby, music = ann.channels()[:2]
        assert isinstance(lobby, voicecat.Channel)
        assert (lobby.name, music.name) == ("Lobby", "Music")
        assert lobby.is_current and not music.is_current
        assert music.audio.mode == voicecat.ChannelMode.STEREO
        _until(lambda: {u.user_id: u.channel_id for u in ann.users()}.get(other.user_id) == music.channel_id)
        assert me.user_id in ann.channels()[0].members

        with bo.start_stream(StreamKind.SCREEN_AUDIO) as screen:
            _until(lambda: [s.kind for u in ann.users() if u.user_id == other.user_id for s in u.streams]
                   == [StreamKind.SCREEN_AUDIO])
            published = next(u for u in ann.users() if u.user_id == other.user_id).streams[0]
            assert isinstance(published, voicecat.UserStream) and published.stream_id == screen.id
            screen.set_state(muted=True)
            _until(lambda: next(u for u in ann.users() if u.user_id == other.user_id).streams[0].muted)

        bo.join("Lobby")
        assert next(u for u in bo.users() if u.is_self).channel_id == lobby.channel_id, "shown when join returns"
        e = _wait(ann, EventType.USER_UPDATED, user_id=other.user_id, channel_id=lobby.channel_id)
        assert e.changes == UserChange.CHANNEL
        assert sorted(ann.channels()[0].members) == sorted([me.user_id, other.user_id])
        bo.disconnect()
        e = _wait(ann, EventType.USER_DISCONNECTED, user_id=other.user_id)
        assert e.text == other.username
        assert other.user_id not in [u.user_id for u in ann.users()]


def test_admin_mute_and_kick(admin_server):
    with joined(admin_server, "boss") as boss, joined(admin_server, "target") as target:
        victim = next(u for u in target.users() if u.is_self).user_id
        with pytest.raises(voicecat.AuthError, match="admin password"):
            boss.admin_set_server_mute(victim, True, admin_password="guess")
        boss.admin_set_server_mute(victim, True, admin_password="s3cret")
        assert next(u for u in boss.users() if u.user_id == victim).server_muted
        e = _wait(target, EventType.USER_UPDATED, user_id=victim, muted=True)
        assert e.changes == UserChange.SERVER_MUTE
        with pytest.raises(voicecat.Rejected, match="cannot kick itself"):
            boss.admin_kick(next(u for u in boss.users() if u.is_self).user_id, admin_password="s3cret")
        boss.admin_kick(victim, admin_password="s3cret", reason="enough")
        end = _wait(target, EventType.DISCONNECTED)
        assert end.code == voicecat.ErrorCode.REJECTED
        assert end.text.endswith("kicked by " + next(u for u in boss.users() if u.is_self).username + ": enough")
        assert victim not in [u.user_id for u in boss.users()]


def test_stream_state_events_and_jitter_bounds(server):
    with joined(server, "talk") as talker, joined(server, "hear") as listener:
        with talker.start_stream(StreamKind.SCREEN_AUDIO) as stream:
            added = _wait(listener, EventType.REMOTE_STREAM_ADDED)
            assert added.kind == StreamKind.SCREEN_AUDIO and added.text.startswith("talk-")
            stream.set_state(hold=True)
            e = _wait(listener, EventType.STREAM_STATE_UPDATE)
            assert (e.ssrc, e.stream_id, e.kind, e.hold, e.muted) == (added.ssrc, stream.id, StreamKind.SCREEN_AUDIO,
                                                                      True, False)
            assert e.text == added.text
            sound = tone(300, 0.6)
            pace([sound[i:i + 960] for i in range(0, len(sound), 960)], stream.feed)
            start = _wait(listener, EventType.TALK_START)
            assert start.kind == StreamKind.SCREEN_AUDIO and start.text == added.text
            listener.set_jitter_bounds(added.ssrc, 200, 200)
            assert listener.stream_stats(added.ssrc).target_depth_ms == 200
            listener.set_jitter_bounds(0, 0, 20)
            assert listener.stream_stats(added.ssrc).target_depth_ms == 20
            with pytest.raises(voicecat.InvalidArgument, match="min_ms 300 is above max_ms 100"):
                listener.set_jitter_bounds(added.ssrc, 300, 100)
            with pytest.raises(voicecat.NotFound):
                listener.set_jitter_bounds(12345, 0, 100)


def test_each_failure_says_what_failed_and_nothing_older(server):
    with voicecat.Client(external_playback=True) as c:
        with pytest.raises(voicecat.NetworkError) as resolved:
            c.connect("nope.invalid", 0, unique("walker"), allow_unverified=True)
        assert resolved.value.detail.startswith("cannot resolve nope.invalid: "), resolved.value.detail
        assert "errno" not in resolved.value.detail
        c.connect("127.0.0.1", server.port, unique("walker"), allow_unverified=True)
        with pytest.raises(voicecat.NotFound, match="no channel named Nope"):
            c.join("Nope")
        with pytest.raises(voicecat.InvalidArgument) as bad:
            c.set_jitter_bounds(0, 50, 10)
        assert "Nope" not in str(bad.value) and "min_ms 50 is above max_ms 10" in str(bad.value)
        assert c.last_error() == "vc_set_jitter_bounds: min_ms 50 is above max_ms 10"
        with pytest.raises(voicecat.StateError):
            c.start_stream()
        assert "join a channel" in c.last_error()


def test_a_full_event_queue_says_how_many_events_it_dropped(server):
    """A program that polls too seldom learns that it missed events (and can read the
    users, streams and stats again) instead of missing them without a word."""
    with joined(server, "small-queue", event_queue_size=1) as client:
        client.set_input_mode(voicecat.InputMode.CONTINUOUS)
        with client.start_stream() as mic:
            mic.feed(tone(300, 0.02))
        time.sleep(0.3)
        marker = client.poll_event()
        assert marker is not None and marker.type == EventType.EVENTS_DROPPED, marker
        assert marker.code >= 2 and "dropped before this one: the queue holds 1" in marker.text
        assert marker.dropped == marker.code and type(marker.code) is int, "a count, not an error code"
        assert str(marker).startswith(f"events_dropped dropped={marker.dropped} ")
        last = client.poll_event()
        assert last is not None and last.type != EventType.EVENTS_DROPPED
        assert client.poll_event() is None
        # wait_event passes over the marker, and says so when what it waited for never came.
        with client.start_stream() as mic:
            mic.feed(tone(300, 0.02))
        time.sleep(0.3)
        with pytest.raises(TimeoutError, match=r"no CHANNEL_JOINED within 0.5 s \(\d+ events? (were|was) dropped meanwhile"):
            client.wait_event(EventType.CHANNEL_JOINED, timeout=0.5)


def test_event_type_names():
    assert voicecat.event_type_name(EventType.TALK_START) == "VC_EVENT_TALK_START"
    assert voicecat.event_type_name(EventType.USER_DISCONNECTED) == "VC_EVENT_USER_DISCONNECTED"
    assert voicecat.event_type_name(999) == "VC_EVENT_UNKNOWN"
    for t in EventType:
        assert voicecat.event_type_name(t) == "VC_EVENT_" + t.name
