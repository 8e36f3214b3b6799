//! The system under test as a fleet: the gateways, and for `[fleet]` the
//! throwaway Redis and PostgreSQL they share, each gateway's link to each
//! store through a [`Relay`] of its own (so one gateway can be cut off while
//! the others go on). A lone gateway, started or remote, is a fleet of one
//! with no stores.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};

use super::cpu::Meter;
use super::gateway::{new_key, Membership, Target};
use super::scenario::{Cut, Scenario, Store};
use crate::relay::{Link, Relay};
use crate::throwaway::{Durability, Persistence, ThrowawayPostgres, ThrowawayRedis};

/// Every gateway of the run and what they share.
pub struct Fleet {
    /// Gateway `i` of the scenario's faults is `gateways[i]`.
    pub gateways: Vec<Arc<Target>>,
    redis: Option<Arc<Mutex<ThrowawayRedis>>>,
    postgres: Option<Arc<ThrowawayPostgres>>,
    /// `relays[i]`: gateway `i`'s links (Redis, PostgreSQL).
    relays: Vec<(Option<Relay>, Option<Relay>)>,
}

impl Fleet {
    /// One target the harness does not own the stores of.
    pub fn single(target: Target) -> Fleet {
        Fleet {
            gateways: vec![Arc::new(target)],
            redis: None,
            postgres: None,
            relays: vec![(None, None)],
        }
    }

    /// Starts the stores `[fleet]` asks for, then the gateways one by one,
    /// each configured with its own relays' addresses.
    pub async fn start(sluice: &Path, paysim: Option<&Path>, scenario: &Scenario) -> Result<Fleet> {
        let Some(setup) = scenario.fleet.clone() else {
            let target = Target::start(sluice, paysim, scenario, &Membership::alone()).await?;
            return Ok(Fleet::single(target));
        };
        let redis = if setup.redis {
            // Append-only, fsync always: a restart "with its data" keeps
            // every write Redis acknowledged; one "without" wipes the files.
            let r = tokio::task::spawn_blocking(|| ThrowawayRedis::start(Persistence::Aof))
                .await?
                .context("starting the fleet's Redis")?;
            Some(Arc::new(Mutex::new(r)))
        } else {
            None
        };
        let (postgres, database) = if setup.postgres {
            let (pg, db) = tokio::task::spawn_blocking(|| -> Result<_> {
                let pg = ThrowawayPostgres::start(Durability::Full)?;
                let db = pg.create_database()?;
                Ok((pg, db))
            })
            .await?
            .context("starting the fleet's PostgreSQL")?;
            (Some(Arc::new(pg)), Some(db))
        } else {
            (None, None)
        };
        let key = new_key();
        // paysim runs once, next to gateway 0 (its webhooks go there); the
        // other gateways are given the same `[payments]` table.
        let mut payments = String::new();
        let mut fleet = Fleet {
            gateways: Vec::new(),
            redis,
            postgres,
            relays: Vec::new(),
        };
        for g in 0..setup.gateways {
            let redis_relay = match &fleet.redis {
                Some(r) => Some(Relay::start(loopback(lock(r).port()))?),
                None => None,
            };
            let pg_relay = match &fleet.postgres {
                Some(pg) => Some(Relay::start(loopback(pg.port()))?),
                None => None,
            };
            let mut cluster = String::from("\n[cluster]\n");
            if let Some(relay) = &redis_relay {
                cluster.push_str(&format!("redis_url = \"redis://{}/\"\n", relay.addr()));
            }
            if let (Some(relay), Some(db)) = (&pg_relay, &database) {
                cluster.push_str(&format!(
                    "postgres_url = \"{}\"\n",
                    through(db, relay.addr())
                ));
            }
            cluster.push_str(&payments);
            let member = Membership {
                key: key.clone(),
                cluster,
                env: Vec::new(),
            };
            let paysim = if g == 0 { paysim } else { None };
            let target = Target::start(sluice, paysim, scenario, &member).await?;
            if g == 0 && target.paysim.is_some() {
                payments = payments_table(&target.config_text().unwrap_or_default());
            }
            fleet.gateways.push(Arc::new(target));
            fleet.relays.push((redis_relay, pg_relay));
        }
        Ok(fleet)
    }

    /// The first gateway (the one of a lone-gateway run).
    pub fn first(&self) -> &Arc<Target> {
        &self.gateways[0]
    }

    /// Is this a fleet of several gateways on shared stores?
    pub fn shared(&self) -> bool {
        self.redis.is_some() || self.postgres.is_some()
    }

    /// The processes to charge a step's CPU time to: every gateway the
    /// harness started, and the PostgreSQL server.
    pub fn meter(&self) -> Meter {
        Meter {
            gateways: self.gateways.iter().filter_map(|g| g.pid()).collect(),
            postgres: self.postgres.as_ref().and_then(|pg| pg.pid()),
        }
    }

