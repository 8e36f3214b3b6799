//! A fleet room's record of spent join challenges, in Redis, so each
//! challenge admits one join on any gateway, and the fleet's join rate
//! that the adaptive difficulty reads.
//!
//! Keys of room `R` (its hash tag, as the line's):
//! - `sluice2:{R}:ch:<nonce>`: what `SpentState::encode` writes, with the
//!   challenge's remaining life (plus the clock difference allowed
//!   between gateways) as its TTL: reserved by `SET NX PX … GET` (one
//!   atomic step: taken, or what it held), then `SET XX KEEPTTL` with the
//!   place the join got, or `DEL` when it got none. The keys expire with
//!   their challenges, so Redis holds at most the spends of one TTL.
//! - `sluice2:{R}:jr:<unix second>`: joins that reached the challenge in
//!   that second, every gateway's added (`INCRBY`, kept 30 s); each
//!   gateway publishes its count and reads the window's sum back every
//!   [`RATE_EVERY`].
//!
//! Calls run on the fleet's runtime, never on a pingora worker, and are
//! awaited within [`super::redis::CALL_TIMEOUT`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use sluice_admission::challenge::rate::RATE_WINDOW_S;
use sluice_admission::challenge::{SpentBy, SpentState};
use sluice_admission::fleet::STORE_RETRY_AFTER_S;

use super::redis::{RedisStore, CALL_TIMEOUT};
use super::Fleet;
use crate::clock::now_ms;
use crate::error::{ApiError, ErrorCode};
use crate::queue::challenge::record::{Reserved, SpendRecord};
use crate::response::LocalResponse;

/// How often a gateway publishes its joins and reads the fleet's.
pub const RATE_EVERY: Duration = Duration::from_millis(250);
/// The clock difference allowed between gateways (the challenge's own
/// bound, `CHALLENGE_LIFETIME_MAX_S`, allows as much).
const SKEW_MS: u64 = 5_000;

struct Shared {
    fleet: Arc<Fleet>,
    redis: Arc<RedisStore>,
    room: String,
    /// Joins counted here and not yet published.
    unpublished: AtomicU64,
    /// The fleet's joins over the window, as last read (`u64::MAX`: not
    /// read yet, or the read failed).
    fleet_joins: AtomicU64,
}

/// A fleet room's record; its rate task stops when this drops.
pub struct FleetRecord {
    shared: Arc<Shared>,
}

impl FleetRecord {
    pub fn new(fleet: &Arc<Fleet>, room: &str) -> Self {
        let shared = Arc::new(Shared {
            fleet: fleet.clone(),
            redis: fleet.redis.clone(),
            room: room.to_owned(),
            unpublished: AtomicU64::new(0),
            fleet_joins: AtomicU64::new(u64::MAX),
        });
        fleet.rt.spawn(rate_loop(Arc::downgrade(&shared)));
        Self { shared }
    }

    fn key(&self, nonce: &[u8; 16]) -> String {
        format!("sluice2:{{{}}}:ch:{}", self.shared.room, hex::encode(nonce))
    }

    /// Runs `cmd` on the fleet's runtime within the call timeout.
    async fn run<T>(&self, cmd: redis::Cmd) -> Result<T, String>
    where
        T: redis::FromRedisValue + Send + 'static,
    {
        let redis = self.shared.redis.clone();
        let call = self.shared.fleet.rt.spawn(async move {
            let mut conn = redis.connection().await.map_err(|e| e.to_string())?;
            cmd.query_async::<T>(&mut conn)
                .await
                .map_err(|e| e.to_string())
        });
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => Err(format!("task: {e}")),
            Err(_) => Err("timed out".into()),
        }
    }
}

fn unavailable() -> LocalResponse {
    LocalResponse::error(
        &ApiError::new(
            ErrorCode::StoreUnavailable,
            "The line cannot take new places right now; please try again shortly.",
        )
        .retry_after(STORE_RETRY_AFTER_S as u32),
    )
}

