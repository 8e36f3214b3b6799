//! A room on the fleet's shared line as a [`RoomBackend`]: joins batched
//! into one store call with the joins around them, polls answered from the
//! shared numbers in memory (the store is asked only to collect a released
//! place's pass), the release and the adaptive rate stepped by the room's
//! own tasks ([`SharedRoom`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use sluice_admission::adaptive::Outcome;
use sluice_admission::enqueue::AccountHash;
use sluice_admission::fair_start::FairStartInfo;
use sluice_admission::fleet::{self as decide, ClaimReply, PollDecision, Presented};
use sluice_admission::fleet_draw::Located;
use sluice_admission::room::Watermark;
use sluice_admission::stats::WaitHistogram;
use sluice_admission::tokens::Claims;
use sluice_admission::{
    Admitted, JoinError, Joined, PassEnd, PassOrders, Policy, RoomStats, Status, TicketId, Wait,
};

use super::{AccountPlace, FleetLimits, SharedRoom};
use crate::queue::adaptive::{AdaptiveRelease, AdaptiveView};
use crate::queue::backend::{Entered, JoinRequest, PollRefused, RoomBackend, Settings};

/// A fleet room, as this gateway holds it.
pub struct FleetRoom {
    shared: Arc<SharedRoom>,
    /// The event's close (unix s; 0: none) and the kill switch as the
    /// config last gave them: the fleet's room is paused when either says
    /// so (every gateway's config has the same close, so each writes the
    /// same state once).
    closes_at_s: AtomicU64,
    config_paused: AtomicBool,
    /// This gateway's view of the room's release source: the adaptive
    /// bounds and start rate it publishes (the fleet's rate itself is
    /// stepped by the lease holder, see `fleet_rate`), or the pinned
    /// source's name.
    adaptive: Mutex<AdaptiveRelease>,
}

impl FleetRoom {
    pub fn new(shared: Arc<SharedRoom>, adaptive: AdaptiveRelease) -> Self {
        Self {
            shared,
            adaptive: Mutex::new(adaptive),
            closes_at_s: AtomicU64::new(0),
            config_paused: AtomicBool::new(false),
        }
    }

    fn adaptive(&self) -> MutexGuard<'_, AdaptiveRelease> {
        self.adaptive.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Paused by the kill switch, or by the event's close at `now_ms`.
    fn paused_at(&self, now_ms: u64) -> bool {
        let closes_at_s = self.closes_at_s.load(Ordering::Relaxed);
        self.config_paused.load(Ordering::Relaxed)
            || (closes_at_s > 0 && now_ms / 1000 >= closes_at_s)
    }
}

/// A waiting answer at the front, for a released place whose pass cannot
/// be collected right now: the shopper keeps the place and asks again.
fn held_at_front(shared: &SharedRoom, ticket: &Presented) -> Status {
    let poll_after_s = shared.policy().poll_min.as_secs().max(1) as u32;
    Status::Paused(Wait {
        position: 1,
        ahead: 0,
        estimated_wait_s: 0,
        poll_after_s,
        expires_at_s: ticket.expires_at_s,
    })
}

impl FleetRoom {
    /// A poll: the pass carries its ticket's seq, as one gateway's does.
    async fn poll_ticket(&self, presented: &Presented, now_ms: u64) -> Result<Status, PollRefused> {
        Ok(match self.poll_place(presented, now_ms).await? {
            Status::Admitted(admitted) => Status::Admitted(Admitted {
                seq: presented.seq,
                ..admitted
            }),
            other => other,
        })
    }

    /// The place of ticket (or pass) `seq`: its drawn one with a fair
    /// start (a pass exists only once drawn), else itself.
    fn place(&self, seq: u64) -> u64 {
        match self.shared.locate(seq) {
            Located::Place(place) => place,
            Located::PreQueue => seq,
        }
    }

