//! A scenario file (TOML): who arrives when, what they buy, how the
//! gateway is set up and which faults are injected at which second.
//!
//! Unknown keys are errors and every error names the file, so a typo in a
//! campaign rehearsal never silently changes what is tested.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Most virtual shoppers one run may start.
pub const SHOPPERS_MAX: u32 = 1_000_000;
/// Longest run allowed, seconds.
pub const DURATION_S_MAX: u64 = 24 * 3600;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Seeds arrivals and every shopper's choices: a run replays.
    #[serde(default)]
    pub seed: u64,
    pub limits: Limits,
    pub gateway: GatewaySetup,
    /// Several gateways on shared stores, behind a sticky load balancer.
    #[serde(default)]
    pub fleet: Option<FleetSetup>,
    /// What is on sale; none in a rooms-only fleet rehearsal.
    #[serde(default)]
    pub products: Vec<Product>,
    pub arrivals: Arrivals,
    #[serde(default)]
    pub shoppers: Behaviour,
    #[serde(default)]
    pub faults: Vec<Fault>,
    #[serde(default)]
    pub books: BooksSetup,
    /// Run the gateway against `paysim` (`payments.provider = "http"`).
    #[serde(default)]
    pub paysim: Option<PaysimSetup>,
    /// The bar adaptive release must meet through the scenario's phases.
    #[serde(default)]
    pub adaptive_bar: AdaptiveBar,
    /// The room as a campaign: pre-queue, opening draw, close.
    #[serde(default)]
    pub event: Option<EventSetup>,
    /// A bot farm beside the honest shoppers ([`super::farm`]).
    #[serde(default)]
    pub farm: Option<FarmSetup>,
}

/// `[farm]`: the attacker the room's defences are for. It runs beside the
/// honest shoppers from the run's start until they are done: `accounts`
/// store accounts (used in turn when the room takes enqueue tokens),
/// `addresses` client addresses (a new one for every request, in the
/// shared address space 100.64.0.0/10, as residential proxies behind a
/// carrier NAT look), one solver thread per core (`solvers`, default:
/// every core the machine has) hashing challenges for real, and each pass
/// it collects either bought with (`quantity` units, the most a pass may
/// take) or, for a share `hold_share` of them, held and never used (the
/// door kept shut).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FarmSetup {
    pub accounts: u32,
    pub addresses: u32,
    #[serde(default)]
    pub solvers: Option<u32>,
    #[serde(default)]
    pub hold_share: f64,
    #[serde(default = "one_u32")]
    pub quantity: u32,
}

impl FarmSetup {
    /// Solver threads: `solvers`, or every core.
    pub fn solver_threads(&self) -> u32 {
        self.solvers
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32))
    }
}

/// `[gateway.challenge]`: the room's proof of work (`kind = "pow"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChallengeSetup {
    pub difficulty_bits: u8,
    #[serde(default)]
    pub challenge_ttl_s: Option<u32>,
}

/// `[gateway.enqueue]`: one place per account. The harness plays the
/// store: it writes an HS256 key into the room's `[rooms.enqueue]` and
/// signs every shopper's (and the farm's) token with it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnqueueSetup {
    pub required: bool,
    /// The store's key (base64url), set by the harness, not the file.
    #[serde(skip)]
    pub store_key: Option<String>,
}

/// `[event]`: the room's schedule, in seconds from the run's start (the
/// harness writes them as the room's `prequeue_at`, `opens_at` and
/// `closes_at` and starts the run at the instant they count from), and
/// its first `message`. The run starts `setup_s` after the config is
/// written, whatever the setup took (a setup that took longer fails).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventSetup {
    pub prequeue_after_s: u64,
    pub opens_after_s: u64,
    pub closes_after_s: u64,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default = "default_event_setup_s")]
    pub setup_s: u64,
    /// The run's start (unix seconds), set by the harness, not the file.
    #[serde(skip)]
    pub start_unix_s: Option<u64>,
}

fn default_event_setup_s() -> u64 {
    30
}

/// Most gateways one fleet scenario may start.
pub const GATEWAYS_MAX: u32 = 16;

