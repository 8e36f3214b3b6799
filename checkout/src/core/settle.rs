//! The payment state machine's one decision: what a definite outcome of an
//! attempt does to the order, its stock and the next attempt, as a plain
//! function ([`decide`]) of what the store read. Both back ends read the
//! same facts, call [`decide`] and apply the [`Settlement`] in their own
//! SQL (SQLite: `crate::backend::sqlite::settle`; PostgreSQL: `backend/postgres/settle.rs`),
//! so a payment rule is written here once.
//!
//! - authorize succeeded: a live order (still `authorizing`, its hold still
//!   held) gets a capture attempt, or a void when a cancel was asked for
//!   while the payment was in flight; anything else is money with no live
//!   order, so it gets a void (an orphan, counted);
//! - authorize declined or failed: an `authorizing` order is `declined`,
//!   its hold released;
//! - capture succeeded: hold committed, `confirmed` (then `refunding` with
//!   a refund attempt when a cancel was asked for), or, with no live
//!   order, a refund (an orphan);
//! - capture declined or failed: a void (authorized, not captured: give
//!   the money back);
//! - void succeeded: `voided` (hold released) for an `authorizing` order;
//! - refund succeeded: `refunded` (units back on sale) for a `confirmed`
//!   or `refunding` order;
//! - void / refund declined or failed: a stuck compensation, counted; an
//!   operator looks.

use crate::clock::UnixMs;
use crate::core::attempt::{AttemptOutcome, Operation};
use crate::core::state::{OrderState, PaymentState};
use crate::core::stock::HoldMove;

/// When a follow-up attempt is due for the reconciler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowUp {
    /// The caller drives it now; the reconciler waits out the in-flight
    /// bound.
    Driven,
    /// Nobody stored it to send it (a provider event): due at once, or
    /// when the attempt it follows was due if a call stored that one
    /// before and may still be waiting for its answer (the call adopts
    /// the follow-up when the answer comes; see `crate::backend::sqlite::settle::settle`).
    Due,
    /// Due at this time (a [`FollowUp::Due`] inheriting its attempt's).
    Until(UnixMs),
}

/// The settled attempt, as the decision needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempted {
    pub operation: Operation,
    /// Its definite outcome (never [`AttemptOutcome::Unknown`]; read as a
    /// failure if it were).
    pub outcome: AttemptOutcome,
}

/// The attempt's order as stored, if it still has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderFacts {
    pub state: OrderState,
    pub payment_state: PaymentState,
    /// Its hold is still `held` (only asked of an `authorizing` order).
    pub hold_held: bool,
}

impl OrderFacts {
    /// Still waiting for this payment: `authorizing`, its hold held.
    pub fn is_live(&self) -> bool {
        self.state == OrderState::Authorizing && self.hold_held
    }
}

/// A compensation's result, counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compensation {
    /// The void or refund went through.
    Done(Operation),
    /// The provider refused it: stuck until an operator looks.
    Refused(Operation),
}

/// Everything a definite outcome decides, for a back end to apply in one
/// transaction, in this order: the payment, the hold, the order's moves,
/// the follow-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// The payment's new state; [`PaymentState::Authorized`] and
    /// [`PaymentState::Captured`] record the provider's payment id.
    pub payment_to: Option<PaymentState>,
    /// What happens to the order's hold.
    pub hold: Option<HoldMove>,
    /// The order's moves, each from the state the one before left.
    pub order_to: Vec<(OrderState, OrderState)>,
    /// The next attempt on the same payment, stored before it is sent.
    pub follow_up: Option<Operation>,
    /// The follow-up gives back money no live order stands for.
    pub orphan: bool,
    /// A compensation's result, for the counters.
    pub compensation: Option<Compensation>,
    /// An attempt still unresolved that can no longer succeed (a capture
    /// after a void, a void after a capture) and is closed as failed.
    pub supersede: Option<Operation>,
}

impl Settlement {
    fn nothing() -> Self {
        Settlement {
            payment_to: None,
            hold: None,
            order_to: Vec::new(),
            follow_up: None,
            orphan: false,
            compensation: None,
            supersede: None,
        }
    }

