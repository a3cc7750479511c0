// Loss feedback on the server (issue #16; docs/protocol.md, loss feedback): listeners
// report what they lose of each stream they receive; the server keeps each listener's
// latest report on the stream and, at most once a second per stream, tells its
// publisher the report at a high quantile of its listeners (LossAggregation). Counts
// only: the relay never decodes audio. Reports arrive through the control token bucket
// and feedback leaves through the connection's output queue like any other message.
import VoiceCatProtocol

extension Server {
    func receiverReport(_ s: Session, _ r: ReceiverReport) {
        // A listener that receives nothing (in no channel, deafened, or with no media
        // address bound: nothing is relayed to it) has no loss to report.
        guard let ch = s.channel, !s.deafened, s.udpAddress != nil else {
            counters.lossReportsIgnored += UInt64(r.reports.count)
            return
        }
        var seen = Set<UInt32>(minimumCapacity: r.reports.count)
        for rep in r.reports {
            // Only a stream of another member of the listener's channel, with counts that
            // can be, once per report (a report repeating a stream would count it again).
            guard rep.counts.problem == nil, let st = streamsBySSRC[rep.ssrc], st.owner !== s, st.owner.channel === ch,
                  seen.insert(rep.ssrc).inserted else {
                counters.lossReportsIgnored += 1
                continue
            }
            st.lossReports[s.userID] = Stream.ListenerReport(counts: rep.counts, atMs: now)
            counters.lossReports += 1
            if st.lastFeedbackMs == 0 || now &- st.lastFeedbackMs >= LossAggregation.feedbackIntervalMs { sendLossFeedback(st) }
        }
    }

    /// Tells the publisher of `st` what its listeners lose: reports of listeners no
    /// longer in the channel (or deafened), and reports too old, are dropped first.
    func sendLossFeedback(_ st: Stream) {
        let ch = st.owner.channel
        st.lossReports = st.lossReports.filter { uid, rep in
            guard now &- rep.atMs <= LossAggregation.reportLifetimeMs, let l = sessionsByUserID[uid] else { return false }
            return l.channel === ch && !l.deafened
        }
        guard let (counts, listeners) = LossAggregation.aggregate(st.lossReports.values.map(\.counts)) else { return }
        st.lastFeedbackMs = now
        counters.lossFeedbackSent += 1
        send(st.owner.connection, .lossFeedback(LossFeedback(streamID: st.streamID, ssrc: st.ssrc, listeners: UInt32(listeners),
                                                             counts: counts)))
    }

    /// `s` no longer listens in `ch` (it left): its reports on the channel's streams go.
    func forgetLossReports(of s: Session, in ch: Channel) {
        for st in ch.streams where !st.lossReports.isEmpty { st.lossReports[s.userID] = nil }
    }
}
