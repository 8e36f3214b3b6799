//! Sluice admission: the waiting room (signed tickets and passes, release at
//! a rate tied to backend capacity, bounded queue).
//!
//! Skeleton: nothing is implemented here yet. Until it is, the gateway keeps
//! every path a room `protect`s closed (no request can carry a valid pass).
