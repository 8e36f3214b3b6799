//! Signed webhooks, delivered badly on purpose.
//!
//! Every event is put on a [`Schedule`] when it happens. The knobs decide
//! then whether it is lost (never sent), when it is first due
//! (`webhook_delay_ms`) and whether a duplicate follows later. The delivery
//! worker runs [`Webhooks::deliver_once`] in a loop: it takes what is due,
//! shuffles it in groups of `webhook_reorder_window`, POSTs each event in
//! that order and puts failures (non-2xx, connection errors) back with
//! exponential backoff until `WEBHOOK_ATTEMPTS_MAX`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};
use serde::Serialize;
use sha2::Sha256;
use tokio::sync::Notify;

use super::faults::{chance, Faults};
use super::ledger::EventBody;

/// Deliveries waiting at once, at most; past it new ones are dropped and counted.
pub const WEBHOOK_PENDING_MAX: usize = 100_000;
/// Tries per delivery, the first included.
pub const WEBHOOK_ATTEMPTS_MAX: u32 = 8;
/// First retry delay; doubles per attempt.
pub const WEBHOOK_BACKOFF_BASE_MS: u64 = 100;
/// Longest retry delay.
pub const WEBHOOK_BACKOFF_MAX_MS: u64 = 5_000;
/// How long one POST may take before it counts as failed.
pub const WEBHOOK_TIMEOUT_MS: u64 = 5_000;
/// How long due events wait for a reorder window to fill before going anyway.
pub const REORDER_HOLD_MS: u64 = 300;
/// A duplicate is sent this long (at least) after the original is due…
pub const DUPLICATE_LAG_MS_MIN: u64 = 50;
/// …and at most this long.
pub const DUPLICATE_LAG_MS_MAX: u64 = 500;
/// Deliveries sent per pass, at most.
pub const DELIVERIES_PER_PASS_MAX: usize = 256;
/// How often the worker looks at the schedule when nothing wakes it.
pub const WORKER_TICK_MS: u64 = 25;

/// Where webhooks go and the secrets that sign them (one `v1` each).
#[derive(Debug, Clone)]
pub struct WebhookTarget {
    pub url: String,
    pub secrets: Vec<String>,
}

/// Counters for `GET /admin/webhooks`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WebhookStats {
    /// Events put on the schedule (lost ones included).
    pub events: u64,
    /// Events dropped by `webhook_loss_ratio`.
    pub lost: u64,
    /// Extra deliveries scheduled by `webhook_duplicate_ratio`.
    pub duplicated: u64,
    /// POSTs answered 2xx.
    pub acknowledged: u64,
    /// POSTs that failed and were scheduled again.
    pub retried: u64,
    /// Deliveries abandoned after `WEBHOOK_ATTEMPTS_MAX` tries.
    pub given_up: u64,
    /// Deliveries dropped because `WEBHOOK_PENDING_MAX` were waiting.
    pub dropped_full: u64,
    /// Deliveries still waiting.
    pub pending: u64,
}

/// One POST to make.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub event_id: String,
    pub body: Arc<[u8]>,
    /// Tries already made.
    pub attempts: u32,
}

/// Deliveries ordered by when they are due (ties: first scheduled first).
#[derive(Debug)]
pub struct Schedule {
    pending: BTreeMap<(Instant, u64), Delivery>,
    next_order: u64,
    rng: StdRng,
    stats: WebhookStats,
}

impl Schedule {
    pub fn new(seed: u64) -> Schedule {
        Schedule {
            pending: BTreeMap::new(),
            next_order: 0,
            rng: StdRng::seed_from_u64(seed),
            stats: WebhookStats::default(),
        }
    }

    /// Schedules an event's webhook, or loses it, as the knobs say.
    pub fn enqueue(&mut self, event: &EventBody, faults: &Faults, now: Instant) {
        self.stats.events += 1;
        if chance(&mut self.rng, faults.webhook_loss_ratio) {
            self.stats.lost += 1;
            return;
        }
        let body: Arc<[u8]> = match serde_json::to_vec(event) {
            Ok(body) => body.into(),
            Err(_) => return,
        };
        let delivery = Delivery {
            event_id: event.id.clone(),
            body,
            attempts: 0,
        };
        let due = now + Duration::from_millis(faults.webhook_delay_ms);
        if chance(&mut self.rng, faults.webhook_duplicate_ratio) {
            let lag_ms = self
                .rng
                .random_range(DUPLICATE_LAG_MS_MIN..=DUPLICATE_LAG_MS_MAX);
            self.stats.duplicated += 1;
            self.push(due + Duration::from_millis(lag_ms), delivery.clone());
        }
        self.push(due, delivery);
    }

