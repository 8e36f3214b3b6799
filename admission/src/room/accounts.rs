//! One place per account: a join carrying a store's enqueue token names an
//! account (its keyed hash, [`crate::enqueue::AccountHash`]); while the
//! place that account was given is live, a join with it answers that place
//! again ([`WaitingRoom::join_account`]) instead of giving a second one.
//!
//! A place is live while its ticket waits in line (not expired, not gone
//! idle), while it is released and not yet collected, and, once its pass
//! was collected, until the pass's expiry (an ended or spent pass too: the
//! account does not go round again while the pass it had could still be
//! shown). After that the account may join again, at the back.
//!
//! The map is kept in the room's events ([`RoomEvent::Account`],
//! [`RoomEvent::AccountPass`]): a restart keeps every account's place.
//! Entries whose place is no longer live are dropped a bounded stretch at
//! a time by the release pass.

use std::collections::{BTreeMap, HashMap};

use super::{JoinError, Joined, WaitingRoom};
use crate::enqueue::AccountHash;
use crate::journal::RoomEvent;
use crate::store::{QueueStore, SlotState};
use crate::ticket_id::TicketId;

/// Entries looked at per release pass to drop the ones no longer live.
const PRUNE_PER_PASS: usize = 1024;

/// An account's place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AccountPlace {
    pub seq: u64,
    /// The ticket's `exp` (unix s).
    pub ticket_expires_s: u64,
    /// Once its pass was collected: the pass's `exp` (unix s).
    pub pass_until_s: Option<u64>,
}

/// The room's accounts: by account hash, and by `seq` (to note a
/// collected pass, and to prune in order).
#[derive(Debug, Default)]
pub(super) struct Accounts {
    by_account: HashMap<AccountHash, AccountPlace>,
    by_seq: BTreeMap<u64, AccountHash>,
    /// Where pruning goes on.
    prune_from: u64,
}

impl Accounts {
    pub fn insert(&mut self, account: AccountHash, place: AccountPlace) {
        if let Some(old) = self.by_account.insert(account, place) {
            self.by_seq.remove(&old.seq);
        }
        self.by_seq.insert(place.seq, account);
    }

    pub fn get(&self, account: &AccountHash) -> Option<AccountPlace> {
        self.by_account.get(account).copied()
    }

    /// The account that holds `seq`, if one does.
    pub fn of_seq(&self, seq: u64) -> Option<AccountHash> {
        self.by_seq.get(&seq).copied()
    }

    pub fn set_pass(&mut self, seq: u64, until_s: u64) {
        if let Some(place) = self
            .by_seq
            .get(&seq)
            .and_then(|a| self.by_account.get_mut(a))
        {
            place.pass_until_s = Some(until_s);
        }
    }

    fn remove(&mut self, account: &AccountHash) {
        if let Some(old) = self.by_account.remove(account) {
            self.by_seq.remove(&old.seq);
        }
    }

    pub fn len(&self) -> usize {
        self.by_account.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&AccountHash, &AccountPlace)> {
        self.by_account.iter()
    }
}

/// The place an account already holds: its ticket again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldPlace {
    pub seq: u64,
    pub ticket_id: TicketId,
    /// The `iat` and `exp` of the ticket signed for it again.
    pub issued_at_s: u64,
    pub expires_at_s: u64,
}

/// What a join with an account got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountJoin {
    /// A new place (the account held none live).
    New(Joined),
    /// The account's live place: answer it as a poll of its ticket.
    Held(HeldPlace),
}

impl<S: QueueStore> WaitingRoom<S> {
    /// A join for `account`: its live place if it has one, else a new
    /// place at the back ([`Self::join`]) kept as the account's.
    pub fn join_account(
        &mut self,
        account: AccountHash,
        now_ms: u64,
    ) -> Result<AccountJoin, JoinError> {
        self.open_if_due(now_ms);
        if let Some(held) = self.held_place(&account, now_ms) {
            return Ok(AccountJoin::Held(held));
        }
        // Kept with the join's own events: one flush, before the answer.
        let joined = self.join_then(now_ms, |room, joined| {
            let place = AccountPlace {
                seq: joined.seq,
                ticket_expires_s: joined.expires_at_s,
                pass_until_s: None,
            };
            room.accounts.insert(account, place);
            room.emit(RoomEvent::Account {
                account: account.0,
                seq: joined.seq,
                expires_at_s: joined.expires_at_s,
            });
        })?;
        Ok(AccountJoin::New(joined))
    }

    /// The live place of `account` at `now_ms`, if it has one.
    pub fn held_place(&self, account: &AccountHash, now_ms: u64) -> Option<HeldPlace> {
        let place = self.accounts.get(account)?;
        if !self.account_place_live(&place, now_ms) {
            return None;
        }
        let ttl_s = self.policy.ticket_ttl.as_secs();
        let now_s = Self::unix_s(now_ms);
        Some(HeldPlace {
            seq: place.seq,
            ticket_id: self.ids.derive(&self.name, place.seq),
            issued_at_s: now_s.min(place.ticket_expires_s.saturating_sub(ttl_s)),
            expires_at_s: place.ticket_expires_s,
        })
    }

