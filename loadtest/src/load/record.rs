//! What the shoppers and the sampler saw, recorded as it happens: one
//! shared recorder behind a mutex (every entry is a few bytes, and the
//! lock is held for a push).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;

/// Orders the recorder keeps (one per shopper at most, so this bounds
/// memory only for runs far beyond a campaign's size).
pub const ORDERS_MAX: usize = 2_000_000;
/// Latency values kept per second of the run.
pub const LATENCIES_PER_SECOND_MAX: usize = 100_000;

/// How one shopper's visit ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Paid: the order is confirmed.
    Confirmed,
    /// The card was declined.
    Declined,
    /// The checkout was rejected: out of stock.
    Rejected,
    /// The room was sold out before the shopper was let in.
    SoldOut,
    /// Stopped polling and left.
    Abandoned,
    /// The ticket or the order expired.
    Expired,
    /// Ran out of attempts (join, poll or checkout) or of run time.
    Failed,
    /// The order ended in another final state (cancelled, refunded, voided).
    OtherFinal,
    /// Let in with nothing to buy (a rooms-only fleet rehearsal).
    Admitted,
    /// The event closed before the shopper was let in.
    Closed,
}

impl Outcome {
    /// The name used in `summary.json` and the report.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Confirmed => "confirmed",
            Outcome::Declined => "declined",
            Outcome::Rejected => "rejected",
            Outcome::SoldOut => "sold_out",
            Outcome::Abandoned => "abandoned",
            Outcome::Expired => "expired",
            Outcome::Failed => "failed",
            Outcome::OtherFinal => "other_final",
            Outcome::Admitted => "admitted",
            Outcome::Closed => "closed",
        }
    }
}

/// An order a shopper was told about.
#[derive(Debug, Clone, Serialize)]
pub struct OrderSeen {
    pub order_id: String,
    pub sku: String,
    pub quantity: u32,
    /// Last known state.
    pub state: String,
    /// Seconds into the run when the gateway first acknowledged it.
    pub acked_at_s: f64,
    /// The gateway that acknowledged it (the books' replays go to gateway 0).
    pub gateway: usize,
    #[serde(skip)]
    pub pass: String,
    /// Found again by `GET /orders/{id}` at the end of the run.
    pub present: bool,
}

/// One `/admin/state` sample.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Sample {
    /// When the answer was in, seconds into the run.
    pub t_s: f64,
    /// How long reading it took (every gateway's, in a fleet): the
    /// numbers are from somewhere in `t_s - read_s ..= t_s`.
    pub read_s: f64,
    pub up: bool,
    pub waiting: u64,
    pub active: u64,
    pub admitted_total: u64,
    pub available: i64,
    pub reserved: i64,
    pub committed: i64,
    pub paused: bool,
    /// The room's release rate in force (`release_per_second`).
    pub release_per_second: f64,
    /// What last moved an adaptive rate (`release_source.reason`; empty
    /// for a pinned rate).
    pub release_reason: String,
    /// Where an adaptive controller is in its cycle
    /// (`release_source.phase`; empty for a pinned rate).
    pub release_phase: String,
    /// An adaptive controller's exact rate, smoothed queue estimate and
    /// capacity last measured (`release_source`); `None` for a pinned rate
    /// or before the controller has one.
    pub release_exact: Option<f64>,
    pub release_queue: Option<f64>,
    pub release_capacity: Option<f64>,
}

/// One gateway's share of the run, as the shoppers saw it.
#[derive(Debug, Clone, Default)]
pub struct GatewayStats {
    /// Requests sent to it, and of them those with no HTTP answer.
    pub requests: u64,
    pub failed: u64,
    /// Every answered request's latency, ms (from when it was due), up to
    /// [`GATEWAY_LATENCIES_MAX`].
    pub latencies_ms: Vec<u32>,
    /// Shoppers whose pass this gateway handed out, and by second.
    pub admissions: u64,
    pub admissions_by_s: Vec<u32>,
    /// Checkout calls sent to it that got no HTTP answer (in flight when
    /// it died, refused, timed out), and when each was sent, seconds into
    /// the run (up to [`CHECKOUTS_LOST_LISTED_MAX`]).
    pub checkouts_lost: u64,
    pub checkouts_lost_sent_s: Vec<f64>,
}

/// Sending times of unanswered checkouts kept per gateway.
pub const CHECKOUTS_LOST_LISTED_MAX: usize = 10_000;

/// Lost tickets listed, at most.
pub const LOST_TICKETS_MAX: usize = 10_000;

/// Latencies kept per gateway.
pub const GATEWAY_LATENCIES_MAX: usize = 4_000_000;

