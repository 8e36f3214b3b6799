//! Held capture answers: the `hold_captures` knob.
//!
//! A held answer waits, its capture already processed, until the knob is
//! turned off (then it is sent) or its connection dies (then it is never
//! sent). The counters let a test wait for "the capture reached the
//! provider" instead of guessing how long that takes.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use tokio::sync::Notify;

/// Counters for `GET /admin/held`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HeldStats {
    /// Capture answers held right now.
    pub captures: u64,
    /// Capture answers ever held.
    pub captures_total: u64,
}

/// Where held answers wait.
#[derive(Debug, Default)]
pub struct Holds {
    knobs_changed: Notify,
    captures: AtomicU64,
    captures_total: AtomicU64,
}

impl Holds {
    /// Wakes every held answer to look at the knobs again.
    pub fn knobs_changed(&self) {
        self.knobs_changed.notify_waiters();
    }

    /// Waits while `holding()` says so; counted as held meanwhile, also when
    /// the wait is dropped with its connection.
    pub async fn hold_capture(&self, holding: impl Fn() -> bool) {
        let _held = Held::new(self);
        loop {
            let changed = self.knobs_changed.notified();
            tokio::pin!(changed);
            // Registered before the check, so a change between the check
            // and the wait is not missed.
            changed.as_mut().enable();
            if !holding() {
                return;
            }
            changed.await;
        }
    }

    pub fn stats(&self) -> HeldStats {
        HeldStats {
            captures: self.captures.load(Ordering::SeqCst),
            captures_total: self.captures_total.load(Ordering::SeqCst),
        }
    }
}

/// One held answer, counted for as long as it lives.
struct Held<'a>(&'a Holds);

impl<'a> Held<'a> {
    fn new(holds: &'a Holds) -> Held<'a> {
        holds.captures.fetch_add(1, Ordering::SeqCst);
        holds.captures_total.fetch_add(1, Ordering::SeqCst);
        Held(holds)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.captures.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn a_held_answer_is_counted_until_the_knob_is_turned_off() {
        let holds = Arc::new(Holds::default());
        let on = Arc::new(AtomicBool::new(true));
        let task = tokio::spawn({
            let (holds, on) = (holds.clone(), on.clone());
            async move { holds.hold_capture(|| on.load(Ordering::SeqCst)).await }
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while holds.stats().captures == 0 {
            assert!(tokio::time::Instant::now() < deadline, "never held");
            tokio::task::yield_now().await;
        }
        assert!(!task.is_finished());
        on.store(false, Ordering::SeqCst);
        holds.knobs_changed();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("released")
            .unwrap();
        assert_eq!(
            holds.stats(),
            HeldStats {
                captures: 0,
                captures_total: 1
            }
        );
    }

    #[tokio::test]
    async fn a_dropped_wait_is_no_longer_counted() {
        let holds = Holds::default();
        let wait = holds.hold_capture(|| true);
        let timed_out = tokio::time::timeout(Duration::from_millis(10), wait).await;
        assert!(timed_out.is_err());
        assert_eq!(holds.stats().captures, 0);
        assert_eq!(holds.stats().captures_total, 1);
    }
}
