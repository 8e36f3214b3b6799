//! A room run as a campaign (`[event]`), checked from what the shoppers
//! saw: nobody got a place before `prequeue_at`; the opening draw is the
//! one the revealed seed gives (recomputed here from the published
//! algorithm, not with the gateway's code) and the pre-queue was let in in
//! that order; a message changed mid-sale reached the shoppers within one
//! poll; after `closes_at` nobody got a place, and no place released after
//! it was let in.
//!
//! Orders are judged from intervals, not from when passes were collected:
//! a shopper's place was released after its last poll told to wait was
//! sent and before its pass came back, so the draw is broken only when a
//! later-drawn place was surely released (pass received) before an
//! earlier-drawn one could have been (its last "wait" sent), however slow
//! the machine answers.
//!
//! Slack: the gateway compares whole seconds and answers after a request's
//! time, so an edge may be seen up to [`EDGE_SLACK_S`] late; a shopper in
//! line asks again within the room's `poll_max_s` plus its jitter and a
//! request's time, and a config edit is noticed within a reload tick.

use sha2::{Digest, Sha256};

use super::books::Check;
use super::record::EventSeen;
use super::scenario::{EventSetup, Scenario};

/// How late an edge of the schedule may show in the answers.
pub const EDGE_SLACK_S: f64 = 1.0;
/// A config edit is in force within this (the gateway's watch tick and
/// the reload).
pub const RELOAD_S: f64 = 1.0;

/// The numbers of the line the checks' slack comes from.
#[derive(Debug, Clone, Copy)]
pub struct LineSetup {
    /// The longest gap between one shopper's two polls.
    pub poll_s: f64,
}

impl LineSetup {
    pub fn of(scenario: &Scenario) -> Self {
        Self {
            poll_s: f64::from(scenario.gateway.poll_max_s) + 0.25 + 1.0,
        }
    }
}

/// Fewest pre-queue admissions that make the draw's check mean something.
pub const DRAWN_ADMITTED_MIN: usize = 20;

pub fn checks(e: &EventSetup, line: LineSetup, seen: &EventSeen) -> Vec<Check> {
    vec![
        not_open_check(e, seen),
        draw_check(seen),
        message_check(e, line, seen),
        close_check(e, seen),
    ]
}

fn not_open_check(e: &EventSetup, seen: &EventSeen) -> Check {
    let opens = e.prequeue_after_s as f64;
    let mut v: Vec<String> = seen
        .tickets_s
        .iter()
        .filter(|&&t| t < opens)
        .map(|t| format!("a ticket at {t:.2} s, before prequeue_at ({opens} s)"))
        .collect();
    v.extend(
        seen.not_open_s
            .iter()
            .filter(|&&t| t > opens + EDGE_SLACK_S)
            .map(|t| format!("503 not_open at {t:.2} s, after prequeue_at ({opens} s)")),
    );
    if seen.not_open_s.is_empty() {
        v.push("no join came before prequeue_at: the scenario does not test it".into());
    }
    Check::new(
        "event: not open before prequeue_at",
        v,
        format!(
            "{} joins answered 503 not_open, the first ticket at {}",
            seen.not_open_s.len(),
            seen.tickets_s
                .iter()
                .copied()
                .reduce(f64::min)
                .map_or("–".into(), |t| format!("{t:.2} s")),
        ),
    )
}

/// `order[place] = arrival number`, as `docs/waiting-room.md` ("Fair
/// start") publishes it: a Fisher–Yates shuffle whose numbers are
/// SHA-256(seed ‖ i as 8-byte big-endian), first 8 bytes mod (i + 1).
pub fn draw_order(seed: &[u8], n: u32) -> Vec<u32> {
    let mut order: Vec<u32> = (0..n).collect();
    for i in (1..n).rev() {
        let h = Sha256::new()
            .chain_update(seed)
            .chain_update(u64::from(i).to_be_bytes())
            .finalize();
        let j = u64::from_be_bytes(h[..8].try_into().expect("8 bytes")) % (u64::from(i) + 1);
        order.swap(i as usize, j as usize);
    }
    order
}

