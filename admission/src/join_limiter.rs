//! Joins per client address: one script cannot take a thousand places.
//!
//! A keyed [`governor`] GCRA limiter: a client may join `burst` times at
//! once and then once per `60 s / per_minute`, computed in nanoseconds, so
//! every accepted `joins_per_minute_per_client` (up to 100,000, one join
//! per 600 µs) means what it says.
//!
//! Forgetting idle clients is [`JoinLimiter::retain_recent`], which the
//! gateway calls from its release worker on a timer, never on the join
//! path. The table holds at most `clients_max` addresses (plus one per join
//! racing at the bound). A client not in a full table is checked as a fresh
//! client, which a GCRA always lets through, and is not remembered: it is
//! counted in [`JoinLimiter::untracked_total`]. Under an attack from that
//! many addresses the queue's own bound is what protects the backend, and
//! refusing everyone new would turn the limiter into the outage; the next
//! `retain_recent` makes room again as soon as clients go idle.
//!
//! A fleet counts the same limit once for all its gateways: the join
//! batch's Redis Function keeps one GCRA per client ([`fleet_client_join`],
//! the arithmetic `sluice.lua` mirrors, on Redis's clock), so joins spread
//! over N gateways get the limit once, not N times. Each gateway still runs
//! its own limiter first: it refuses only a client over the limit at this
//! gateway alone, so over the fleet too, and spares Redis a flood.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::{DefaultKeyedStateStore, ShrinkableKeyedStateStore};
use governor::state::StateStore;
use governor::{Quota, RateLimiter};
use thiserror::Error;

/// A client as the limiter sees it: an IPv4 address, or an IPv6 /64 (one
/// household or phone usually holds a whole /64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientKey(u128);

impl ClientKey {
    pub fn from_ip(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self(u128::from(u32::from(v4))),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self(u128::from(u32::from(v4))),
                None => Self((u128::from(v6) >> 64) << 64 | 1),
            },
        }
    }
}

impl std::fmt::Display for ClientKey {
    /// The key as the fleet's store names it: 32 hex digits.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// The fleet's step between two joins of one client, in microseconds,
/// rounded up (rounding never lets one more through).
pub fn client_period_us(per_minute: NonZeroU32) -> u64 {
    60_000_000u64.div_ceil(u64::from(per_minute.get()))
}

/// One join of a client whose GCRA state is `tat_us` (0: none), at
/// `now_us`, `burst` at once then one per `period_us`: `Ok(new tat)`, or
/// `Err(wait in µs)` until it would be allowed (the state unchanged). The
/// same arithmetic as `client_join` in the gateway's `sluice.lua`.
pub fn fleet_client_join(tat_us: u64, now_us: u64, period_us: u64, burst: u64) -> Result<u64, u64> {
    let next = tat_us.max(now_us) + period_us;
    let over = (next - now_us).saturating_sub(burst * period_us);
    if over > 0 {
        Err(over)
    } else {
        Ok(next)
    }
}

/// `429 rate_limited`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("too many joins from this client")]
pub struct JoinRateLimited {
    pub retry_after_s: u64,
}

/// governor's default keyed store with a bound on its keys.
#[derive(Debug)]
struct BoundedStore {
    keys: DefaultKeyedStateStore<ClientKey>,
    clients_max: usize,
    untracked: Arc<AtomicU64>,
}

impl StateStore for BoundedStore {
    type Key = ClientKey;