/// One ticket from join to admission or leaving: the FIFO check's input.
#[derive(Debug, Clone, Serialize)]
pub struct TicketLife {
    pub shopper: u32,
    /// The gateway that answered the join.
    pub gateway: usize,
    /// When the join was answered, seconds into the run.
    pub joined_s: f64,
    /// When the shopper first saw `admitted` with it.
    pub admitted_s: Option<f64>,
    /// When the last poll answered `waiting` (or `paused`) was sent.
    pub last_waiting_s: Option<f64>,
    /// When the shopper stopped waiting with it without being let in
    /// (gave up, lost the ticket, ran out of time).
    pub left_s: Option<f64>,
}

/// One gateway's `/admin/state` sample in a fleet.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FleetSample {
    pub t_s: f64,
    pub gateway: usize,
    pub up: bool,
    pub serving: u64,
    pub active: u64,
    pub waiting: u64,
}

#[derive(Debug, Default)]
pub struct Inner {
    /// Per gateway of the fleet (one for a lone gateway).
    pub gateways: Vec<GatewayStats>,
    pub tickets: Vec<TicketLife>,
    pub fleet_samples: Vec<FleetSample>,
    /// Shoppers who moved to another gateway while waiting and polled
    /// there with the same ticket.
    pub moved_waiting: u64,
    /// A moved shopper whose place got worse or whose ticket was refused.
    pub places_lost: Vec<String>,
    /// When a shared store came back without its data (the release
    /// budget starts afresh then).
    pub store_resets_s: Vec<f64>,
    /// Tickets lost while waiting (the shopper joins again): when, and the
    /// answer that lost it (`expired`, `401 <error>`), up to
    /// [`LOST_TICKETS_MAX`].
    pub tickets_lost: Vec<(f64, String)>,
    /// (route, status) → count; status 0 is a timeout or connection error.
    pub responses: BTreeMap<(String, u16), u64>,
    /// Checkout latency in ms, by second of the run (when the call ended).
    pub checkout_ms: Vec<Vec<u32>>,
    /// Checkout calls by second of the run (when the call ended), and of
    /// them those that failed for the backend's sake (timed out, no
    /// connection, or a 5xx).
    pub checkout_calls: Vec<(u32, u32)>,
    /// Seconds from the first join to admission, per admitted shopper.
    pub waits_s: Vec<f64>,
    pub outcomes: BTreeMap<Outcome, u64>,
    /// Shoppers who saw `admitted`, by second of the run.
    pub admitted_seen: Vec<u32>,
    pub orders: Vec<OrderSeen>,
    /// Order id → its place in `orders`.
    pub order_index: HashMap<String, usize>,
    /// Idempotency-Key → order id, to catch a key that made two orders.
    pub keys: HashMap<String, String>,
    /// Checkouts sent whose answer never arrived (timeouts, 5xx, the end
    /// of the run): the books replay each with its key, as a client
    /// recovering a lost answer would.
    pub unanswered: BTreeMap<String, Unanswered>,
    pub samples: Vec<Sample>,
    pub shoppers_started: u64,
    pub shoppers_done: u64,
    pub waiting_now: i64,
    pub held_back: u64,
    pub impatient_served: u64,
    /// Impatient early polls served whose answer came back so late that
    /// they may have been on time by the gateway's clock.
    pub impatient_late: u64,
    pub rejoins: u64,
    pub checkout_retries: u64,
    /// Problems shoppers saw that the books must list (e.g. a key reused
    /// for two orders).
    pub anomalies: Vec<String>,
    pub faults: Vec<(f64, String)>,
    /// What a campaign's shoppers saw ([`EventSeen`]).
    pub event: EventSeen,
    /// What the bot farm did and what honest shoppers paid ([`FarmSeen`]).
    pub farm: FarmSeen,
}

/// A bot-farm rehearsal (`[farm]`): the farm's work and what it got, and
/// the honest shoppers' solving.
#[derive(Debug, Default, Clone)]
pub struct FarmSeen {
    /// Solver threads the farm ran.
    pub solvers: u32,
    /// SHA-256 hashes the farm's solvers computed.
    pub hashes: u64,
    /// CPU seconds its threads spent inside the solver.
    pub solve_cpu_s: f64,
    /// CPU seconds of its threads in all (solving, challenges, joins).
    pub cpu_s: f64,
    /// Challenges fetched, joins sent, joins answered with a place.
    pub challenges: u64,
    pub joins: u64,
    pub joins_placed: u64,
    /// Joins refused, by `status error`.
    pub refused: BTreeMap<String, u64>,
    /// Difficulty of the challenges it was given: bits → count.
    pub bits: BTreeMap<u8, u64>,
    /// A solved challenge sent again from another address: answers with
    /// a place, and of those, places another than the first join's.
    pub replays: u64,
    pub replay_new_places: u64,
    /// Places (`seq`) the farm got, by the account that got them (one
    /// key, `""`, when the room takes no tokens).
    pub places: BTreeMap<String, std::collections::BTreeSet<u64>>,
    /// Addresses it sent requests from.
    pub addresses_used: u64,
    /// When its solvers stopped (second of the run).
    pub stopped_s: f64,
    /// Passes collected; of those held and never used, with when.
    pub passes: u64,
    pub held_at_s: Vec<f64>,
    /// Order ids of the farm's checkouts.
    pub orders: std::collections::BTreeSet<String>,
    /// Seconds each honest shopper's phone took on its challenge.
    pub honest_solve_s: Vec<f64>,
}

