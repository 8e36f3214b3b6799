//! A room on a line shared by a fleet of gateways: the decisions a gateway
//! makes from the room's shared numbers (held in its memory, refreshed from
//! the shared store) and a ticket's signed `seq`. Plain functions, no I/O:
//! the store's answers come in as [`LineNumbers`], [`JoinReply`] and
//! [`ClaimReply`], and the answers go out as the same [`Status`] and
//! [`JoinError`] the embedded room gives.
//!
//! The shared store keeps no record per waiting shopper: a place is its
//! `seq`, `serving` says which places have been released; a released place
//! waits for its holder in the store's released set (its claim window) and
//! takes one of the `max_active` slots only when its pass is collected.
//! The store cannot tell leavers from people still polling, so every place
//! is released in turn; those whose holder never comes back are no-shows,
//! made up for as [`crate::no_show`] says. [`release`] and [`claim`] are the
//! store's two pacing decisions, written here so that the seeded simulation
//! runs what the store's Function runs (`sluice.lua` mirrors them).

use std::num::NonZeroU32;

use rand::Rng;

use crate::no_show::{self, SHARE_MAX_MILLI};
pub use crate::no_show::{claim_window_ms, CLAIM_SLACK};
use crate::pace::gcra;
use crate::poll::paced_poll_after_s;
use crate::room::{Admitted, JoinError, RoomState, Status, Wait, Watermark};
use crate::ticket_id::TicketId;
use crate::wait_estimate::{estimated_wait_s, SlotOutlook};
use crate::Policy;

/// Shared numbers older than this (the store could not be read) make every
/// waiting ticket `paused`: nobody is let in who was not already.
pub const STALE_AFTER_MS: u64 = 1000;

/// `Retry-After` of a join the store could not take.
pub const STORE_RETRY_AFTER_S: u64 = 2;

/// A poll this much sooner than it was told is still on time (the
/// embedded room's one second of slack).
pub const POLL_SLACK_MS: u64 = 1000;

/// The room's numbers as the shared store last gave them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LineNumbers {
    /// The next `seq` the store will give.
    pub next: u64,
    /// Places below this have been released.
    pub serving: u64,
    /// Slots of `max_active` held: collected passes that may still start a
    /// checkout.
    pub held: u64,
    /// Released places not collected yet (within their claim window).
    pub pending: u64,
    /// Released places collected and never collected so far (totals).
    pub shows: u64,
    pub no_shows: u64,
    /// Mean milliseconds a pass held its slot (0: none ended yet).
    pub hold_ms: u64,
    /// The no-show share this gateway measured from the totals, in
    /// thousandths (stamped by the gateway, like `read_at_ms`).
    pub share_milli: u32,
    pub paused: bool,
    pub sold_out: bool,
    /// Bumped by the store each time `paused` or `sold_out` changes.
    pub version: u64,
    /// Local unix ms when this gateway read them.
    pub read_at_ms: u64,
}

impl LineNumbers {
    /// Too old to let anyone in on: the store has not answered lately.
    pub fn is_stale(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.read_at_ms) > STALE_AFTER_MS
    }

    /// The room's state as a waiting shopper should see it now.
    pub fn state(&self, now_ms: u64) -> RoomState {
        if self.sold_out {
            RoomState::SoldOut
        } else if self.paused || self.is_stale(now_ms) {
            RoomState::Paused
        } else {
            RoomState::Open
        }
    }

    /// Places given and not released yet (including people who left: the
    /// store cannot tell them apart without a record per shopper).
    pub fn waiting(&self) -> u64 {
        self.next.saturating_sub(self.serving)
    }

    /// `GET /queue/{room}/watermark`.
    pub fn watermark(&self, policy: &Policy, now_ms: u64) -> Watermark {
        Watermark {
            serving: self.serving,
            waiting: self.waiting(),
            release_per_second: policy.release_per_second.get(),
            state: self.state(now_ms),
            poll_after_s: policy.poll_min.as_secs() as u32,
        }
    }
}

/// What a poll of a verified ticket comes to before any signing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollDecision {
    /// Still in line (or paused: see the status).
    Answer(Status),
    /// The place has been released: ask the store for the pass.
    Claim,
}

