//! The embedded room: the line in this process, a `WaitingRoom` under a
//! lock, made durable by its journal in `data_dir/rooms/<room>/`.
//!
//! Early polls are answered from the room's [`RoomView`] without the lock;
//! the release worker's tick releases places and compacts a grown journal;
//! the adaptive controller is this gateway's own.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use sluice_admission::adaptive::Outcome;
use sluice_admission::fair_start::FairStartInfo;
use sluice_admission::fleet::Presented;
use sluice_admission::room::{AccountJoin, RoomView, Watermark};
use sluice_admission::tokens::Claims;
use sluice_admission::{
    JoinError, PassEnd, PassOrders, Policy, PollError, RoomStats, Status, TicketId, WaitingRoom,
};

use super::adaptive::{AdaptiveRelease, AdaptiveView};
use super::backend::{Entered, JoinRequest, PollRefused, RoomBackend, Settings};
use super::journal;

pub struct EmbeddedRoom {
    /// Taken after `adaptive` when both are held.
    line: Mutex<WaitingRoom>,
    /// What `line` publishes for readers without its lock: the watermark's
    /// numbers, and early polls answered.
    view: Arc<RoomView>,
    /// The room's files, when it is durable: the release worker syncs and
    /// compacts them.
    journal: Option<journal::RoomJournal>,
    /// Checkouts measured and the rate decided. Taken before `line`.
    adaptive: Mutex<AdaptiveRelease>,
    /// The event's close (unix s; 0: none) and the kill switch as the
    /// config last gave them: the room is paused when either says so.
    closes_at_s: AtomicU64,
    config_paused: AtomicBool,
}

impl EmbeddedRoom {
    pub fn new(
        line: WaitingRoom,
        journal: Option<journal::RoomJournal>,
        adaptive: AdaptiveRelease,
    ) -> Self {
        Self {
            view: line.view(),
            line: Mutex::new(line),
            journal,
            adaptive: Mutex::new(adaptive),
            closes_at_s: AtomicU64::new(0),
            config_paused: AtomicBool::new(false),
        }
    }

    /// The line, locked (a poisoned lock is taken as it is: the room's
    /// state is changed whole or not at all).
    pub fn line(&self) -> MutexGuard<'_, WaitingRoom> {
        self.line.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn adaptive(&self) -> MutexGuard<'_, AdaptiveRelease> {
        self.adaptive.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Paused by the kill switch, or by the event's close at `now_ms`.
    fn paused_at(&self, now_ms: u64) -> bool {
        let closes_at_s = self.closes_at_s.load(Ordering::Relaxed);
        self.config_paused.load(Ordering::Relaxed)
            || (closes_at_s > 0 && now_ms / 1000 >= closes_at_s)
    }

    /// Starts a new journal generation from the room's snapshot when the
    /// current one has grown well past it. Called with the line's lock.
    fn compact_if_due(&self, line: &WaitingRoom) {
        let Some(journal) = &self.journal else {
            return;
        };
        let records = line.snapshot_records();
        if !journal::compaction_due(journal.appended(), records) {
            return;
        }
        let mut snapshot = Vec::with_capacity(records as usize * journal::RECORD_BYTES);
        line.snapshot(&mut |event| snapshot.extend_from_slice(&event.encode()));
        if let Err(e) = journal.rebase(snapshot) {
            tracing::error!(room = line.name(), "room journal compaction failed: {e}");
        }
    }
}

#[async_trait]
impl RoomBackend for EmbeddedRoom {
    fn early_poll(&self, ticket: &Presented, now_ms: u64) -> Option<u64> {
        self.view.early_poll(ticket.seq, &ticket.ticket_id, now_ms)
    }

    async fn poll(&self, ticket: &Presented, now_ms: u64) -> Result<Status, PollRefused> {
        self.line()
            .status(ticket.seq, &ticket.ticket_id, now_ms)
            .map_err(|e| match e {
                PollError::TooEarly { retry_after_s } => PollRefused::TooEarly { retry_after_s },
                PollError::UnknownTicket => PollRefused::UnknownPlace,
            })
    }

