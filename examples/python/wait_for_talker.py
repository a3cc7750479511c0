#!/usr/bin/env python3
"""Joins a channel and waits, with asyncio, until someone starts talking (or a timeout).

    wait_for_talker.py HOST PORT USERNAME CHANNEL [SECONDS]

Prints who talked and exits 0, or exits 1 when nobody did within SECONDS (default 30).
"""
import asyncio
import sys

import voicecat


async def main() -> int:
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    host, port, user, channel = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    seconds = float(sys.argv[5]) if len(sys.argv) > 5 else 30.0
    loop = asyncio.get_running_loop()
    with voicecat.Client("wait_for_talker.py", external_playback=True) as client:
        async with client.async_events() as events:
            # connect and join block: run them off the loop
            await loop.run_in_executor(None, client.connect, host, port, user)
            await loop.run_in_executor(None, client.join, channel)
            print(f"wait_for_talker.py: in {channel}, waiting", flush=True)
            try:
                talk = await events.wait_for(voicecat.EventType.TALK_START, timeout=seconds)
            except TimeoutError:
                print(f"wait_for_talker.py: nobody talked within {seconds:g} s")
                return 1
        names = {s.ssrc: s.username for s in client.remote_streams()}
        print(f"wait_for_talker.py: {names.get(talk.ssrc, talk.user_id)} started talking (ssrc {talk.ssrc})")
        client.disconnect()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
