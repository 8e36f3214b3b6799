//! A fleet room's fair start (`opens_at`): the draw the store holds, as
//! this gateway last read it, and where a ticket stands by it.
//!
//! Every tick of a room with an opening first calls `sluice_7_draw` (see
//! `sluice.lua`): with the draw this gateway saw (so a Redis that lost the
//! room gets the same one back), or, before it saw one, a seed of its own
//! (the first stored stands). The store freezes the pre-queue at the
//! opening by its own clock and the tick releases nobody before; what a
//! ticket's place is comes from [`sluice_admission::fleet_draw`], the same
//! draw one gateway makes ([`sluice_admission::fair_start`]). The seed is
//! shown (`draw_seed`) only once the store says the pre-queue is frozen.

use std::sync::Arc;

use arc_swap::ArcSwap;
use sluice_admission::fair_start::{commitment, poll_before_opening_s, FairStartInfo};
use sluice_admission::fleet_draw::{pre_queue_status, Drawn, Located, StoredDraw};
use sluice_admission::Status;

use super::redis::CALL_TIMEOUT;
use super::SharedRoom;

/// How long before the opening (by the store's clock, as measured here)
/// a pre-queue answer reads the draw again first: more than the clock
/// offset's error.
const OPENING_MARGIN_MS: i64 = 200;

/// A room's draw as this gateway knows it.
pub(super) struct DrawState {
    /// The opening the config gives (unix ms); `None`: no fair start.
    opens_at_ms: Option<u64>,
    /// This gateway's proposal, until it has seen the stored draw.
    own_seed: [u8; 32],
    /// The stored draw, as last read.
    seen: ArcSwap<Option<Arc<Drawn>>>,
    /// Held while the draw is read and its places computed: one read at a
    /// time per room, so the tick and a storm of pre-queue answers at the
    /// opening share one instead of each calling Redis and drawing (and a
    /// reply read before the freeze is never stored after one read after).
    reading: tokio::sync::Mutex<()>,
}

impl DrawState {
    pub(super) fn new(opens_at_ms: Option<u64>) -> Self {
        let mut own_seed = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut own_seed);
        Self {
            opens_at_ms,
            own_seed,
            seen: ArcSwap::from_pointee(None),
            reading: tokio::sync::Mutex::new(()),
        }
    }

    fn seen(&self) -> Option<Arc<Drawn>> {
        self.seen.load().as_ref().clone()
    }
}

/// `sluice_7_draw`'s arguments for what this gateway knows.
fn draw_args(
    opens_at_ms: u64,
    own_seed: &[u8; 32],
    seen: Option<&Drawn>,
    hw_next: u64,
) -> Vec<String> {
    let (first, seed, entrants) = match seen {
        Some(d) => (
            d.stored.first.to_string(),
            d.stored.seed,
            d.stored.entrants.map(|n| n.to_string()).unwrap_or_default(),
        ),
        None => (String::new(), *own_seed, String::new()),
    };
    vec![
        opens_at_ms.to_string(),
        first,
        hex::encode(seed),
        hex::encode(commitment(&seed)),
        entrants,
        hw_next.to_string(),
    ]
}

/// The stored draw from `sluice_7_draw`'s answer.
fn parse_reply(r: &[String]) -> Result<StoredDraw, String> {
    let [opens, first, seed, commit, entrants, _now] = r else {
        return Err(format!("sluice_7_draw gave {} items", r.len()));
    };
    let number = |v: &str| {
        v.parse::<u64>()
            .map_err(|_| format!("sluice_7_draw gave {r:?}"))
    };
    let entrants = if entrants.is_empty() {
        None
    } else {
        Some(number(entrants)?)
    };
    StoredDraw::parse(number(opens)?, number(first)?, seed, commit, entrants)
        .map_err(|e| format!("the room's stored draw: {e}"))
}