    /// Every gateway's public URL, in order.
    pub fn publics(&self) -> Vec<String> {
        self.gateways.iter().map(|g| g.public.clone()).collect()
    }

    /// SIGKILL of Redis, `down` without it, start again on the same port
    /// with its append-only file, or wiped.
    pub async fn restart_redis(&self, keep_data: bool, down: Duration) -> Result<()> {
        let redis = self.redis.clone().context("the fleet has no Redis")?;
        let r = redis.clone();
        tokio::task::spawn_blocking(move || lock(&r).kill()).await?;
        tokio::time::sleep(down).await;
        tokio::task::spawn_blocking(move || lock(&redis).restart(!keep_data)).await?
    }

    /// PostgreSQL stopped at once (a crash), `down` without it, started
    /// again with its data.
    pub async fn restart_postgres(&self, down: Duration) -> Result<()> {
        let pg = self
            .postgres
            .clone()
            .context("the fleet has no PostgreSQL")?;
        let p = pg.clone();
        tokio::task::spawn_blocking(move || p.stop()).await?;
        tokio::time::sleep(down).await;
        tokio::task::spawn_blocking(move || pg.restart()).await?
    }

    /// Passes collected so far across the fleet, as Redis itself holds the
    /// count, not as a gateway last read it; `None` without a Redis or
    /// while it does not answer.
    pub async fn collected_in_redis(&self, room: &str) -> Option<u64> {
        let redis = self.redis.clone()?;
        // `shows`: released places whose pass was collected, fleet-wide
        // (`sluice_2`'s room hash). Releases run ahead of it by the
        // measured no-show make-up; collections are what the rate bounds.
        let line = format!("HGET sluice2:{{{room}}} shows");
        let reply = tokio::task::spawn_blocking(move || lock(&redis).command(&line))
            .await
            .ok()?
            .ok()?;
        Some(bulk_u64(&reply).unwrap_or(0))
    }

    /// Gateway `gateway`'s link to `store` set to `link`.
    pub fn set_link(&self, gateway: usize, store: Store, link: Link) -> Result<()> {
        let (redis, pg) = self
            .relays
            .get(gateway)
            .with_context(|| format!("there is no gateway {gateway}"))?;
        let relay = match store {
            Store::Redis => redis.as_ref(),
            Store::Postgres => pg.as_ref(),
        }
        .with_context(|| format!("gateway {gateway} has no link to {store:?}"))?;
        relay.set(link);
        Ok(())
    }
}

/// The `[payments]` table at the end of a gateway config the harness
/// wrote (it is appended last), or nothing.
fn payments_table(config: &str) -> String {
    config
        .find("\n[payments]\n")
        .map(|at| config[at..].to_string())
        .unwrap_or_default()
}

/// The relay state a cut stands for.
pub fn link_of(cut: Cut) -> Link {
    match cut {
        Cut::Refused => Link::Refused,
        Cut::Blackholed => Link::Blackholed,
    }
}

/// The number in a RESP bulk-string reply (`$3\r\n120\r\n`).
fn bulk_u64(reply: &str) -> Option<u64> {
    reply
        .strip_prefix('$')?
        .split("\r\n")
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// `url` (a `postgres://user@host:port/db?...` URL) with its host and port
/// replaced by `addr`.
fn through(url: &str, addr: SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let (userinfo, rest) = rest.split_once('@').map_or(("", rest), |(u, r)| (u, r));
    let path = rest.find('/').map_or("", |i| &rest[i..]);
    let at = if userinfo.is_empty() { "" } else { "@" };
    format!("{scheme}://{userinfo}{at}{addr}{path}")
}

fn lock(m: &Mutex<ThrowawayRedis>) -> std::sync::MutexGuard<'_, ThrowawayRedis> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payments_table_is_the_tail_of_the_config() {
        let config = "[gateway]\nlisten = \"x\"\n\n[cluster]\nredis_url = \"r\"\n\n[payments]\nprovider = \"http\"\nurl = \"u\"\n";
        assert_eq!(
            payments_table(config),
            "\n[payments]\nprovider = \"http\"\nurl = \"u\"\n"
        );
        assert_eq!(payments_table("[gateway]\n"), "");
    }

    #[test]
    fn a_bulk_reply_gives_its_number() {
        assert_eq!(bulk_u64("$3\r\n120\r\n"), Some(120));
        assert_eq!(bulk_u64("$-1\r\n"), None);
        assert_eq!(bulk_u64("-ERR no\r\n"), None);
    }

    #[test]
    fn a_store_url_is_pointed_at_the_relay() {
        let addr: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        assert_eq!(
            through(
                "postgres://postgres@127.0.0.1:5999/t1_0?connect_timeout=2",
                addr
            ),
            "postgres://postgres@127.0.0.1:4000/t1_0?connect_timeout=2"
        );
    }
}
