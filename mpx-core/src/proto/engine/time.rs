//! Time as an input: idle timeouts and pings.

use super::*;

impl Engine {
    /// When the engine next wants [`handle_timeout`](Engine::handle_timeout)
    /// called; `None` when it keeps no timers (no idle timeout configured,
    /// or [`handle_timeout`](Engine::handle_timeout) never called yet).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_tick
    }

    /// The time is now `now`: fails peers silent for longer than the idle
    /// timeout and queues pings to peers this rank has been silent to for a
    /// third of it. Call it once at start, then whenever
    /// [`poll_timeout`](Engine::poll_timeout) comes due.
    pub fn handle_timeout(&mut self, now: Instant) {
        let Some(idle) = self.config.idle_timeout else { return };
        let tick = (idle / 3).max(Duration::from_millis(1));
        self.next_tick = Some(now + tick);
        if self.closed {
            self.next_tick = None;
            return;
        }
        let mut silent = Vec::new();
        let mut ping = Vec::new();
        for (r, p) in self.peers.iter_mut().enumerate() {
            if r as u32 == self.rank || p.failed.is_some() {
                continue;
            }
            // A finished peer is watched only while it still owes data; it
            // is pinged all the same, since it may be watching this rank.
            let owes = || p.final_seq.is_some_and(|last| p.expected_seq < last) || queries::owes_data(&self.transfers, &self.early, &self.unexpected, r as u32);
            if std::mem::take(&mut p.heard) || p.last_heard.is_none() || (p.finished && !owes()) {
                p.last_heard = Some(now);
            } else if p.last_heard.is_some_and(|t| now.saturating_duration_since(t) >= idle) {
                silent.push(r as u32);
                continue;
            }
            if std::mem::take(&mut p.sent) || p.last_sent.is_none() {
                p.last_sent = Some(now);
            } else if p.last_sent.is_some_and(|t| now.saturating_duration_since(t) >= tick) {
                p.last_sent = Some(now);
                ping.push(r as u32);
            }
        }
        for r in silent {
            self.fail_peer(r, Error::process_failed(r, format!("it sent nothing for {idle:?}")));
        }
        for r in ping {
            self.push_frame(r, Frame::control(Header::control(Kind::Ping, self.rank)));
        }
    }
}
