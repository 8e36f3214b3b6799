//! The outbox relay: at-least-once publication, marking only after the
//! sink's acknowledgement, and publication after a restart.

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use common::{key, request, seeds, Harness, T0_MS};
use sluice_checkout::{
    relay_once, CheckoutService, JsonLinesSink, OutboxEvent, SimulatedProvider, Sink, SinkError,
    Store,
};

fn read_lines(path: &std::path::Path) -> Vec<OutboxEvent> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is one event"))
        .collect()
}

/// Accepts into the file, then fails before the relay can mark anything:
/// the window between publish and mark.
struct CrashAfterPublish(JsonLinesSink);

impl Sink for CrashAfterPublish {
    fn publish(&mut self, events: &[OutboxEvent]) -> Result<(), SinkError> {
        self.0.publish(events)?;
        Err(SinkError::Refused("crashed after publishing".into()))
    }
}

#[test]
fn every_transition_becomes_one_event_with_a_unique_id() {
    let h = Harness::new(&[("sku-a", 10)]);
    h.service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    h.service
        .checkout(
            "sub-1",
            &key("key-00002"),
            &request("sku-a", 1, "pm_decline"),
            T0_MS,
        )
        .unwrap();
    let mut sink = JsonLinesSink::open(h.dir.path()).unwrap();
    let outcome = relay_once(&h.store, &mut sink, 100, T0_MS).unwrap();
    assert_eq!(outcome.published, 6);
    assert!(!outcome.more_pending);
    let events = read_lines(sink.path());
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(
        types,
        [
            "order.reserved",
            "order.authorizing",
            "order.confirmed",
            "order.reserved",
            "order.authorizing",
            "order.declined"
        ]
    );
    let ids: HashSet<&str> = events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids.len(), events.len());
    assert_eq!(events[2].data["state"], "confirmed");
    assert_eq!(events[2].data["payment"]["state"], "captured");
    assert_eq!(h.store.outbox_pending().unwrap(), 0);
    assert_eq!(
        relay_once(&h.store, &mut sink, 100, T0_MS)
            .unwrap()
            .published,
        0
    );
}

#[test]
fn relay_is_bounded_by_its_limit() {
    let h = Harness::new(&[("sku-a", 10)]);
    for i in 0..3 {
        h.service
            .checkout(
                "sub-1",
                &key(&format!("key-{i:05}")),
                &request("sku-a", 1, "pm_ok"),
                T0_MS,
            )
            .unwrap();
    }
    let mut sink = JsonLinesSink::open(h.dir.path()).unwrap();
    let first = relay_once(&h.store, &mut sink, 4, T0_MS).unwrap();
    assert_eq!((first.published, first.more_pending), (4, true));
    let second = relay_once(&h.store, &mut sink, 100, T0_MS).unwrap();
    assert_eq!((second.published, second.more_pending), (5, false));
    assert_eq!(read_lines(sink.path()).len(), 9);
}

#[test]
fn a_crash_between_publish_and_mark_publishes_again() {
    let h = Harness::new(&[("sku-a", 10)]);
    h.service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_ok"),
            T0_MS,
        )
        .unwrap();
    let mut crashing = CrashAfterPublish(JsonLinesSink::open(h.dir.path()).unwrap());
    assert!(relay_once(&h.store, &mut crashing, 100, T0_MS).is_err());
    assert_eq!(h.store.outbox_pending().unwrap(), 3);
    let mut sink = JsonLinesSink::open(h.dir.path()).unwrap();
    assert_eq!(
        relay_once(&h.store, &mut sink, 100, T0_MS)
            .unwrap()
            .published,
        3
    );
    let events = read_lines(sink.path());
    // At least once: every event twice in the file, consumers dedupe by id.
    assert_eq!(events.len(), 6);
    let ids: HashSet<&str> = events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids.len(), 3);
}

#[test]
fn events_committed_before_a_restart_are_published_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let order_id = {
        let store = Arc::new(Store::open(dir.path()).unwrap());
        store.seed_products(&seeds(&[("sku-a", 10)])).unwrap();
        let service = CheckoutService::new(Arc::clone(&store), Arc::new(SimulatedProvider::new()));
        let (order, _) = service
            .checkout(
                "sub-1",
                &key("key-00001"),
                &request("sku-a", 1, "pm_ok"),
                T0_MS,
            )
            .unwrap();
        order.order_id
        // Store dropped here with nothing relayed: the process is gone.
    };
    // The audit reads the stopped store without opening it for writing.
    assert!(sluice_checkout::audit(dir.path(), T0_MS)
        .unwrap()
        .is_empty());
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.outbox_pending().unwrap(), 3);
    let mut sink = JsonLinesSink::open(dir.path()).unwrap();
    assert_eq!(
        relay_once(&store, &mut sink, 100, T0_MS).unwrap().published,
        3
    );
    let events = read_lines(sink.path());
    assert!(events.iter().all(|e| e.order_id == order_id));
    assert_eq!(events.last().unwrap().event_type, "order.confirmed");
}

#[test]
fn a_torn_last_line_does_not_swallow_the_next_event() {
    let h = Harness::new(&[("sku-a", 10)]);
    std::fs::write(h.dir.path().join("outbox.jsonl"), b"{\"id\":\"evt_torn").unwrap();
    h.service
        .checkout(
            "sub-1",
            &key("key-00001"),
            &request("sku-a", 1, "pm_decline"),
            T0_MS,
        )
        .unwrap();
    assert!(h.store.outbox_lag_ms(T0_MS + 2_000).unwrap() >= 2_000);
    let mut sink = JsonLinesSink::open(h.dir.path()).unwrap();
    relay_once(&h.store, &mut sink, 100, T0_MS).unwrap();
    assert_eq!(h.store.outbox_lag_ms(T0_MS + 2_000).unwrap(), 0);
    let text = std::fs::read_to_string(sink.path()).unwrap();
    let parsed: Vec<OutboxEvent> = text
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(parsed.len(), 3);
}