#[async_trait]
impl SpendRecord for FleetRecord {
    async fn reserve(
        &self,
        nonce: [u8; 16],
        solution_tag: u64,
        expires_at_s: u64,
        now_ms: u64,
    ) -> Result<(Option<SpentState>, Option<Reserved>), LocalResponse> {
        let ttl_ms = (expires_at_s * 1000).saturating_sub(now_ms) + SKEW_MS;
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.key(&nonce))
            .arg(SpentState::Pending { solution_tag }.encode())
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms)
            .arg("GET");
        let held: Option<String> = self.run(cmd).await.map_err(|e| {
            tracing::warn!(room = self.shared.room, "spent challenge not read: {e}");
            unavailable()
        })?;
        match held {
            None => Ok((
                None,
                Some(Reserved {
                    nonce,
                    solution_tag,
                    expires_at_s,
                }),
            )),
            Some(text) => match SpentState::decode(&text) {
                Some(state) => Ok((Some(state), None)),
                None => {
                    tracing::error!(room = self.shared.room, "a spent challenge reads {text:?}");
                    Err(unavailable())
                }
            },
        }
    }

    async fn confirm(&self, reserved: Reserved, by: SpentBy) {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.key(&reserved.nonce))
            .arg(SpentState::Spent(by).encode())
            .arg("XX")
            .arg("KEEPTTL");
        if let Err(e) = self.run::<Option<String>>(cmd).await {
            // The challenge stays reserved until it expires: a retry is
            // told to wait, any other use is refused.
            tracing::warn!(room = self.shared.room, "spent challenge not recorded: {e}");
        }
    }

    async fn release(&self, reserved: Reserved) {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(self.key(&reserved.nonce));
        if let Err(e) = self.run::<u64>(cmd).await {
            tracing::warn!(room = self.shared.room, "challenge not given back: {e}");
        }
    }

    fn count_join(&self, _now_ms: u64) {
        self.shared.unpublished.fetch_add(1, Ordering::Relaxed);
    }

    fn joins_in_window(&self) -> Option<u64> {
        Some(self.shared.fleet_joins.load(Ordering::Relaxed)).filter(|&n| n != u64::MAX)
    }
}

/// Publishes this gateway's joins into the current second's counter and
/// reads the window's sum back, until the record drops.
async fn rate_loop(shared: Weak<Shared>) {
    let mut every = tokio::time::interval(RATE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let n = shared.unpublished.swap(0, Ordering::Relaxed);
        let now_s = now_ms() / 1000;
        let key = |s: u64| format!("sluice2:{{{}}}:jr:{s}", shared.room);
        let mut pipe = redis::pipe();
        if n > 0 {
            pipe.cmd("INCRBY").arg(key(now_s)).arg(n).ignore();
            pipe.cmd("EXPIRE").arg(key(now_s)).arg(30).ignore();
        }
        let window: Vec<String> = (0..RATE_WINDOW_S).map(|back| key(now_s - back)).collect();
        pipe.cmd("MGET").arg(&window);
        let read = async {
            let mut conn = shared.redis.connection().await.map_err(|e| e.to_string())?;
            pipe.query_async::<(Vec<Option<u64>>,)>(&mut conn)
                .await
                .map_err(|e| e.to_string())
        };
        match tokio::time::timeout(CALL_TIMEOUT, read).await {
            Ok(Ok((counts,))) => {
                let sum = counts.into_iter().flatten().sum();
                shared.fleet_joins.store(sum, Ordering::Relaxed);
            }
            _ => {
                // Not published: counted again next time; the rate falls
                // back on this gateway's own until the store answers.
                shared.unpublished.fetch_add(n, Ordering::Relaxed);
                shared.fleet_joins.store(u64::MAX, Ordering::Relaxed);
            }
        }
    }
}