    /// Whether an account's place still holds the account at `now_ms`.
    pub(super) fn account_place_live(&self, place: &AccountPlace, now_ms: u64) -> bool {
        let now_unix_s = Self::unix_s(now_ms);
        if let Some(until_s) = place.pass_until_s {
            return now_unix_s < until_s;
        }
        if self.before_opening() {
            let slot = usize::try_from(place.seq)
                .ok()
                .and_then(|i| self.pre_queue.as_ref()?.slots.get(i).copied());
            let idle_s = self.policy.idle_timeout.as_secs();
            let now_s = self.room_s(now_ms);
            return slot.is_some_and(|s| {
                s.state == SlotState::Waiting
                    && u64::from(now_s.saturating_sub(s.last_poll_s)) <= idle_s
            });
        }
        let Some(at) = self.place_of(place.seq) else {
            return false;
        };
        if let Some(pending) = self.uncollected.get(&at) {
            return now_unix_s < pending.pass.expires_at_s;
        }
        if let Some(pass) = self.active.get(&at) {
            return now_unix_s < pass.expires_at_s;
        }
        if at < self.cursor || now_unix_s >= place.ticket_expires_s {
            return false;
        }
        let now_s = self.room_s(now_ms);
        self.store
            .get(at)
            .is_some_and(|slot| self.fate(&slot, now_s) == SlotState::Waiting)
    }

    /// A released place `seq` collected its pass (expiring at `until_s`):
    /// if an account holds it, the pass holds the account until then.
    pub(super) fn account_collected(&mut self, seq: u64, until_s: u64) {
        if self.accounts.of_seq(seq).is_some() {
            self.accounts.set_pass(seq, until_s);
            self.emit(RoomEvent::AccountPass { seq, until_s });
        }
    }

    /// Drops up to [`PRUNE_PER_PASS`] entries whose place is no longer
    /// live (the release pass's part).
    pub(super) fn prune_accounts(&mut self, now_ms: u64) {
        let looked: Vec<(u64, AccountHash)> = self
            .accounts
            .by_seq
            .range(self.accounts.prune_from..)
            .take(PRUNE_PER_PASS)
            .map(|(&seq, &a)| (seq, a))
            .collect();
        self.accounts.prune_from = match looked.last() {
            Some(&(seq, _)) if looked.len() == PRUNE_PER_PASS => seq + 1,
            _ => 0,
        };
        for (_, account) in looked {
            let live = self
                .accounts
                .get(&account)
                .is_some_and(|p| self.account_place_live(&p, now_ms));
            if !live {
                self.accounts.remove(&account);
            }
        }
    }