/// `[fleet]`: `gateways` `sluice` processes sharing a throwaway Redis (the
/// line) and PostgreSQL (stock and orders), each through its own relay.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetSetup {
    pub gateways: u32,
    /// The waiting rooms on one shared Redis (`[cluster] redis_url`).
    #[serde(default)]
    pub redis: bool,
    /// Stock and orders on one shared PostgreSQL (`[cluster] postgres_url`).
    #[serde(default)]
    pub postgres: bool,
}

/// Which shared store a relay stands in front of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Store {
    Redis,
    Postgres,
}

/// How a gateway is cut off from a store: connections closed at once
/// (`refused`) or left hanging (`blackholed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cut {
    Refused,
    Blackholed,
}

/// `release_per_second = "adaptive"` for the room, with its
/// `[rooms.adaptive]` keys (the scenario's `release_per_second` stays the
/// reference: the rate a fixed run would use).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveSetup {
    pub target_p99_ms: u32,
    #[serde(default = "default_max_error_ratio")]
    pub max_error_ratio: f64,
    pub min_per_second: u32,
    pub max_per_second: u32,
}

/// What "the rate followed the backend" means for this scenario: the run
/// is cut into phases at each `paysim_faults` fault; from `settle_s` into
/// each phase on, the release rate stays within `swing_max` of the phase's
/// mean and inside its bounds, admitted shoppers' checkout p99 within
/// `p99_factor_max` × `target_p99_ms`, failed checkouts under
/// `max_error_ratio`; with `utilisation_min`, the phase's mean rate at
/// least that share of the backend's capacity at the target, found per
/// phase by a fixed-rate sweep before the run (`phase_capacity`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdaptiveBar {
    pub settle_s: f64,
    pub swing_max: f64,
    pub p99_factor_max: f64,
    pub utilisation_min: Option<f64>,
}

impl Default for AdaptiveBar {
    fn default() -> Self {
        Self {
            settle_s: 30.0,
            swing_max: 0.15,
            p99_factor_max: 1.5,
            utilisation_min: None,
        }
    }
}

/// The payment provider simulator the harness starts next to the gateway.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaysimSetup {
    #[serde(default)]
    pub seed: u64,
    /// The gateway's timeout for one provider call (`payments.timeout_ms`).
    #[serde(default = "default_provider_timeout_ms")]
    pub provider_timeout_ms: u64,
    /// paysim's fault knobs (`GET /admin/faults` keys, e.g.
    /// `timeout_ratio`, `webhook_duplicate_ratio`), passed as its `--faults` file.
    #[serde(default)]
    pub faults: toml::Table,
}

/// A mid-range phone's Web Worker running the queue page's SHA-256: a few
/// hundred thousand hashes a second (docs/waiting-room.md, "The join
/// challenge"); 18 bits take it about a second.
pub const PHONE_HASHES_PER_SECOND: f64 = 300_000.0;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Shoppers started, at most (arrivals beyond it are dropped).
    pub max_shoppers: u32,
    /// The run stops its shoppers after this long, seconds.
    pub max_duration_s: u64,
}

/// How the harness sets up the gateway it starts (ignored when targeting a
/// running deployment, except `room` and `release_per_second`, read there
/// from `/admin/state`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySetup {
    #[serde(default = "default_room")]
    pub room: String,
    pub release_per_second: u32,
    pub burst: Option<u32>,
    pub max_active: u32,
    #[serde(default = "default_queue_capacity")]
    pub queue_capacity: u32,
    #[serde(default = "default_poll_min_s")]
    pub poll_min_s: u32,
    #[serde(default = "default_poll_max_s")]
    pub poll_max_s: u32,
    /// A waiting ticket silent this long has left (gateway default when unset).
    pub idle_timeout_s: Option<u32>,
    /// Checkouts one pass may start (gateway default, 1, when unset).
    pub max_orders_per_pass: Option<u32>,
    #[serde(default = "default_pass_ttl_s")]
    pub pass_ttl_s: u32,
    #[serde(default = "default_reservation_ttl_s")]
    pub reservation_ttl_s: u32,
    /// Test knob of the gateway: every store commit is this much slower.
    pub test_store_commit_delay_ms: Option<u32>,
    /// Adaptive release instead of the fixed `release_per_second`.
    #[serde(default)]
    pub adaptive: Option<AdaptiveSetup>,
    /// Extra TOML appended to `[gateway]` verbatim (e.g. payments keys).
    #[serde(default)]
    pub extra: String,
    /// A pass nobody uses this long gives its slot back (`pass_idle_s`).
    #[serde(default)]
    pub pass_idle_s: Option<u32>,
    /// The per-client join limit (the harness's default is high: one
    /// budget per virtual shopper, not measured).
    #[serde(default)]
    pub joins_per_minute_per_client: Option<u32>,
    #[serde(default)]
    pub challenge: Option<ChallengeSetup>,
    #[serde(default)]
    pub enqueue: Option<EnqueueSetup>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Product {
    pub sku: String,
    pub stock: u64,
    #[serde(default = "default_price_cents")]
    pub price_cents: u64,
    /// Relative share of shoppers who want this one.
    #[serde(default = "one")]
    pub weight: f64,
    /// Stock rows the store splits it into (the gateway's `partitions`).
    #[serde(default)]
    pub partitions: Option<u32>,
}