fn draw_check(seen: &EventSeen) -> Check {
    const NAME: &str = "event: the opening draw, recomputed";
    let Some((commitment, seed, entrants)) = &seen.draw else {
        return Check::new(NAME, vec!["no draw was published".into()], String::new());
    };
    let Some(seed) = seed else {
        return Check::new(
            NAME,
            vec!["the seed was never revealed".into()],
            String::new(),
        );
    };
    let mut v = Vec::new();
    let Ok(seed_bytes) = hex::decode(seed) else {
        return Check::new(
            NAME,
            vec![format!("the seed {seed:?} is not hex")],
            String::new(),
        );
    };
    if hex::encode(Sha256::digest(&seed_bytes)) != *commitment {
        v.push(format!(
            "SHA-256 of the seed is not the commitment {commitment}"
        ));
    }
    let mut seqs = seen.pre_queue_seqs.clone();
    seqs.sort_unstable();
    seqs.dedup();
    if seqs.len() as u64 != *entrants {
        v.push(format!(
            "{entrants} entrants published, {} pre-queue tickets given to shoppers",
            seqs.len()
        ));
    }
    let n = u32::try_from(*entrants).unwrap_or(u32::MAX);
    let order = draw_order(&seed_bytes, n);
    let mut place_of = vec![u32::MAX; order.len()];
    for (place, &arrival) in order.iter().enumerate() {
        place_of[arrival as usize] = place as u32;
    }
    // (drawn place, seq, released after, released by), in drawn order.
    let mut admitted: Vec<(u32, u64, f64, f64)> = seen
        .pre_queue_admitted
        .iter()
        .filter_map(|&(seq, (after, by))| {
            let place = *place_of.get(usize::try_from(seq).ok()?)?;
            Some((place, seq, after, by))
        })
        .collect();
    admitted.sort_by_key(|a| a.0);
    // For each place, the earliest "released by" among the places drawn
    // after it: if that is before this place's "released after", a later
    // place surely went first.
    let mut later_first: Option<(f64, usize)> = None;
    let mut out_of_order = 0;
    for i in (0..admitted.len()).rev() {
        let (place, seq, after, by) = admitted[i];
        if let Some((first_by, k)) = later_first {
            if first_by < after {
                out_of_order += 1;
                let (later_place, later_seq, _, _) = admitted[k];
                v.push(format!(
                    "pre-queue ticket {seq} (drawn place {place}) was still waiting at {after:.2} s, \
                     when ticket {later_seq} (drawn place {later_place}) had its pass already ({first_by:.2} s)"
                ));
            }
        }
        if later_first.is_none_or(|(t, _)| by < t) {
            later_first = Some((by, i));
        }
    }
    if admitted.len() < DRAWN_ADMITTED_MIN {
        v.push(format!(
            "{} pre-queue shoppers let in: too few to check the draw's order (at least {DRAWN_ADMITTED_MIN})",
            admitted.len()
        ));
    }
    Check::new(
        NAME,
        v,
        format!(
            "{entrants} entrants, {} let in, {out_of_order} let in ahead of an earlier-drawn place",
            admitted.len()
        ),
    )
}

fn message_check(e: &EventSetup, line: LineSetup, seen: &EventSeen) -> Check {
    let within = line.poll_s + RELOAD_S + EDGE_SLACK_S;
    let mut v = Vec::new();
    let mut before = e.message.clone().unwrap_or_default();
    for (at, message) in &seen.messages_set {
        match seen.messages.get(message) {
            None => v.push(format!("{message:?} (set at {at:.1} s) was never shown")),
            Some(&(first, _)) if first > at + within => v.push(format!(
                "{message:?} (set at {at:.1} s) first shown at {first:.1} s, later than {within:.1} s"
            )),
            _ => {}
        }
        if let Some(&(_, last)) = seen.messages.get(&before) {
            if last > at + within {
                v.push(format!(
                    "{before:?} still shown at {last:.1} s, replaced at {at:.1} s"
                ));
            }
        }
        before.clone_from(message);
    }
    if seen.messages_set.is_empty() {
        v.push("no message was changed: the scenario does not test it".into());
    }
    Check::new(
        "event: the message changed live",
        v,
        format!(
            "{} messages set, shown within {within:.1} s",
            seen.messages_set.len()
        ),
    )
}

fn close_check(e: &EventSetup, seen: &EventSeen) -> Check {
    let closes = e.closes_after_s as f64 + EDGE_SLACK_S;
    let mut v: Vec<String> = seen
        .tickets_s
        .iter()
        .filter(|&&t| t > closes)
        .map(|t| format!("a ticket at {t:.2} s, after closes_at"))
        .collect();
    v.extend(
        seen.admitted_s
            .iter()
            .filter(|&&(after, _)| after > closes)
            .map(|(after, by)| {
                format!("a place released after closes_at let in: still waiting at {after:.2} s, pass at {by:.2} s")
            }),
    );
    if seen.closed_joins + seen.told_closed == 0 {
        v.push("nobody met the close: the scenario does not test it".into());
    }
    Check::new(
        "event: closed at closes_at",
        v,
        format!(
            "{} joins answered 410 event_closed, {} shoppers in line told closed",
            seen.closed_joins, seen.told_closed
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_draw_is_the_published_algorithm() {
        // The gateway's own unit tests pin the same order for this seed
        // (sluice_admission::fair_start); here it is re-done from the text.
        let seed = [7u8; 32];
        let order = draw_order(&seed, 50);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        assert_ne!(order, (0..50).collect::<Vec<_>>());
        assert_eq!(draw_order(&seed, 1), vec![0]);
    }

    fn drawn(n: u32, admitted_in_draw_order: bool) -> EventSeen {
        let seed = [9u8; 32];
        let order = draw_order(&seed, n);
        // Released one every 0.1 s; each collected within a 2 s poll.
        let released = |k: usize| (k as f64 * 0.1 - 1.5, k as f64 * 0.1 + 0.5);
        let admitted: Vec<(u64, (f64, f64))> = if admitted_in_draw_order {
            order
                .iter()
                .enumerate()
                .map(|(p, &a)| (u64::from(a), released(p)))
                .collect()
        } else {
            (0..n)
                .map(|a| (u64::from(a), released(a as usize)))
                .collect()
        };
        EventSeen {
            pre_queue_seqs: (0..u64::from(n)).collect(),
            pre_queue_admitted: admitted,
            draw: Some((
                hex::encode(Sha256::digest(seed)),
                Some(hex::encode(seed)),
                u64::from(n),
            )),
            ..EventSeen::default()
        }
    }

    #[test]
    fn the_draw_check_tells_the_draw_from_arrival_order() {
        let drawn_order = draw_check(&drawn(100, true));
        assert_eq!(drawn_order.result, "pass", "{:?}", drawn_order.violations);
        let fifo = draw_check(&drawn(100, false));
        assert_eq!(fifo.result, "fail", "{:?}", fifo.violations);
        // A seed that is not the commitment's.
        let mut lied = drawn(100, true);
        lied.draw.as_mut().unwrap().0 = "00".repeat(32);
        assert_eq!(draw_check(&lied).result, "fail");
    }
}
