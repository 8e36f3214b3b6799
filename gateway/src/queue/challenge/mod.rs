//! The join challenge of a room (`[rooms.challenge]`) over HTTP:
//! `GET /queue/{room}/challenge` (kind `pow`), and the check a join passes
//! after the door and the per-client limit, before it asks the room for a
//! place (`contract.md`, "People and events").
//!
//! - [`body`]: the join body's challenge fields;
//! - [`record`]: where a room keeps which challenges were spent (this
//!   process's [`record::LocalRecord`], or the fleet's in Redis,
//!   `super::fleet::challenge`) and the join rate the adaptive difficulty
//!   reads;
//! - [`siteverify`]: the Turnstile / hCaptcha / reCAPTCHA verifier call;
//! - [`answer`]: the JSON of a challenge and of `401 challenge_required`.
//!
//! The decisions are `sluice_admission::challenge`'s plain functions:
//! `verify_join` (shape, signature, room, expiry, work), `decide_spend`
//! (once, fleet-wide; the same solution again answers the same place) and
//! `bits_now` (the adaptive law). A challenge is spent only by a join that
//! got a place: [`Passed::Reserved`] is confirmed with the place, or given
//! back when the room refused the join.

pub mod answer;
pub mod body;
pub mod record;
pub mod siteverify;

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use sluice_admission::challenge::{
    bits_now, decide_spend, verify_join, ChallengeError, ChallengeKeys, JoinRate, SpendDecision,
    SpentBy,
};
use sluice_admission::TicketId;
use sluice_policies::model::{Challenge, OnVerifierError, Room};

use crate::error::{ApiError, ErrorCode};
use crate::response::LocalResponse;
use body::JoinFields;
use record::{Reserved, SpendRecord};
use siteverify::{Verdict, Verifier};

/// A join body is a few short fields; more is refused `413`.
pub const JOIN_BODY_BYTES_MAX: usize = 8 * 1024;

/// A room's challenge: its settings in force, the record of spent ones,
/// the join rate, and what it refused (for `sluice_queue_joins_total`).
pub struct ChallengeGate {
    settings: ArcSwap<Challenge>,
    record: Box<dyn SpendRecord>,
    /// This gateway's joins that reached the challenge, by second.
    rate: Mutex<JoinRate>,
    verifier: ArcSwap<Option<Arc<Verifier>>>,
    pub(crate) required: AtomicU64,
    pub(crate) failed: AtomicU64,
}

/// What a join may do after the challenge.
pub enum Passed {
    /// No challenge asked (or the verifier said yes): join.
    Open,
    /// A fresh challenge, held for this join: join, then
    /// [`ChallengeGate::spent_by`] with the place, or
    /// [`ChallengeGate::not_spent`].
    Reserved(Reserved),
    /// The same challenge and solution already got this place: answer it.
    SamePlace(SpentBy),
    /// Refused: the answer.
    Refused(LocalResponse),
}

impl ChallengeGate {
    pub fn new(room: &Room, record: Box<dyn SpendRecord>) -> Self {
        let gate = Self {
            settings: ArcSwap::from_pointee(Challenge::None),
            record,
            rate: Mutex::new(JoinRate::default()),
            verifier: ArcSwap::from_pointee(None),
            required: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        };
        gate.set(room);
        gate
    }

    /// Puts a (re)loaded room's `[rooms.challenge]` in force.
    pub fn set(&self, room: &Room) {
        let verifier = match &room.challenge {
            Challenge::SiteVerify(sv) => match self.verifier.load().as_ref() {
                Some(v) if v.config() == sv => Some(v.clone()),
                _ => Some(Arc::new(Verifier::new(sv.clone()))),
            },
            _ => None,
        };
        self.verifier.store(Arc::new(verifier));
        self.settings.store(Arc::new(room.challenge.clone()));
    }

    /// The room's `[rooms.challenge]` in force (the page renders it).
    pub fn settings(&self) -> Arc<Challenge> {
        self.settings.load_full()
    }

    /// The join rate the adaptive difficulty reads: the fleet's when the
    /// record counts one, else this gateway's.
    fn joins_per_second(&self, now_ms: u64) -> f64 {
        let local = self
            .rate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .in_window(now_ms);
        let joins = self.record.joins_in_window().unwrap_or(local).max(local);
        sluice_admission::challenge::rate::per_second(joins)
    }

    /// `GET /queue/{room}/challenge`: a fresh challenge (kind `pow`), or
    /// `404` for a room that asks none (or a widget's).
    pub fn issue(&self, room: &str, keys: &ChallengeKeys, now_ms: u64) -> LocalResponse {
        match self.settings.load().as_ref() {
            Challenge::Pow(pow) => {
                let bits = bits_now(&pow.difficulty, self.joins_per_second(now_ms));
                let issued = keys.issue(
                    room,
                    bits,
                    now_ms / 1000,
                    pow.ttl.as_secs(),
                    &mut rand::rng(),
                );
                answer::challenge(room, &issued)
            }
            _ => LocalResponse::error(&ApiError::new(
                ErrorCode::NotFound,
                "This waiting room asks no proof of work.",
            )),
        }
    }