/// When shoppers arrive.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, tag = "profile", rename_all = "snake_case")]
pub enum Arrivals {
    /// `shoppers` arrive at random within the first `over_s` seconds.
    Spike { shoppers: u32, over_s: f64 },
    /// `per_second` arrive each second for `for_s` seconds (Poisson).
    Constant { per_second: f64, for_s: f64 },
    /// The rate grows linearly from `from_per_second` to `to_per_second`.
    Ramp {
        from_per_second: f64,
        to_per_second: f64,
        over_s: f64,
    },
}

/// How the virtual people behave.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Behaviour {
    /// Share of shoppers who stop polling after a few polls.
    pub give_up_probability: f64,
    /// Share who poll again at once after joining (they must get 429).
    pub impatient_probability: f64,
    /// Units per order, 1 to this.
    pub quantity_max: u32,
    /// Payment methods and their shares, e.g. `{ pm_ok = 0.9, pm_decline = 0.1 }`.
    pub payment_methods: std::collections::BTreeMap<String, f64>,
    /// Per-request timeout, milliseconds.
    pub request_timeout_ms: u64,
    /// Attempts of one checkout (same Idempotency-Key), at most.
    pub checkout_attempts_max: u32,
    /// Status polls of one shopper, at most.
    pub polls_max: u32,
    /// Joins of one shopper (first one and rejoins), at most.
    pub joins_max: u32,
    /// `GET /orders/{id}` polls until the order is final, at most.
    pub order_polls_max: u32,
    /// A shopper's phone solving the room's challenge: SHA-256 per second
    /// of the queue page's Web Worker. The harness finds the solution with
    /// its own solver and waits out the rest of the time the phone would
    /// have taken (tries ÷ this rate).
    pub phone_hashes_per_second: f64,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self {
            give_up_probability: 0.0,
            impatient_probability: 0.0,
            quantity_max: 1,
            payment_methods: [("pm_ok".to_string(), 1.0)].into_iter().collect(),
            request_timeout_ms: 5_000,
            checkout_attempts_max: 5,
            polls_max: 500,
            joins_max: 20,
            order_polls_max: 60,
            phone_hashes_per_second: PHONE_HASHES_PER_SECOND,
        }
    }
}

/// Something done to the system at `at_s` seconds into the run.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(from = "FaultFile")]
pub struct Fault {
    pub at_s: f64,
    pub action: FaultAction,
}

#[derive(Debug, Clone, PartialEq)]
pub enum FaultAction {
    /// Set `gateway.admissions = "paused"` in the config file.
    PauseAdmissions,
    /// Set `gateway.admissions = "open"` in the config file.
    OpenAdmissions,
    /// SIGKILL gateway `gateway` (0 for the only one), wait `down_s`,
    /// start it on the same ports and data.
    KillRestart { gateway: u32, down_s: f64 },
    /// SIGKILL the fleet's Redis, wait `down_s`, start it on the same port:
    /// with its data (`keep_data`, append-only file) or empty.
    RestartRedis { keep_data: bool, down_s: f64 },
    /// Stop the fleet's PostgreSQL (immediate shutdown), wait `down_s`,
    /// start it again with its data.
    RestartPostgres { down_s: f64 },
    /// Cut gateway `gateway` off from `store` for `for_s` seconds through
    /// its relay; the other gateways keep their links.
    CutOff {
        gateway: u32,
        store: Store,
        how: Cut,
        for_s: f64,
    },
    /// Turn paysim's knobs (`GET /admin/faults` keys, e.g. `latency_ms`,
    /// `workers`): the ones given change, the others stay.
    PaysimFaults { knobs: toml::Table },
    /// Change the room's `message` in the config file (a live reload).
    SetMessage { message: String },
}

