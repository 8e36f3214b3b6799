//! At most a few order calls in flight per pass on this gateway.
//!
//! A shopper needs one checkout at a time, and perhaps a read of its order
//! beside it. Without a bound, one admitted pass looping on `POST
//! /checkout` with fresh keys (or on `GET /orders/…`) holds every permit
//! of the bounded pools, so the other admitted shoppers are answered
//! `503 overloaded` and, counted as the backend failing, drag the
//! adaptive release rate down for everyone. The gate refuses a pass's
//! call beyond [`PASS_CALLS_IN_FLIGHT_MAX`] at once, before it reaches a
//! pool (`429 rate_limited`, `Retry-After: 1`), and that refusal counts
//! for nothing else.
//!
//! Per gateway: a pass spread over a fleet gets this many calls per
//! gateway, each still bounded by its gateway's pools. The map holds only
//! passes with a call in flight, so it is bounded by the requests being
//! served.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Order calls (checkout, order read, cancel) one pass may have in flight
/// on one gateway at once.
pub const PASS_CALLS_IN_FLIGHT_MAX: u8 = 2;

/// The calls in flight per pass subject.
#[derive(Debug, Default, Clone)]
pub struct SubjectGate {
    in_flight: Arc<Mutex<HashMap<String, u8>>>,
}

/// A call admitted by the gate; its place is given back when dropped
/// (answered, or the client hung up and the handler's future was dropped).
#[derive(Debug)]
pub struct SubjectCall {
    gate: SubjectGate,
    subject: String,
}

impl SubjectGate {
    /// A place for one more call of `subject`, or `None` when it already
    /// has [`PASS_CALLS_IN_FLIGHT_MAX`] in flight.
    pub fn enter(&self, subject: &str) -> Option<SubjectCall> {
        let mut in_flight = self.lock();
        let n = in_flight.entry(subject.to_owned()).or_insert(0);
        if *n >= PASS_CALLS_IN_FLIGHT_MAX {
            return None;
        }
        *n += 1;
        Some(SubjectCall {
            gate: self.clone(),
            subject: subject.to_owned(),
        })
    }

    /// Passes with a call in flight now.
    #[cfg(test)]
    fn passes(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u8>> {
        // A panic while holding this lock leaves only counts behind.
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for SubjectCall {
    fn drop(&mut self) {
        let mut in_flight = self.gate.lock();
        if let Some(n) = in_flight.get_mut(&self.subject) {
            *n -= 1;
            if *n == 0 {
                in_flight.remove(&self.subject);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_gets_its_calls_and_no_more_and_each_answer_frees_one() {
        let gate = SubjectGate::default();
        let first = gate.enter("drop/a").expect("first");
        let second = gate.enter("drop/a").expect("second");
        assert!(gate.enter("drop/a").is_none(), "a third at once");
        // Another pass is not held back by this one.
        let other = gate.enter("drop/b").expect("another pass");
        drop(first);
        let third = gate.enter("drop/a").expect("one freed");
        assert!(gate.enter("drop/a").is_none());
        drop((second, third, other));
        assert_eq!(gate.passes(), 0, "nothing kept once answered");
    }
}