    async fn join(&self, req: JoinRequest, now_ms: u64) -> Result<Entered, JoinError> {
        let mut line = self.line();
        match req.account {
            None => line.join(now_ms).map(Entered::New),
            Some(account) => line.join_account(account, now_ms).map(|j| match j {
                AccountJoin::New(joined) => Entered::New(joined),
                AccountJoin::Held(held) => Entered::Held(held),
            }),
        }
    }

    fn watermark(&self, _now_ms: u64) -> Watermark {
        self.view.watermark()
    }

    fn fair_start(&self) -> Option<FairStartInfo> {
        self.line().fair_start()
    }

    fn may_start(&self, seq: u64, ticket_id: &TicketId, now_ms: u64) -> bool {
        self.line().may_start(seq, ticket_id, now_ms)
    }

    fn touch_pass(&self, seq: u64, ticket_id: &TicketId, now_ms: u64) {
        self.line().touch_pass(seq, ticket_id, now_ms);
    }

    fn pass_checkout(&self, seq: u64, ticket_id: &TicketId, running: bool, now_ms: u64) {
        self.line()
            .checkout_running(seq, ticket_id, running, now_ms);
    }

    fn end_pass(&self, pass: &Claims, why: PassEnd, now_ms: u64) -> bool {
        let Some(id) = TicketId::parse(&pass.sub) else {
            return false;
        };
        self.line().end_pass(pass.seq, &id, pass.exp, why, now_ms)
    }

    fn pass_ended(&self, seq: u64, now_ms: u64) -> bool {
        self.line().pass_ended(seq, now_ms)
    }

    fn give_back_if_spent(&self, seq: u64, orders: PassOrders, _now_ms: u64) -> bool {
        self.line().give_back_if_spent(seq, orders)
    }

    fn policy(&self) -> Policy {
        self.line().policy().clone()
    }

    fn stats(&self, now_ms: u64) -> RoomStats {
        self.line().stats(now_ms)
    }

    fn apply(&self, settings: Settings<'_>, now_ms: u64) {
        let mut adaptive = self.adaptive();
        let mut line = self.line();
        if let Err(e) = line.update_policy(settings.policy) {
            // The reload's plan validated this very policy.
            tracing::error!(room = line.name(), "policy refused after validation: {e}");
        }
        // A room that stays adaptive keeps the rate it had reached.
        if let Some(rate) = adaptive.configure(settings.config, now_ms) {
            line.set_release_per_second(rate);
        }
        self.closes_at_s
            .store(settings.closes_at_s.unwrap_or(0), Ordering::Relaxed);
        self.config_paused.store(settings.paused, Ordering::Relaxed);
        line.set_paused(self.paused_at(now_ms));
    }

    fn release_once(&self, now_ms: u64, places_max: usize) -> u32 {
        let mut line = self.line();
        // The event closes while the room runs: nobody more is released.
        let paused = self.paused_at(now_ms);
        if paused != line.is_paused() {
            line.set_paused(paused);
        }
        let released = line.release_once(now_ms, places_max).released;
        self.compact_if_due(&line);
        released
    }

    fn adapt_once(&self, now_ms: u64) {
        let mut adaptive = self.adaptive();
        let mut line = self.line();
        // A paused room releases nobody whatever the rate, so its
        // controller holds.
        if line.is_paused() {
            return;
        }
        if let Some(rate) = adaptive.step(now_ms, line.free_slots()) {
            line.set_release_per_second(rate);
        }
    }

    fn adaptive_view(&self) -> Option<AdaptiveView> {
        self.adaptive().view()
    }

    fn release_reason(&self) -> &'static str {
        self.adaptive().reason()
    }

    fn checkout_started(&self, now_ms: u64) {
        self.adaptive().checkout_started(now_ms);
    }

    fn checkout_ended(&self, now_ms: u64) {
        self.adaptive().checkout_ended(now_ms);
    }

    fn record_checkout(&self, now_ms: u64, latency_ms: u32, outcome: Outcome) {
        self.adaptive().record(now_ms, latency_ms, outcome);
    }

    fn journal(&self) -> Option<journal::RoomJournal> {
        self.journal.clone()
    }

    #[cfg(test)]
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