/// The ticket a poll presented: its verified claims.
#[derive(Debug, Clone, Copy)]
pub struct Presented {
    pub seq: u64,
    pub ticket_id: TicketId,
    /// The ticket's `exp`.
    pub expires_at_s: u64,
}

/// Decides a poll from the numbers in memory. `numbers` is `None` before
/// the store has ever answered.
pub fn poll(
    ticket: &Presented,
    numbers: Option<&LineNumbers>,
    policy: &Policy,
    now_ms: u64,
    rng: &mut impl Rng,
) -> PollDecision {
    let numbers = numbers.copied().unwrap_or_default();
    let state = if numbers.read_at_ms == 0 {
        RoomState::Paused
    } else {
        numbers.state(now_ms)
    };
    if state == RoomState::SoldOut {
        return PollDecision::Answer(Status::SoldOut);
    }
    // A place released before a pause is an admission already given: the
    // kill switch stops new ones, so its pass is still collected (as the
    // embedded room hands out a pass it minted before the pause). Numbers
    // too old to trust let nobody in.
    let fresh = numbers.read_at_ms != 0 && !numbers.is_stale(now_ms);
    if ticket.seq < numbers.serving && fresh {
        return PollDecision::Claim;
    }
    // Released places still waiting for their holder are ahead too, as
    // in the embedded room, but already let in: the estimate counts them
    // in the slots, from the places still in line.
    let in_line = ticket.seq.saturating_sub(numbers.serving);
    let ahead = in_line + numbers.pending;
    let estimated_wait_s = estimate_s(in_line, &numbers, policy);
    // Paced at the front as the embedded room's line (crate::poll): while
    // the line moves at the rate (open, fresh numbers, and the slots free
    // now would take this place too).
    let free = no_show::releasable(
        u64::from(policy.max_active.get()),
        numbers.held,
        numbers.pending,
        numbers.share_milli,
    );
    let releasing = state == RoomState::Open && fresh && in_line < free;
    let poll = paced_poll_after_s(
        estimated_wait_s,
        policy.poll_min.as_secs() as u8,
        policy.poll_max.as_secs() as u8,
        releasing,
        rng,
    );
    let wait = Wait {
        position: ahead + 1,
        ahead,
        estimated_wait_s,
        poll_after_s: u32::from(poll),
        expires_at_s: ticket.expires_at_s,
    };
    PollDecision::Answer(match state {
        RoomState::Open => Status::Waiting(wait),
        RoomState::Paused | RoomState::SoldOut => Status::Paused(wait),
    })
}

/// `Some(retry_after_s)` when a poll at `now_ms` comes sooner than the
/// `due_ms` its last answer told it, beyond [`POLL_SLACK_MS`]: refused
/// (`429 rate_limited`) like the embedded room's early poll.
pub fn too_early(due_ms: u64, now_ms: u64) -> Option<u64> {
    (now_ms.saturating_add(POLL_SLACK_MS) < due_ms).then(|| (due_ms - now_ms).div_ceil(1000))
}

/// When the holder of a waiting answer may poll next (unix ms); `None`
/// for any other answer (a released place, sold out: never early).
pub fn poll_due_ms(status: &Status, now_ms: u64) -> Option<u64> {
    match status {
        Status::Waiting(w) | Status::Paused(w) => Some(now_ms + u64::from(w.poll_after_s) * 1000),
        // A pre-queue ticket is held to its time too, as one gateway's is.
        Status::PreQueue(p) => Some(now_ms + u64::from(p.poll_after_s) * 1000),
        _ => None,
    }
}

