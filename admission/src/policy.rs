//! The numbers that govern one room, as plain values.

use std::num::NonZeroU32;
use std::time::Duration;

use sluice_policies::model::Room;
use thiserror::Error;

/// Per-ticket poll times are stored in one byte of seconds.
pub const POLL_SECONDS_MAX: u64 = 255;

/// How one room releases people. Built from the config's `[[rooms]]` by
/// [`Policy::from_room`], or by hand in tests; [`Policy::validate`] says
/// whether the numbers make sense together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// New admissions per second, at most (the long-run rate).
    pub release_per_second: NonZeroU32,
    /// Admissions allowed in one instant above the rate (bucket size).
    pub burst: NonZeroU32,
    /// Passes able to start a checkout at once, at most. A pass holds its
    /// slot until it can no longer start one (see [`crate::PassOrders`]).
    pub max_active: NonZeroU32,
    /// Checkouts one pass may start.
    pub max_orders_per_pass: NonZeroU32,
    /// Live waiting tickets, at most.
    pub queue_capacity: NonZeroU32,
    pub pass_ttl: Duration,
    pub ticket_ttl: Duration,
    /// A waiting ticket not polled for this long has left the queue.
    pub idle_timeout: Duration,
    /// `poll_after` for the people at the front.
    pub poll_min: Duration,
    /// `poll_after` for the people far back.
    pub poll_max: Duration,
    /// Fair start: joins before this instant (unix ms) go into a pre-queue
    /// that is drawn at random when the room opens.
    pub opens_at_ms: Option<u64>,
    /// A pass with no request and no checkout running for this long gives
    /// its slot back and is refused from then on; zero: never.
    pub pass_idle: Duration,
}

/// Why a policy cannot run.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PolicyError {
    #[error("poll_min must be at least 1 s and at most poll_max")]
    PollMin,
    #[error("poll_max must be at most {POLL_SECONDS_MAX} s")]
    PollMax,
    #[error(
        "idle_timeout must be at least twice poll_max, or live people would be counted as gone"
    )]
    IdleTimeout,
    #[error("pass_ttl and ticket_ttl must be at least 1 s")]
    Ttl,
}

impl Policy {
    /// The policy for a configured (already validated) room.
    pub fn from_room(room: &Room) -> Self {
        Self {
            release_per_second: room.release_per_second,
            burst: room.burst,
            max_active: room.max_active,
            max_orders_per_pass: room.max_orders_per_pass,
            queue_capacity: room.queue_capacity,
            pass_ttl: room.pass_ttl,
            ticket_ttl: room.ticket_ttl,
            idle_timeout: room.idle_timeout,
            poll_min: room.poll_min,
            poll_max: room.poll_max,
            opens_at_ms: room.opens_at_unix.map(|s| s.saturating_mul(1000)),
            pass_idle: room.pass_idle.unwrap_or(Duration::ZERO),
        }
    }

    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.poll_max.as_secs() > POLL_SECONDS_MAX {
            return Err(PolicyError::PollMax);
        }
        if self.poll_min.as_secs() < 1 || self.poll_min > self.poll_max {
            return Err(PolicyError::PollMin);
        }
        if self.idle_timeout < self.poll_max * 2 {
            return Err(PolicyError::IdleTimeout);
        }
        if self.pass_ttl.as_secs() < 1 || self.ticket_ttl.as_secs() < 1 {
            return Err(PolicyError::Ttl);
        }
        Ok(())
    }
}
