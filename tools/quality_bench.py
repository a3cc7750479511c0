#!/usr/bin/env python3
"""What a listener hears under loss (issue #16): PESQ-WB of speech through bare Opus
and through the adaptive pipeline, on clean, isolated-loss, bursty-loss and Wi-Fi-like
traces.

Speech is synthesised with espeak-ng (resampled to 48 kHz with sox, without dither, so
every run is the same); bench-quality
(Sources/bench-quality, simulated time) runs it through each trace in three arms and
writes what the listener decodes; this script scores each with PESQ-WB (ITU-T P.862.2,
PyPI's `pesq`) against the speech, both resampled to 16 kHz by sox. The first part of
the speech is a warm-up (the adaptive sender starts at the channel's 10 % FEC and
learns the path); scores cover the speech after it, which starts after a pause.

    quality_bench.py BENCH_BINARY WORKDIR [--seeds N] [--trace NAME]... [--arm NAME]... [--sweep]
                     [--goals | --check] [--markdown]

--goals prints whether issue #16's goals are met on the traces run; --check also exits
with status 1 when one is not:
  clean       the pipeline within 0.05 of bare Opus without FEC, and FEC off within 5 s
  isolated-*  the pipeline above bare Opus with PLC only; and over all the isolated-loss
              runs together, at least 80 % of the frames lost in the network rebuilt
              from FEC
  bursty-*    the pipeline at least bare Opus with PLC only
PESQ goals are judged on the mean over the seeds of a trace.
"""
import argparse
import os
import statistics
import subprocess
import sys
import wave

import numpy as np
from pesq import pesq

RATE = 48000
# The traces issue #16's goals speak of: isolated loss of 1-3 %, bursty loss of 5-7 %.
ISOLATED = {"isolated-1", "isolated-2", "isolated-3"}
BURSTY = {"bursty-5", "bursty-7"}
PESQ_RATE = 16000