    fn measure_and_replace<T, F, E>(&self, key: &ClientKey, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        if self.keys.len() >= self.clients_max && !self.keys.contains_key(key) {
            // Decided as a fresh client, and not remembered.
            self.untracked.fetch_add(1, Ordering::Relaxed);
            return f(None).map(|(outcome, _)| outcome);
        }
        self.keys.measure_and_replace(key, f)
    }
}

/// Joins allowed per client, with a bounded table of clients.
#[derive(Debug)]
pub struct JoinLimiter<C: Clock = DefaultClock> {
    limiter: RateLimiter<ClientKey, BoundedStore, C, NoOpMiddleware<C::Instant>>,
    /// Shared with the store, which the limiter owns.
    untracked: Arc<AtomicU64>,
}

impl JoinLimiter<DefaultClock> {
    /// `per_minute` joins per client per minute after a first `burst`;
    /// at most `clients_max` clients remembered.
    pub fn new(per_minute: NonZeroU32, burst: NonZeroU32, clients_max: usize) -> Self {
        Self::with_clock(per_minute, burst, clients_max, DefaultClock::default())
    }
}

impl<C: Clock> JoinLimiter<C> {
    /// Like [`JoinLimiter::new`], on `clock` (tests use governor's
    /// `FakeRelativeClock`).
    pub fn with_clock(
        per_minute: NonZeroU32,
        burst: NonZeroU32,
        clients_max: usize,
        clock: C,
    ) -> Self {
        let period = Duration::from_nanos(60_000_000_000 / u64::from(per_minute.get()));
        let quota = Quota::with_period(period)
            .expect("60 s / a u32 is at least 13 ns")
            .allow_burst(burst);
        let untracked = Arc::new(AtomicU64::new(0));
        let store = BoundedStore {
            keys: DefaultKeyedStateStore::default(),
            clients_max,
            untracked: untracked.clone(),
        };
        Self {
            limiter: RateLimiter::new(quota, store, clock),
            untracked,
        }
    }

    /// Allows or refuses one join by `client`, now.
    pub fn check(&self, client: ClientKey) -> Result<(), JoinRateLimited> {
        self.limiter.check_key(&client).map_err(|not_until| {
            let wait = not_until.wait_time_from(self.limiter.clock().now());
            let retry_after_s = wait.as_nanos().div_ceil(1_000_000_000).max(1);
            JoinRateLimited {
                retry_after_s: u64::try_from(retry_after_s).unwrap_or(u64::MAX),
            }
        })
    }

    /// Forgets clients whose allowance is whole again. O(clients): called
    /// on a timer, off the join path.
    pub fn retain_recent(&self) {
        self.limiter.retain_recent();
    }

    /// Clients currently remembered.
    pub fn tracked(&self) -> usize {
        self.limiter.len()
    }

    /// Joins decided as a fresh client because the table was full.
    pub fn untracked_total(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }
}

impl ShrinkableKeyedStateStore<ClientKey> for BoundedStore {
    fn retain_recent(&self, drop_below: Nanos) {
        self.keys.retain_recent(drop_below);
    }