/// The wait of someone with `ahead` places in front, from the shared
/// numbers. Places (leavers among them) go at the release's pace, the rate
/// made up for the measured no-show share; when the slots bind, each slot
/// a pass gives back lets `1 / (1 - share)` places go, after the measured
/// mean time a pass holds its slot (`pass_ttl` until one has ended) plus
/// what the no-shows cost it: each collected pass comes with
/// `share / (1 - share)` places nobody collects, each counted as
/// `1 - share` of a slot for its claim window `W`, so `share · W` more per
/// pass; and a slot freed is taken at its next holder's next poll, half a
/// shortest poll interval later on average. The slots held now are taken as ending evenly over that time (the
/// store does not say when each one ends).
pub fn estimate_s(ahead: u64, numbers: &LineNumbers, policy: &Policy) -> u64 {
    let share = numbers.share_milli.min(SHARE_MAX_MILLI);
    let max_active = u64::from(policy.max_active.get());
    let held_s = if numbers.hold_ms > 0 {
        numbers.hold_ms as f64 / 1000.0
    } else {
        policy.pass_ttl.as_secs_f64()
    };
    let hold_s = held_s
        + f64::from(share) / 1000.0 * claim_window_ms(policy) as f64 / 1000.0
        + policy.poll_min.as_secs_f64() / 2.0;
    let slots = SharedSlots {
        places: no_show::releasable(max_active, 0, 0, share),
        free: no_show::releasable(max_active, numbers.held, numbers.pending, share),
        held: no_show::releasable(numbers.held, 0, 0, share),
        hold_s,
    };
    let rate = no_show::make_up_rate(policy.release_per_second.get(), share);
    estimated_wait_s(ahead, rate, &slots)
}

/// The slots in places: with a no-show share `s`, a slot stands for
/// `1 / (1 - s)` released places.
struct SharedSlots {
    places: u64,
    free: u64,
    held: u64,
    hold_s: f64,
}

impl SlotOutlook for SharedSlots {
    fn slots(&self) -> u64 {
        self.places
    }

    fn free(&self) -> u64 {
        self.free.min(self.places)
    }

    fn end_in_s(&self, n: u64) -> Option<f64> {
        (n < self.held).then(|| self.hold_s * (n + 1) as f64 / self.held as f64)
    }

    fn hold_s(&self) -> f64 {
        self.hold_s
    }
}

/// The store's answer to a claim of a released place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimReply {
    /// Not released after all (numbers in memory ran ahead of the store,
    /// which happens only when it was restarted empty).
    Waiting { serving: u64 },
    /// The pass's slot is held until this unix ms.
    Admitted { expires_at_ms: u64 },
    /// Released, but its claim window ended before the pass was collected
    /// (or its pass ended, or was given back): the place is spent.
    Gone,
    /// Released and waiting for its holder, but no slot is free right
    /// now: the place stays at the front and asks again.
    Full,
}

/// The status a claim comes to. The pass is the same every time it is
/// asked for: its times come from the slot's end, kept by the store.
pub fn claimed(ticket: &Presented, reply: ClaimReply, policy: &Policy) -> Status {
    match reply {
        ClaimReply::Admitted { expires_at_ms } => {
            let expires_at_s = expires_at_ms / 1000;
            Status::Admitted(Admitted {
                seq: ticket.seq,
                ticket_id: ticket.ticket_id,
                number: ticket.seq + 1,
                issued_at_s: expires_at_s.saturating_sub(policy.pass_ttl.as_secs()),
                expires_at_s,
            })
        }
        ClaimReply::Gone => Status::Expired,
        ClaimReply::Full => Status::Waiting(Wait {
            position: 1,
            ahead: 0,
            estimated_wait_s: 0,
            poll_after_s: policy.poll_min.as_secs() as u32,
            expires_at_s: ticket.expires_at_s,
        }),
        ClaimReply::Waiting { serving } => {
            let ahead = ticket.seq.saturating_sub(serving);
            Status::Waiting(Wait {
                position: ahead + 1,
                ahead,
                estimated_wait_s: 0,
                poll_after_s: policy.poll_min.as_secs() as u32,
                expires_at_s: ticket.expires_at_s,
            })
        }
    }
}

/// The store's answer to a batch of joins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinReply {
    /// The first `seq` given; the joins within their client's limit get
    /// `first .. first + granted`, in batch order.
    pub first: u64,
    pub granted: u32,
    pub serving: u64,
    pub paused: bool,
    pub sold_out: bool,
    /// The store's room is new (or the store came back empty) and waits
    /// for every gateway to tell it the highest numbers it saw: no places
    /// for a moment.
    pub warming: bool,
    /// Per join of the batch, in order: 0 when within its client's limit
    /// (the fleet's per-client join limit), else the wait in ms until its
    /// client may join again. Shorter than the batch: the rest are 0.
    pub retry_after_ms: Vec<u64>,
}