/// What shoppers saw of a room run as a campaign (`[event]`), in seconds
/// of the run.
#[derive(Debug, Default)]
pub struct EventSeen {
    /// Joins answered `503 not_open`: when.
    pub not_open_s: Vec<f64>,
    /// Joins that got a ticket: when the answer came.
    pub tickets_s: Vec<f64>,
    /// Joins answered `410 event_closed`.
    pub closed_joins: u64,
    /// Shoppers in line told `closed`.
    pub told_closed: u64,
    /// Pre-queue tickets: their `seq` (the arrival number of the draw).
    pub pre_queue_seqs: Vec<u64>,
    /// Pre-queue tickets admitted: `seq` and when their place was
    /// released, as [`Self::admitted_s`].
    pub pre_queue_admitted: Vec<(u64, (f64, f64))>,
    /// Every admission: its place was released after the first time (the
    /// shopper's last poll told to wait was sent then) and before the
    /// second (the pass received).
    pub admitted_s: Vec<(f64, f64)>,
    /// Each message seen in a status answer: first and last time.
    pub messages: BTreeMap<String, (f64, f64)>,
    /// The draw as last published: commitment, seed, entrants.
    pub draw: Option<(String, Option<String>, u64)>,
    /// The `set_message` faults played: when the file was written, and
    /// the message.
    pub messages_set: Vec<(f64, String)>,
}

/// A `POST /checkout` still without a final answer: what replaying it
/// with the same Idempotency-Key needs.
#[derive(Debug, Clone)]
pub struct Unanswered {
    pub pass: String,
    pub body: String,
    pub sku: String,
    pub quantity: u32,
}

pub struct Recorder {
    pub start: Instant,
    inner: Mutex<Inner>,
}

