//! The load balancer in front of the fleet, as shoppers meet it: sticky
//! sessions. A shopper is placed on a gateway when it arrives (spread
//! evenly) and stays there until a request fails at the connection level
//! (no HTTP answer: refused, reset, timed out) or the balancer's health
//! check takes the gateway out (`/readyz` not 200, every
//! [`HEALTH_EVERY`]); then it moves to the next gateway in rotation,
//! carrying its ticket, pass and Idempotency-Key (they are the shopper's,
//! not the gateway's).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the balancer checks each gateway's `/readyz`.
pub const HEALTH_EVERY: Duration = Duration::from_millis(1000);
/// One health check's timeout.
pub const HEALTH_TIMEOUT: Duration = Duration::from_millis(800);

/// The gateways' public URLs and whether each is in rotation.
pub struct Balancer {
    publics: Vec<String>,
    admins: Vec<String>,
    in_rotation: Vec<AtomicBool>,
}

impl Balancer {
    pub fn new(publics: Vec<String>, admins: Vec<String>) -> Balancer {
        let in_rotation = publics.iter().map(|_| AtomicBool::new(true)).collect();
        Balancer {
            publics,
            admins,
            in_rotation,
        }
    }

    pub fn len(&self) -> usize {
        self.publics.len()
    }

    pub fn is_empty(&self) -> bool {
        self.publics.is_empty()
    }

    /// Gateway `g`'s public URL.
    pub fn public(&self, g: usize) -> &str {
        &self.publics[g]
    }

    pub fn in_rotation(&self, g: usize) -> bool {
        self.in_rotation[g].load(Ordering::Relaxed)
    }

    /// Where shopper `index` starts: round robin.
    pub fn first_for(&self, index: u32) -> usize {
        index as usize % self.len()
    }

    /// Another gateway than `from` for shopper `index`, in rotation: the
    /// shoppers of a gateway that failed spread over the others (as a
    /// balancer hashing sessions would), the next one up when the first
    /// choice is out too; `from`'s successor when none is in rotation (a
    /// balancer with nothing healthy still forwards somewhere).
    pub fn next_after(&self, from: usize, index: u32) -> usize {
        let n = self.len();
        let offset = 1 + index as usize % (n - 1).max(1);
        (0..n - 1)
            .map(|k| (from + offset + k) % n)
            .map(|g| if g == from { (g + 1) % n } else { g })
            .find(|&g| self.in_rotation(g))
            .unwrap_or((from + 1) % n)
    }

    /// Checks every gateway's `/readyz` until `stop` fires.
    pub async fn health_checks(
        self: Arc<Self>,
        http: reqwest::Client,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        if self.len() < 2 {
            return;
        }
        let mut tick = tokio::time::interval(HEALTH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => return,
            }
            for (g, admin) in self.admins.iter().enumerate() {
                let ok = http
                    .get(format!("{admin}/readyz"))
                    .timeout(HEALTH_TIMEOUT)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                self.in_rotation[g].store(ok, Ordering::Relaxed);
            }
        }
    }
}

/// One shopper's place at the balancer.
#[derive(Debug, Clone, Copy)]
pub struct Sticky {
    index: u32,
    pub gateway: usize,
    /// Moves so far.
    pub moves: u32,
}

impl Sticky {
    pub fn new(lb: &Balancer, index: u32) -> Sticky {
        Sticky {
            index,
            gateway: lb.first_for(index),
            moves: 0,
        }
    }

    /// The gateway for the next request: this one, unless the balancer
    /// took it out of rotation.
    pub fn pick(&mut self, lb: &Balancer) -> usize {
        if !lb.in_rotation(self.gateway) && lb.len() > 1 {
            self.move_on(lb);
        }
        self.gateway
    }

    /// After a request that failed at the connection level.
    pub fn failed(&mut self, lb: &Balancer) {
        if lb.len() > 1 {
            self.move_on(lb);
        }
    }

    fn move_on(&mut self, lb: &Balancer) {
        let to = lb.next_after(self.gateway, self.index);
        if to != self.gateway {
            self.gateway = to;
            self.moves += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lb(n: usize) -> Balancer {
        let urls: Vec<String> = (0..n).map(|i| format!("http://127.0.0.1:{i}")).collect();
        Balancer::new(urls.clone(), urls)
    }

    #[test]
    fn a_shopper_sticks_until_a_failure_then_moves_to_a_gateway_in_rotation() {
        let lb = lb(3);
        let mut s = Sticky::new(&lb, 4);
        assert_eq!(s.pick(&lb), 1);
        assert_eq!(s.pick(&lb), 1, "sticky");
        lb.in_rotation[2].store(false, Ordering::Relaxed);
        s.failed(&lb);
        assert_eq!((s.gateway, s.moves), (0, 1), "2 is out of rotation");
        lb.in_rotation[0].store(false, Ordering::Relaxed);
        assert_eq!(s.pick(&lb), 1, "the health check moves it too");
        assert_eq!(s.moves, 2);
        // The shoppers of a failed gateway spread over the others.
        lb.in_rotation[0].store(true, Ordering::Relaxed);
        lb.in_rotation[2].store(true, Ordering::Relaxed);
        let to: std::collections::BTreeSet<usize> = (0..6).map(|i| lb.next_after(1, i)).collect();
        assert_eq!(to, [0, 2].into());
        let spread: Vec<usize> = (0..6).map(|i| lb.first_for(i)).collect();
        assert_eq!(spread, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn a_lone_gateway_never_moves() {
        let lb = lb(1);
        let mut s = Sticky::new(&lb, 7);
        s.failed(&lb);
        assert_eq!((s.pick(&lb), s.moves), (0, 0));
    }
}
