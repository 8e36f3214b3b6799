//! What the room answers: to a join, to a poll, to a release pass.

use thiserror::Error;

use crate::ticket_id::TicketId;
use crate::tokens::{Claims, TokenType};

/// Where a waiting person stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// 1 for the next person to be let in.
    pub position: u64,
    /// Live people in front.
    pub ahead: u64,
    pub estimated_wait_s: u64,
    /// Do not ask again sooner than this.
    pub poll_after_s: u32,
    /// When the ticket stops holding the place (unix seconds).
    pub expires_at_s: u64,
}

/// A fair-start ticket before the opening: no place yet, only a promise of
/// a fair draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreQueue {
    pub opens_at_ms: u64,
    /// Tickets in the pre-queue so far.
    pub entrants: u64,
    pub poll_after_s: u32,
    pub expires_at_s: u64,
}

/// A released ticket: the pass to mint (the same every time it is asked
/// for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    pub seq: u64,
    pub ticket_id: TicketId,
    /// Which pass of the room this is (1 for the first): the order in
    /// which places were released, finer than `issued_at_s`.
    pub number: u64,
    pub issued_at_s: u64,
    pub expires_at_s: u64,
}

impl Admitted {
    /// The claims of the pass.
    pub fn claims(&self, room: &str) -> Claims {
        Claims::new(
            TokenType::Pass,
            room,
            &self.ticket_id.to_string(),
            self.seq,
            self.issued_at_s,
            self.expires_at_s,
        )
    }
}

/// The answer to a poll (and part of the answer to a join).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Waiting(Wait),
    PreQueue(PreQueue),
    /// The kill switch is on: still in line, nobody is let in.
    Paused(Wait),
    Admitted(Admitted),
    /// Gone from the line: too old, idle too long, or its pass has ended.
    Expired,
    SoldOut,
}

impl Status {
    /// The contract's `state` value.
    pub fn state(&self) -> &'static str {
        match self {
            Status::Waiting(_) | Status::PreQueue(_) => "waiting",
            Status::Paused(_) => "paused",
            Status::Admitted(_) => "admitted",
            Status::Expired => "expired",
            Status::SoldOut => "sold_out",
        }
    }
}

/// A new ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Joined {
    pub seq: u64,
    pub ticket_id: TicketId,
    pub issued_at_s: u64,
    pub expires_at_s: u64,
    /// `Waiting` or `PreQueue`.
    pub status: Status,
}

impl Joined {
    /// The claims of the ticket.
    pub fn claims(&self, room: &str) -> Claims {
        Claims::new(
            TokenType::Ticket,
            room,
            &self.ticket_id.to_string(),
            self.seq,
            self.issued_at_s,
            self.expires_at_s,
        )
    }
}

/// Why a join was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum JoinError {
    /// `503 queue_full`.
    #[error("the queue is full")]
    QueueFull { retry_after_s: u64 },
    /// `503 admissions_paused`.
    #[error("admissions are paused")]
    Paused { retry_after_s: u64 },
    /// `410 sold_out`.
    #[error("sold out")]
    SoldOut,
    /// `503 store_unavailable`: the join could not be kept.
    #[error("the room's store is unavailable")]
    StoreUnavailable { retry_after_s: u64 },
    /// `429 rate_limited`: the client joined more than its limit (the
    /// fleet's, counted in the store; a single gateway refuses before the
    /// room sees the join).
    #[error("too many joins from this client")]
    RateLimited { retry_after_s: u64 },
}

/// Why a poll was not answered with a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum PollError {
    /// `429 rate_limited`.
    #[error("polled sooner than told")]
    TooEarly { retry_after_s: u64 },
    /// `401 invalid_ticket`: a place this room never gave out (or gave out
    /// before a restart).
    #[error("no such ticket in this room")]
    UnknownTicket,
}

/// Why a release pass stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Nobody left to release.
    CaughtUp,
    /// The rate limit is spent for now.
    RateLimited,
    /// `max_active` passes are valid.
    Full,
    /// The pass examined `limit` places.
    StepLimit,
    Paused,
    SoldOut,
    /// Fair start: the room has not opened yet.
    NotOpen,
    /// The room's changes cannot be kept right now: nobody is released.
    StoreUnavailable,
}

/// What one release pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseOutcome {
    /// Passes minted.
    pub released: u32,
    /// Places passed over without spending capacity (gone).
    pub skipped: u32,
    /// Passes that ran out and freed their slot.
    pub expired_passes: u32,
    pub stop: Stop,
}
