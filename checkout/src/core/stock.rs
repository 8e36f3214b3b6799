//! Stock with no store: a SKU's counts, a product's seed and what a seed
//! or an adjustment may not be, and the moves a hold makes between its
//! partition's counts. The partition plans are in [`super::partition`].

use serde::Serialize;

use crate::clock::UnixMs;
use crate::core::partition::PARTITIONS_MAX;
use crate::core::request::validate_sku;
use crate::error::StoreError;
use crate::limits::{ADJUST_REASON_LEN_MAX, STOCK_UNITS_MAX};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StockLevel {
    pub sku: String,
    pub total: i64,
    pub available: i64,
    pub reserved: i64,
    pub committed: i64,
}

impl StockLevel {
    pub fn is_conserved(&self) -> bool {
        self.available >= 0
            && self.reserved >= 0
            && self.committed >= 0
            && self.available + self.reserved + self.committed == self.total
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReserveOutcome {
    Reserved { expires_at_ms: UnixMs },
    SoldOut,
}

/// One move of a hold's units between two columns of its partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum HoldMove {
    /// held → committed (paid).
    Commit,
    /// held → released (declined, cancelled, expired).
    Release,
    /// committed → returned (refunded: the units go back on sale).
    Return,
}

/// The partition side of a hold's move: `units` of `sku` moved by `step`
/// between two counts of partition `part`. A store that batches writes
/// puts these off to the end of its batch (PostgreSQL: a transaction
/// that defers its hold moves), summed per partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMove {
    pub sku: String,
    pub part: i32,
    pub step: HoldMove,
    pub units: i64,
}

/// A product as configuration describes it. Only the first seed sets the
/// stock; price and reservation TTL follow the config on every seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductSeed {
    pub sku: String,
    pub total: u32,
    pub price_cents: u64,
    /// The room's `reservation_ttl_s`, in milliseconds.
    pub reservation_ttl_ms: i64,
    /// Rows the stock is split into (the product's `partitions`); follows
    /// the config on every seed, moving free units by a logged rebalance.
    pub partitions: u32,
}

/// What seeding `products` would refuse before writing anything, without
/// touching a store: a reload checks its seeds with this before any of its
/// steps changes the running state (both back ends call it).
pub fn check_seeds(products: &[ProductSeed]) -> Result<(), StoreError> {
    for product in products {
        validate_sku(&product.sku)?;
        if product.reservation_ttl_ms <= 0 {
            return Err(StoreError::InvalidArgument(format!(
                "reservation ttl of {} must be positive",
                product.sku
            )));
        }
        if !(1..=PARTITIONS_MAX).contains(&product.partitions) {
            return Err(StoreError::InvalidArgument(format!(
                "partitions of {} must be 1 to {PARTITIONS_MAX}",
                product.sku
            )));
        }
        if i64::try_from(product.price_cents).is_err() {
            return Err(StoreError::InvalidArgument(format!(
                "price of {} too large",
                product.sku
            )));
        }
    }
    Ok(())
}

/// Whether an adjustment's `delta` and `reason` may be applied at all
/// (both back ends check it before writing).
pub fn check_adjustment(delta: i64, reason: &str) -> Result<(), StoreError> {
    if reason.trim().is_empty() || reason.len() > ADJUST_REASON_LEN_MAX {
        return Err(StoreError::InvalidArgument(format!(
            "reason must be 1 to {ADJUST_REASON_LEN_MAX} bytes"
        )));
    }
    if delta == 0 || delta.abs() > STOCK_UNITS_MAX {
        return Err(StoreError::InvalidArgument(format!(
            "delta must be non-zero and at most {STOCK_UNITS_MAX} units"
        )));
    }
    Ok(())
}
