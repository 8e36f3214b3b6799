//! The provider's capacity: the `workers` knob.
//!
//! A real provider serves a bounded number of requests at once; the rest
//! wait their turn, so its latency grows with the load offered beyond
//! `workers × 1000 / latency_ms` requests per second. With `workers = 0`
//! (the default) every request is served at once, as before. The knob may
//! change at run time (a provider losing machines): waiting requests look
//! at it again whenever a slot frees or the knobs change.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Requests waiting for a worker, at most; beyond it a request is refused
/// (`503`, as a provider shedding load), which also bounds the simulator's
/// memory.
pub const WAITING_MAX: usize = 65_536;

#[derive(Debug, Default)]
struct State {
    busy: u32,
    /// Tickets of the waiting requests, oldest first: a freed worker goes
    /// to the oldest (first come, first served, as a queue in front of a
    /// worker pool).
    waiting: VecDeque<u64>,
    next_ticket: u64,
}

/// The worker pool in front of `/v1`.
#[derive(Debug, Default)]
pub struct Workers {
    state: Mutex<State>,
    changed: Notify,
}

/// One worker, held while a request is served; freed when dropped.
#[derive(Debug)]
pub struct Worker {
    pool: Arc<Workers>,
}

impl Workers {
    /// Wakes the waiting requests to look at the knob again.
    pub fn knobs_changed(&self) {
        self.changed.notify_waiters();
    }

    /// Waits for a worker while `limit()` of them are busy (`0`: no limit);
    /// `None` when [`WAITING_MAX`] requests are waiting already.
    pub async fn enter(self: &Arc<Self>, limit: impl Fn() -> u32) -> Option<Worker> {
        let ticket = {
            let mut s = self.lock();
            if limit() == 0 || (s.waiting.is_empty() && s.busy < limit()) {
                s.busy += 1;
                return Some(self.worker());
            }
            if s.waiting.len() >= WAITING_MAX {
                return None;
            }
            let t = s.next_ticket;
            s.next_ticket += 1;
            s.waiting.push_back(t);
            t
        };
        // Leaves the line if this wait is dropped with its connection.
        let mut place = Place {
            pool: self,
            ticket: Some(ticket),
        };
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the check, so a slot freed between the
            // check and the wait is not missed.
            changed.as_mut().enable();
            {
                let mut s = self.lock();
                let first = s.waiting.front() == Some(&ticket);
                if first && (limit() == 0 || s.busy < limit()) {
                    s.waiting.pop_front();
                    s.busy += 1;
                    place.ticket = None;
                    drop(s);
                    // The next in line may find a slot too.
                    self.changed.notify_waiters();
                    return Some(self.worker());
                }
            }
            changed.await;
        }
    }

    /// Requests being served and waiting now.
    pub fn load(&self) -> (u32, usize) {
        let s = self.lock();
        (s.busy, s.waiting.len())
    }

    fn worker(self: &Arc<Self>) -> Worker {
        Worker { pool: self.clone() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.pool.lock().busy -= 1;
        self.pool.changed.notify_waiters();
    }
}

/// A request's place in line while it waits.
struct Place<'a> {
    pool: &'a Workers,
    ticket: Option<u64>,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if let Some(t) = self.ticket {
            let mut s = self.pool.lock();
            s.waiting.retain(|&w| w != t);
            drop(s);
            self.pool.changed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn at_most_limit_are_served_and_the_oldest_goes_first() {
        let pool = Arc::new(Workers::default());
        let a = pool.enter(|| 2).await.unwrap();
        let _b = pool.enter(|| 2).await.unwrap();
        assert_eq!(pool.load(), (2, 0));
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..3 {
            let (p, order) = (pool.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let w = p.enter(|| 2).await.unwrap();
                order.lock().unwrap().push(i);
                tokio::time::sleep(Duration::from_millis(20)).await;
                drop(w);
            }));
            // Each joins the line before the next.
            while pool.load().1 < i + 1 {
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(pool.load(), (2, 3));
        drop(a);
        for w in waiters {
            w.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
        assert_eq!(pool.load(), (1, 0));
    }

    #[tokio::test]
    async fn no_limit_never_waits_and_a_raised_limit_lets_waiters_in() {
        let pool = Arc::new(Workers::default());
        let held: Vec<_> = futures_join(&pool, 5, 0).await;
        assert_eq!(pool.load(), (5, 0));
        drop(held);
        let limit = Arc::new(std::sync::atomic::AtomicU32::new(1));
        let _first = pool.enter(|| 1).await.unwrap();
        let (p, l) = (pool.clone(), limit.clone());
        let waiter = tokio::spawn(async move {
            p.enter(move || l.load(std::sync::atomic::Ordering::SeqCst))
                .await
        });
        while pool.load().1 < 1 {
            tokio::task::yield_now().await;
        }
        limit.store(2, std::sync::atomic::Ordering::SeqCst);
        pool.knobs_changed();
        let _second = waiter.await.unwrap().unwrap();
        assert_eq!(pool.load(), (2, 0));
    }

    #[tokio::test]
    async fn a_wait_dropped_leaves_the_line() {
        let pool = Arc::new(Workers::default());
        let only = pool.enter(|| 1).await.unwrap();
        let p = pool.clone();
        let gone = tokio::spawn(async move { p.enter(|| 1).await });
        while pool.load().1 < 1 {
            tokio::task::yield_now().await;
        }
        gone.abort();
        let _ = gone.await;
        assert_eq!(pool.load(), (1, 0));
        drop(only);
        let _next = pool.enter(|| 1).await.unwrap();
        assert_eq!(pool.load(), (1, 0));
    }

    async fn futures_join(pool: &Arc<Workers>, n: usize, limit: u32) -> Vec<Worker> {
        let mut held = Vec::new();
        for _ in 0..n {
            held.push(pool.enter(move || limit).await.unwrap());
        }
        held
    }
}