    fn shrink_to_fit(&self) {
        ShrinkableKeyedStateStore::shrink_to_fit(&self.keys);
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(last: u8) -> ClientKey {
        ClientKey::from_ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)))
    }

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    fn limiter(
        per_minute: u32,
        burst: u32,
        max: usize,
    ) -> (JoinLimiter<FakeRelativeClock>, FakeRelativeClock) {
        let clock = FakeRelativeClock::default();
        (
            JoinLimiter::with_clock(nz(per_minute), nz(burst), max, clock.clone()),
            clock,
        )
    }

    #[test]
    fn the_fleets_arithmetic_gives_the_same_burst_and_rate_as_governor() {
        let (l, clock) = limiter(6, 3, 100);
        let period = client_period_us(nz(6));
        assert_eq!(period, 10_000_000);
        let mut tat = 0;
        let mut now = 1_000_000_000_000u64;
        for step in 0..40 {
            let fleet = fleet_client_join(tat, now, period, 3);
            let local = l.check(v4(1));
            assert_eq!(fleet.is_ok(), local.is_ok(), "step {step}");
            match (fleet, local) {
                (Ok(next), _) => tat = next,
                (Err(wait_us), Err(refused)) => {
                    assert_eq!(
                        wait_us.div_ceil(1_000_000),
                        refused.retry_after_s,
                        "step {step}"
                    )
                }
                _ => unreachable!(),
            }
            // Irregular arrivals: bursts and gaps.
            let gap_ms = [0, 0, 2_500, 7_000, 0, 11_000, 400][step % 7];
            clock.advance(Duration::from_millis(gap_ms));
            now += gap_ms * 1000;
        }
    }

    #[test]
    fn the_fleets_period_rounds_up_and_keys_are_32_hex_digits() {
        assert_eq!(client_period_us(nz(7)), 8_571_429);
        assert_eq!(client_period_us(nz(100_000)), 600);
        assert_eq!(v4(1).to_string(), format!("{:032x}", 0x0a00_0001u32));
        assert_eq!(v4(1).to_string().len(), 32);
    }

    #[test]
    fn burst_then_the_rate_per_client() {
        let (l, clock) = limiter(6, 3, 100); // one per 10 s after 3
        for _ in 0..3 {
            assert!(l.check(v4(1)).is_ok());
        }
        assert_eq!(l.check(v4(1)), Err(JoinRateLimited { retry_after_s: 10 }));
        assert!(l.check(v4(2)).is_ok(), "other clients are not affected");
        clock.advance(Duration::from_millis(9_999));
        assert_eq!(l.check(v4(1)), Err(JoinRateLimited { retry_after_s: 1 }));
        clock.advance(Duration::from_millis(1));
        assert!(l.check(v4(1)).is_ok());
        assert!(l.check(v4(1)).is_err());
    }

    /// Every value validation accepts is a real limit, the largest too:
    /// 100,000 a minute is a burst of 100,000 and then one per 600 µs.
    #[test]
    fn the_largest_accepted_rate_still_limits() {
        let (l, clock) = limiter(100_000, 100_000, 10);
        for i in 0..100_000 {
            assert!(l.check(v4(1)).is_ok(), "join {i} of the burst");
        }
        assert_eq!(l.check(v4(1)), Err(JoinRateLimited { retry_after_s: 1 }));
        clock.advance(Duration::from_micros(599));
        assert!(l.check(v4(1)).is_err());
        clock.advance(Duration::from_micros(1));
        assert!(l.check(v4(1)).is_ok());
        assert!(l.check(v4(1)).is_err());
    }

    /// The other end and the values between: a burst of exactly `burst`,
    /// then one join per `60 s / per_minute`.
    #[test]
    fn every_rate_means_what_it_says() {
        for per_minute in [1, 7, 60, 1_000, 60_000, 60_001, 99_999, 100_000] {
            let (l, clock) = limiter(per_minute, 5, 10);
            for _ in 0..5 {
                assert!(l.check(v4(1)).is_ok(), "{per_minute}/min burst");
            }
            assert!(l.check(v4(1)).is_err(), "{per_minute}/min after burst");
            let period = Duration::from_nanos(60_000_000_000 / u64::from(per_minute));
            clock.advance(period - Duration::from_nanos(1));
            assert!(l.check(v4(1)).is_err(), "{per_minute}/min just before");
            clock.advance(Duration::from_nanos(1));
            assert!(l.check(v4(1)).is_ok(), "{per_minute}/min one period on");
            assert!(l.check(v4(1)).is_err(), "{per_minute}/min only one");
        }
    }

    #[test]
    fn ipv6_clients_are_their_slash_64() {
        let a: Ipv6Addr = "2001:db8:1:2::1".parse().unwrap();
        let b: Ipv6Addr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: Ipv6Addr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(ClientKey::from_ip(a.into()), ClientKey::from_ip(b.into()));
        assert_ne!(ClientKey::from_ip(a.into()), ClientKey::from_ip(c.into()));
        let mapped: Ipv6Addr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(ClientKey::from_ip(mapped.into()), v4(1));
        // One /64 shares one budget.
        let (l, _clock) = limiter(60, 1, 10);
        assert!(l.check(ClientKey::from_ip(a.into())).is_ok());
        assert!(l.check(ClientKey::from_ip(b.into())).is_err());
        assert!(l.check(ClientKey::from_ip(c.into())).is_ok());
    }

    #[test]
    fn table_is_bounded_and_retain_recent_forgets_idle_clients() {
        let (l, clock) = limiter(60, 1, 2);
        assert!(l.check(v4(1)).is_ok());
        assert!(l.check(v4(2)).is_ok());
        // Full of active clients: a third goes through, untracked, every
        // time, while the tracked ones stay limited.
        assert!(l.check(v4(3)).is_ok());
        assert!(l.check(v4(3)).is_ok());
        assert!(l.check(v4(1)).is_err());
        assert_eq!((l.tracked(), l.untracked_total()), (2, 2));
        // Nothing is forgotten while allowances are still in use.
        l.retain_recent();
        assert_eq!(l.tracked(), 2);
        // Two seconds on, both allowances are whole again: forgotten.
        clock.advance(Duration::from_secs(2));
        l.retain_recent();
        assert_eq!(l.tracked(), 0);
        assert!(l.check(v4(3)).is_ok());
        assert!(l.check(v4(3)).is_err(), "now tracked and limited");
        assert_eq!(l.tracked(), 1);
    }
}