WARMUP = [
    "Good morning, this is the first voice on the line today.",
    "We will begin in a moment, once everyone can hear me.",
]
MEASURED = [
    "The harbour lights came on one by one as the ferry slowed.",
    "She counted seven red boats tied along the northern wall.",
    "A cold wind pushed the smell of rain across the square.",
    "Please bring the blue folder and two pencils to the meeting.",
    "Nobody expected the old clock to start ticking again.",
    "The baker opens at six, but the bread is gone by eight.",
]
PAUSE_S = 0.6          # between sentences
WARMUP_GAP_S = 1.5     # between the warm-up and the measured part: room for any playout delay


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def synthesise(work):
    """The speech as 48 kHz mono s16le; returns (path, warm-up samples)."""
    parts = []
    for i, text in enumerate(WARMUP + MEASURED):
        wav = os.path.join(work, f"s{i}.wav")
        raw = os.path.join(work, f"s{i}.raw")
        run(["espeak-ng", "-v", "en-us", "-s", "155", "-w", wav, text])
        run(["sox", "-D", wav, "-r", str(RATE), "-c", "1", "-b", "16", "-e", "signed-integer", "-t", "raw", raw])
        parts.append(np.fromfile(raw, dtype="<i2"))
    pause = np.zeros(int(PAUSE_S * RATE), dtype="<i2")
    speech = [np.zeros(int(0.3 * RATE), dtype="<i2")]
    for i, p in enumerate(parts):
        speech.append(p)
        speech.append(np.zeros(int(WARMUP_GAP_S * RATE), dtype="<i2") if i == len(WARMUP) - 1 else pause)
    warmup = sum(len(x) for x in speech[: 1 + 2 * len(WARMUP)]) - int(WARMUP_GAP_S * RATE / 2)
    pcm = np.concatenate(speech)
    pcm = pcm[: len(pcm) // 960 * 960]
    path = os.path.join(work, "speech.raw")
    pcm.tofile(path)
    return path, warmup


def to16k(raw48, work, name):
    out = os.path.join(work, name + ".16k.raw")
    run(["sox", "-D", "-t", "raw", "-r", str(RATE), "-c", "1", "-b", "16", "-e", "signed-integer", raw48,
         "-t", "raw", "-r", str(PESQ_RATE), "-c", "1", "-b", "16", "-e", "signed-integer", out])
    return np.fromfile(out, dtype="<i2").astype(np.float64)


def score(ref16, deg16, start16):
    """PESQ-WB of the part after the warm-up (the degraded signal may lag: PESQ aligns)."""
    ref = ref16[start16:]
    deg = deg16[start16: start16 + len(ref) + PESQ_RATE // 2]
    return pesq(PESQ_RATE, ref, deg, "wb")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench")
    ap.add_argument("work")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trace", action="append", default=[])
    ap.add_argument("--arm", action="append", default=[])
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--goals", action="store_true", help="print the goals met and not met (--check also fails)")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    speech, warmup = synthesise(a.work)
    ref16 = to16k(speech, a.work, "speech")
    start16 = warmup * PESQ_RATE // RATE
    cmd = [a.bench, speech, a.work, "--seeds", str(a.seeds)]
    for t in a.trace:
        cmd += ["--trace", t]
    for arm in a.arm:
        cmd += ["--arm", arm]
    if a.sweep:
        cmd.append("--sweep")
    lines = run(cmd, capture_output=True, text=True).stdout.strip().splitlines()
    header = lines[0].split("\t")
    rows = [dict(zip(header, l.split("\t"))) for l in lines[1:]]
    for r in rows:
        deg = to16k(r["file"], a.work, os.path.basename(r["file"])[:-4])
        r["pesq"] = score(ref16, deg, start16)

    traces = list(dict.fromkeys(r["trace"] for r in rows))
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    by = {(t, arm): [r for r in rows if r["trace"] == t and r["arm"] == arm] for t in traces for arm in arms}

    def mean(t, arm, key, f=float):
        return statistics.mean(f(r[key]) for r in by[(t, arm)])

    def fec_off_ms(r):
        """When the pipeline's sender last turned FEC off and kept it off (None: on at the end)."""
        steps = [s.split(":") for s in r["protection"].split(",")]
        last = steps[-1]
        if last[1].startswith("fec@"):
            return None
        off = None
        for at, what in steps:
            if what.startswith("nofec") and off is None:
                off = int(at[:-2])
            elif what.startswith("fec@"):
                off = None
        return off

    out, md = [], []
    titles = {"bare-plc": "bare Opus, FEC off (PLC)", "bare-fec": "bare Opus, FEC at the measured loss",
              "pipeline": "pipeline, adaptive", "pipeline-nofec": "pipeline on a channel without FEC"}
    if a.markdown:
        md.append("| trace | network loss % | " + " | ".join(titles.get(arm, arm) for arm in arms)
                   + (" | lost frames the pipeline rebuilt | lost speech frames rebuilt | protection at the end |" if "pipeline" in arms else " |"))
        md.append("|---|---:|" + "---:|" * len(arms) + ("---:|---:|---|" if "pipeline" in arms else ""))
    failures = []
    for t in traces:
        loss = 100 * mean(t, arms[0], "network_loss")
        p = {arm: mean(t, arm, "pesq") for arm in arms}
        runs = by[(t, "pipeline")] if "pipeline" in arms else []
        lost = sum(int(r["lost"]) for r in runs)
        rebuilt = sum(int(r["lost_rebuilt"]) for r in runs)
        speech = sum(int(r["lost_speech"]) for r in runs)
        speech_rebuilt = sum(int(r["lost_speech_rebuilt"]) for r in runs)
        share = rebuilt / lost if lost else 1.0
        ends = sorted(set(r["protection"].split(",")[-1].split(":")[1] for r in runs))
        offs = [fec_off_ms(r) for r in runs]

        if a.markdown:
            row = f"| {t} | {loss:.2f} | " + " | ".join(f"{p[arm]:.2f}" for arm in arms) + " |"
            if runs:
                row += f" {rebuilt} of {lost} ({100 * share:.0f} %) | {speech_rebuilt} of {speech} | {', '.join(ends)} |"
            md.append(row)
        line = f"{t:11s} loss {loss:5.2f} %  PESQ-WB"
        for arm in arms:
            line += f"  {arm} {p[arm]:.3f} (" + ", ".join(f"{r['pesq']:.2f}" for r in by[(t, arm)]) + ")"
        if runs:
            line += (f"  rebuilt {rebuilt}/{lost} ({100 * share:.0f} %; speech {speech_rebuilt}/{speech})"
                     f"  FEC off at {offs} ms  end {','.join(ends)}")
        out.append(line)
        if not (a.check or a.goals) or "pipeline" not in p or "bare-plc" not in p:
            continue
        if t == "clean":
            if abs(p["pipeline"] - p["bare-plc"]) > 0.05:
                failures.append(f"clean: pipeline {p['pipeline']:.3f} not within 0.05 of bare Opus without FEC {p['bare-plc']:.3f}")
            if any(o is None or o > 5000 for o in offs):
                failures.append(f"clean: FEC not off within 5 s in every run ({offs})")
        if t in ISOLATED and p["pipeline"] <= p["bare-plc"]:
            failures.append(f"{t}: pipeline {p['pipeline']:.3f} not above bare Opus PLC-only {p['bare-plc']:.3f}")
        if t in BURSTY and p["pipeline"] < p["bare-plc"]:
            failures.append(f"{t}: pipeline {p['pipeline']:.3f} below bare Opus PLC-only {p['bare-plc']:.3f}")
    # Lost frames rebuilt, over the isolated-loss traces (1-3 %) together.
    iso = [r for t in traces if t in ISOLATED for r in by.get((t, "pipeline"), [])]
    if iso:
        lost = sum(int(r["lost"]) for r in iso)
        rebuilt = sum(int(r["lost_rebuilt"]) for r in iso)
        speech = sum(int(r["lost_speech"]) for r in iso)
        speech_rebuilt = sum(int(r["lost_speech_rebuilt"]) for r in iso)
        out.append(f"isolated loss of 1-3 %, all runs: {rebuilt} of {lost} lost frames rebuilt from FEC ({100 * rebuilt / max(1, lost):.1f} %); "
                   f"of the lost frames coded as speech {speech_rebuilt} of {speech} ({100 * speech_rebuilt / max(1, speech):.1f} %)")
        if rebuilt < 0.8 * lost:
            failures.append(f"isolated loss: {rebuilt} of {lost} lost frames rebuilt from FEC (goal 80 %)")
    print("\n".join(out))
    if md:
        print()
        print("\n".join(md))
    if a.check or a.goals:
        for f in failures:
            print("NOT MET: " + f)
        print(f"quality goals (issue #16): {len(failures)} not met" if failures else "quality goals (issue #16): every goal met")
    return 1 if a.check and failures else 0


if __name__ == "__main__":
    sys.exit(main())