    /// Accounts holding a place (kept, not yet pruned).
    pub fn accounts_held(&self) -> usize {
        self.accounts.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;
    use crate::policy::Policy;
    use crate::room::Status;
    use crate::stock::InMemoryStock;
    use crate::store::MemoryStore;

    const T0: u64 = 1_700_000_000_000;

    fn room(policy: Policy) -> WaitingRoom<MemoryStore> {
        WaitingRoom::new(
            "drop",
            policy,
            Arc::new(InMemoryStock::new()),
            StdRng::seed_from_u64(7),
            T0,
        )
        .unwrap()
    }

    fn policy() -> Policy {
        let one = std::num::NonZeroU32::new(1).unwrap();
        Policy {
            release_per_second: one,
            burst: one,
            max_active: one,
            max_orders_per_pass: one,
            queue_capacity: std::num::NonZeroU32::new(100).unwrap(),
            pass_ttl: Duration::from_secs(120),
            ticket_ttl: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(600),
            poll_min: Duration::from_secs(1),
            poll_max: Duration::from_secs(10),
            opens_at_ms: None,
            pass_idle: Duration::ZERO,
        }
    }

    fn new(j: AccountJoin) -> Joined {
        match j {
            AccountJoin::New(j) => j,
            AccountJoin::Held(h) => panic!("held {h:?}"),
        }
    }

    fn held(j: AccountJoin) -> HeldPlace {
        match j {
            AccountJoin::Held(h) => h,
            AccountJoin::New(j) => panic!("new {j:?}"),
        }
    }

    #[test]
    fn an_account_keeps_one_place_while_it_is_live() {
        let mut r = room(policy());
        let a = AccountHash([1; 16]);
        let b = AccountHash([2; 16]);
        let first = new(r.join_account(a, T0).unwrap());
        let other = new(r.join_account(b, T0).unwrap());
        assert_ne!(first.seq, other.seq);
        // Again, waiting: the same seq and ticket id.
        let again = held(r.join_account(a, T0 + 1000).unwrap());
        assert_eq!(
            (again.seq, again.ticket_id, again.expires_at_s),
            (first.seq, first.ticket_id, first.expires_at_s)
        );
        // Released and collected: still the same place, until the pass ends.
        r.release_once(T0 + 2000, 100);
        let status = r.status(first.seq, &first.ticket_id, T0 + 2000).unwrap();
        let Status::Admitted(pass) = status else {
            panic!("{status:?}")
        };
        let after_ticket = T0 + 61_000;
        assert_eq!(
            held(r.join_account(a, after_ticket).unwrap()).seq,
            first.seq
        );
        // The pass ended by time: the account joins again, at the back.
        let later = pass.expires_at_s * 1000;
        let back = new(r.join_account(a, later).unwrap());
        assert!(back.seq > other.seq, "{back:?}");
    }

    #[test]
    fn a_ticket_that_expired_unused_lets_the_account_join_again() {
        let mut r = room(policy());
        let a = AccountHash([1; 16]);
        // One slot, held by someone else: the account's place waits.
        let holder = r.join(T0).unwrap();
        r.release_once(T0, 100);
        r.status(holder.seq, &holder.ticket_id, T0).unwrap();
        let first = new(r.join_account(a, T0).unwrap());
        assert_eq!(held(r.join_account(a, T0 + 59_000).unwrap()).seq, first.seq);
        let again = new(r.join_account(a, T0 + 60_000).unwrap());
        assert!(again.seq > first.seq);
        assert_eq!(r.accounts_held(), 1, "the old entry is replaced");
    }

    #[test]
    fn a_spent_pass_given_back_still_holds_the_account_until_it_expires() {
        let mut r = room(policy());
        let a = AccountHash([1; 16]);
        let first = new(r.join_account(a, T0).unwrap());
        r.release_once(T0, 100);
        let Status::Admitted(pass) = r.status(first.seq, &first.ticket_id, T0).unwrap() else {
            panic!("not admitted")
        };
        let spent = crate::PassOrders {
            started: 1,
            open: 0,
        };
        assert!(r.give_back_if_spent(first.seq, spent));
        // The slot is free for the next, but the account has its place.
        let b = new(r.join_account(AccountHash([2; 16]), T0 + 1000).unwrap());
        assert_eq!(held(r.join_account(a, T0 + 2000).unwrap()).seq, first.seq);
        r.prune_accounts(T0 + 3000);
        assert_eq!(r.accounts_held(), 2);
        let after = pass.expires_at_s * 1000;
        assert!(new(r.join_account(a, after).unwrap()).seq > b.seq);
    }

    #[test]
    fn a_restored_room_keeps_each_accounts_place() {
        use crate::journal::{EventSink, SinkError};
        use std::sync::Mutex;
        #[derive(Clone, Default)]
        struct Kept(Arc<Mutex<Vec<RoomEvent>>>);
        impl EventSink for Kept {
            fn append(&mut self, events: &[RoomEvent]) -> Result<(), SinkError> {
                self.0.lock().unwrap().extend_from_slice(events);
                Ok(())
            }
        }
        let kept = Kept::default();
        let stock = Arc::new(InMemoryStock::new());
        let restore = |events: Vec<RoomEvent>, now_ms: u64| {
            WaitingRoom::restore(
                "drop",
                policy(),
                stock.clone(),
                [9; 32],
                StdRng::seed_from_u64(1),
                now_ms,
                events,
                Box::new(kept.clone()),
            )
            .unwrap()
        };
        let mut r = restore(Vec::new(), T0);
        let a = AccountHash([1; 16]);
        let b = AccountHash([2; 16]);
        let first = new(r.join_account(a, T0).unwrap());
        r.release_once(T0, 100);
        r.status(first.seq, &first.ticket_id, T0).unwrap();
        let waiting = new(r.join_account(b, T0).unwrap());
        let events = kept.0.lock().unwrap().clone();
        let mut again = restore(events, T0 + 5000);
        assert_eq!(
            held(again.join_account(a, T0 + 5000).unwrap()).seq,
            first.seq
        );
        let held_b = held(again.join_account(b, T0 + 5000).unwrap());
        assert_eq!(
            (held_b.seq, held_b.ticket_id),
            (waiting.seq, waiting.ticket_id)
        );
        // And from a snapshot of it.
        let mut snapshot = Vec::new();
        again.snapshot(&mut |e| snapshot.push(e));
        let mut third = restore(snapshot, T0 + 6000);
        assert_eq!(
            held(third.join_account(b, T0 + 6000).unwrap()).seq,
            waiting.seq
        );
    }

    #[test]
    fn pruning_drops_only_places_no_longer_live() {
        let mut r = room(policy());
        for i in 0..5u8 {
            new(r.join_account(AccountHash([i; 16]), T0).unwrap());
        }
        r.prune_accounts(T0 + 1000);
        assert_eq!(r.accounts_held(), 5);
        r.prune_accounts(T0 + 61_000);
        assert_eq!(r.accounts_held(), 0);
    }
}