/// The file form of a fault: one table per fault, tagged by `action`.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
enum FaultFile {
    PauseAdmissions {
        at_s: f64,
    },
    OpenAdmissions {
        at_s: f64,
    },
    KillRestart {
        at_s: f64,
        down_s: f64,
        #[serde(default)]
        gateway: u32,
    },
    PaysimFaults {
        at_s: f64,
        knobs: toml::Table,
    },
    SetMessage {
        at_s: f64,
        message: String,
    },
    RestartRedis {
        at_s: f64,
        keep_data: bool,
        down_s: f64,
    },
    RestartPostgres {
        at_s: f64,
        down_s: f64,
    },
    CutOff {
        at_s: f64,
        gateway: u32,
        store: Store,
        how: Cut,
        for_s: f64,
    },
}

impl From<FaultFile> for Fault {
    fn from(f: FaultFile) -> Self {
        match f {
            FaultFile::PauseAdmissions { at_s } => Fault {
                at_s,
                action: FaultAction::PauseAdmissions,
            },
            FaultFile::OpenAdmissions { at_s } => Fault {
                at_s,
                action: FaultAction::OpenAdmissions,
            },
            FaultFile::KillRestart {
                at_s,
                down_s,
                gateway,
            } => Fault {
                at_s,
                action: FaultAction::KillRestart { gateway, down_s },
            },
            FaultFile::RestartRedis {
                at_s,
                keep_data,
                down_s,
            } => Fault {
                at_s,
                action: FaultAction::RestartRedis { keep_data, down_s },
            },
            FaultFile::RestartPostgres { at_s, down_s } => Fault {
                at_s,
                action: FaultAction::RestartPostgres { down_s },
            },
            FaultFile::CutOff {
                at_s,
                gateway,
                store,
                how,
                for_s,
            } => Fault {
                at_s,
                action: FaultAction::CutOff {
                    gateway,
                    store,
                    how,
                    for_s,
                },
            },
            FaultFile::PaysimFaults { at_s, knobs } => Fault {
                at_s,
                action: FaultAction::PaysimFaults { knobs },
            },
            FaultFile::SetMessage { at_s, message } => Fault {
                at_s,
                action: FaultAction::SetMessage { message },
            },
        }
    }
}

/// How long the books check waits for the system to settle.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BooksSetup {
    /// Wait at most this long for every order to be final, seconds.
    pub settle_s_max: u64,
}

impl Default for BooksSetup {
    fn default() -> Self {
        Self { settle_s_max: 30 }
    }
}

fn default_room() -> String {
    "drop".into()
}
fn default_queue_capacity() -> u32 {
    1_000_000
}
fn default_poll_min_s() -> u32 {
    3
}
fn default_poll_max_s() -> u32 {
    10
}
fn default_pass_ttl_s() -> u32 {
    600
}
fn default_reservation_ttl_s() -> u32 {
    600
}
fn default_max_error_ratio() -> f64 {
    0.02
}
fn default_provider_timeout_ms() -> u64 {
    2_000
}
fn default_price_cents() -> u64 {
    1_000
}
fn one() -> f64 {
    1.0
}
fn one_u32() -> u32 {
    1
}

/// A scenario that failed to load: the file and why.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ScenarioError {
    pub file: PathBuf,
    pub message: String,
}

impl Scenario {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let err = |message: String| ScenarioError {
            file: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
        let scenario: Scenario = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
        scenario.validate().map_err(err)?;
        Ok(scenario)
    }

    /// Parses a scenario from text (`name` is used in errors).
    pub fn parse(text: &str, name: &str) -> Result<Scenario, ScenarioError> {
        let err = |message: String| ScenarioError {
            file: PathBuf::from(name),
            message,
        };
        let scenario: Scenario = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        scenario.validate().map_err(err)?;
        Ok(scenario)
    }

