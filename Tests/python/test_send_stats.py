"""A published stream's send statistics and loss protection (issue #16): it starts at
the channel's FEC setting, and a clean listener's loss reports turn FEC off, told by a
PROTECTION_CHANGED event."""
import threading

import pytest

import voicecat
from voicecat import EventType, InputMode

from conftest import joined, pace, tone, wait_until


def test_a_clean_listener_turns_the_publishers_fec_off(server):
    with joined(server, "fec-talk") as talker, joined(server, "fec-listen") as listener:
        listener.set_sink(lambda pcm, frames: None)   # rendering: what it receives is measured and reported
        talker.set_input_mode(InputMode.CONTINUOUS)
        with talker.start_stream() as mic:
            start = mic.send_stats()
            assert isinstance(start, voicecat.SendStats)
            assert start.fec and start.packet_loss_perc == 10
            assert start.channel_fec and start.channel_expected_loss == 10
            assert start.listeners == 0 and start.feedback_received == 0 and start.ssrc != 0
            assert start.frames_dropped == 0 and start.frames_sent_path_lost == 0
            block = tone(300, 0.02)
            stop = threading.Event()

            def talk() -> None:
                while not stop.is_set():
                    pace([block] * 25, mic.feed)

            feeder = threading.Thread(target=talk)
            feeder.start()
            try:
                changed = talker.wait_event(EventType.PROTECTION_CHANGED, timeout=20)
                assert changed.stream_id == mic.id and changed.ssrc == start.ssrc
                assert changed.text.startswith("FEC off"), changed.text
                now = mic.send_stats()
                assert not now.fec and now.packet_loss_perc == 0
                assert now.listeners == 1 and now.reported_lost == 0 and now.reported_expected >= 50
                assert now.feedback_received >= 3 and now.protection_changes == 1
                assert wait_until(lambda: mic.send_stats().packets_sent > now.packets_sent)
                assert mic.send_stats().fec_packets == now.fec_packets, "no packet carries FEC while it is off"
            finally:
                stop.set()
                feeder.join()
        with pytest.raises(voicecat.NotFound):
            mic.send_stats()


def test_loss_reports_can_be_turned_off_and_are_checked():
    with pytest.raises(voicecat.InvalidArgument):
        voicecat.Client(external_playback=True, loss_report_ms=50)
    with voicecat.Client(external_playback=True, loss_report_ms=0):
        pass
