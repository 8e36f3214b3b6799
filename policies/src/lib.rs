//! Sluice configuration.
//!
//! The operator writes a TOML file ([`file`]); it is parsed with
//! `deny_unknown_fields` and converted by [`validate`] into the immutable,
//! typed [`model::Config`] (durations are `Duration`, limits are non-zero,
//! rooms and products cross-checked). Every problem found is reported as a
//! [`Diagnostic`] that points at `FILE:LINE:COL`.
//!
//! [`deny_list`] parses `gateway.deny_cidrs_file`, for the validator and
//! for the gateway's reload of that file.
//!
//! At run time the gateway holds the current model in a [`ConfigHandle`]:
//! one snapshot swapped whole on reload, so a request sees either the old or
//! the new config, never a mix, and a failed reload keeps the last good one.

pub mod deny_list;
pub mod diagnostic;
pub mod file;
pub mod model;
pub mod reload;
pub mod validate;

pub use diagnostic::{Diagnostic, Diagnostics};
pub use model::Config;
pub use reload::{ConfigHandle, ReloadError};
pub use validate::{load_file, parse_str};