/// The answer to each join of a batch, in order: its `seq`, or why it got
/// none. The joins over their client's limit take no place; the others
/// take the granted places in order.
pub fn join_answers(reply: &JoinReply, n: usize, policy: &Policy) -> Vec<Result<u64, JoinError>> {
    let mut given = 0u32;
    (0..n)
        .map(|i| {
            let limited_ms = reply.retry_after_ms.get(i).copied().unwrap_or(0);
            // Sold out (and a store warming up) is the answer for all: a
            // client over its limit is not told to come back to nothing.
            if limited_ms > 0 && !reply.warming && !reply.sold_out {
                return Err(JoinError::RateLimited {
                    retry_after_s: limited_ms.div_ceil(1000).max(1),
                });
            }
            let rank = given;
            let answer = join_seq(reply, rank, policy);
            if answer.is_ok() {
                given += 1;
            }
            answer
        })
        .collect()
}

/// The answer to the join that takes the `rank`-th granted place (0-based)
/// of a batch: its `seq`, or why it got none.
fn join_seq(reply: &JoinReply, rank: u32, policy: &Policy) -> Result<u64, JoinError> {
    if reply.warming {
        return Err(JoinError::StoreUnavailable {
            retry_after_s: STORE_RETRY_AFTER_S,
        });
    }
    if reply.sold_out {
        return Err(JoinError::SoldOut);
    }
    let retry_after_s = policy.poll_min.as_secs().max(1);
    if reply.paused {
        return Err(JoinError::Paused { retry_after_s });
    }
    if rank >= reply.granted {
        return Err(JoinError::QueueFull { retry_after_s });
    }
    Ok(reply.first + u64::from(rank))
}

/// The policy a fleet room runs at: this gateway's `config` with the rate
/// in force and the fleet's smallest burst, `max_active` and
/// `queue_capacity` (a 0 from the store keeps the config's number).
pub fn runs_at(
    config: &Policy,
    rate: u32,
    burst: u32,
    max_active: u32,
    queue_capacity: u32,
) -> Policy {
    let or = |v: u32, keep: NonZeroU32| NonZeroU32::new(v).unwrap_or(keep);
    Policy {
        release_per_second: or(rate, config.release_per_second),
        burst: or(burst, config.burst),
        max_active: or(max_active, config.max_active),
        queue_capacity: or(queue_capacity, config.queue_capacity),
        ..config.clone()
    }
}

/// The store's room as the pacing decisions see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pacing {
    /// GCRA state of the release.
    pub release_tat_us: u64,
    /// Collected passes holding a slot, and released places not collected.
    pub passes: u64,
    pub pending: u64,
}

/// The release tick's decision (the store's `tick`): how many of the
/// `waiting` places to release at `now_us`, paced at the rate made up for
/// `share_milli` and within the slots as [`no_show::releasable`] counts
/// them. Updates `pacing`.
pub fn release(
    pacing: &mut Pacing,
    now_us: u64,
    policy: &Policy,
    share_milli: u32,
    waiting: u64,
) -> u64 {
    let step = no_show::interval_us(policy.release_per_second.get(), share_milli);
    let slots = no_show::releasable(
        u64::from(policy.max_active.get()),
        pacing.passes,
        pacing.pending,
        share_milli,
    );
    let wanted = slots.min(waiting);
    let (granted, tat) = gcra(
        pacing.release_tat_us,
        now_us,
        step,
        u64::from(policy.burst.get()),
        wanted,
    );
    if granted > 0 {
        pacing.release_tat_us = tat;
        pacing.pending += granted;
    }
    granted
}

/// A claim's decision (the store's `claim` of a place still in its claim
/// window): the pass is handed over only while a slot is free. `true` if
/// it is; the place then holds a slot.
///
/// The passes handed out are not paced again here: a pace at exactly the
/// rate behind a release made up to it would be a queue served as fast as
/// it fills, which grows without bound and serves whoever asks first.
pub fn claim(pacing: &mut Pacing, policy: &Policy) -> bool {
    if pacing.passes >= u64::from(policy.max_active.get()) {
        return false;
    }
    pacing.pending = pacing.pending.saturating_sub(1);
    pacing.passes += 1;
    true
}