    async fn poll_place(&self, presented: &Presented, now_ms: u64) -> Result<Status, PollRefused> {
        let shared = &self.shared;
        let early = |retry_after_s| PollRefused::TooEarly { retry_after_s };
        // When each ticket may poll next is kept by its own seq.
        let key = presented.seq;
        // With a fair start, a pre-queue ticket's place is its drawn one
        // (kept by the store as the place); before the draw it waits.
        let ticket = &match shared.locate_now(presented.seq, now_ms).await {
            Located::Place(place) => Presented {
                seq: place,
                ..*presented
            },
            Located::PreQueue => {
                let status = shared.pre_queue_status(presented.seq, now_ms);
                shared.on_time(key, &status, now_ms).map_err(early)?;
                return Ok(status);
            }
        };
        // A pass already collected is shown again from memory, also while
        // the store is away: passes already issued keep working.
        if let Some(known) = shared.known_claim(ticket.seq) {
            // Not the pass's use by itself: the status route notes it
            // (`touch_pass`); a join answered with the place is not one.
            return Ok(decide::claimed(ticket, known, &shared.policy()));
        }
        match shared.decide_poll(ticket, now_ms) {
            PollDecision::Answer(status) => {
                shared.on_time(key, &status, now_ms).map_err(early)?;
                Ok(status)
            }
            PollDecision::Claim => {
                let status = match shared.claim(ticket.seq).await {
                    Ok(reply) => {
                        if matches!(reply, ClaimReply::Admitted { .. }) {
                            // Collected now: in use from here.
                            shared.touch_pass(ticket.seq);
                        }
                        decide::claimed(ticket, reply, &shared.policy())
                    }
                    Err(e) => {
                        tracing::debug!(room = shared.name(), "pass not collected: {e}");
                        held_at_front(shared, ticket)
                    }
                };
                // A released place collects its pass whenever it asks; one
                // told to wait at the front (no slot free yet) is held to
                // the time it was told, as a waiting one is.
                shared.on_time(key, &status, now_ms).map_err(early)?;
                Ok(status)
            }
        }
    }

    async fn join_place(&self, req: JoinRequest, now_ms: u64) -> Result<Entered, JoinError> {
        let shared = &self.shared;
        let (seq, ticket_id) = match req.account {
            None => {
                let seq = shared.join(req.client).await?;
                let mut id = [0u8; 16];
                rand::RngCore::fill_bytes(&mut rand::rng(), &mut id);
                let ticket_id = TicketId::parse(&hex::encode(id)).expect("32 hex digits");
                (seq, ticket_id)
            }
            Some(account) => match shared.join_account(account, req.client, now_ms).await? {
                AccountPlace::Held(held) => return Ok(Entered::Held(held)),
                AccountPlace::New { seq, ticket_id } => (seq, ticket_id),
            },
        };
        let issued_at_s = now_ms / 1000;
        let place = match shared.locate_now(seq, now_ms).await {
            Located::Place(place) => place,
            Located::PreQueue => {
                // In the pre-queue: its clock starts at the opening.
                let status = shared.pre_queue_status(seq, now_ms);
                let _ = shared.on_time(seq, &status, now_ms);
                let Status::PreQueue(pre) = status else {
                    unreachable!("a pre-queue status")
                };
                return Ok(Entered::New(Joined {
                    seq,
                    ticket_id,
                    issued_at_s,
                    expires_at_s: pre.expires_at_s,
                    status,
                }));
            }
        };
        let ticket = Presented {
            seq: place,
            ticket_id,
            expires_at_s: issued_at_s + shared.policy().ticket_ttl.as_secs(),
        };
        let status = match shared.decide_poll(&ticket, now_ms) {
            PollDecision::Answer(status) => status,
            // Released already: the first poll collects the pass.
            PollDecision::Claim => held_at_front(shared, &ticket),
        };
        // A new place: its first poll is timed from this answer.
        let _ = shared.on_time(seq, &status, now_ms);
        Ok(Entered::New(Joined {
            seq,
            ticket_id,
            issued_at_s,
            expires_at_s: ticket.expires_at_s,
            status,
        }))
    }
}

#[async_trait]
impl RoomBackend for FleetRoom {
    async fn poll(&self, presented: &Presented, now_ms: u64) -> Result<Status, PollRefused> {
        self.poll_ticket(presented, now_ms).await
    }

    async fn join(&self, req: JoinRequest, now_ms: u64) -> Result<Entered, JoinError> {
        self.join_place(req, now_ms).await
    }

    fn account_pass(&self, account: &AccountHash, seq: u64, expires_at_s: u64) {
        self.shared.account_pass(*account, seq, expires_at_s);
    }

    fn watermark(&self, now_ms: u64) -> Watermark {
        self.shared
            .numbers()
            .watermark(&self.shared.policy(), now_ms)
    }

    fn fair_start(&self) -> Option<FairStartInfo> {
        self.shared.fair_start()
    }

    fn may_start(&self, seq: u64, _ticket_id: &TicketId, _now_ms: u64) -> bool {
        self.shared.may_start(self.place(seq))
    }