impl SharedRoom {
    /// Every tick of a room with a fair start: pushes the draw this gateway
    /// saw (or proposes one) and reads the stored one back.
    pub(super) async fn draw_once(&self) {
        let Some(opens_at_ms) = self.draw.opens_at_ms else {
            return;
        };
        let _one_at_a_time = self.draw.reading.lock().await;
        let seen = self.draw.seen();
        let hw_next = self.hw_next.load(std::sync::atomic::Ordering::Relaxed);
        let args = draw_args(opens_at_ms, &self.draw.own_seed, seen.as_deref(), hw_next);
        let key = super::redis::keys(&self.name)[0].clone();
        let redis = self.fleet.redis.clone();
        let call = async move {
            let mut conn = redis.connection().await.map_err(|e| e.to_string())?;
            let mut cmd = ::redis::cmd("FCALL");
            cmd.arg("sluice_7_draw").arg(1).arg(key).arg(&args);
            cmd.query_async::<Vec<String>>(&mut conn)
                .await
                .map_err(|e| e.to_string())
        };
        let reply = match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => return tracing::debug!(room = self.name, "draw not read: {e}"),
            Err(_) => return tracing::debug!(room = self.name, "draw not read: timed out"),
        };
        let stored = match parse_reply(&reply) {
            Ok(stored) => stored,
            Err(e) => return tracing::error!(room = self.name, "{e}"),
        };
        if seen.as_ref().is_some_and(|d| d.stored == stored) {
            return;
        }
        if let Some(before) = &seen {
            if before.stored.seed != stored.seed || before.stored.first != stored.first {
                // Only after Redis lost the room with no gateway that had
                // seen its draw calling first (see `sluice.lua`).
                tracing::warn!(
                    room = self.name,
                    "the room's stored draw changed (its commitment is now {})",
                    hex::encode(commitment(&stored.seed))
                );
            }
        }
        if let Some(entrants) = stored
            .entrants
            .filter(|_| !seen.as_ref().is_some_and(|d| d.opened()))
        {
            tracing::info!(
                room = self.name,
                entrants,
                seed = hex::encode(stored.seed),
                "the fair start's pre-queue is frozen: the draw is revealed"
            );
        }
        // A million entrants take a moment to draw: not on this runtime's
        // one worker.
        match tokio::task::spawn_blocking(move || Drawn::new(stored)).await {
            Ok(drawn) => self.draw.seen.store(Arc::new(Some(Arc::new(drawn)))),
            Err(e) => tracing::error!(room = self.name, "the draw's places: {e}"),
        }
    }

    /// Where ticket `seq` stands: its place, or in the pre-queue (a room
    /// with a fair start whose draw this gateway has not read yet, or has
    /// read not frozen yet).
    pub fn locate(&self, seq: u64) -> Located {
        if self.draw.opens_at_ms.is_none() {
            return Located::Place(seq);
        }
        match self.draw.seen() {
            Some(drawn) => drawn.locate(seq),
            None => Located::PreQueue,
        }
    }

    /// [`Self::locate`], exact at the opening: from [`OPENING_MARGIN_MS`]
    /// before the opening (the store's clock, as this gateway measures it)
    /// until it has seen the pre-queue frozen, a ticket that would be told
    /// it is in the pre-queue has the draw read again first (on the
    /// fleet's runtime): a seq given after the store froze the pre-queue is
    /// never told it is in it, nor counted in its entrants.
    pub async fn locate_now(self: &Arc<Self>, seq: u64, now_ms: u64) -> Located {
        let located = self.locate(seq);
        let Some(opens_at_ms) = self.draw.opens_at_ms else {
            return located;
        };
        let store_now_ms = now_ms as i64 + self.fleet.clock_offset_ms().unwrap_or(0);
        if located != Located::PreQueue || store_now_ms + OPENING_MARGIN_MS < opens_at_ms as i64 {
            return located;
        }
        let room = self.clone();
        let _ = self
            .fleet
            .rt
            .spawn(async move {
                // A read already under way answers this one too: wait for
                // it rather than queue a read of one's own behind it.
                if room.draw.reading.try_lock().is_err() {
                    let _ = room.draw.reading.lock().await;
                } else {
                    room.draw_once().await;
                }
            })
            .await;
        self.locate(seq)
    }

    /// The answer to pre-queue ticket `seq` at `now_ms` (the entrants
    /// counted at least up to it: the shared numbers may be a tick old).
    pub fn pre_queue_status(&self, seq: u64, now_ms: u64) -> Status {
        let policy = self.policy();
        let info = self.fair_start();
        let opens_at_ms = info
            .as_ref()
            .map(|i| i.opens_at_ms)
            .or(self.draw.opens_at_ms)
            .unwrap_or(now_ms);
        let poll = poll_before_opening_s(
            now_ms,
            opens_at_ms,
            policy.poll_min.as_secs() as u8,
            policy.poll_max.as_secs() as u8,
            &mut rand::rng(),
        );
        let first = self.draw.seen().map_or(0, |d| d.stored.first);
        let entrants = info
            .map_or(0, |i| i.entrants)
            .max((seq + 1).saturating_sub(first));
        pre_queue_status(opens_at_ms, entrants, poll, policy.ticket_ttl.as_secs())
    }

    /// What the room publishes about its draw, once read.
    pub fn fair_start(&self) -> Option<FairStartInfo> {
        self.draw.seen().map(|d| d.info(self.numbers().next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gateway_pushes_the_draw_it_saw_and_proposes_its_own_before() {
        let own = [1u8; 32];
        let args = draw_args(5_000, &own, None, 7);
        assert_eq!(args[1], "", "no first seq known");
        assert_eq!(args[2], hex::encode(own));
        assert_eq!(args[3], hex::encode(commitment(&own)));
        assert_eq!(args[4], "");
        let seed = [2u8; 32];
        let stored = StoredDraw::parse(
            5_000,
            3,
            &hex::encode(seed),
            &hex::encode(commitment(&seed)),
            Some(9),
        )
        .unwrap();
        let args = draw_args(5_000, &own, Some(&Drawn::new(stored.clone())), 12);
        assert_eq!(
            args,
            vec![
                "5000",
                "3",
                &hex::encode(seed),
                &hex::encode(commitment(&seed)),
                "9",
                "12"
            ]
        );
        let reply: Vec<String> = [
            "5000",
            "3",
            &hex::encode(seed),
            &hex::encode(commitment(&seed)),
            "9",
            "1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(parse_reply(&reply), Ok(stored));
        let mut bad = reply.clone();
        bad[3] = hex::encode(commitment(&own));
        assert!(parse_reply(&bad).unwrap_err().contains("commitment"));
    }
}