impl Recorder {
    pub fn new(start: Instant) -> Self {
        Self {
            start,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Seconds since the run started.
    pub fn now_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn response(&self, route: &str, status: u16) {
        self.with(|i| *i.responses.entry((route.to_string(), status)).or_default() += 1);
    }

    pub fn checkout_latency(&self, ms: f64) {
        let second = self.now_s() as usize;
        self.with(|i| {
            if i.checkout_ms.len() <= second {
                i.checkout_ms.resize(second + 1, Vec::new());
            }
            let bucket = &mut i.checkout_ms[second];
            if bucket.len() < LATENCIES_PER_SECOND_MAX {
                bucket.push(ms.round().clamp(0.0, u32::MAX as f64) as u32);
            }
        });
    }

    /// A checkout call answered `status` (0: timeout or connection error).
    pub fn checkout_call(&self, status: u16) {
        let second = self.now_s() as usize;
        self.with(|i| {
            if i.checkout_calls.len() <= second {
                i.checkout_calls.resize(second + 1, (0, 0));
            }
            let c = &mut i.checkout_calls[second];
            c.0 += 1;
            if status == 0 || status >= 500 {
                c.1 += 1;
            }
        });
    }

    pub fn admitted(&self, wait_s: f64) {
        let second = self.now_s() as usize;
        self.with(|i| {
            if i.admitted_seen.len() <= second {
                i.admitted_seen.resize(second + 1, 0);
            }
            i.admitted_seen[second] += 1;
            i.waits_s.push(wait_s);
        });
    }

    pub fn outcome(&self, o: Outcome) {
        self.with(|i| {
            *i.outcomes.entry(o).or_default() += 1;
            i.shoppers_done += 1;
        });
    }

    /// Records an acknowledged order; a key seen before with another
    /// order id is an anomaly.
    pub fn order(&self, key: &str, seen: OrderSeen) {
        self.with(|i| {
            match i.keys.get(key) {
                Some(id) if *id != seen.order_id => i.anomalies.push(format!(
                    "Idempotency-Key {key} answered with two orders: {id} and {}",
                    seen.order_id
                )),
                Some(_) => return,
                None => {}
            }
            i.keys.insert(key.to_string(), seen.order_id.clone());
            if i.orders.len() < ORDERS_MAX {
                i.order_index.insert(seen.order_id.clone(), i.orders.len());
                i.orders.push(seen);
            }
        });
    }

    /// Updates the last known state of an order.
    pub fn order_state(&self, order_id: &str, state: &str) {
        self.with(|i| {
            if let Some(&n) = i.order_index.get(order_id) {
                if let Some(o) = i.orders.get_mut(n) {
                    o.state = state.to_string();
                }
            }
        });
    }

    /// A request to gateway `g` answered `reply_status` after `elapsed_ms`.
    pub fn gateway_reply(&self, g: usize, status: u16, elapsed_ms: f64) {
        self.with(|i| {
            let s = gateway_stats(i, g);
            s.requests += 1;
            if status == 0 {
                s.failed += 1;
            } else if s.latencies_ms.len() < GATEWAY_LATENCIES_MAX {
                s.latencies_ms
                    .push(elapsed_ms.round().clamp(0.0, u32::MAX as f64) as u32);
            }
        });
    }

    /// A checkout call sent to gateway `g` at `sent_s` got no HTTP answer.
    pub fn gateway_checkout_lost(&self, g: usize, sent_s: f64) {
        self.with(|i| {
            let s = gateway_stats(i, g);
            s.checkouts_lost += 1;
            if s.checkouts_lost_sent_s.len() < CHECKOUTS_LOST_LISTED_MAX {
                s.checkouts_lost_sent_s.push(sent_s);
            }
        });
    }

    /// Gateway `g` handed a shopper its pass.
    pub fn gateway_admission(&self, g: usize) {
        let second = self.now_s() as usize;
        self.with(|i| {
            let s = gateway_stats(i, g);
            s.admissions += 1;
            if s.admissions_by_s.len() <= second {
                s.admissions_by_s.resize(second + 1, 0);
            }
            s.admissions_by_s[second] += 1;
        });
    }

    /// A new ticket; its index in `tickets`.
    pub fn ticket(&self, shopper: u32, gateway: usize) -> usize {
        let joined_s = self.now_s();
        self.with(|i| {
            i.tickets.push(TicketLife {
                shopper,
                gateway,
                joined_s,
                admitted_s: None,
                last_waiting_s: None,
                left_s: None,
            });
            i.tickets.len() - 1
        })
    }

    /// A poll of ticket `n` sent at `sent_s` was answered "still waiting".
    pub fn ticket_waiting(&self, n: usize, sent_s: f64) {
        self.with(|i| {
            if let Some(life) = i.tickets.get_mut(n) {
                life.last_waiting_s = Some(life.last_waiting_s.map_or(sent_s, |w| w.max(sent_s)));
            }
        });
    }

    /// A waiting ticket was refused or told `expired`: `why`.
    pub fn ticket_lost(&self, why: String) {
        let t = self.now_s();
        self.with(|i| {
            if i.tickets_lost.len() < LOST_TICKETS_MAX {
                i.tickets_lost.push((t, why));
            }
        });
    }

    /// Ticket `n` ended: let in (`admitted`) or left.
    pub fn ticket_end(&self, n: usize, admitted: bool) {
        let t = self.now_s();
        self.with(|i| {
            if let Some(life) = i.tickets.get_mut(n) {
                if life.admitted_s.is_none() && life.left_s.is_none() {
                    if admitted {
                        life.admitted_s = Some(t);
                    } else {
                        life.left_s = Some(t);
                    }
                }
            }
        });
    }

    pub fn fault(&self, what: String) {
        let t = self.now_s();
        self.with(|i| i.faults.push((t, what)));
    }
}

fn gateway_stats(i: &mut Inner, g: usize) -> &mut GatewayStats {
    if i.gateways.len() <= g {
        i.gateways.resize(g + 1, GatewayStats::default());
    }
    &mut i.gateways[g]
}

/// The `q`-quantile (0–1) of `sorted` values, nearest rank.
pub fn quantile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), Some(50));
        assert_eq!(quantile(&v, 0.99), Some(99));
        assert_eq!(quantile(&v, 1.0), Some(100));
        assert_eq!(quantile::<u32>(&[], 0.5), None);
    }

    #[test]
    fn a_key_answered_with_two_orders_is_an_anomaly() {
        let r = Recorder::new(Instant::now());
        let seen = |id: &str| OrderSeen {
            order_id: id.into(),
            sku: "a".into(),
            quantity: 1,
            state: "confirmed".into(),
            acked_at_s: 0.0,
            gateway: 0,
            pass: String::new(),
            present: true,
        };
        r.order("key-1", seen("o1"));
        r.order("key-1", seen("o1"));
        assert!(r.with(|i| i.anomalies.is_empty() && i.orders.len() == 1));
        r.order("key-1", seen("o2"));
        assert_eq!(r.with(|i| i.anomalies.len()), 1);
    }
}