    /// The checks serde cannot express; the first problem found.
    pub fn validate(&self) -> Result<(), String> {
        let g = &self.gateway;
        let b = &self.shoppers;
        check(!self.name.is_empty(), "`name` must not be empty")?;
        check(
            (1..=SHOPPERS_MAX).contains(&self.limits.max_shoppers),
            &format!("`limits.max_shoppers` must be 1 to {SHOPPERS_MAX}"),
        )?;
        check(
            (1..=DURATION_S_MAX).contains(&self.limits.max_duration_s),
            &format!("`limits.max_duration_s` must be 1 to {DURATION_S_MAX}"),
        )?;
        check(
            g.release_per_second >= 1,
            "`gateway.release_per_second` must be at least 1",
        )?;
        check(g.max_active >= 1, "`gateway.max_active` must be at least 1")?;
        check(
            (1..=60).contains(&g.poll_min_s) && g.poll_min_s <= g.poll_max_s,
            "`gateway.poll_min_s` must be 1 to 60 and at most `poll_max_s`",
        )?;
        self.validate_fleet()?;
        self.validate_event()?;
        self.validate_farm()?;
        if !self.rooms_only() {
            check(
                !self.products.is_empty(),
                "at least one [[products]] entry is needed",
            )?;
        }
        for p in &self.products {
            check(
                p.weight.is_finite() && p.weight >= 0.0,
                &format!("product `{}`: `weight` must be a number ≥ 0", p.sku),
            )?;
        }
        check(
            self.products.is_empty() || self.products.iter().any(|p| p.weight > 0.0),
            "at least one product needs a positive `weight`",
        )?;
        match &self.arrivals {
            Arrivals::Spike { over_s, .. } => positive(*over_s, "arrivals.over_s")?,
            Arrivals::Constant { per_second, for_s } => {
                positive(*per_second, "arrivals.per_second")?;
                positive(*for_s, "arrivals.for_s")?;
            }
            Arrivals::Ramp {
                from_per_second,
                to_per_second,
                over_s,
            } => {
                check(
                    from_per_second.is_finite()
                        && to_per_second.is_finite()
                        && *from_per_second >= 0.0
                        && *to_per_second >= 0.0
                        && from_per_second + to_per_second > 0.0,
                    "`arrivals` ramp rates must be ≥ 0 and not both 0",
                )?;
                positive(*over_s, "arrivals.over_s")?;
            }
        }
        for (name, p) in [
            ("give_up_probability", b.give_up_probability),
            ("impatient_probability", b.impatient_probability),
        ] {
            check(
                (0.0..=1.0).contains(&p),
                &format!("`shoppers.{name}` must be between 0 and 1"),
            )?;
        }
        check(
            (1..=100).contains(&b.quantity_max),
            "`shoppers.quantity_max` must be 1 to 100",
        )?;
        check(
            !b.payment_methods.is_empty()
                && b.payment_methods
                    .values()
                    .all(|w| w.is_finite() && *w >= 0.0)
                && b.payment_methods.values().any(|w| *w > 0.0),
            "`shoppers.payment_methods` needs at least one method with a positive share",
        )?;
        check(
            (100..=120_000).contains(&b.request_timeout_ms),
            "`shoppers.request_timeout_ms` must be 100 to 120000",
        )?;
        for (name, v, max) in [
            ("checkout_attempts_max", b.checkout_attempts_max, 100),
            ("polls_max", b.polls_max, 100_000),
            ("joins_max", b.joins_max, 1_000),
            ("order_polls_max", b.order_polls_max, 10_000),
        ] {
            check(
                (1..=max).contains(&v),
                &format!("`shoppers.{name}` must be 1 to {max}"),
            )?;
        }
        for f in &self.faults {
            check(
                f.at_s.is_finite() && f.at_s >= 0.0,
                "a fault's `at_s` must be ≥ 0",
            )?;
            let gateways = self.gateways();
            let fleet = self.fleet.as_ref();
            match &f.action {
                FaultAction::KillRestart { gateway, down_s } => {
                    check((0.0..=600.0).contains(down_s), "`down_s` must be 0 to 600")?;
                    check(
                        *gateway < gateways,
                        &format!("`kill_restart`: `gateway` must be 0 to {}", gateways - 1),
                    )?;
                }
                FaultAction::RestartRedis { down_s, .. } => {
                    check((0.0..=600.0).contains(down_s), "`down_s` must be 0 to 600")?;
                    check(
                        fleet.is_some_and(|f| f.redis),
                        "`restart_redis` needs `[fleet] redis = true`",
                    )?;
                }
                FaultAction::RestartPostgres { down_s } => {
                    check((0.0..=600.0).contains(down_s), "`down_s` must be 0 to 600")?;
                    check(
                        fleet.is_some_and(|f| f.postgres),
                        "`restart_postgres` needs `[fleet] postgres = true`",
                    )?;
                }
                FaultAction::CutOff {
                    gateway,
                    store,
                    for_s,
                    ..
                } => {
                    check(
                        for_s.is_finite() && (0.0..=3600.0).contains(for_s),
                        "`cut_off`: `for_s` must be 0 to 3600",
                    )?;
                    check(
                        *gateway < gateways,
                        &format!("`cut_off`: `gateway` must be 0 to {}", gateways - 1),
                    )?;
                    let has = fleet.is_some_and(|f| match store {
                        Store::Redis => f.redis,
                        Store::Postgres => f.postgres,
                    });
                    check(has, "`cut_off` names a store the `[fleet]` does not share")?;
                }
                FaultAction::PaysimFaults { knobs } => {
                    check(
                        self.paysim.is_some(),
                        "a `paysim_faults` fault needs a [paysim] table",
                    )?;
                    check(!knobs.is_empty(), "`paysim_faults` needs `knobs`")?;
                }
                FaultAction::PauseAdmissions | FaultAction::OpenAdmissions => {}
                // Checked with the [event] (validate_event).
                FaultAction::SetMessage { .. } => {}
            }
        }
        if let Some(a) = &g.adaptive {
            check(
                (1..=a.max_per_second).contains(&a.min_per_second),
                "`gateway.adaptive`: `min_per_second` must be 1 to `max_per_second`",
            )?;
            check(
                a.target_p99_ms >= 1 && (0.0..1.0).contains(&a.max_error_ratio),
                "`gateway.adaptive`: `target_p99_ms` ≥ 1, `max_error_ratio` in [0, 1)",
            )?;
        }
        let bar = &self.adaptive_bar;
        check(
            bar.settle_s.is_finite()
                && bar.settle_s >= 0.0
                && bar.swing_max > 0.0
                && bar.p99_factor_max > 0.0,
            "`adaptive_bar` values must be positive",
        )?;
        check(
            bar.utilisation_min.is_none_or(|u| u > 0.0 && u <= 1.0),
            "`adaptive_bar.utilisation_min` must be in (0, 1]",
        )?;
        check(
            self.books.settle_s_max <= 3600,
            "`books.settle_s_max` must be at most 3600",
        )?;
        Ok(())
    }

