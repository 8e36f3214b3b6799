//! Sluice load and fault harness (`sluice-load`, `paysim`).
//!
//! Skeleton: nothing is implemented here yet.