    /// The order leaves `authorizing` with an outcome: its checkout's key
    /// is done.
    pub fn completes_key(&self) -> bool {
        self.order_to
            .iter()
            .any(|(from, _)| *from == OrderState::Authorizing)
    }
}

/// Whether [`decide`] reads `cancel_requested` for this outcome, so a back
/// end asks its store only then (a live order's successful authorize or
/// capture).
pub fn needs_cancel_flag(attempted: Attempted, order: Option<&OrderFacts>) -> bool {
    attempted.outcome == AttemptOutcome::Succeeded
        && matches!(
            attempted.operation,
            Operation::Authorize | Operation::Capture
        )
        && order.is_some_and(OrderFacts::is_live)
}

/// Every follow-up [`decide`] may store after `attempted`, whatever the
/// order and the cancel flag: what a call whose answer came second (a
/// webhook settled its attempt first) looks for to adopt.
pub fn possible_follow_ups(attempted: Attempted) -> &'static [Operation] {
    use AttemptOutcome as A;
    match (attempted.operation, attempted.outcome) {
        (Operation::Authorize, A::Succeeded) => &[Operation::Capture, Operation::Void],
        (Operation::Capture, A::Succeeded) => &[Operation::Refund],
        (Operation::Capture, A::Declined | A::Failed) => &[Operation::Void],
        _ => &[],
    }
}