    /// The challenge a join to `room` must pass, given its body's fields.
    pub async fn check(
        &self,
        room: &str,
        body: &[u8],
        client: Option<IpAddr>,
        keys: &ChallengeKeys,
        now_ms: u64,
    ) -> Passed {
        let settings = self.settings.load_full();
        if matches!(settings.as_ref(), Challenge::None) {
            return Passed::Open;
        }
        self.rate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(now_ms);
        self.record.count_join(now_ms);
        let fields = match JoinFields::read(body) {
            Ok(fields) => fields,
            Err(why) => return self.fail_malformed(why),
        };
        match settings.as_ref() {
            Challenge::None => Passed::Open,
            Challenge::Pow(_) => self.pow(room, &fields, keys, now_ms).await,
            Challenge::SiteVerify(_) => self.site(room, &fields, client).await,
        }
    }

    async fn pow(
        &self,
        room: &str,
        fields: &JoinFields,
        keys: &ChallengeKeys,
        now_ms: u64,
    ) -> Passed {
        let (challenge, solution) = match (&fields.challenge, &fields.solution) {
            (None, None) => {
                self.required.fetch_add(1, Ordering::Relaxed);
                let fresh = self.issue(room, keys, now_ms);
                return Passed::Refused(answer::required(fresh));
            }
            (Some(c), Some(s)) => (c, s),
            _ => {
                return self.fail_malformed("A join carries a challenge and its solution together.")
            }
        };
        let now_s = now_ms / 1000;
        let verified = match verify_join(keys, challenge, solution, room, now_s) {
            Ok(v) => v,
            Err(ChallengeError::Malformed) => {
                return self.fail_malformed("The challenge or its solution is malformed.")
            }
            Err(e) => return self.fail(e),
        };
        let nonce = verified.challenge.nonce;
        let expires_at_s = verified.challenge.expires_at_s;
        let held = self
            .record
            .reserve(nonce, verified.solution_tag, expires_at_s, now_ms)
            .await;
        let (already, reserved) = match held {
            Ok(r) => r,
            Err(refused) => return Passed::Refused(refused),
        };
        match decide_spend(already, verified.solution_tag) {
            SpendDecision::Fresh => match reserved {
                Some(r) => Passed::Reserved(r),
                None => Passed::Open,
            },
            SpendDecision::SamePlace(by) => Passed::SamePlace(by),
            SpendDecision::InFlight => Passed::Refused(LocalResponse::error(
                &ApiError::new(
                    ErrorCode::RateLimited,
                    "This join is still being answered; ask again in a moment.",
                )
                .retry_after(1),
            )),
            SpendDecision::Replayed => self.fail(ChallengeError::Replayed),
        }
    }

    async fn site(&self, room: &str, fields: &JoinFields, client: Option<IpAddr>) -> Passed {
        let verifier = self.verifier.load_full();
        let Some(verifier) = verifier.as_ref() else {
            return Passed::Open;
        };
        let Some(response) = &fields.challenge_response else {
            self.required.fetch_add(1, Ordering::Relaxed);
            return Passed::Refused(answer::required(answer::widget(room, verifier.config())));
        };
        match verifier.verify(response, client).await {
            Verdict::Yes => Passed::Open,
            Verdict::Busy => Passed::Refused(LocalResponse::error(
                &ApiError::new(
                    ErrorCode::Overloaded,
                    "Too many joins are being checked right now; please try again shortly.",
                )
                .retry_after(1),
            )),
            Verdict::No(why) => {
                tracing::debug!(room, why, "the challenge verifier said no");
                self.fail(ChallengeError::WrongSolution)
            }
            Verdict::Error(why) => match verifier.config().on_verifier_error {
                OnVerifierError::Admit => {
                    tracing::warn!(room, why, "challenge verifier failed; admitting per policy");
                    Passed::Open
                }
                OnVerifierError::Refuse => {
                    tracing::warn!(room, why, "challenge verifier failed; refusing per policy");
                    self.fail(ChallengeError::WrongSolution)
                }
            },
            Verdict::Malformed => self.fail_malformed("The challenge response is malformed."),
        }
    }

    /// The place (seq, ticket id, iat, exp) a reserved challenge's join got
    /// (a new one, or the account's own): the challenge is spent.
    pub async fn spent_by(&self, reserved: Reserved, place: (u64, TicketId, u64, u64)) {
        let (seq, ticket_id, issued_at_s, expires_at_s) = place;
        let by = SpentBy {
            seq,
            solution_tag: reserved.solution_tag,
            ticket_id: *ticket_id.as_bytes(),
            issued_at_s,
            expires_at_s,
        };
        self.record.confirm(reserved, by).await;
    }

    /// The room refused the join: the challenge is not spent.
    pub async fn not_spent(&self, reserved: Reserved) {
        self.record.release(reserved).await;
    }

    /// `403 challenge_failed`, counted.
    pub fn fail(&self, why: ChallengeError) -> Passed {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let message = match why {
            ChallengeError::Expired => "The challenge has expired; solve a new one.",
            ChallengeError::Replayed => "The challenge was already used; solve a new one.",
            _ => "The challenge was not passed; solve a new one.",
        };
        Passed::Refused(LocalResponse::error(&ApiError::new(
            ErrorCode::ChallengeFailed,
            message,
        )))
    }

    fn fail_malformed(&self, message: &str) -> Passed {
        self.failed.fetch_add(1, Ordering::Relaxed);
        Passed::Refused(LocalResponse::error(&ApiError::new(
            ErrorCode::BadRequest,
            message,
        )))
    }
}
