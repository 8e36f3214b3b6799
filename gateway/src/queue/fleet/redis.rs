//! [`RoomStore`] on Redis: the room's state changes only through the
//! Functions of `sluice.lua` (loaded with `FUNCTION LOAD REPLACE` on every
//! new connection and again whenever Redis says a function is missing, as
//! after a restart without data), which read Redis's own clock.
//!
//! Keys of room `R`: `sluice2:{R}`, `sluice2:{R}:slots`,
//! `sluice2:{R}:released` and, for an adaptive room,
//! `sluice2:{R}:checkouts` and `sluice2:{R}:leader`, after a loss
//! `sluice2:{R}:spent`, for passes that end `sluice2:{R}:active` and
//! `sluice2:{R}:ended`, and one `sluice2:{R}:jl:<client>` per client whose
//! join allowance is not whole again: one hash tag, so Redis Cluster keeps
//! each room on one slot.
//!
//! One multiplexed connection ([`ConnectionManager`], which reconnects by
//! itself), explicit connect and response timeouts, and every call bounded
//! by [`CALL_TIMEOUT`] so nothing waits on a Redis that went away.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, RedisError};
use sluice_admission::adaptive::Decision;
use sluice_admission::enqueue::AccountHash;
use sluice_admission::fleet::{ClaimReply, JoinReply, LineNumbers};
use sluice_admission::fleet_rate;
use sluice_admission::join_limiter::ClientKey;
use tokio::sync::Mutex;

use super::enqueue::{AccountJoinArgs, AccountReply};
use super::store::{
    AdaptReply, ClaimArgs, FleetLimits, Heartbeat, JoinBatch, Member, PassesArgs, PassesReply,
    Reseed, RoomStore, StoreError, StoredDecision, Tick, TickArgs,
};

/// The Functions library.
pub const LIBRARY: &str = include_str!("sluice.lua");

/// One connection attempt, at most.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// One answer, at most.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);
/// One call including reconnecting and reloading the Functions, at most.
pub const CALL_TIMEOUT: Duration = Duration::from_millis(1500);
/// Passes re-counted in one `sluice_7_reseed` call, at most.
pub const RESEED_BATCH_MAX: usize = 512;

pub struct RedisStore {
    client: redis::Client,
    conn: Mutex<Option<ConnectionManager>>,
    /// The gateway this store speaks for, `<node id>/<random>` (unique
    /// even when two gateways share a node id): its ticks publish the
    /// limits its config gives each room under this id.
    id: String,
}

impl RedisStore {
    /// A store for `url`, for a gateway with a random id; connects on first
    /// use.
    pub fn new(url: &str) -> Result<Self, String> {
        Self::for_gateway(url, "store")
    }