    /// Takes the deliveries to send now, in the order to send them.
    ///
    /// With a reorder window of `w >= 2`, due deliveries wait until `w` are
    /// due or the oldest has waited `REORDER_HOLD_MS`, then go out shuffled
    /// in groups of `w`.
    pub fn take_due(&mut self, now: Instant, reorder_window: u32, limit: usize) -> Vec<Delivery> {
        let due_total = self.pending.range(..(now, u64::MAX)).count();
        let window = reorder_window as usize;
        if window >= 2 && due_total < window {
            let held_since = self.pending.keys().next().map(|(due, _)| *due);
            match held_since {
                Some(due) if now < due + Duration::from_millis(REORDER_HOLD_MS) => {
                    return Vec::new();
                }
                _ => {}
            }
        }
        let mut taken = Vec::with_capacity(due_total.min(limit));
        while taken.len() < limit {
            match self.pending.first_key_value() {
                Some(((due, _), _)) if *due <= now => {}
                _ => break,
            }
            if let Some((_, delivery)) = self.pending.pop_first() {
                taken.push(delivery);
            }
        }
        if window >= 2 {
            for group in taken.chunks_mut(window) {
                group.shuffle(&mut self.rng);
            }
        }
        self.stats.pending = self.pending.len() as u64;
        taken
    }

    /// Records the outcome of one POST; a failure is tried again later.
    pub fn settle(&mut self, mut delivery: Delivery, acknowledged: bool, now: Instant) {
        delivery.attempts += 1;
        if acknowledged {
            self.stats.acknowledged += 1;
        } else if delivery.attempts >= WEBHOOK_ATTEMPTS_MAX {
            self.stats.given_up += 1;
        } else {
            self.stats.retried += 1;
            let backoff_ms = (WEBHOOK_BACKOFF_BASE_MS << (delivery.attempts - 1).min(16))
                .min(WEBHOOK_BACKOFF_MAX_MS);
            let jitter_ms = self.rng.random_range(0..=backoff_ms / 2);
            self.push(
                now + Duration::from_millis(backoff_ms + jitter_ms),
                delivery,
            );
        }
        self.stats.pending = self.pending.len() as u64;
    }

    /// Draws whether the next POST gets a wrong signature.
    pub fn draw_bad_signature(&mut self, faults: &Faults) -> bool {
        chance(&mut self.rng, faults.webhook_bad_signature_ratio)
    }

    pub fn stats(&self) -> WebhookStats {
        WebhookStats {
            pending: self.pending.len() as u64,
            ..self.stats.clone()
        }
    }

    fn push(&mut self, due: Instant, delivery: Delivery) {
        if self.pending.len() >= WEBHOOK_PENDING_MAX {
            self.stats.dropped_full += 1;
            return;
        }
        self.pending.insert((due, self.next_order), delivery);
        self.next_order += 1;
        self.stats.pending = self.pending.len() as u64;
    }
}

