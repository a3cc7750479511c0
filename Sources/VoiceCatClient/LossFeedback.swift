// Loss feedback on the client (issue #16; docs/protocol.md, loss feedback):
//   * as a listener: every `loss_report_ms` the network thread closes each received
//     stream's LossMeter interval and sends one ReceiverReport with what it lost of
//     each (before recovery) over the last few seconds;
//   * as a publisher: a LossFeedback from the server drives the stream's FECPolicy,
//     which switches its encoder's FEC and expected loss between two frames (under
//     the stream's slot lock, where the encoder is used), and a change is told to
//     the host (VC_EVENT_PROTECTION_CHANGED, vc_get_send_stats).
import VoiceCatAudio
import VoiceCatProtocol

/// A published stream's send counters and loss protection (vc_send_stats).
public struct SendStats: Equatable {
    public var ssrc: UInt32 = 0
    public var packetsSent: UInt64 = 0
    public var bytesSent: UInt64 = 0
    public var fecPackets: UInt64 = 0
    /// What the encoder runs with now, and the channel's setting (ceiling and start).
    public var protection = FECPolicy.Protection(fec: false, lossPercent: 0)
    public var ceiling = FECPolicy.Protection(fec: false, lossPercent: 0)
    public var feedbacks: UInt64 = 0
    public var changes: UInt64 = 0
    /// The last feedback acted on: listener reports summed up, and the counts sent.
    public var listeners: UInt32 = 0
    public var reported = LossCounts()
    /// Frames dropped for want of a media path (an auto-reconnect's gap).
    public var framesDropped: UInt64 = 0
    /// Frames sent while the media path was lost (VOICE_DISCONNECTED until VOICE_RECONNECTED).
    public var framesSentPathLost: UInt64 = 0
    /// A device stream's capture devices: overruns recovered, failures.
    public var deviceOverruns: UInt64 = 0
    public var deviceFailures: UInt64 = 0
}

extension VoiceClient {
    /// Network thread: sends the loss reports when they are due.
    func reportLosses(_ conn: ControlSender, media: inout MediaPathState, now: UInt64) {
        let interval = UInt64(config.lossReportMs)
        // Nothing received: nothing to report and no timer (an idle client does not
        // wake for it); the first report comes an interval after a stream appears.
        guard receive.count > 0 else {
            media.lossReportsIdle = true
            return
        }
        if media.lossReportsIdle {
            media.lossReportsIdle = false
            media.nextLossReportMs = now + interval
            return
        }
        guard interval > 0, now >= media.nextLossReportMs else { return }
        media.nextLossReportMs = now + interval
        media.lossReports.removeAll(keepingCapacity: true)
        receive.forEachStream { ssrc, s in
            if let c = s.lock.withLock({ s.closeLossInterval() }) { media.lossReports.append(ReceptionReport(ssrc: ssrc, counts: c)) }
        }
        guard !media.lossReports.isEmpty else { return }
        try? conn.send(.receiverReport(ReceiverReport(reports: media.lossReports)))
    }

    /// When the next loss report is due (network thread; .max: never, or not while no
    /// stream is received).
    func nextLossReportMs(_ media: MediaPathState) -> UInt64 {
        config.lossReportMs > 0 && receive.count > 0 ? media.nextLossReportMs : .max
    }

    /// Network thread: the server's feedback for one of this session's streams. One
    /// that names no stream of ours (it stopped while the feedback was on its way) is
    /// dropped; the counts were checked with the message (Validation.swift).
    func applyLossFeedback(_ f: LossFeedback) {
        let applied = try? streams.withStream(f.streamID) { s, _ -> FECPolicy.Protection? in
            guard s.ssrc == f.ssrc else { return nil }
            return s.applyLossFeedback(f.counts, listeners: f.listeners)
        }
        guard let p = applied ?? nil else { return }
        var e = ClientEvent(type: .protectionChanged)
        e.streamID = f.streamID
        e.ssrc = f.ssrc
        e.text = VoiceClient.describe(p, f)
        ClientLog.log(2, "stream \(f.streamID): \(e.text)")
        events.raise(e)
    }

    static func describe(_ p: FECPolicy.Protection, _ f: LossFeedback) -> String {
        func pct(_ x: Double) -> String {
            let tenths = Int((x * 1000).rounded())
            return "\(tenths / 10).\(tenths % 10) %"
        }
        return "FEC \(p.fec ? "on" : "off"), expected loss \(p.lossPercent) % (listeners lose \(pct(f.counts.lossRate)), "
            + "\(pct(f.counts.isolatedRate)) isolated; \(f.listeners) report\(f.listeners == 1 ? "" : "s"))"
    }

    /// vc_get_send_stats.
    public func sendStats(streamID: UInt32) throws -> SendStats {
        try failing {
            try streams.withStream(streamID) { s, _ in
                var st = SendStats()
                st.ssrc = s.ssrc
                st.packetsSent = s.packetsSent
                st.bytesSent = s.bytesSent
                st.fecPackets = s.fecPacketsSent
                st.protection = s.fecPolicy.current
                st.ceiling = s.fecPolicy.ceiling
                st.feedbacks = s.fecPolicy.feedbacks
                st.changes = s.fecPolicy.changes
                st.listeners = s.fecPolicy.lastListeners
                st.reported = s.fecPolicy.lastFeedback ?? LossCounts()
                st.framesDropped = s.framesLostNoPath
                st.framesSentPathLost = s.framesSentPathLost
                st.deviceOverruns = s.deviceOverruns
                st.deviceFailures = s.deviceFailures
                return st
            }
        }
    }
}