    /// A store for `url`, for the gateway with node id `node_id`.
    pub fn for_gateway(url: &str, node_id: &str) -> Result<Self, String> {
        let client = redis::Client::open(url)
            .map_err(|e| format!("[cluster] redis_url is not a Redis URL ({:?})", e.kind()))?;
        let mut nonce = [0u8; 4];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut nonce);
        Ok(Self {
            client,
            conn: Mutex::new(None),
            id: format!("{node_id}/{}", hex::encode(nonce)),
        })
    }

    /// The connection, made (and the Functions loaded) if there is none.
    pub(super) async fn connection(&self) -> Result<ConnectionManager, StoreError> {
        let mut slot = self.conn.lock().await;
        if let Some(conn) = slot.as_ref() {
            return Ok(conn.clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(CONNECT_TIMEOUT)
            .set_response_timeout(RESPONSE_TIMEOUT)
            .set_number_of_retries(1)
            .set_max_delay(1000);
        let mut conn = ConnectionManager::new_with_config(self.client.clone(), config)
            .await
            .map_err(unavailable)?;
        load_library(&mut conn).await?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Runs `FCALL`, reloading the library once if Redis lost it.
    async fn fcall<T: redis::FromRedisValue>(
        &self,
        function: &str,
        keys: &[String],
        args: &[u64],
    ) -> Result<T, StoreError> {
        let args: Vec<String> = args.iter().map(u64::to_string).collect();
        self.fcall_str(function, keys, &args).await
    }

    async fn fcall_str<T: redis::FromRedisValue>(
        &self,
        function: &str,
        keys: &[String],
        args: &[String],
    ) -> Result<T, StoreError> {
        let call = async {
            let mut conn = self.connection().await?;
            let mut cmd = redis::cmd("FCALL");
            cmd.arg(function).arg(keys.len()).arg(keys).arg(args);
            match query::<T>(&cmd, &mut conn).await {
                Err(e) if function_missing(&e) => {
                    tracing::warn!(
                        "Redis lost the sluice Functions (restarted?); loading them again"
                    );
                    load_library(&mut conn).await?;
                    query::<T>(&cmd, &mut conn).await.map_err(classify)
                }
                other => other.map_err(classify),
            }
        };
        tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .map_err(|_| StoreError::Unavailable("timed out".into()))?
    }
}

async fn query<T: redis::FromRedisValue>(
    cmd: &Cmd,
    conn: &mut ConnectionManager,
) -> Result<T, RedisError> {
    cmd.query_async(conn).await
}

async fn load_library(conn: &mut ConnectionManager) -> Result<(), StoreError> {
    let loaded: Result<String, RedisError> = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(LIBRARY)
        .query_async(conn)
        .await;
    loaded.map(drop).map_err(classify)
}

fn function_missing(e: &RedisError) -> bool {
    e.to_string().contains("Function not found")
}

fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// Server-side refusals that are not about reachability are the
/// library's problem; everything else means "not now".
fn classify(e: RedisError) -> StoreError {
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() {
        return unavailable(e);
    }
    match e.code() {
        Some("LOADING" | "READONLY" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN" | "BUSY") => {
            unavailable(e)
        }
        _ if e.kind() == redis::ErrorKind::TypeError => StoreError::Protocol(e.to_string()),
        _ => StoreError::Unavailable(e.to_string()),
    }
}

/// The fleet's members.
pub const FLEET_KEY: &str = "sluice:fleet";

/// The keys of room `room`, under its hash tag: the room, its slots,
/// its released places waiting for their holder.
pub fn keys(room: &str) -> [String; 3] {
    [
        format!("sluice2:{{{room}}}"),
        format!("sluice2:{{{room}}}:slots"),
        format!("sluice2:{{{room}}}:released"),
    ]
}

fn clamp32(v: u64) -> u32 {
    v.min(u64::from(u32::MAX)) as u32
}

/// The join allowance of `client` in `room` (the fleet's per-client join
/// limit), in the room's hash slot.
pub fn client_key(room: &str, client: ClientKey) -> String {
    format!("sluice2:{{{room}}}:jl:{client}")
}

/// [`keys`] and the places re-seeded as spent after a loss (never taken
/// back; the set lives until the take-back window ends).
pub fn keys_with_spent(room: &str) -> [String; 4] {
    let [line, slots, released] = keys(room);
    [line, slots, released, format!("sluice2:{{{room}}}:spent")]
}

/// The room, its slots, its passes' last activity and its stream of passes
/// ended before their time (`sluice_7_pass_end`, `sluice_7_passes`).
pub fn pass_keys(room: &str) -> [String; 4] {
    let [line, slots, _] = keys(room);
    [
        line,
        slots,
        format!("sluice2:{{{room}}}:active"),
        format!("sluice2:{{{room}}}:ended"),
    ]
}

/// The adaptive room's stream of checkouts and its leader's lease.
pub fn adaptive_keys(room: &str) -> [String; 2] {
    [
        format!("sluice2:{{{room}}}:checkouts"),
        format!("sluice2:{{{room}}}:leader"),
    ]
}

fn flag(b: bool) -> u64 {
    u64::from(b)
}

/// The stored decision from the five `ad_` fields a Function returns.
fn stored_decision(f: &[String]) -> Option<StoredDecision> {
    let [rate, reason, at, state, by] = f else {
        return None;
    };
    Some(StoredDecision {
        decision: fleet_rate::decode_decision(rate, reason, at, state)?,
        by: by.clone(),
    })
}

/// The record of the account whose keyed hash is `account`, in the room's
/// hash slot.
pub fn account_key(room: &str, account: &AccountHash) -> String {
    format!("sluice2:{{{room}}}:acct:{account}")
}

#[async_trait]
impl RoomStore for RedisStore {
    async fn enqueue(
        &self,
        room: &str,
        a: &AccountJoinArgs<'_>,
    ) -> Result<AccountReply, StoreError> {
        let [line, slots, released] = keys(room);
        let mut keys = vec![line, slots, released, account_key(room, a.account)];
        if let Some(client) = a.client {
            keys.push(client_key(room, client));
        }
        let args = [
            a.capacity.to_string(),
            a.hw_next.to_string(),
            a.period_us.to_string(),
            a.burst.to_string(),
            a.ticket_id.to_owned(),
            a.ticket_ttl_ms.to_string(),
            a.keep_ms.to_string(),
        ];
        let r: Vec<String> = self.fcall_str("sluice_7_enqueue", &keys, &args).await?;
        let bad = || StoreError::Protocol(format!("sluice_7_enqueue gave {r:?}"));
        let n = |i: usize| r.get(i).and_then(|v| v.parse::<u64>().ok()).ok_or_else(bad);
        match r.first().map(String::as_str) {
            Some("1") => Ok(AccountReply::Held {
                seq: n(1)?,
                ticket_id: r.get(2).ok_or_else(bad)?.clone(),
                ticket_expires_ms: n(3)?,
            }),
            Some("0") if r.len() == 8 => Ok(AccountReply::Joined(JoinReply {
                first: n(1)?,
                granted: clamp32(n(2)?),
                serving: n(3)?,
                paused: n(4)? == 1,
                sold_out: n(5)? == 1,
                warming: n(6)? == 1,
                retry_after_ms: vec![n(7)?],
            })),
            _ => Err(bad()),
        }
    }

    async fn enqueue_pass(
        &self,
        room: &str,
        account: &AccountHash,
        seq: u64,
        pass_expires_ms: u64,
    ) -> Result<bool, StoreError> {
        let written: u64 = self
            .fcall(
                "sluice_7_enqueue_pass",
                &[account_key(room, account)],
                &[seq, pass_expires_ms],
            )
            .await?;
        Ok(written == 1)
    }

    async fn join(&self, room: &str, batch: &JoinBatch<'_>) -> Result<JoinReply, StoreError> {
        let n = batch.clients.len();
        let [line, _, _] = keys(room);
        let mut keys = vec![line];
        let mut args = Vec::with_capacity(5 + n);
        args.extend([
            n.to_string(),
            batch.capacity.to_string(),
            batch.hw_next.to_string(),
            batch.period_us.to_string(),
            batch.burst.to_string(),
        ]);
        // Each client once in KEYS (all in the room's hash slot); each join
        // names its client's index there.
        let mut index: HashMap<ClientKey, usize> = HashMap::new();
        for client in batch.clients {
            let k = client.map_or(0, |c| {
                *index.entry(c).or_insert_with(|| {
                    keys.push(client_key(room, c));
                    keys.len() - 1
                })
            });
            args.push(k.to_string());
        }
        let r: Vec<u64> = self.fcall_str("sluice_7_join", &keys, &args).await?;
        let (&[first, granted, serving, paused, sold_out, warming], limited) = r
            .split_first_chunk::<6>()
            .ok_or_else(|| StoreError::Protocol(format!("sluice_7_join gave {r:?}")))?;
        if limited.len() != n {
            return Err(StoreError::Protocol(format!(
                "sluice_7_join answered {} joins of {n}",
                limited.len()
            )));
        }
        Ok(JoinReply {
            first,
            granted: granted.min(n as u64) as u32,
            serving,
            paused: paused != 0,
            sold_out: sold_out != 0,
            warming: warming != 0,
            retry_after_ms: limited.to_vec(),
        })
    }

    async fn tick(&self, room: &str, a: &TickArgs) -> Result<Tick, StoreError> {
        let (adaptive, lo, hi) = a.adaptive.map_or((0, 0, 0), |(lo, hi)| (1, lo, hi));
        let [line, slots, released] = keys(room);
        let keys = [line, slots, released, format!("sluice2:{{{room}}}:limits")];
        let numbers = [
            u64::from(a.release_per_second),
            u64::from(a.burst),
            u64::from(a.max_active),
            a.claim_window_ms,
            a.hw_next,
            a.hw_serving,
            flag(a.sold_out_seen),
            u64::from(a.share_milli),
            a.pass_ttl_ms,
            adaptive,
            u64::from(lo),
            u64::from(hi),
            a.hw_tat_us,
            u64::from(a.members_live),
        ];
        let mut args: Vec<String> = numbers.iter().map(u64::to_string).collect();
        args.push(self.id.clone());
        args.push(a.queue_capacity.to_string());
        let r: Vec<String> = self.fcall_str("sluice_7_tick", &keys, &args).await?;
        let bad = || StoreError::Protocol(format!("sluice_7_tick gave {r:?}"));
        if r.len() != 25 {
            return Err(bad());
        }
        let numeric = |v: &String| v.parse::<u64>().map_err(|_| bad());
        let n: Vec<u64> = r[..13].iter().map(numeric).collect::<Result<_, _>>()?;
        let [next, serving, held, pending, paused, sold_out, version, released, now_ms, shows, no_shows, hold_ms, rate] =
            n[..]
        else {
            return Err(bad());
        };
        Ok(Tick {
            numbers: LineNumbers {
                next,
                serving,
                held,
                pending,
                shows,
                no_shows,
                hold_ms,
                share_milli: 0,
                paused: paused != 0,
                sold_out: sold_out != 0,
                version,
                read_at_ms: 0,
            },
            released: released as u32,
            store_now_ms: now_ms,
            rate_in_force: rate.min(u64::from(u32::MAX)) as u32,
            adaptive: stored_decision(&r[13..18]),
            tat_us: numeric(&r[18])?,
            born_ms: numeric(&r[19])?,
            limits: FleetLimits {
                rate: clamp32(numeric(&r[20])?),
                burst: clamp32(numeric(&r[21])?),
                max_active: clamp32(numeric(&r[22])?),
                queue_capacity: clamp32(numeric(&r[23])?),
            },
            tighter_by: r[24]
                .split(' ')
                .filter(|id| !id.is_empty())
                .map(str::to_owned)
                .collect(),
        })
    }

    async fn reseed(&self, room: &str, seed: &Reseed<'_>) -> Result<u64, StoreError> {
        let passes: Vec<&[(u64, u64)]> = seed.passes.chunks(RESEED_BATCH_MAX).collect();
        let spent: Vec<&[u64]> = seed.spent.chunks(2 * RESEED_BATCH_MAX).collect();
        // One call even with nothing to bring back: it carries the numbers
        // and counts this gateway as re-seeded (with its last call).
        let calls = passes.len().max(spent.len()).max(1);
        let mut changed = 0;
        for i in 0..calls {
            let these = passes.get(i).copied().unwrap_or(&[]);
            let mut args = vec![
                seed.pending_seen.to_string(),
                seed.lost_from.to_string(),
                seed.id.to_owned(),
                u8::from(i + 1 == calls).to_string(),
                seed.read_at_ms.to_string(),
                these.len().to_string(),
            ];
            args.extend(
                these
                    .iter()
                    .flat_map(|&(seq, ends)| [seq.to_string(), ends.to_string()]),
            );
            args.extend(
                spent
                    .get(i)
                    .into_iter()
                    .flat_map(|c| c.iter().map(u64::to_string)),
            );
            let n: u64 = self
                .fcall_str("sluice_7_reseed", &keys_with_spent(room), &args)
                .await?;
            changed += n;
        }
        Ok(changed)
    }

    async fn claim(&self, room: &str, seq: u64, a: &ClaimArgs) -> Result<ClaimReply, StoreError> {
        let r: Vec<u64> = self
            .fcall(
                "sluice_7_claim",
                &keys_with_spent(room),
                &[
                    seq,
                    a.pass_ttl_ms,
                    u64::from(a.max_active),
                    a.claim_window_ms,
                ],
            )
            .await?;
        match r[..] {
            [0, serving] => Ok(ClaimReply::Waiting { serving }),
            [1, expires_at_ms] => Ok(ClaimReply::Admitted { expires_at_ms }),
            [2, _] => Ok(ClaimReply::Gone),
            [3, _] => Ok(ClaimReply::Full),
            _ => Err(StoreError::Protocol(format!("sluice_7_claim gave {r:?}"))),
        }
    }

    async fn give_back(&self, room: &str, seq: u64, pass_ttl_ms: u64) -> Result<bool, StoreError> {
        let [line, slots, _] = keys(room);
        let freed: u64 = self
            .fcall("sluice_7_give_back", &[line, slots], &[seq, pass_ttl_ms])
            .await?;
        Ok(freed == 1)
    }

    async fn pass_end(
        &self,
        room: &str,
        seq: u64,
        ends_ms: u64,
        pass_ttl_ms: u64,
    ) -> Result<bool, StoreError> {
        let freed: u64 = self
            .fcall(
                "sluice_7_pass_end",
                &pass_keys(room),
                &[seq, ends_ms, pass_ttl_ms],
            )
            .await?;
        Ok(freed == 1)
    }

    async fn passes(&self, room: &str, a: &PassesArgs<'_>) -> Result<PassesReply, StoreError> {
        let mut args = vec![
            a.idle_ms.to_string(),
            a.pass_ttl_ms.to_string(),
            a.after.to_string(),
            a.touched.len().to_string(),
        ];
        args.extend(a.touched.iter().map(u64::to_string));
        let r: Vec<String> = self
            .fcall_str("sluice_7_passes", &pass_keys(room), &args)
            .await?;
        let bad = || StoreError::Protocol(format!("sluice_7_passes gave {} items", r.len()));
        let number = |v: &String| v.parse::<u64>().map_err(|_| bad());
        let [now, n_idle, rest @ ..] = &r[..] else {
            return Err(bad());
        };
        let n_idle = number(n_idle)? as usize;
        if rest.len() < n_idle || !(rest.len() - n_idle).is_multiple_of(3) {
            return Err(bad());
        }
        let (idle, entries) = rest.split_at(n_idle);
        Ok(PassesReply {
            now_ms: number(now)?,
            idle_ended: idle.iter().map(number).collect::<Result<_, _>>()?,
            ended: entries
                .chunks(3)
                .map(|e| Ok((number(&e[1])?, number(&e[2])?)))
                .collect::<Result<_, StoreError>>()?,
            last_id: entries.chunks(3).last().map(|e| e[0].clone()),
        })
    }

    async fn set_state(
        &self,
        room: &str,
        paused: bool,
        sold_out: bool,
        only_if_new: bool,
    ) -> Result<u64, StoreError> {
        let [line, _, _] = keys(room);
        self.fcall(
            "sluice_7_set_state",
            &[line],
            &[flag(paused), flag(sold_out), flag(only_if_new)],
        )
        .await
    }

    async fn adapt(
        &self,
        room: &str,
        id: &str,
        lease_ms: u64,
        after: &str,
        batch: &str,
    ) -> Result<AdaptReply, StoreError> {
        let [line, _, _] = keys(room);
        let [checkouts, leader] = adaptive_keys(room);
        let r: Vec<String> = self
            .fcall_str(
                "sluice_7_adapt",
                &[line, checkouts, leader],
                &[
                    id.to_string(),
                    lease_ms.to_string(),
                    after.to_string(),
                    batch.to_string(),
                ],
            )
            .await?;
        let bad = || StoreError::Protocol(format!("sluice_7_adapt gave {} items", r.len()));
        if r.len() < 8 || !r.len().is_multiple_of(2) {
            return Err(bad());
        }
        Ok(AdaptReply {
            now_ms: r[0].parse().map_err(|_| bad())?,
            leads: r[1] == "1",
            leader: r[2].clone(),
            stored: stored_decision(&r[3..8]),
            batches: r[8..]
                .chunks(2)
                .map(|b| (b[0].clone(), b[1].clone()))
                .collect(),
        })
    }

    async fn decide(
        &self,
        room: &str,
        id: &str,
        next: &Decision,
        previous_at_ms: Option<u64>,
    ) -> Result<bool, StoreError> {
        let [line, _, _] = keys(room);
        let [_, leader] = adaptive_keys(room);
        let [rate, reason, at, state] = fleet_rate::encode_decision(next);
        let written: u64 = self
            .fcall_str(
                "sluice_7_decide",
                &[line, leader],
                &[
                    id.to_string(),
                    rate,
                    reason,
                    at,
                    state,
                    previous_at_ms.map(|p| p.to_string()).unwrap_or_default(),
                ],
            )
            .await?;
        Ok(written == 1)
    }

    async fn heartbeat(&self, id: &str, region: &str) -> Result<Heartbeat, StoreError> {
        let r: Vec<String> = self
            .fcall_str(
                "sluice_7_heartbeat",
                &[FLEET_KEY.to_string()],
                &[id.to_string(), region.to_string()],
            )
            .await?;
        let bad = || StoreError::Protocol(format!("sluice_7_heartbeat gave {} items", r.len()));
        let (now, rest) = r.split_first().ok_or_else(bad)?;
        let now: u64 = now.parse().map_err(|_| bad())?;
        if rest.len() % 3 != 0 {
            return Err(bad());
        }
        let members = rest
            .chunks(3)
            .map(|m| {
                let seen: u64 = m[2].parse().map_err(|_| bad())?;
                Ok(Member {
                    id: m[0].clone(),
                    region: m[1].clone(),
                    last_seen_s: now.saturating_sub(seen) / 1000,
                })
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(Heartbeat {
            store_now_ms: now,
            members,
        })
    }
}