/// `hex(HMAC-SHA256(secret, "<t>.<body>"))`.
pub fn sign(secret: &[u8], t: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC accepts any key length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// `Sluice-Signature` value: `t=<t>,v1=<sig>` with one `v1` per secret.
pub fn signature_header(secrets: &[String], t: i64, body: &[u8]) -> String {
    let mut header = format!("t={t}");
    for secret in secrets {
        header.push_str(",v1=");
        header.push_str(&sign(secret.as_bytes(), t, body));
    }
    header
}

/// The webhook sender: a schedule, the knobs and an HTTP client.
#[derive(Debug)]
pub struct Webhooks {
    target: WebhookTarget,
    schedule: Mutex<Schedule>,
    wake: Notify,
    client: reqwest::Client,
}

impl Webhooks {
    pub fn new(target: WebhookTarget, seed: u64) -> anyhow::Result<Webhooks> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(WEBHOOK_TIMEOUT_MS))
            .build()?;
        Ok(Webhooks {
            target,
            schedule: Mutex::new(Schedule::new(seed)),
            wake: Notify::new(),
            client,
        })
    }

    /// Puts an event on the schedule and wakes the worker.
    pub fn enqueue(&self, event: &EventBody, faults: &Faults) {
        lock(&self.schedule).enqueue(event, faults, Instant::now());
        self.wake.notify_one();
    }

    pub fn stats(&self) -> WebhookStats {
        lock(&self.schedule).stats()
    }

    /// One bounded pass: sends what is due, in order; returns how many POSTs
    /// were made.
    pub async fn deliver_once(&self, faults: &RwLock<Faults>, limit: usize) -> usize {
        let knobs = read(faults);
        let due =
            lock(&self.schedule).take_due(Instant::now(), knobs.webhook_reorder_window, limit);
        let sent = due.len();
        for delivery in due {
            let bad = lock(&self.schedule).draw_bad_signature(&knobs);
            let acknowledged = self.post(&delivery, &knobs, bad).await;
            lock(&self.schedule).settle(delivery, acknowledged, Instant::now());
        }
        sent
    }

    /// Delivers for ever; the caller aborts the task to stop it.
    pub async fn run(self: Arc<Self>, faults: Arc<RwLock<Faults>>) {
        loop {
            let sent = self.deliver_once(&faults, DELIVERIES_PER_PASS_MAX).await;
            if sent < DELIVERIES_PER_PASS_MAX {
                let tick = tokio::time::sleep(Duration::from_millis(WORKER_TICK_MS));
                tokio::select! {
                    _ = tick => {}
                    _ = self.wake.notified() => {}
                }
            }
        }
    }

    async fn post(&self, delivery: &Delivery, faults: &Faults, bad_signature: bool) -> bool {
        let now_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let t = now_unix + faults.webhook_signature_skew_s;
        let header = if bad_signature {
            signature_header(&["paysim-wrong-secret".to_owned()], t, &delivery.body)
        } else {
            signature_header(&self.target.secrets, t, &delivery.body)
        };
        let response = self
            .client
            .post(&self.target.url)
            .header("content-type", "application/json")
            .header("sluice-signature", header)
            .body(delivery.body.to_vec())
            .send()
            .await;
        matches!(response, Ok(r) if r.status().is_success())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn read(faults: &RwLock<Faults>) -> Faults {
    faults
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paysim::ledger::EventData;

    fn event(n: u32) -> EventBody {
        EventBody {
            id: format!("evt_{n}"),
            kind: "payment.authorized".into(),
            created: 0,
            data: EventData {
                payment_id: format!("pay_{n}"),
                order_id: format!("o{n}"),
                amount_cents: 100,
            },
        }
    }

    fn ids(deliveries: &[Delivery]) -> Vec<String> {
        deliveries.iter().map(|d| d.event_id.clone()).collect()
    }

    #[test]
    fn signature_matches_a_known_hmac() {
        // Computed independently: printf '1700000000.{}' | openssl dgst -sha256 -hmac secret
        assert_eq!(
            sign(b"secret", 1700000000, b"{}"),
            "b8569b78799ff9e3cbff0fc2d63a33a2b57f3282abd07c37ae5e8e7d79a5f163"
        );
        let header = signature_header(&["a".into(), "b".into()], 5, b"x");
        assert_eq!(
            header,
            format!("t=5,v1={},v1={}", sign(b"a", 5, b"x"), sign(b"b", 5, b"x"))
        );
    }

    #[test]
    fn in_order_without_knobs() {
        let mut schedule = Schedule::new(1);
        let now = Instant::now();
        for n in 0..5 {
            schedule.enqueue(&event(n), &Faults::default(), now);
        }
        let taken = schedule.take_due(now, 0, 100);
        assert_eq!(ids(&taken), ["evt_0", "evt_1", "evt_2", "evt_3", "evt_4"]);
    }

    #[test]
    fn reorder_window_holds_then_shuffles() {
        let faults = Faults {
            webhook_reorder_window: 8,
            ..Faults::default()
        };
        let mut schedule = Schedule::new(3);
        let now = Instant::now();
        for n in 0..7 {
            schedule.enqueue(&event(n), &faults, now);
        }
        assert!(schedule.take_due(now, 8, 100).is_empty(), "window not full");
        schedule.enqueue(&event(7), &faults, now);
        let taken = ids(&schedule.take_due(now, 8, 100));
        let mut sorted = taken.clone();
        sorted.sort();
        assert_eq!(sorted.len(), 8);
        assert_ne!(taken, sorted, "shuffled");
    }

    #[test]
    fn duplicates_come_later_and_loss_drops() {
        let dup = Faults {
            webhook_duplicate_ratio: 1.0,
            ..Faults::default()
        };
        let mut schedule = Schedule::new(1);
        let now = Instant::now();
        schedule.enqueue(&event(1), &dup, now);
        assert_eq!(ids(&schedule.take_due(now, 0, 100)), ["evt_1"]);
        let later = now + Duration::from_millis(DUPLICATE_LAG_MS_MAX);
        assert_eq!(ids(&schedule.take_due(later, 0, 100)), ["evt_1"]);

        let loss = Faults {
            webhook_loss_ratio: 1.0,
            ..Faults::default()
        };
        schedule.enqueue(&event(2), &loss, now);
        assert!(schedule.take_due(later, 0, 100).is_empty());
        assert_eq!(schedule.stats().lost, 1);
    }

    #[test]
    fn failures_back_off_then_give_up() {
        let mut schedule = Schedule::new(1);
        let mut now = Instant::now();
        schedule.enqueue(&event(1), &Faults::default(), now);
        for attempt in 1..=WEBHOOK_ATTEMPTS_MAX {
            let mut taken = schedule.take_due(now, 0, 100);
            assert_eq!(taken.len(), 1, "attempt {attempt}");
            assert!(schedule.take_due(now, 0, 100).is_empty());
            schedule.settle(taken.remove(0), false, now);
            now += Duration::from_millis(WEBHOOK_BACKOFF_MAX_MS * 2);
        }
        assert!(schedule.take_due(now, 0, 100).is_empty());
        let stats = schedule.stats();
        assert_eq!(stats.given_up, 1);
        assert_eq!(stats.retried, u64::from(WEBHOOK_ATTEMPTS_MAX - 1));
    }
}
