//! The routes of a room on the fleet's shared line: `join` (batched into
//! one store call with the joins around it) and `status` (from the shared
//! numbers in memory; the store is asked only to collect a released
//! place's pass). The answers are the embedded room's, in the same JSON.

use std::net::IpAddr;

use http::HeaderMap;
use sluice_admission::fleet::{self as decide, PollDecision, Presented};
use sluice_admission::join_limiter::ClientKey;
use sluice_admission::tokens::Claims;
use sluice_admission::{JoinError, Joined, Status, TicketId, Wait};
use sluice_policies::Config;

use super::SharedRoom;
use crate::error::{ApiError, ErrorCode};
use crate::metrics::Metrics;
use crate::queue::{
    bearer, cookie, invalid_ticket, join_refused, limit_join, too_early, RoomEntry, Rooms,
    TICKET_COOKIE,
};
use crate::response::LocalResponse;

/// What a fleet's config must hold beyond a single gateway's.
pub fn check_config(config: &Config) -> Result<(), String> {
    if config.keys.is_empty() {
        return Err(
            "[cluster] redis_url: every gateway of a fleet signs and checks the \
                    same tickets and passes, so the config must list its [[keys]] \
                    (the same on every gateway; `sluice keygen` makes one)"
                .into(),
        );
    }
    // One line for the fleet but a stock per gateway would sell the stock
    // once per gateway: a fleet that sells keeps its stock and orders on
    // the shared PostgreSQL (tests of the line alone opt in).
    let knobs =
        std::env::var(sluice_policies::validate::ALLOW_TEST_KNOBS_ENV).as_deref() == Ok("1");
    if !config.products.is_empty() && config.cluster.postgres_url.is_none() && !knobs {
        return Err(format!(
            "[cluster] redis_url with [[products]] needs [cluster] postgres_url (or \
             postgres_url_env): the rooms would be one line for the fleet but each gateway \
             would sell its own stock from its data_dir, so N gateways would sell the stock \
             N times; refused (set {}=1 to run a fleet's line alone, for tests)",
            sluice_policies::validate::ALLOW_TEST_KNOBS_ENV
        ));
    }
    if let Some(room) = config.rooms.iter().find(|r| r.opens_at_unix.is_some()) {
        return Err(format!(
            "room {:?}: a fair start (opens_at) is not built for rooms on [cluster] \
             redis_url yet; leave opens_at out",
            room.name
        ));
    }
    Ok(())
}

/// The presented ticket of `claims`, if its `sub` is a ticket id.
fn presented(claims: &Claims) -> Option<Presented> {
    Some(Presented {
        seq: claims.seq,
        ticket_id: TicketId::parse(&claims.sub)?,
        expires_at_s: claims.exp,
    })
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

impl Rooms {
    /// The status of a verified ticket: from memory, or the pass;
    /// `Err(retry_after_s)` for a waiting ticket asking sooner than told.
    async fn shared_decide(
        &self,
        shared: &SharedRoom,
        ticket: &Presented,
        now: u64,
    ) -> Result<Status, u64> {
        // A pass already collected is shown again from memory, also while
        // the store is away: passes already issued keep working.
        if let Some(known) = shared.known_claim(ticket.seq) {
            return Ok(decide::claimed(ticket, known, &shared.policy()));
        }
        match shared.decide_poll(ticket, now) {
            PollDecision::Answer(status) => {
                shared.on_time(ticket.seq, &status, now)?;
                Ok(status)
            }
            PollDecision::Claim => {
                let status = match shared.claim(ticket.seq).await {
                    Ok(reply) => decide::claimed(ticket, reply, &shared.policy()),
                    Err(e) => {
                        tracing::debug!(room = shared.name(), "pass not collected: {e}");
                        held_at_front(shared, ticket)
                    }
                };
                // A released place collects its pass whenever it asks; one
                // told to wait at the front (no slot free yet) is held to
                // the time it was told, as a waiting one is.
                shared.on_time(ticket.seq, &status, now)?;
                Ok(status)
            }
        }
    }

    pub(in crate::queue) async fn shared_join(
        &self,
        room: &str,
        entry: &RoomEntry,
        shared: &SharedRoom,
        headers: &HeaderMap,
        client: Option<IpAddr>,
        now: u64,
    ) -> LocalResponse {
        // One browser keeps one ticket: a live ticket comes back as it is.
        if let Some(token) = cookie(headers, TICKET_COOKIE).or_else(|| bearer(headers)) {
            let verified =
                self.keyring
                    .load()
                    .verify(token, &entry.expect_ticket(room), now / 1000);
            if let Some((claims, ticket)) =
                verified.ok().and_then(|c| presented(&c).map(|t| (c, t)))
            {
                match self.shared_decide(shared, &ticket, now).await {
                    Ok(Status::Expired | Status::SoldOut) => {}
                    Ok(status) => {
                        return self.ticket_answer(room, token, &claims, status, now, true)
                    }
                    // Rejoining sooner than told is an early poll: same
                    // answer as the status route.
                    Err(retry_after_s) => return too_early(retry_after_s),
                }
            }
        }
        // This gateway's own limit first (a client over it here is over it
        // for the fleet too), then the fleet's, counted in the store.
        if let Some(refused) = limit_join(entry, client) {
            return refused;
        }
        let seq = match shared.join(client.map(ClientKey::from_ip)).await {
            Ok(seq) => seq,
            Err(e) => {
                if matches!(e, JoinError::RateLimited { .. }) {
                    entry.count_rate_limited_join();
                }
                return join_refused(e);
            }
        };
        let mut id = [0u8; 16];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut id);
        let ticket_id = TicketId::parse(&hex::encode(id)).expect("32 hex digits");
        let issued_at_s = now / 1000;
        let ticket = Presented {
            seq,
            ticket_id,
            expires_at_s: issued_at_s + shared.policy().ticket_ttl.as_secs(),
        };
        let status = match shared.decide_poll(&ticket, now) {
            PollDecision::Answer(status) => status,
            // Released already: the first poll collects the pass.
            PollDecision::Claim => held_at_front(shared, &ticket),
        };
        // A new place: its first poll is timed from this answer.
        let _ = shared.on_time(seq, &status, now);
        let joined = Joined {
            seq,
            ticket_id,
            issued_at_s,
            expires_at_s: ticket.expires_at_s,
            status,
        };
        let claims = joined.claims(room);
        match self.keyring.load().sign(&claims) {
            Ok(token) => self.ticket_answer(room, &token, &claims, joined.status, now, true),
            Err(_) => LocalResponse::error(&ApiError::new(
                ErrorCode::Internal,
                "The ticket could not be signed.",
            )),
        }
    }

    pub(in crate::queue) async fn shared_status(
        &self,
        room: &str,
        entry: &RoomEntry,
        shared: &SharedRoom,
        headers: &HeaderMap,
        now: u64,
        metrics: &Metrics,
    ) -> LocalResponse {
        let invalid = |reason: &str| invalid_ticket(metrics, room, reason);
        let (token, claims) = match self.verified_ticket(room, entry, headers, now, metrics) {
            Ok(verified) => verified,
            Err(refused) => return refused,
        };
        let Some(ticket) = presented(&claims) else {
            return invalid("malformed");
        };
        match self.shared_decide(shared, &ticket, now).await {
            Ok(status) => self.ticket_answer(room, token, &claims, status, now, false),
            Err(retry_after_s) => too_early(retry_after_s),
        }
    }
}