/// The one settle decision (see the table at the top).
pub fn decide(
    attempted: Attempted,
    order: Option<&OrderFacts>,
    cancel_requested: bool,
) -> Settlement {
    use OrderState as O;
    let succeeded = attempted.outcome == AttemptOutcome::Succeeded;
    let state = order.map(|o| o.state);
    let live = order.is_some_and(OrderFacts::is_live);
    let mut s = Settlement::nothing();
    match (attempted.operation, succeeded) {
        (Operation::Authorize, true) => {
            if order.is_some_and(|o| {
                matches!(o.payment_state, PaymentState::None | PaymentState::Pending)
            }) {
                s.payment_to = Some(PaymentState::Authorized);
            }
            s.follow_up = Some(if live && cancel_requested {
                Operation::Void
            } else if live {
                Operation::Capture
            } else {
                Operation::Void
            });
            s.orphan = !live;
        }
        (Operation::Authorize, false) => {
            if state == Some(O::Authorizing) {
                s.payment_to = Some(PaymentState::Declined);
                s.hold = Some(HoldMove::Release);
                s.order_to.push((O::Authorizing, O::Declined));
            }
        }
        (Operation::Capture, true) => {
            s.supersede = Some(Operation::Void);
            if order.is_some() {
                s.payment_to = Some(PaymentState::Captured);
            }
            if live {
                s.hold = Some(HoldMove::Commit);
                s.order_to.push((O::Authorizing, O::Confirmed));
                if cancel_requested {
                    // Captured after the shopper cancelled: refund it.
                    s.order_to.push((O::Confirmed, O::Refunding));
                    s.follow_up = Some(Operation::Refund);
                }
            } else {
                s.follow_up = Some(Operation::Refund);
                s.orphan = true;
            }
        }
        (Operation::Capture, false) => s.follow_up = Some(Operation::Void),
        (Operation::Void, true) => {
            s.compensation = Some(Compensation::Done(Operation::Void));
            s.supersede = Some(Operation::Capture);
            if order.is_some() {
                s.payment_to = Some(PaymentState::Voided);
            }
            if state == Some(O::Authorizing) {
                s.hold = Some(HoldMove::Release);
                s.order_to.push((O::Authorizing, O::Voided));
            }
        }
        (Operation::Refund, true) => {
            s.compensation = Some(Compensation::Done(Operation::Refund));
            if order.is_some() {
                s.payment_to = Some(PaymentState::Refunded);
            }
            if state == Some(O::Confirmed) {
                // Refunded at the provider without our asking.
                s.order_to.push((O::Confirmed, O::Refunding));
            }
            if matches!(state, Some(O::Confirmed | O::Refunding)) {
                s.hold = Some(HoldMove::Return);
                s.order_to.push((O::Refunding, O::Refunded));
            }
        }
        (operation @ (Operation::Void | Operation::Refund), false) => {
            s.compensation = Some(Compensation::Refused(operation));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::state::transition_allowed;

    fn facts(state: OrderState, payment_state: PaymentState, hold_held: bool) -> OrderFacts {
        OrderFacts {
            state,
            payment_state,
            hold_held,
        }
    }

    fn every_input() -> Vec<(Attempted, Option<OrderFacts>, bool)> {
        let mut orders = vec![None];
        for state in OrderState::ALL {
            for payment_state in PaymentState::ALL {
                for hold_held in [false, true] {
                    orders.push(Some(facts(state, payment_state, hold_held)));
                }
            }
        }
        let mut inputs = Vec::new();
        for operation in Operation::ALL {
            for outcome in [
                AttemptOutcome::Succeeded,
                AttemptOutcome::Declined,
                AttemptOutcome::Failed,
            ] {
                for order in &orders {
                    for cancel in [false, true] {
                        inputs.push((Attempted { operation, outcome }, *order, cancel));
                    }
                }
            }
        }
        inputs
    }

    #[test]
    fn every_order_move_is_legal_and_chained() {
        for (attempted, order, cancel) in every_input() {
            let s = decide(attempted, order.as_ref(), cancel);
            let mut at = order.map(|o| o.state);
            for (from, to) in &s.order_to {
                assert!(transition_allowed(*from, *to), "{attempted:?} {order:?}");
                assert_eq!(at, Some(*from), "{attempted:?} {order:?}");
                at = Some(*to);
            }
        }
    }

    #[test]
    fn possible_follow_ups_are_exactly_what_decide_stores() {
        for operation in Operation::ALL {
            for outcome in AttemptOutcome::ALL {
                let attempted = Attempted { operation, outcome };
                let mut stored: Vec<Operation> = every_input()
                    .into_iter()
                    .filter(|(a, _, _)| *a == attempted)
                    .filter_map(|(a, order, cancel)| decide(a, order.as_ref(), cancel).follow_up)
                    .collect();
                stored.sort_by_key(|op| op.as_str());
                stored.dedup();
                let mut possible = possible_follow_ups(attempted).to_vec();
                possible.sort_by_key(|op| op.as_str());
                assert_eq!(stored, possible, "{attempted:?}");
            }
        }
    }

    #[test]
    fn the_cancel_flag_matters_only_where_it_is_read() {
        for (attempted, order, _) in every_input() {
            let asked = decide(attempted, order.as_ref(), true);
            let not = decide(attempted, order.as_ref(), false);
            if !needs_cancel_flag(attempted, order.as_ref()) {
                assert_eq!(asked, not, "{attempted:?} {order:?}");
            }
        }
    }

    #[test]
    fn each_outcome_does_what_the_table_says() {
        use AttemptOutcome::{Declined, Failed, Succeeded};
        use OrderState as O;
        use PaymentState as P;
        let live = facts(O::Authorizing, P::Pending, true);
        let authorized = facts(O::Authorizing, P::Authorized, true);
        let confirmed = facts(O::Confirmed, P::Captured, false);
        #[allow(clippy::type_complexity)]
        let table: [(
            Operation,
            AttemptOutcome,
            &OrderFacts,
            Option<PaymentState>,
            Option<HoldMove>,
            &[(OrderState, OrderState)],
            Option<Operation>,
        ); 8] = [
            (
                Operation::Authorize,
                Succeeded,
                &live,
                Some(P::Authorized),
                None,
                &[],
                Some(Operation::Capture),
            ),
            (
                Operation::Authorize,
                Declined,
                &live,
                Some(P::Declined),
                Some(HoldMove::Release),
                &[(O::Authorizing, O::Declined)],
                None,
            ),
            (
                Operation::Authorize,
                Failed,
                &live,
                Some(P::Declined),
                Some(HoldMove::Release),
                &[(O::Authorizing, O::Declined)],
                None,
            ),
            (
                Operation::Capture,
                Succeeded,
                &authorized,
                Some(P::Captured),
                Some(HoldMove::Commit),
                &[(O::Authorizing, O::Confirmed)],
                None,
            ),
            (
                Operation::Capture,
                Failed,
                &authorized,
                None,
                None,
                &[],
                Some(Operation::Void),
            ),
            (
                Operation::Void,
                Succeeded,
                &authorized,
                Some(P::Voided),
                Some(HoldMove::Release),
                &[(O::Authorizing, O::Voided)],
                None,
            ),
            (
                Operation::Refund,
                Succeeded,
                &confirmed,
                Some(P::Refunded),
                Some(HoldMove::Return),
                &[(O::Confirmed, O::Refunding), (O::Refunding, O::Refunded)],
                None,
            ),
            (Operation::Refund, Failed, &confirmed, None, None, &[], None),
        ];
        for (operation, outcome, order, payment_to, hold, order_to, follow_up) in table {
            let s = decide(Attempted { operation, outcome }, Some(order), false);
            let case = format!("{operation:?} {outcome:?}");
            assert_eq!(s.payment_to, payment_to, "{case}");
            assert_eq!(s.hold, hold, "{case}");
            assert_eq!(s.order_to, order_to, "{case}");
            assert_eq!(s.follow_up, follow_up, "{case}");
            assert!(!s.orphan, "{case}");
        }
    }

    #[test]
    fn money_with_no_live_order_is_given_back() {
        let authorized = Attempted {
            operation: Operation::Authorize,
            outcome: AttemptOutcome::Succeeded,
        };
        let captured = Attempted {
            operation: Operation::Capture,
            ..authorized
        };
        let expired = facts(OrderState::Expired, PaymentState::Pending, false);
        let s = decide(authorized, Some(&expired), false);
        assert_eq!(s.follow_up, Some(Operation::Void));
        assert!(s.orphan);
        assert_eq!(s.payment_to, Some(PaymentState::Authorized));
        let s = decide(captured, None, false);
        assert_eq!(s.follow_up, Some(Operation::Refund));
        assert!(s.orphan);
        assert_eq!(s.payment_to, None);
        assert_eq!(s.hold, None);
    }

    #[test]
    fn a_live_order_is_captured_then_confirmed_unless_cancelled() {
        let live = facts(OrderState::Authorizing, PaymentState::Pending, true);
        let authorized = Attempted {
            operation: Operation::Authorize,
            outcome: AttemptOutcome::Succeeded,
        };
        assert_eq!(
            decide(authorized, Some(&live), false).follow_up,
            Some(Operation::Capture)
        );
        assert_eq!(
            decide(authorized, Some(&live), true).follow_up,
            Some(Operation::Void)
        );
        let captured = Attempted {
            operation: Operation::Capture,
            ..authorized
        };
        let s = decide(captured, Some(&live), false);
        assert_eq!(s.hold, Some(HoldMove::Commit));
        assert_eq!(
            s.order_to,
            vec![(OrderState::Authorizing, OrderState::Confirmed)]
        );
        assert_eq!(s.follow_up, None);
        assert!(s.completes_key());
        let s = decide(captured, Some(&live), true);
        assert_eq!(s.follow_up, Some(Operation::Refund));
        assert!(!s.orphan);
        assert_eq!(
            s.order_to.last(),
            Some(&(OrderState::Confirmed, OrderState::Refunding))
        );
    }

    #[test]
    fn refused_compensations_are_stuck_and_change_nothing_else() {
        for operation in [Operation::Void, Operation::Refund] {
            let s = decide(
                Attempted {
                    operation,
                    outcome: AttemptOutcome::Failed,
                },
                Some(&facts(
                    OrderState::Authorizing,
                    PaymentState::Authorized,
                    true,
                )),
                false,
            );
            assert_eq!(s.compensation, Some(Compensation::Refused(operation)));
            assert_eq!(s.payment_to, None);
            assert_eq!(s.hold, None);
            assert!(s.order_to.is_empty());
            assert_eq!(s.follow_up, None);
        }
    }
}