    /// The same scenario with `shoppers` people: arrival counts and rates
    /// are scaled, so a file written for a campaign runs short in a test.
    pub fn with_shoppers(mut self, shoppers: u32) -> Scenario {
        let shoppers = shoppers.clamp(1, SHOPPERS_MAX);
        let factor = f64::from(shoppers) / f64::from(self.limits.max_shoppers.max(1));
        self.arrivals = match self.arrivals {
            Arrivals::Spike { over_s, .. } => Arrivals::Spike { shoppers, over_s },
            Arrivals::Constant { per_second, for_s } => Arrivals::Constant {
                per_second: per_second * factor,
                for_s,
            },
            Arrivals::Ramp {
                from_per_second,
                to_per_second,
                over_s,
            } => Arrivals::Ramp {
                from_per_second: from_per_second * factor,
                to_per_second: to_per_second * factor,
                over_s,
            },
        };
        self.limits.max_shoppers = shoppers;
        self
    }

    /// The same scenario at its fixed `release_per_second`: the baseline an
    /// adaptive run is compared with.
    pub fn with_fixed_rate(mut self) -> Scenario {
        self.gateway.adaptive = None;
        self
    }

    /// The seconds where the backend changes: each `paysim_faults` fault.
    pub fn phase_starts_s(&self) -> Vec<f64> {
        let mut at: Vec<f64> = self
            .faults
            .iter()
            .filter(|f| matches!(f.action, FaultAction::PaysimFaults { .. }))
            .map(|f| f.at_s)
            .collect();
        at.sort_by(f64::total_cmp);
        at
    }

