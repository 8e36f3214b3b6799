//! Joins per client address: one script cannot take a thousand places.
//!
//! GCRA (the "virtual scheduling" form of a token bucket): per client we
//! keep only the theoretical arrival time of its next join, 8 bytes. A
//! client may join `burst` times at once and then once per
//! `60 s / per_minute`.
//!
//! The table holds at most `clients_max` addresses. When it is full, clients
//! whose allowance has fully come back are forgotten (they carry no
//! information). If every tracked client is still active the new one is let
//! through untracked and counted: under an attack from that many addresses
//! the queue's own bounds are what protects the backend, and refusing
//! everyone new would turn the limiter into the outage.

use std::collections::HashMap;
use std::net::IpAddr;

use thiserror::Error;

/// Least time between two table sweeps when the table is full of active
/// clients, so a flood of new addresses does not make every join a sweep.
const RESCAN_AFTER_MS: u64 = 1_000;

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

/// `429 rate_limited`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("too many joins from this client")]
pub struct JoinRateLimited {
    pub retry_after_s: u64,
}

#[derive(Debug)]
pub struct JoinLimiter {
    interval_ms: u64,
    tolerance_ms: u64,
    clients_max: usize,
    next_join_at_ms: HashMap<ClientKey, u64>,
    next_scan_ms: u64,
    untracked: u64,
}

impl JoinLimiter {
    /// `per_minute` joins per client per minute after a first `burst`;
    /// at most `clients_max` clients remembered.
    pub fn new(per_minute: u32, burst: u32, clients_max: usize) -> Self {
        let interval_ms = 60_000 / u64::from(per_minute.max(1));
        Self {
            interval_ms,
            tolerance_ms: interval_ms * u64::from(burst.max(1) - 1),
            clients_max,
            next_join_at_ms: HashMap::new(),
            next_scan_ms: 0,
            untracked: 0,
        }
    }

    /// Allows or refuses one join by `client` at `now_ms`.
    pub fn check(&mut self, client: ClientKey, now_ms: u64) -> Result<(), JoinRateLimited> {
        let tat = match self.next_join_at_ms.get(&client) {
            Some(&tat) => tat.max(now_ms),
            None => {
                if self.next_join_at_ms.len() >= self.clients_max && !self.make_room(now_ms) {
                    self.untracked += 1;
                    return Ok(());
                }
                now_ms
            }
        };
        let early_ms = tat - now_ms;
        if early_ms > self.tolerance_ms {
            let wait_ms = early_ms - self.tolerance_ms;
            return Err(JoinRateLimited {
                retry_after_s: wait_ms.div_ceil(1000),
            });
        }
        self.next_join_at_ms.insert(client, tat + self.interval_ms);
        Ok(())
    }

    /// Forgets clients whose allowance is whole again; whether there is
    /// room now.
    fn make_room(&mut self, now_ms: u64) -> bool {
        if now_ms >= self.next_scan_ms {
            self.next_join_at_ms.retain(|_, &mut tat| tat > now_ms);
            self.next_scan_ms = now_ms + RESCAN_AFTER_MS;
        }
        self.next_join_at_ms.len() < self.clients_max
    }

    /// Clients currently remembered.
    pub fn tracked(&self) -> usize {
        self.next_join_at_ms.len()
    }

    /// Joins let through because the table was full of active clients.
    pub fn untracked_total(&self) -> u64 {
        self.untracked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(last: u8) -> ClientKey {
        ClientKey::from_ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)))
    }

    #[test]
    fn burst_then_the_rate_per_client() {
        let mut l = JoinLimiter::new(6, 3, 100); // one per 10 s after 3
        for _ in 0..3 {
            assert!(l.check(v4(1), 0).is_ok());
        }
        assert_eq!(
            l.check(v4(1), 0),
            Err(JoinRateLimited { retry_after_s: 10 })
        );
        assert!(l.check(v4(2), 0).is_ok(), "other clients are not affected");
        assert!(l.check(v4(1), 9_999).is_err());
        assert!(l.check(v4(1), 10_000).is_ok());
        assert!(l.check(v4(1), 10_000).is_err());
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
    }

    #[test]
    fn table_is_bounded_and_forgets_idle_clients() {
        let mut l = JoinLimiter::new(60, 1, 2);
        assert!(l.check(v4(1), 0).is_ok());
        assert!(l.check(v4(2), 0).is_ok());
        // Full of active clients: a third goes through untracked.
        assert!(l.check(v4(3), 10).is_ok());
        assert_eq!((l.tracked(), l.untracked_total()), (2, 1));
        // A second later both allowances are back, so they can be forgotten.
        assert!(l.check(v4(3), 1_500).is_ok());
        assert_eq!(l.tracked(), 1);
        assert!(l.check(v4(3), 1_600).is_err());
    }
}
