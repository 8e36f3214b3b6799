//! One place per account on the fleet's line: a join with an account is
//! one call of `sluice_7_enqueue` (not batched with the others), which
//! answers the account's live place, or gives one new place by the join's
//! own rules and keeps it as the account's, atomically: two gateways
//! joining the same account at once give one place. Redis keeps only the
//! account's keyed hash (see the "One place per account" section of
//! `sluice.lua`).

use std::num::NonZeroU32;
use std::sync::atomic::Ordering;

use sluice_admission::enqueue::AccountHash;
use sluice_admission::fleet::{self as decide, JoinReply, STORE_RETRY_AFTER_S};
use sluice_admission::join_limiter::{client_period_us, ClientKey};
use sluice_admission::room::HeldPlace;
use sluice_admission::{JoinError, TicketId};

use super::{SharedRoom, ANSWER_WAIT_MAX, CLAIMS_REMEMBERED_MAX};

/// A join with an account, as the store takes it.
#[derive(Debug, Clone, Copy)]
pub struct AccountJoinArgs<'a> {
    pub account: &'a AccountHash,
    pub client: Option<ClientKey>,
    pub capacity: u32,
    pub hw_next: u64,
    pub period_us: u64,
    pub burst: u32,
    /// The ticket id a new place is kept with (its ticket's `sub`).
    pub ticket_id: &'a str,
    pub ticket_ttl_ms: u64,
    /// How long the account's record may be needed at most: the ticket's
    /// life, then its pass's.
    pub keep_ms: u64,
}

/// What a join with an account got from the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccountReply {
    /// The account's live place.
    Held {
        seq: u64,
        ticket_id: String,
        ticket_expires_ms: u64,
    },
    /// A join of one, by the join's own rules (granted or not).
    Joined(JoinReply),
}

/// What [`SharedRoom::join_account`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountPlace {
    New { seq: u64, ticket_id: TicketId },
    Held(HeldPlace),
}

impl SharedRoom {
    /// The account's live place on the fleet's line, or a new one kept as
    /// its own (within the client's limit, capacity, pause, sold out).
    pub async fn join_account(
        &self,
        account: AccountHash,
        client: Option<ClientKey>,
        now_ms: u64,
    ) -> Result<AccountPlace, JoinError> {
        let answer = self.join_account_uncounted(account, client, now_ms).await;
        let counted = match &answer {
            // The place is this account's already: no join to count.
            Ok(AccountPlace::Held(_)) => return answer,
            Ok(AccountPlace::New { seq, .. }) => Ok(*seq),
            Err(e) => Err(*e),
        };
        self.count_join(&counted);
        answer
    }

    async fn join_account_uncounted(
        &self,
        account: AccountHash,
        client: Option<ClientKey>,
        now_ms: u64,
    ) -> Result<AccountPlace, JoinError> {
        let unavailable = JoinError::StoreUnavailable {
            retry_after_s: STORE_RETRY_AFTER_S,
        };
        let policy = self.policy.load_full();
        let mut id = [0u8; 16];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut id);
        let ticket_id = hex::encode(id);
        let per_minute = self.joins_per_minute.load(Ordering::Relaxed).max(1);
        let ticket_ttl_ms = policy.ticket_ttl.as_millis() as u64;
        let keep_ms =
            ticket_ttl_ms + decide::claim_window_ms(&policy) + policy.pass_ttl.as_millis() as u64;
        let store = self.fleet.store.clone();
        let name = self.name.clone();
        let hw_next = self.hw_next.load(Ordering::Relaxed);
        let call_id = ticket_id.clone();
        let call = self.fleet.rt.spawn(async move {
            let args = AccountJoinArgs {
                account: &account,
                client,
                capacity: policy.queue_capacity.get(),
                hw_next,
                period_us: client_period_us(NonZeroU32::new(per_minute).expect("at least 1")),
                burst: per_minute,
                ticket_id: &call_id,
                ticket_ttl_ms,
                keep_ms,
            };
            store.enqueue(&name, &args).await
        });
        let reply = match tokio::time::timeout(ANSWER_WAIT_MAX, call).await {
            Ok(Ok(Ok(reply))) => {
                self.answered(Ok(()));
                reply
            }
            Ok(Ok(Err(e))) => {
                self.answered(Err(&e));
                return Err(unavailable);
            }
            _ => return Err(unavailable),
        };
        let policy = self.policy.load_full();
        match reply {
            AccountReply::Held {
                seq,
                ticket_id,
                ticket_expires_ms,
            } => {
                let ticket_id = TicketId::parse(&ticket_id).ok_or(unavailable)?;
                let expires_at_s = ticket_expires_ms / 1000;
                let ttl_s = policy.ticket_ttl.as_secs();
                Ok(AccountPlace::Held(HeldPlace {
                    seq,
                    ticket_id,
                    issued_at_s: (now_ms / 1000).min(expires_at_s.saturating_sub(ttl_s)),
                    expires_at_s,
                }))
            }
            AccountReply::Joined(reply) => {
                self.saw(reply.first + u64::from(reply.granted), reply.serving);
                let seq = decide::join_answers(&reply, 1, &policy)
                    .pop()
                    .unwrap_or(Err(unavailable))?;
                let ticket_id = TicketId::parse(&ticket_id).expect("32 hex digits");
                Ok(AccountPlace::New { seq, ticket_id })
            }
        }
    }

    /// The account's place `seq` collected its pass (ending at
    /// `expires_at_s`): the pass holds the account until then, given back
    /// or not. Written once per place from this gateway, in the
    /// background.
    pub fn account_pass(&self, account: AccountHash, seq: u64, expires_at_s: u64) {
        {
            let mut noted = self
                .accounts_noted
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if noted.len() >= CLAIMS_REMEMBERED_MAX {
                noted.clear();
            }
            if !noted.insert(seq) {
                return;
            }
        }
        let store = self.fleet.store.clone();
        let name = self.name.clone();
        self.fleet.rt.spawn(async move {
            if let Err(e) = store
                .enqueue_pass(&name, &account, seq, expires_at_s.saturating_mul(1000))
                .await
            {
                tracing::debug!(room = name, "an account's pass end not recorded: {e}");
            }
        });
    }
}