    /// Is this a scenario that needs the `paysim` payment simulator?
    pub fn needs_paysim(&self) -> bool {
        self.paysim.is_some()
    }
}

impl Scenario {
    /// Gateways the run starts: `[fleet] gateways`, or 1.
    pub fn gateways(&self) -> u32 {
        self.fleet.as_ref().map_or(1, |f| f.gateways)
    }

    /// A fleet whose orders cannot be shared (no PostgreSQL): shoppers
    /// wait, are let in, and leave; nothing is sold.
    pub fn rooms_only(&self) -> bool {
        self.fleet.as_ref().is_some_and(|f| !f.postgres)
    }

    fn validate_event(&self) -> Result<(), String> {
        let has_messages = self
            .faults
            .iter()
            .any(|f| matches!(f.action, FaultAction::SetMessage { .. }));
        let Some(e) = &self.event else {
            return check(!has_messages, "a `set_message` fault needs an [event]");
        };
        check(
            e.prequeue_after_s < e.opens_after_s && e.opens_after_s < e.closes_after_s,
            "`event`: prequeue_after_s < opens_after_s < closes_after_s",
        )?;
        check(
            (5..=600).contains(&e.setup_s),
            "`event.setup_s` must be 5 to 600",
        )?;
        // On a fleet every gateway's config carries the same schedule, and
        // the fair start is one draw for the fleet.
        check(
            self.fleet.as_ref().is_none_or(|f| f.redis),
            "`[event]` on a `[fleet]` needs `redis = true` (the fair start is one draw on the shared line)",
        )?;
        let messages = self
            .faults
            .iter()
            .filter_map(|f| match &f.action {
                FaultAction::SetMessage { message } => Some(message),
                _ => None,
            })
            .chain(&e.message);
        for message in messages {
            check(
                !message.is_empty()
                    && message.chars().count() <= 280
                    && !message.contains(['"', '\\', '\n']),
                "an event message is 1 to 280 characters, without quotes, \\ or newlines",
            )?;
        }
        Ok(())
    }

    fn validate_farm(&self) -> Result<(), String> {
        let g = &self.gateway;
        if let Some(c) = &g.challenge {
            check(
                (1..=28).contains(&c.difficulty_bits),
                "`gateway.challenge.difficulty_bits` must be 1 to 28",
            )?;
        }
        check(
            self.shoppers.phone_hashes_per_second.is_finite()
                && self.shoppers.phone_hashes_per_second >= 1.0,
            "`shoppers.phone_hashes_per_second` must be at least 1",
        )?;
        check(
            g.pass_idle_s
                .is_none_or(|s| (10..=86_400).contains(&s) && s < g.pass_ttl_s),
            "`gateway.pass_idle_s` must be 10 to 86400 and below `pass_ttl_s`",
        )?;
        let Some(f) = &self.farm else {
            return Ok(());
        };
        check(
            self.fleet.is_none() && self.event.is_none(),
            "`[farm]` runs against one gateway without an [event] (not built for a fleet yet)",
        )?;
        check(
            g.challenge.is_some(),
            "`[farm]` needs `[gateway.challenge]`: the farm solves the room's challenge",
        )?;
        check(
            (1..=10_000).contains(&f.accounts),
            "`farm.accounts` must be 1 to 10000",
        )?;
        check(
            (1..=1 << 22).contains(&f.addresses),
            "`farm.addresses` must be 1 to 4194304 (100.64.0.0/10)",
        )?;
        check(
            f.solvers.is_none_or(|n| (1..=256).contains(&n)),
            "`farm.solvers` must be 1 to 256",
        )?;
        check(
            (0.0..=1.0).contains(&f.hold_share),
            "`farm.hold_share` must be between 0 and 1",
        )?;
        check(
            (1..=100).contains(&f.quantity),
            "`farm.quantity` must be 1 to 100",
        )
    }