/// How many released places were still waiting for their holder when
/// the store lost the room, as this gateway can tell: the `pending` of its
/// last numbers (read at store time `read_at_store_ms`), less the passes it
/// collected itself since then (`passes`: seq and end in store ms, each
/// `pass_ttl_ms` long, so collected at its end less that). Collections on
/// other gateways since this gateway's last read are not known here: the
/// count can only err high (slots held back, `ahead` one too many) for
/// one claim window, never admit past `max_active`.
pub fn uncollected_when_lost(
    pending: u64,
    passes: &[(u64, u64)],
    pass_ttl_ms: u64,
    read_at_store_ms: u64,
) -> u64 {
    let since = passes
        .iter()
        .filter(|&&(_, ends_ms)| ends_ms.saturating_sub(pass_ttl_ms) >= read_at_store_ms)
        .count() as u64;
    pending.saturating_sub(since)
}

/// The store's clock less this machine's (ms), from one call sent at
/// local `sent_ms`, answered at local `received_ms` with the store's
/// `store_ms`: the store read its clock halfway, give or take half the
/// round trip.
pub fn clock_offset_ms(store_ms: u64, sent_ms: u64, received_ms: u64) -> i64 {
    let local_mid = sent_ms / 2 + received_ms / 2 + (sent_ms % 2 + received_ms % 2) / 2;
    store_ms as i64 - local_mid as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_offset_is_the_store_less_the_middle_of_the_round_trip() {
        assert_eq!(clock_offset_ms(10_050, 10_000, 10_100), 0);
        assert_eq!(
            clock_offset_ms(12_050, 10_000, 10_100),
            2_000,
            "store ahead"
        );
        assert_eq!(
            clock_offset_ms(9_050, 10_000, 10_100),
            -1_000,
            "store behind"
        );
    }

    #[test]
    fn a_place_collected_here_after_the_last_read_is_no_longer_uncollected() {
        // Read at 10,000 with 2 uncollected; pass 7 collected at 10,050
        // (ends 70,050 with 60 s passes), pass 3 long before.
        let passes = [(3, 65_000), (7, 70_050)];
        assert_eq!(uncollected_when_lost(2, &passes, 60_000, 10_000), 1);
        assert_eq!(uncollected_when_lost(2, &passes[..1], 60_000, 10_000), 2);
        assert_eq!(uncollected_when_lost(0, &passes, 60_000, 10_000), 0);
    }
    use rand::rngs::StdRng;
    use rand::SeedableRng;
    use std::num::NonZeroU32;
    use std::time::Duration;

    fn policy() -> Policy {
        Policy {
            release_per_second: NonZeroU32::new(10).unwrap(),
            burst: NonZeroU32::new(10).unwrap(),
            max_active: NonZeroU32::new(3).unwrap(),
            max_orders_per_pass: NonZeroU32::new(1).unwrap(),
            queue_capacity: NonZeroU32::new(100).unwrap(),
            pass_ttl: Duration::from_secs(6),
            ticket_ttl: Duration::from_secs(600),
            idle_timeout: Duration::from_secs(30),
            poll_min: Duration::from_secs(1),
            poll_max: Duration::from_secs(30),
            opens_at_ms: None,
            pass_idle: std::time::Duration::ZERO,
        }
    }

    fn ticket(seq: u64) -> Presented {
        Presented {
            seq,
            ticket_id: TicketId::parse("00112233445566778899aabbccddeeff").unwrap(),
            expires_at_s: 2_000,
        }
    }

    fn numbers(serving: u64, next: u64) -> LineNumbers {
        LineNumbers {
            next,
            serving,
            held: 0,
            read_at_ms: 1_000_000,
            ..LineNumbers::default()
        }
    }

    #[test]
    fn a_place_below_serving_claims_and_one_above_waits_with_its_distance() {
        let mut rng = StdRng::seed_from_u64(1);
        let n = numbers(5, 20);
        let now = 1_000_100;
        assert_eq!(
            poll(&ticket(4), Some(&n), &policy(), now, &mut rng),
            PollDecision::Claim
        );
        match poll(&ticket(12), Some(&n), &policy(), now, &mut rng) {
            PollDecision::Answer(Status::Waiting(w)) => {
                assert_eq!((w.ahead, w.position), (7, 8));
                assert_eq!(w.expires_at_s, 2_000);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_front_of_a_moving_line_is_told_its_turn_as_in_the_embedded_room() {
        let mut p = policy();
        p.poll_min = Duration::from_secs(10);
        let now = 1_000_100;
        let told = |n: &LineNumbers, seq: u64| match poll(
            &ticket(seq),
            Some(n),
            &p,
            now,
            &mut StdRng::seed_from_u64(seq),
        ) {
            PollDecision::Answer(Status::Waiting(w) | Status::Paused(w)) => {
                (w.estimated_wait_s, w.poll_after_s)
            }
            other => panic!("{other:?}"),
        };
        // 2 ahead at 10/s with 3 slots free: its turn, 1 s.
        let n = numbers(5, 20);
        assert_eq!(told(&n, 7), (1, 1));
        // Paused, or no slot free for it: poll_min, as before.
        let paused = LineNumbers { paused: true, ..n };
        assert_eq!(told(&paused, 7).1, 10);
        let held = LineNumbers { held: 3, ..n };
        assert_eq!(told(&held, 7).1, 10);
    }

    #[test]
    fn stale_or_missing_numbers_pause_everyone_and_let_nobody_in() {
        let mut rng = StdRng::seed_from_u64(1);
        let n = numbers(5, 20);
        let late = n.read_at_ms + STALE_AFTER_MS + 1;
        for seq in [4, 12] {
            assert!(matches!(
                poll(&ticket(seq), Some(&n), &policy(), late, &mut rng),
                PollDecision::Answer(Status::Paused(_))
            ));
            assert!(matches!(
                poll(&ticket(seq), None, &policy(), late, &mut rng),
                PollDecision::Answer(Status::Paused(_))
            ));
        }
        let paused = LineNumbers { paused: true, ..n };
        assert_eq!(
            poll(&ticket(4), Some(&paused), &policy(), 1_000_100, &mut rng),
            PollDecision::Claim,
            "a place released before the pause still collects its pass"
        );
        assert!(matches!(
            poll(&ticket(12), Some(&paused), &policy(), 1_000_100, &mut rng),
            PollDecision::Answer(Status::Paused(w)) if w.ahead == 7
        ));
        let sold = LineNumbers {
            sold_out: true,
            ..n
        };
        assert_eq!(
            poll(&ticket(4), Some(&sold), &policy(), 1_000_100, &mut rng),
            PollDecision::Answer(Status::SoldOut)
        );
        assert_eq!(n.state(late), RoomState::Paused);
        assert_eq!(n.watermark(&policy(), 1_000_100).state, RoomState::Open);
    }

    #[test]
    fn released_places_still_uncollected_count_ahead_but_not_twice_in_the_wait() {
        let mut rng = StdRng::seed_from_u64(1);
        let none = numbers(5, 20);
        let some = LineNumbers { pending: 2, ..none };
        let (PollDecision::Answer(Status::Waiting(a)), PollDecision::Answer(Status::Waiting(b))) = (
            poll(&ticket(12), Some(&none), &policy(), 1_000_100, &mut rng),
            poll(&ticket(12), Some(&some), &policy(), 1_000_100, &mut rng),
        ) else {
            panic!()
        };
        assert_eq!((a.ahead, a.position), (7, 8));
        assert_eq!((b.ahead, b.position), (9, 10));
        assert_eq!(
            b.estimated_wait_s,
            estimate_s(7, &some, &policy()),
            "the pending places are in the slots, not in line again"
        );
    }

    #[test]
    fn a_poll_sooner_than_told_by_more_than_the_slack_is_too_early() {
        let due = poll_due_ms(
            &Status::Waiting(Wait {
                position: 1,
                ahead: 0,
                estimated_wait_s: 9,
                poll_after_s: 5,
                expires_at_s: 2_000,
            }),
            1_000_000,
        )
        .unwrap();
        assert_eq!(due, 1_005_000);
        assert_eq!(too_early(due, 1_000_150), Some(5));
        assert_eq!(too_early(due, 1_003_900), Some(2));
        assert_eq!(too_early(due, 1_004_000), None, "one second of slack");
        assert_eq!(too_early(due, 1_009_000), None);
        assert_eq!(poll_due_ms(&Status::Expired, 1_000_000), None);
    }

    #[test]
    fn held_slots_lengthen_the_wait_when_they_bind() {
        // 3 slots, 6 s passes, 10/s: slots bind (6 > 3/10).
        let free = numbers(0, 12);
        let full = LineNumbers { held: 3, ..free };
        let p = policy();
        assert_eq!(estimate_s(0, &free, &p), 0);
        assert!(
            estimate_s(11, &free, &p) >= 18,
            "{}",
            estimate_s(11, &free, &p)
        );
        assert!(estimate_s(0, &full, &p) >= 2);
    }

    #[test]
    fn a_claim_gives_the_same_pass_from_the_slots_end() {
        let p = policy();
        let Status::Admitted(a) = claimed(
            &ticket(4),
            ClaimReply::Admitted {
                expires_at_ms: 1_006_500,
            },
            &p,
        ) else {
            panic!()
        };
        assert_eq!((a.seq, a.expires_at_s, a.issued_at_s), (4, 1_006, 1_000));
        assert_eq!(claimed(&ticket(4), ClaimReply::Gone, &p), Status::Expired);
    }

    #[test]
    fn a_fleet_room_runs_at_the_rate_in_force_and_the_fleets_limits() {
        let p = policy();
        let runs = runs_at(&p, 7, 2, 1, 30);
        assert_eq!(
            (
                runs.release_per_second.get(),
                runs.burst.get(),
                runs.max_active.get(),
                runs.queue_capacity.get()
            ),
            (7, 2, 1, 30)
        );
        assert_eq!((runs.poll_min, runs.pass_ttl), (p.poll_min, p.pass_ttl));
        assert_eq!(runs_at(&p, 0, 0, 0, 0), p, "nothing from the store");
    }

    #[test]
    fn a_batch_hands_out_its_seqs_in_order_and_refuses_past_the_grant() {
        let p = policy();
        let reply = JoinReply {
            first: 40,
            granted: 2,
            serving: 0,
            paused: false,
            sold_out: false,
            warming: false,
            retry_after_ms: vec![],
        };
        let answers = join_answers(&reply, 3, &p);
        assert_eq!(answers[..2], [Ok(40), Ok(41)]);
        assert!(matches!(answers[2], Err(JoinError::QueueFull { .. })));
        let paused = JoinReply {
            paused: true,
            ..reply.clone()
        };
        assert!(matches!(
            join_answers(&paused, 1, &p)[0],
            Err(JoinError::Paused { .. })
        ));
        let warming = JoinReply {
            warming: true,
            retry_after_ms: vec![900],
            ..reply.clone()
        };
        assert!(matches!(
            join_answers(&warming, 1, &p)[0],
            Err(JoinError::StoreUnavailable { .. })
        ));
        // Joins over their client's limit take no place: the next ones
        // take the granted places in order.
        let limited = JoinReply {
            retry_after_ms: vec![0, 1_200, 0, 0],
            ..reply.clone()
        };
        let answers = join_answers(&limited, 4, &p);
        assert_eq!(answers[0], Ok(40));
        assert_eq!(answers[1], Err(JoinError::RateLimited { retry_after_s: 2 }));
        assert_eq!(answers[2], Ok(41));
        assert!(matches!(answers[3], Err(JoinError::QueueFull { .. })));
        let sold_out = JoinReply {
            sold_out: true,
            ..limited.clone()
        };
        assert!(join_answers(&sold_out, 4, &p)
            .iter()
            .all(|a| *a == Err(JoinError::SoldOut)));
        assert_eq!(claim_window_ms(&p), 6_000, "never longer than a pass");
        let long_pass = Policy {
            pass_ttl: Duration::from_secs(600),
            idle_timeout: Duration::from_secs(180),
            poll_max: Duration::from_secs(20),
            ..p.clone()
        };
        assert_eq!(claim_window_ms(&long_pass), 45_000, "two polls and slack");
        let short_idle = Policy {
            idle_timeout: Duration::from_secs(40),
            ..long_pass
        };
        assert_eq!(
            claim_window_ms(&short_idle),
            40_000,
            "never past the idle timeout"
        );
    }
}
