//! Sluice checkout: the embedded reservation and payment core (stock as
//! available / reserved / committed, idempotent checkout, durable orders,
//! outbox, reconciler).
//!
//! Skeleton: nothing is implemented here yet.