    fn validate_fleet(&self) -> Result<(), String> {
        let Some(f) = &self.fleet else {
            return Ok(());
        };
        check(
            (1..=GATEWAYS_MAX).contains(&f.gateways),
            &format!("`fleet.gateways` must be 1 to {GATEWAYS_MAX}"),
        )?;
        check(
            f.redis || f.gateways == 1,
            "a `[fleet]` of several gateways shares one line: set `redis = true`",
        )?;
        check(
            f.postgres || self.products.is_empty(),
            "a `[fleet]` without `postgres = true` is a rooms-only rehearsal: each gateway \
             would sell the whole stock from its own data_dir, so leave out [[products]]",
        )?;
        check(
            self.gateway.adaptive.is_none() && self.gateway.test_store_commit_delay_ms.is_none(),
            "`[fleet]` runs a fixed release rate and no test knobs",
        )
    }
}

fn check(ok: bool, message: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(message.to_string())
    }
}

fn positive(v: f64, key: &str) -> Result<(), String> {
    check(v.is_finite() && v > 0.0, &format!("`{key}` must be > 0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
name = "t"
[limits]
max_shoppers = 10
max_duration_s = 30
[gateway]
release_per_second = 5
max_active = 10
[[products]]
sku = "a"
stock = 3
[arrivals]
profile = "spike"
shoppers = 10
over_s = 1
"#;

    #[test]
    fn a_minimal_file_loads_with_defaults() {
        let s = Scenario::parse(MINIMAL, "t.toml").unwrap();
        assert_eq!(s.gateway.room, "drop");
        assert_eq!(s.shoppers.payment_methods["pm_ok"], 1.0);
        assert!(s.faults.is_empty());
    }

    #[test]
    fn errors_name_the_file_and_the_problem() {
        let e = Scenario::parse(&MINIMAL.replace("over_s = 1", "over_s = 0"), "x.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("x.toml: ") && e.contains("over_s"), "{e}");
        let e = Scenario::parse(&format!("{MINIMAL}\nbogus = 1\n"), "y.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("y.toml: ") && e.contains("bogus"), "{e}");
        let e = Scenario::load(Path::new("/nonexistent/z.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("/nonexistent/z.toml: cannot read"), "{e}");
    }

    #[test]
    fn faults_parse_by_action() {
        let text = format!(
            "{MINIMAL}\n[[faults]]\nat_s = 2\naction = \"kill_restart\"\ndown_s = 1\n[[faults]]\nat_s = 1\naction = \"pause_admissions\"\n"
        );
        let s = Scenario::parse(&text, "f.toml").unwrap();
        assert_eq!(
            s.faults[0].action,
            FaultAction::KillRestart {
                gateway: 0,
                down_s: 1.0
            }
        );
        assert_eq!(s.faults[1].action, FaultAction::PauseAdmissions);
    }

    #[test]
    fn a_farm_needs_the_challenge_and_one_gateway() {
        let farm = "[farm]\naccounts = 3\naddresses = 100\n";
        let challenge = "[gateway.challenge]\ndifficulty_bits = 12\n";
        let with = |extra: &str| {
            let text = MINIMAL.replace("[[products]]", &format!("{extra}\n[[products]]"));
            Scenario::parse(&format!("{text}\n{farm}"), "f.toml")
        };
        let e = with("").unwrap_err().to_string();
        assert!(e.contains("needs `[gateway.challenge]`"), "{e}");
        let s = with(challenge).unwrap();
        assert_eq!(s.farm.as_ref().unwrap().accounts, 3);
        assert_eq!(s.shoppers.phone_hashes_per_second, PHONE_HASHES_PER_SECOND);
        let e = with(&format!(
            "{challenge}[fleet]\ngateways = 1\npostgres = true\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("one gateway"), "{e}");
        let e = with(&challenge.replace("12", "29"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("difficulty_bits"), "{e}");
    }

    #[test]
    fn scaling_keeps_the_profile() {
        let s = Scenario::parse(MINIMAL, "t.toml").unwrap().with_shoppers(4);
        assert_eq!(s.limits.max_shoppers, 4);
        assert!(matches!(s.arrivals, Arrivals::Spike { shoppers: 4, .. }));
    }
}
