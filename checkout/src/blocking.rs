//! Where the store steps of an async call run.
//!
//! The stores are synchronous (SQLite, the `postgres` driver); an async
//! checkout or cancel ([`crate::OrderBackend::checkout_on`],
//! [`crate::OrderBackend::cancel_on`]) awaits its provider calls and hands each store step between them to a [`Blocking`]: the
//! gateway's blocking threads, so no thread is held while the provider
//! answers, or [`Inline`], the calling thread, for a synchronous caller
//! that waits for the whole call ([`crate::http_client::wait`]).

use crate::error::StoreError;

/// A store step, reporting its own result.
pub type Job = Box<dyn FnOnce() + Send + 'static>;

/// Runs store steps where blocking is allowed.
pub trait Blocking: Send + Sync {
    /// Starts `job`; it may run before this returns ([`Inline`]).
    fn spawn(&self, job: Job);
}

/// Runs each step on the calling thread, at once.
#[derive(Debug, Default, Clone, Copy)]
pub struct Inline;

impl Blocking for Inline {
    fn spawn(&self, job: Job) {
        job()
    }
}

/// Runs `step` on `blocking` and waits for its result. A step that never
/// reports (its thread panicked, the runtime is shutting down) is
/// [`StoreError::Unavailable`]: nothing after it is attempted.
pub async fn step<T: Send + 'static>(
    blocking: &dyn Blocking,
    step: impl FnOnce() -> T + Send + 'static,
) -> Result<T, StoreError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    blocking.spawn(Box::new(move || {
        let _ = tx.send(step());
    }));
    rx.await
        .map_err(|_| StoreError::Unavailable("a store step did not finish".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http_client::wait;

    /// Drops every job unrun.
    struct Lost;
    impl Blocking for Lost {
        fn spawn(&self, _job: Job) {}
    }

    #[test]
    fn a_step_answers_where_it_ran_and_a_lost_one_is_unavailable() {
        assert_eq!(wait(step(&Inline, || 7)).unwrap(), 7);
        assert!(matches!(
            wait(step(&Lost, || 7)),
            Err(StoreError::Unavailable(_))
        ));
    }
}
