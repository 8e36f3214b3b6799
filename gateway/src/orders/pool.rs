//! The bounded pools the reservation core runs on.
//!
//! The stores are synchronous (SQLite, the `postgres` driver). None of it
//! may run on a pingora worker thread, so each call goes to tokio's
//! blocking pool, and tokio's blocking queue has no bound. A semaphore in
//! front of it does: a call that finds every permit taken is refused at
//! once (the caller answers `503 overloaded` with `Retry-After`) instead
//! of waiting in a queue without end. The permit moves into the blocking
//! closure, so a client that hangs up does not free a slot whose work is
//! still running.
//!
//! A checkout or a cancel is async (its provider calls are awaited): it
//! holds a permit for its whole length in a task of its own
//! ([`BlockingPool::spawn_held`]), and hands each store step to
//! [`BlockingThreads`]; so the permits still bound the calls in flight
//! (and with them their store steps), while a call waiting for the
//! provider holds no thread.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use sluice_checkout::blocking::{Blocking, Job};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Every permit is taken: the call was not started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overloaded;

/// Blocking calls in flight, at most `limit` at once.
pub struct BlockingPool {
    permits: Arc<Semaphore>,
    #[cfg(test)]
    limit: usize,
}

impl BlockingPool {
    pub fn new(limit: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(limit)),
            #[cfg(test)]
            limit,
        }
    }

    /// Calls running now.
    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        self.limit - self.permits.available_permits()
    }

    /// A permit, held until dropped, if one is free; refuses at once
    /// otherwise.
    pub fn try_hold(&self) -> Result<OwnedSemaphorePermit, Overloaded> {
        self.permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| Overloaded)
    }

    /// Runs `call` as a task of its own holding a permit, if one is free;
    /// refuses at once otherwise. The task runs to its end even when the
    /// caller stops waiting (a client hanging up does not stop a payment
    /// between its durable steps, nor free its permit). A panic in it is
    /// resumed in the caller.
    pub async fn spawn_held<T: Send + 'static>(
        &self,
        call: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Result<T, Overloaded> {
        let permit = self.try_hold()?;
        let joined = tokio::spawn(async move {
            let _permit = permit;
            call.await
        })
        .await;
        match joined {
            Ok(t) => Ok(t),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Cancelled: the runtime is shutting down.
            Err(_) => Err(Overloaded),
        }
    }

    /// Runs `f` on the blocking pool if a permit is free; refuses at once
    /// otherwise. A panic in `f` is resumed in the caller.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Overloaded> {
        let permit = self
            .permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| Overloaded)?;
        let joined = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            f()
        })
        .await;
        match joined {
            Ok(t) => Ok(t),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Cancelled: the runtime is shutting down.
            Err(_) => Err(Overloaded),
        }
    }
}

/// tokio's blocking threads, for the store steps of an async checkout (as
/// many at once as the checkouts holding a permit).
#[derive(Debug, Default, Clone, Copy)]
pub struct BlockingThreads;

impl Blocking for BlockingThreads {
    fn spawn(&self, job: Job) {
        tokio::task::spawn_blocking(move || {
            // The step's caller sees it as unavailable; say why here.
            if catch_unwind(AssertUnwindSafe(job)).is_err() {
                tracing::error!("a store step panicked");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn refuses_at_once_when_every_permit_is_taken() {
        let pool = Arc::new(BlockingPool::new(2));
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = Arc::new(std::sync::Mutex::new(held));
        let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
        let mut running = Vec::new();
        for _ in 0..2 {
            let (pool, held, started_tx) = (pool.clone(), held.clone(), started_tx.clone());
            running.push(tokio::spawn(async move {
                pool.run(move || {
                    started_tx.send(()).unwrap();
                    let _ = held.lock().unwrap().recv();
                })
                .await
            }));
        }
        for _ in 0..2 {
            started.recv().await.unwrap();
        }
        assert_eq!(pool.in_flight(), 2);
        assert_eq!(pool.run(|| ()).await, Err(Overloaded));
        release.send(()).unwrap();
        release.send(()).unwrap();
        for r in running {
            assert_eq!(r.await.unwrap(), Ok(()));
        }
        assert_eq!(pool.in_flight(), 0);
        assert_eq!(pool.run(|| 7).await, Ok(7));
    }
}