    fn touch_pass(&self, seq: u64, _ticket_id: &TicketId, _now_ms: u64) {
        self.shared.touch_pass(self.place(seq));
    }

    fn pass_checkout(&self, seq: u64, _ticket_id: &TicketId, running: bool, _now_ms: u64) {
        self.shared.pass_checkout(self.place(seq), running);
    }

    fn end_pass(&self, pass: &Claims, why: PassEnd, _now_ms: u64) -> bool {
        let ended = self.shared.end_pass(self.place(pass.seq), pass.exp);
        if ended {
            self.shared.count_ended(why);
        }
        ended
    }

    fn pass_ended(&self, seq: u64, now_ms: u64) -> bool {
        self.shared.pass_ended(self.place(seq), now_ms)
    }

    fn give_back_if_spent(&self, seq: u64, orders: PassOrders, now_ms: u64) -> bool {
        let policy = self.shared.policy();
        orders.spent(policy.max_orders_per_pass.get())
            && self
                .shared
                .give_back(self.place(seq), now_ms / 1000 + policy.pass_ttl.as_secs())
    }

    fn policy(&self) -> Policy {
        (*self.shared.policy()).clone()
    }

    fn stats(&self, now_ms: u64) -> RoomStats {
        let shared = &self.shared;
        let numbers = shared.numbers();
        RoomStats {
            joins: shared.join_counts(),
            waiting: numbers.waiting(),
            // Per-ticket facts the store does not keep (one record per
            // waiting shopper is what Redis must not hold).
            oldest_wait_s: 0,
            abandoned_total: 0,
            expired_total: 0,
            admitted_total: 0,
            too_early_total: shared.too_early_total(),
            active_passes: numbers.held,
            uncollected: numbers.pending,
            no_show_share: f64::from(numbers.share_milli) / 1000.0,
            release_rate: 0.0,
            release_per_second: shared.policy().release_per_second.get(),
            serving: numbers.serving,
            paused: numbers.paused || numbers.is_stale(now_ms),
            sold_out: !shared.stock.can_sell(shared.name()) || numbers.sold_out,
            wait: WaitHistogram::default(),
            passes_ended_idle: shared.ended_total(PassEnd::Idle),
            passes_ended_origin: shared.ended_total(PassEnd::Origin),
        }
    }

    fn apply(&self, settings: Settings<'_>, now_ms: u64) {
        let mut adaptive = self.adaptive();
        let mut policy = settings.policy;
        if let Some(rate) = adaptive.configure(settings.config, now_ms) {
            policy.release_per_second = rate;
        }
        // The fleet's one rate: the configured rate is its start.
        let start = settings.config.release_per_second.get();
        self.shared
            .set_adaptive(adaptive.view().map(|v| (v.bounds, start)));
        self.shared.set_policy(policy);
        self.shared.set_joins_per_minute(settings.joins_per_minute);
        self.closes_at_s
            .store(settings.closes_at_s.unwrap_or(0), Ordering::Relaxed);
        self.config_paused.store(settings.paused, Ordering::Relaxed);
        self.shared.want_paused(self.paused_at(now_ms));
    }

    fn release_once(&self, now_ms: u64, _places_max: usize) -> u32 {
        // The room's tick task releases (see `SharedRoom`); here only the
        // event's close is written, once (`want_paused` writes a change).
        self.shared.want_paused(self.paused_at(now_ms));
        0
    }

    fn adapt_once(&self, _now_ms: u64) {
        // The fleet's rate is stepped by the lease holder's task.
    }

    fn adaptive_view(&self) -> Option<AdaptiveView> {
        self.shared.adaptive_view().map(|v| AdaptiveView {
            bounds: v.bounds,
            decision: v.decision,
            in_force: v.in_force,
            fleet: Some(v.by),
        })
    }

    fn release_reason(&self) -> &'static str {
        match self.shared.adaptive_view() {
            Some(v) => v.decision.reason.as_str(),
            None => self.adaptive().pinned_reason(),
        }
    }

    fn checkout_started(&self, _now_ms: u64) {
        // The fleet's window counts finished checkouts only.
    }

    fn checkout_ended(&self, _now_ms: u64) {}

    fn record_checkout(&self, now_ms: u64, latency_ms: u32, outcome: Outcome) {
        // The fleet's window: published, and read back by all.
        self.shared.record_checkout(now_ms, latency_ms, outcome);
    }

    fn fleet_limits(&self) -> Option<FleetLimits> {
        self.shared.fleet_limits()
    }

    #[cfg(test)]
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
