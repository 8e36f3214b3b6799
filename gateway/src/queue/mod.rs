//! The waiting room over HTTP: `/queue/{room}` (the page),
//! `/queue/{room}/join`, `/queue/{room}/status`, `/queue/{room}/watermark`
//! (public, cacheable), the pass check of protected paths, and the release
//! worker.
//!
//! The rooms themselves (`sluice-admission`) are pure logic over injected
//! time; this module owns them, feeds them the wall clock, signs and checks
//! their tokens, and turns their answers into the contract's JSON.
//!
//! Started by `sluice run` ([`Rooms::open`]) the rooms are durable: each
//! keeps its events in `data_dir/rooms/<room>/` ([`journal`]) and the keys
//! tickets depend on are made once and kept in `data_dir` ([`secrets`]), so
//! a restart, even after `kill -9`, keeps every place, ticket and pass.
//! [`Rooms::new`] keeps everything in memory (unit tests).
//!
//! With `[cluster] redis_url` the rooms live on a line shared by the
//! fleet instead ([`fleet`]): each room's state is in Redis, this gateway
//! keeps its shared numbers in memory, and the tokens are signed with the
//! config's `[[keys]]`, which every gateway of the fleet lists.

pub mod adaptive;
mod backend;
pub mod challenge;
mod collector;
mod embedded;
pub mod enqueue;
mod event;
pub mod fleet;
pub mod journal;
pub mod page;
mod release;
mod respond;
pub mod secrets;
mod watermark;

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use http::{HeaderMap, Method};
use rand::rngs::StdRng;
use rand::SeedableRng;
use sluice_admission::adaptive::Outcome;
use sluice_admission::challenge::ChallengeKeys;
use sluice_admission::enqueue::{AccountHash, AccountHasher};
use sluice_admission::fleet::Presented;
use sluice_admission::join_limiter::{ClientKey, JoinLimiter, JoinRateLimited};
use sluice_admission::room::HeldPlace;
use sluice_admission::tokens::{
    Claims, Expected, KeyMaterial, KeySpec, Keyring, TokenError, TokenType,
};
use sluice_admission::{
    JoinError, PassEnd, PassOrders, Policy, RoomStats, Status, StockAuthority, TicketId,
    WaitingRoom,
};
use sluice_policies::model::{Admissions, Room};
use sluice_policies::Config;

use crate::clock::now_ms;
use crate::error::{ApiError, ErrorCode};
use crate::metrics::Metrics;
use crate::response::LocalResponse;
use crate::verified::VerifyingKeyring;
use backend::{Entered, JoinRequest, PollRefused, RoomBackend, Settings};
pub use collector::RoomCollector;
pub use release::Releaser;
pub use respond::clear_pass_cookie;
use sluice_admission::event_window::JoinWindow;
use sluice_policies::deny_list::DenyList;

/// A join a browser sent for another site's page (`Sec-Fetch-Site:
/// cross-site`, a header page scripts cannot set). A join needs no
/// preflight (a bodiless POST), so without this any page could make its
/// visitors' browsers fill the line from their own addresses. Same-site,
/// same-origin, a typed address (`none`) and clients that send no such
/// header (apps, older browsers, scripts) join as before.
pub fn cross_site(headers: &HeaderMap) -> bool {
    headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"))
}

pub const TICKET_COOKIE: &str = "sluice_ticket";
pub const PASS_COOKIE: &str = "sluice_pass";

/// Most client addresses each room's join limiter remembers.
pub const JOIN_CLIENTS_MAX: usize = 200_000;

/// Most unexpired spent challenges one room's local record holds.
pub const SPENT_CHALLENGES_MAX: usize = 1_000_000;

/// A request under `/queue/`, as the proxy read it.
pub struct QueueRequest<'a> {
    pub method: &'a Method,
    /// The canonical, decoded path.
    pub path: &'a str,
    /// The query as sent (the page's `next`).
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
    /// The client's address ([`crate::client`]).
    pub client: Option<IpAddr>,
    /// The body of a join (empty for other requests), at most
    /// [`challenge::JOIN_BODY_BYTES_MAX`].
    pub body: &'a [u8],
}

/// One room and its place in the registry.
pub struct RoomEntry {
    /// Joins per client: `joins_per_minute_per_client` of the config in
    /// force, all of it usable at once. Swapped whole when the rate
    /// changes; checked without a lock.
    limiter: ArcSwap<RoomLimiter>,
    /// Joins refused by the per-client limit (the room never sees them).
    rate_limited_joins: AtomicU64,
    /// Joins refused at the door before the room saw them: a denied
    /// network, before `prequeue_at`, after `closes_at`.
    pub(crate) forbidden_joins: AtomicU64,
    pub(crate) not_open_joins: AtomicU64,
    pub(crate) event_closed_joins: AtomicU64,
    /// The campaign's schedule and message in force (reloadable).
    event: ArcSwap<event::Event>,
    /// What a token of this room may claim.
    lifetimes: Lifetimes,
    /// Where the line lives: in this process ([`embedded::EmbeddedRoom`])
    /// or on the fleet's shared line ([`fleet::FleetRoom`]).
    pub backend: Box<dyn RoomBackend>,
    /// The room's `heartbeat_s` in force, told to the queue page in the
    /// watermark.
    heartbeat_s: AtomicU64,
    /// The store's enqueue tokens (`[rooms.enqueue]`).
    pub(crate) enqueue: enqueue::EnqueueGate,
    /// The join challenge (`[rooms.challenge]`) and its spent record.
    pub(crate) challenge: challenge::ChallengeGate,
}

/// The room's TTLs in force and its fair start: a presented ticket or pass
/// may not live longer than the room would have let it.
struct Lifetimes {
    pass_ttl_s: AtomicU64,
    ticket_ttl_s: AtomicU64,
    /// Fixed when the room is made, as the room's own opening is.
    opens_at_s: Option<u64>,
}

impl Lifetimes {
    fn new(room: &Room) -> Self {
        let lifetimes = Self {
            pass_ttl_s: AtomicU64::new(0),
            ticket_ttl_s: AtomicU64::new(0),
            opens_at_s: room.opens_at_unix,
        };
        lifetimes.set(TokenTtls::of(room));
        lifetimes
    }

    fn set(&self, ttls: TokenTtls) {
        self.pass_ttl_s.store(ttls.pass_s, Ordering::Relaxed);
        self.ticket_ttl_s.store(ttls.ticket_s, Ordering::Relaxed);
    }
}

/// A room's pass and ticket TTLs, in seconds.
#[derive(Debug, Clone, Copy)]
struct TokenTtls {
    pass_s: u64,
    ticket_s: u64,
}

impl TokenTtls {
    fn of(room: &Room) -> Self {
        Self {
            pass_s: room.pass_ttl.as_secs(),
            ticket_s: room.ticket_ttl.as_secs(),
        }
    }
}

impl RoomEntry {
    /// A join refused by the per-client limit
    /// (`sluice_queue_joins_total{result="rate_limited"}`).
    pub(crate) fn count_rate_limited_join(&self) {
        self.rate_limited_joins.fetch_add(1, Ordering::Relaxed);
    }

    /// The adaptive rate in force (for a fleet room, the fleet's one).
    pub fn adaptive_view(&self) -> Option<adaptive::AdaptiveView> {
        self.backend.adaptive_view()
    }

    /// The `reason` label of `sluice_release_rate_limit`.
    pub fn release_reason(&self) -> &'static str {
        self.backend.release_reason()
    }

    /// The room's numbers at `now_ms`; for a room on the fleet's line, the
    /// shared ones as this gateway last read them, and its own joins.
    pub fn stats(&self, now_ms: u64) -> RoomStats {
        self.backend.stats(now_ms)
    }

    /// What a pass of this room (named `room`) must be.
    fn expect_pass<'a>(&self, room: &'a str) -> Expected<'a> {
        Expected::pass(room, self.lifetimes.pass_ttl_s.load(Ordering::Relaxed))
    }

    /// What a ticket of this room (named `room`) must be.
    fn expect_ticket<'a>(&self, room: &'a str) -> Expected<'a> {
        Expected::ticket(room, self.lifetimes.ticket_ttl_s.load(Ordering::Relaxed))
            .opening_at(self.lifetimes.opens_at_s)
    }
}

/// A room's join limiter and the rate it was built for.
struct RoomLimiter {
    per_minute: NonZeroU32,
    joins: JoinLimiter,
}

impl RoomLimiter {
    fn new(per_minute: NonZeroU32) -> Self {
        Self {
            per_minute,
            joins: JoinLimiter::new(per_minute, per_minute, JOIN_CLIENTS_MAX),
        }
    }
}

/// A running checkout of a room, counted by its adaptive release (and as
/// its pass's use) until this drops (on every path out of the handler, a
/// hang-up included).
#[must_use = "the checkout counts as running until this drops"]
pub struct CheckoutInFlight(Option<(Arc<RoomEntry>, Option<PassRef>)>);

/// A pass's place and ticket id, as its verified claims give them.
type PassRef = (u64, TicketId);

impl Drop for CheckoutInFlight {
    fn drop(&mut self) {
        if let Some((entry, pass)) = &self.0 {
            let now = now_ms();
            entry.backend.checkout_ended(now);
            if let Some((seq, id)) = pass {
                entry.backend.pass_checkout(*seq, id, false, now);
            }
        }
    }
}

/// The rooms of a config, built and checked but not yet in force.
pub struct RoomsPlan {
    keyring: Arc<VerifyingKeyring>,
    challenge_keys: Arc<ChallengeKeys>,
    rooms: Vec<PlannedRoom>,
    paused: bool,
    /// When the plan was made: the adaptive controller's clock at commit.
    now_ms: u64,
}

struct PlannedRoom {
    name: String,
    /// The running room (kept across the reload) or a new, empty one.
    entry: Arc<RoomEntry>,
    policy: Policy,
    joins_per_minute: NonZeroU32,
    ttls: TokenTtls,
    /// The room's config, for the adaptive controller's bounds.
    config: Room,
}

/// Where durable rooms keep their state.
struct Durable {
    /// `data_dir/rooms`.
    rooms_dir: PathBuf,
    /// The gateway's ticket-id key (see [`secrets`]).
    ticket_id_key: [u8; 32],
}

/// Every room of the config, kept across reloads.
pub struct Rooms {
    rooms: ArcSwap<HashMap<String, Arc<RoomEntry>>>,
    keyring: ArcSwap<VerifyingKeyring>,
    /// The keyring used when the config lists no `[[keys]]`: kept in
    /// `data_dir` for durable rooms, made at start otherwise.
    ephemeral: Arc<VerifyingKeyring>,
    durable: Option<Durable>,
    /// The fleet's shared store, with `[cluster] redis_url`.
    fleet: Option<Arc<fleet::Fleet>>,
    stock: Arc<dyn StockAuthority>,
    /// The public listener speaks TLS: cookies get `Secure`.
    tls: bool,
    /// The account hash an enqueue token's `sub` is kept as.
    accounts: AccountHasher,
    /// The keys join challenges are signed with: derived from `[[keys]]`
    /// (the same on every gateway of a fleet), or from this gateway's own
    /// signing key when the config lists none.
    challenge_keys: ArcSwap<ChallengeKeys>,
    own_secret: [u8; 32],
}

impl Rooms {
    /// Rooms that live in memory only, with a signing key made now: a
    /// restart loses them (unit tests).
    pub fn new(config: &Config, tls: bool, stock: Arc<dyn StockAuthority>) -> Result<Self, String> {
        let mut secret = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut secret);
        let accounts = account_hasher(config, None)?;
        Self::build(config, tls, stock, secret, None, None, accounts)
    }

    /// Durable rooms in `gateway.data_dir` (`sluice run`): the keys are
    /// read from there (made the first time) and each room is restored
    /// from its journal.
    pub fn open(
        config: &Config,
        tls: bool,
        stock: Arc<dyn StockAuthority>,
    ) -> Result<Self, String> {
        if let Some(url) = &config.cluster.redis_url {
            let fleet = fleet::Fleet::redis(
                url.expose(),
                crate::node::node_id(&config.gateway),
                config.gateway.region.clone(),
            )?;
            let mut secret = [0u8; 32];
            rand::RngCore::fill_bytes(&mut rand::rng(), &mut secret);
            let accounts = account_hasher(config, None)?;
            return Self::build(config, tls, stock, secret, None, Some(fleet), accounts);
        }
        let data_dir: &Path = &config.gateway.data_dir;
        let secret = secrets::load_or_create(data_dir, secrets::SIGNING_KEY_FILE)?;
        let ticket_id_key = secrets::load_or_create(data_dir, secrets::TICKET_ID_KEY_FILE)?;
        let durable = Durable {
            rooms_dir: data_dir.join("rooms"),
            ticket_id_key,
        };
        let accounts = account_hasher(config, Some(data_dir))?;
        Self::build(config, tls, stock, secret, Some(durable), None, accounts)
    }

    fn build(
        config: &Config,
        tls: bool,
        stock: Arc<dyn StockAuthority>,
        secret: [u8; 32],
        durable: Option<Durable>,
        fleet: Option<Arc<fleet::Fleet>>,
        accounts: AccountHasher,
    ) -> Result<Self, String> {
        let kid = if durable.is_some() {
            "local"
        } else {
            "ephemeral"
        };
        let ephemeral = Arc::new(VerifyingKeyring::new(
            Keyring::new(vec![KeySpec {
                kid: kid.into(),
                material: KeyMaterial::Hs256(secret.to_vec()),
            }])
            .map_err(|e| e.to_string())?,
        ));
        let own_keys =
            ChallengeKeys::derived_from(&[&secret]).ok_or("the challenge key could not be made")?;
        let rooms = Self {
            rooms: ArcSwap::from_pointee(HashMap::new()),
            keyring: ArcSwap::new(ephemeral.clone()),
            ephemeral,
            durable,
            fleet,
            stock,
            tls,
            accounts,
            challenge_keys: ArcSwap::from_pointee(own_keys),
            own_secret: secret,
        };
        rooms.apply(config, now_ms())?;
        Ok(rooms)
    }

    /// A room not running yet: on the fleet's line with `[cluster]`; else
    /// in this process, restored from its journal when durable, new and
    /// empty otherwise. A new room runs at its configured (start) rate.
    fn make_backend(
        &self,
        room: &Room,
        policy: Policy,
        now_ms: u64,
    ) -> Result<Box<dyn RoomBackend>, String> {
        let mut adaptive = adaptive::AdaptiveRelease::default();
        let _ = adaptive.configure(room, now_ms);
        if let Some(fleet) = &self.fleet {
            let shared = fleet.room(
                &room.name,
                policy,
                room.joins_per_minute_per_client,
                self.stock.clone(),
            );
            return Ok(Box::new(fleet::FleetRoom::new(shared, adaptive)));
        }
        let (line, journal) = self.make_line(room, policy, now_ms)?;
        Ok(Box::new(embedded::EmbeddedRoom::new(
            line, journal, adaptive,
        )))
    }

    /// Where a new room keeps its spent challenges: in Redis on a fleet,
    /// else in this process (in its directory when durable), at most
    /// about the places it can give within a challenge's life.
    fn spend_record(&self, room: &Room, now_ms: u64) -> Box<dyn challenge::record::SpendRecord> {
        if let Some(fleet) = &self.fleet {
            return Box::new(fleet::challenge::FleetRecord::new(fleet, &room.name));
        }
        let capacity = (room.queue_capacity.get() as usize + room.max_active.get() as usize)
            .saturating_add(1024)
            .min(SPENT_CHALLENGES_MAX);
        let dir = self.durable.as_ref().map(|d| d.rooms_dir.join(&room.name));
        Box::new(challenge::record::LocalRecord::open(
            capacity,
            dir,
            now_ms / 1000,
        ))
    }

    /// An embedded room's line: restored from its journal when durable,
    /// else new and empty.
    fn make_line(
        &self,
        room: &Room,
        policy: Policy,
        now_ms: u64,
    ) -> Result<(WaitingRoom, Option<journal::RoomJournal>), String> {
        let name = &room.name;
        let Some(durable) = self.durable.as_ref() else {
            let line = WaitingRoom::new(
                name,
                policy,
                self.stock.clone(),
                StdRng::from_os_rng(),
                now_ms,
            )
            .map_err(|e| format!("room {name:?}: {e}"))?;
            return Ok((line, None));
        };
        let opened = journal::RoomJournal::open(&durable.rooms_dir.join(name))?;
        let restored = opened.events.len();
        let line = WaitingRoom::restore(
            name,
            policy,
            self.stock.clone(),
            durable.ticket_id_key,
            StdRng::from_os_rng(),
            now_ms,
            opened.events,
            opened.journal.sink(),
        )
        .map_err(|e| {
            format!(
                "room {name:?}: its journal in {} does not make a room: {e}",
                durable.rooms_dir.join(name).display()
            )
        })?;
        if restored > 0 {
            let stats = line.stats(now_ms);
            tracing::info!(
                room = name.as_str(),
                waiting = stats.waiting,
                serving = stats.serving,
                active = stats.active_passes,
                "room restored from its journal"
            );
        }
        Ok((line, Some(opened.journal)))
    }

    /// Brings the rooms in line with a (re)loaded config: existing rooms
    /// keep their line and passes and take the new policy; new rooms start
    /// empty; rooms no longer configured are dropped.
    pub fn apply(&self, config: &Config, now_ms: u64) -> Result<(), String> {
        let plan = self.plan(config, now_ms)?;
        self.commit(plan);
        Ok(())
    }

    /// Builds the rooms of `config` without touching the running ones:
    /// the keyring, every policy checked, new rooms created. Everything
    /// that can fail fails here.
    pub fn plan(&self, config: &Config, now_ms: u64) -> Result<RoomsPlan, String> {
        if self.fleet.is_some() {
            fleet::check_config(config)?;
        }
        let keyring = if config.keys.is_empty() {
            self.ephemeral.clone()
        } else {
            Arc::new(VerifyingKeyring::new(
                Keyring::from_config(&config.keys).map_err(|e| e.to_string())?,
            ))
        };
        let challenge_keys = if config.keys.is_empty() {
            ChallengeKeys::derived_from(&[&self.own_secret])
        } else {
            let secrets: Vec<&[u8]> = config
                .keys
                .iter()
                .map(|k| k.secret.expose().as_bytes())
                .collect();
            ChallengeKeys::derived_from(&secrets)
        }
        .map(Arc::new)
        .ok_or("the challenge keys could not be made")?;
        let old = self.rooms.load_full();
        let mut rooms = Vec::with_capacity(config.rooms.len());
        for room in &config.rooms {
            if let Some(lane) = room.lanes.first() {
                // Refused rather than taken and ignored: a lane's shoppers
                // would wait in the room's one line, not in theirs.
                return Err(format!(
                    "room {:?}: lanes ([[rooms.lanes]], {:?} first) are not built yet: the \
                     room has one line; leave [[rooms.lanes]] out (a token's `lane` claim is \
                     then refused as an unknown lane)",
                    room.name, lane.name
                ));
            }
            let policy = Policy::from_room(room);
            policy
                .validate()
                .map_err(|e| format!("room {:?}: {e}", room.name))?;
            let entry = match old.get(&room.name) {
                Some(entry) => entry.clone(),
                None => Arc::new(RoomEntry {
                    limiter: ArcSwap::from_pointee(RoomLimiter::new(
                        room.joins_per_minute_per_client,
                    )),
                    rate_limited_joins: AtomicU64::new(0),
                    forbidden_joins: AtomicU64::new(0),
                    not_open_joins: AtomicU64::new(0),
                    event_closed_joins: AtomicU64::new(0),
                    event: ArcSwap::from_pointee(event::Event::of(room)),
                    lifetimes: Lifetimes::new(room),
                    backend: self.make_backend(room, policy.clone(), now_ms)?,
                    heartbeat_s: AtomicU64::new(room.heartbeat.as_secs()),
                    enqueue: enqueue::EnqueueGate::new(room),
                    challenge: challenge::ChallengeGate::new(room, self.spend_record(room, now_ms)),
                }),
            };
            rooms.push(PlannedRoom {
                name: room.name.clone(),
                entry,
                policy,
                joins_per_minute: room.joins_per_minute_per_client,
                ttls: TokenTtls::of(room),
                config: room.clone(),
            });
        }
        Ok(RoomsPlan {
            keyring,
            challenge_keys,
            rooms,
            paused: config.gateway.admissions == Admissions::Paused,
            now_ms,
        })
    }

    /// Puts a plan in force. Cannot fail: [`Self::plan`] checked it all.
    pub fn commit(&self, plan: RoomsPlan) {
        let mut next = HashMap::with_capacity(plan.rooms.len());
        for room in plan.rooms {
            let entry = room.entry;
            let event = event::Event::of(&room.config);
            entry.backend.apply(
                Settings {
                    policy: room.policy,
                    paused: plan.paused,
                    closes_at_s: event.closes_at_s(),
                    joins_per_minute: room.joins_per_minute,
                    config: &room.config,
                },
                plan.now_ms,
            );
            if entry.limiter.load().per_minute != room.joins_per_minute {
                entry
                    .limiter
                    .store(Arc::new(RoomLimiter::new(room.joins_per_minute)));
            }
            entry.lifetimes.set(room.ttls);
            entry.enqueue.set(&room.config);
            entry.challenge.set(&room.config);
            entry.event.store(Arc::new(event));
            entry
                .heartbeat_s
                .store(room.config.heartbeat.as_secs(), Ordering::Relaxed);
            next.insert(room.name, entry);
        }
        self.rooms.store(Arc::new(next));
        self.keyring.store(plan.keyring);
        self.challenge_keys.store(plan.challenge_keys);
    }

    /// With `[cluster] redis_url`: the fleet's gateways the store heard
    /// from lately (`/admin/state` `"fleet"`).
    pub fn fleet_members(&self) -> Option<Vec<fleet::Member>> {
        self.fleet.as_ref().map(|f| f.members())
    }

    /// With `[cluster] redis_url`, once measured: the store's clock less
    /// this machine's (ms).
    pub fn fleet_clock_offset_ms(&self) -> Option<i64> {
        self.fleet.as_ref()?.clock_offset_ms()
    }

    /// With `[cluster] redis_url`: whether this gateway reaches the room
    /// store.
    pub fn fleet_store_health(&self) -> Option<fleet::StoreHealth> {
        self.fleet.as_ref().map(|f| f.store_health())
    }

    pub fn get(&self, name: &str) -> Option<Arc<RoomEntry>> {
        self.rooms.load().get(name).cloned()
    }

    pub fn all(&self) -> Arc<HashMap<String, Arc<RoomEntry>>> {
        self.rooms.load_full()
    }

    pub fn stats(&self, name: &str, now_ms: u64) -> Option<RoomStats> {
        Some(self.get(name)?.stats(now_ms))
    }

    /// Checks the pass a request carries for `room` (cookie or bearer).
    pub fn verify_pass(
        &self,
        room: &str,
        headers: &HeaderMap,
        metrics: &Metrics,
    ) -> Result<Claims, TokenError> {
        let token = bearer(headers)
            .or_else(|| cookie(headers, PASS_COOKIE))
            .ok_or(TokenError::Malformed)?;
        let entry = self.get(room).ok_or(TokenError::WrongAudience)?;
        let now = now_ms();
        let result = self
            .keyring
            .load()
            .verify(token, &entry.expect_pass(room), now / 1000)
            .and_then(|claims| {
                // An ended pass is refused until its expiry; any other
                // request with it is its use (not idle).
                if entry.backend.pass_ended(claims.seq, now) {
                    return Err(TokenError::Ended);
                }
                if let Some(id) = TicketId::parse(&claims.sub) {
                    entry.backend.touch_pass(claims.seq, &id, now);
                }
                Ok(claims)
            });
        if let Err(e) = &result {
            metrics
                .ticket_rejections
                .with_label_values(&[room, e.reason()])
                .inc();
        }
        result
    }

    /// A request carrying a pass (cookie or bearer) that no protected
    /// path checked: its use keeps the pass from going idle
    /// (`pass_idle_s`), as the contract says any request with it does.
    /// Only for rooms whose passes can go idle, so every other request
    /// costs no more than reading a header; the pass is verified first (a
    /// forged one keeps nothing alive) and refusals are not counted as
    /// ticket rejections (the request was not asking to be let in).
    pub fn note_pass_use(&self, headers: &HeaderMap) {
        let Some(token) = cookie(headers, PASS_COOKIE).or_else(|| bearer(headers)) else {
            return;
        };
        let Some(room) = claimed_room(token) else {
            return;
        };
        let Some(entry) = self.get(&room) else {
            return;
        };
        if entry.backend.policy().pass_idle.is_zero() {
            return;
        }
        let now = now_ms();
        let Ok(claims) = self
            .keyring
            .load()
            .verify(token, &entry.expect_pass(&room), now / 1000)
        else {
            return;
        };
        if entry.backend.pass_ended(claims.seq, now) {
            return;
        }
        if let Some(id) = TicketId::parse(&claims.sub) {
            entry.backend.touch_pass(claims.seq, &id, now);
        }
    }

    /// The pass the request carries, verified once: the token's own `aud`
    /// (read before verifying, only to choose the room) names the room it
    /// is checked against; the signature, `aud`, `typ` and expiry are then
    /// checked as for [`Self::verify_pass`].
    pub fn pass_of(&self, headers: &HeaderMap, metrics: &Metrics) -> Option<(String, Claims)> {
        let token = bearer(headers).or_else(|| cookie(headers, PASS_COOKIE))?;
        let room = claimed_room(token)?;
        let room = self.rooms.load().get_key_value(room.as_str())?.0.clone();
        self.verify_pass(&room, headers, metrics)
            .ok()
            .map(|claims| (room, claims))
    }

    /// Forgets join-limiter clients whose allowance is whole again, in
    /// every room: O(clients), so it runs on the release worker's timer,
    /// never on the join path.
    pub fn retain_recent_joins(&self) {
        for entry in self.rooms.load().values() {
            entry.limiter.load().joins.retain_recent();
        }
    }

    /// Counts a checkout of `room` as running until the returned guard
    /// drops (adaptive release's in-flight signal); a room that does not
    /// exist counts nothing.
    pub fn checkout_started(&self, room: &str, pass: &Claims) -> CheckoutInFlight {
        let Some(entry) = self.get(room) else {
            return CheckoutInFlight(None);
        };
        let now = now_ms();
        entry.backend.checkout_started(now);
        let pass = TicketId::parse(&pass.sub).map(|id| (pass.seq, id));
        if let Some((seq, id)) = &pass {
            entry.backend.pass_checkout(*seq, id, true, now);
        }
        CheckoutInFlight(Some((entry, pass)))
    }

    /// Ends `pass` (verified for `room`) before its time; `true` if it held
    /// a slot.
    pub fn end_pass(&self, room: &str, pass: &Claims, why: PassEnd) -> bool {
        self.get(room)
            .is_some_and(|entry| entry.backend.end_pass(pass, why, now_ms()))
    }

    /// A checkout of an admitted shopper of `room` that reached the
    /// backend, for adaptive release.
    pub fn record_checkout(&self, room: &str, latency_ms: u32, outcome: Outcome) {
        if let Some(entry) = self.get(room) {
            entry.backend.record_checkout(now_ms(), latency_ms, outcome);
        }
    }

    /// The adaptive controller of `room`, when its rate is not pinned.
    /// For a fleet room, the fleet's one rate as this gateway last read it.
    pub fn adaptive_view(&self, room: &str) -> Option<adaptive::AdaptiveView> {
        self.get(room)?.adaptive_view()
    }

    /// Whether `pass` (already verified for `room`) still holds its active
    /// slot, and so may start a checkout.
    pub fn may_start(&self, room: &str, pass: &Claims) -> bool {
        let Some(id) = TicketId::parse(&pass.sub) else {
            return false;
        };
        self.get(room)
            .is_some_and(|entry| entry.backend.may_start(pass.seq, &id, now_ms()))
    }

    /// The room's `max_orders_per_pass` in force.
    pub fn orders_per_pass_max(&self, room: &str) -> u32 {
        self.get(room)
            .map_or(0, |entry| entry.backend.policy().max_orders_per_pass.get())
    }

    /// Gives the pass's active slot back if `orders` shows it has spent its
    /// checkouts; `true` if a slot was freed.
    pub fn give_back_if_spent(&self, room: &str, seq: u64, orders: PassOrders) -> bool {
        self.get(room)
            .is_some_and(|entry| entry.backend.give_back_if_spent(seq, orders, now_ms()))
    }

    /// Answers a request under `/queue/`. Awaits only for a room on the
    /// fleet's shared line: a join, or collecting a released place's pass.
    pub async fn handle(
        &self,
        req: QueueRequest<'_>,
        deny: Option<&DenyList>,
        metrics: &Metrics,
    ) -> LocalResponse {
        let QueueRequest {
            method,
            path,
            query,
            headers,
            client,
            body: req_body,
        } = req;
        let rest = &path["/queue/".len()..];
        let (name, action) = match rest.split_once('/') {
            Some((name, action)) => (name, action),
            None => (rest, ""),
        };
        let Some(entry) = self.get(name) else {
            return LocalResponse::error(&ApiError::new(
                ErrorCode::UnknownRoom,
                "There is no waiting room by that name.",
            ));
        };
        let now = now_ms();
        match (method, action) {
            (&Method::GET | &Method::HEAD, "") => {
                respond::page(headers, query, &entry.challenge.settings())
            }
            (&Method::POST, "join") if cross_site(headers) => LocalResponse::error(&ApiError::new(
                ErrorCode::Forbidden,
                "Join the waiting room from the store's own page.",
            )),
            (&Method::POST, "join") if denied(deny, client) => {
                entry.forbidden_joins.fetch_add(1, Ordering::Relaxed);
                network_denied()
            }
            (&Method::GET, "status") if denied(deny, client) => network_denied(),
            (&Method::POST, "join") => {
                self.join(name, &entry, headers, client, req_body, now)
                    .await
            }
            (&Method::GET | &Method::HEAD, "challenge") => {
                if denied(deny, client) {
                    return network_denied();
                }
                if let Some(shut) = door(&entry, now) {
                    return shut;
                }
                entry
                    .challenge
                    .issue(name, &self.challenge_keys.load(), now)
            }
            (&Method::GET, "status") => self.status(name, &entry, headers, now, metrics).await,
            (&Method::GET | &Method::HEAD, "watermark") => {
                let mark = entry.backend.watermark(now);
                watermark::answer(name, &mark, entry.heartbeat_s.load(Ordering::Relaxed))
            }
            (_, "" | "join" | "status" | "watermark" | "challenge") => {
                respond::method_not_allowed(if action == "join" {
                    "POST"
                } else {
                    "GET, HEAD"
                })
            }
            _ => LocalResponse::error(&ApiError::new(
                ErrorCode::NotFound,
                "Nothing is served at this path.",
            )),
        }
    }

    async fn join(
        &self,
        room: &str,
        entry: &RoomEntry,
        headers: &HeaderMap,
        client: Option<IpAddr>,
        body: &[u8],
        now: u64,
    ) -> LocalResponse {
        // One browser keeps one ticket: a live ticket comes back as it is.
        if let Some(token) = cookie(headers, TICKET_COOKIE).or_else(|| bearer(headers)) {
            let verified = self.keyring.load().verify_then(
                token,
                &entry.expect_ticket(room),
                now / 1000,
                presented,
            );
            if let Ok(Some((ticket, account))) = verified {
                // Rejoining sooner than told is an early poll: same answer
                // as the status route.
                if let Some(retry_after_s) = entry.backend.early_poll(&ticket, now) {
                    return too_early(retry_after_s);
                }
                match entry.backend.poll(&ticket, now).await {
                    Ok(Status::Expired | Status::SoldOut) | Err(PollRefused::UnknownPlace) => {}
                    Ok(status) => {
                        page_used(entry, &ticket, &status, now);
                        let shown = Shown {
                            token,
                            ticket: &ticket,
                            account: account.as_ref(),
                        };
                        return self.ticket_answer(room, entry, shown, status, now, true);
                    }
                    Err(PollRefused::TooEarly { retry_after_s }) => {
                        return too_early(retry_after_s)
                    }
                }
            }
        }
        // The campaign's door, then this gateway's own limit (a client over
        // it here is over it for the fleet too); a fleet's store then
        // counts the fleet's.
        match entry.event.load().window(now) {
            JoinWindow::Open | JoinWindow::PreQueue => {}
            JoinWindow::NotOpen { retry_after_s } => {
                entry.not_open_joins.fetch_add(1, Ordering::Relaxed);
                return LocalResponse::error(
                    &ApiError::new(
                        ErrorCode::NotOpen,
                        "This waiting room is not open yet; it opens shortly.",
                    )
                    .retry_after(retry_after_s.min(u64::from(u32::MAX)) as u32),
                );
            }
            JoinWindow::Closed => {
                entry.event_closed_joins.fetch_add(1, Ordering::Relaxed);
                return LocalResponse::error(&ApiError::new(
                    ErrorCode::EventClosed,
                    "This event has closed; no new places are given.",
                ));
            }
        }
        if let Some(refused) = limit_join(entry, client) {
            return refused;
        }
        // The challenge, then the store's enqueue token (the contract's
        // order of answers). A challenge held for this join is spent with
        // the place it gets, given back if the join gets none.
        let keys = self.challenge_keys.load_full();
        let reserved = match entry.challenge.check(room, body, client, &keys, now).await {
            challenge::Passed::Open => None,
            challenge::Passed::Reserved(reserved) => Some(reserved),
            // A retry of a join whose answer was lost. A place that came
            // with an account is the account's: its own retry (a fresh
            // solution) gets it back through the account, and the same
            // solution sent with an account token is a replay, so a solved
            // challenge never hands one account's place to another.
            challenge::Passed::SamePlace(by) => {
                return match self.entrant(room, entry, headers, body, now) {
                    Err(refused) => refused,
                    Ok(Some(_)) => refused_replay(entry),
                    Ok(None) => self.same_place(room, entry, by, now).await,
                };
            }
            challenge::Passed::Refused(answer) => return answer,
        };
        let account = match self.entrant(room, entry, headers, body, now) {
            Ok(account) => account,
            Err(refused) => {
                if let Some(reserved) = reserved {
                    entry.challenge.not_spent(reserved).await;
                }
                return refused;
            }
        };
        let req = JoinRequest {
            client: client.map(ClientKey::from_ip),
            account,
        };
        let entered = entry.backend.join(req, now).await;
        if let Some(reserved) = reserved {
            match &entered {
                Ok(Entered::New(j)) => {
                    let place = (j.seq, j.ticket_id, j.issued_at_s, j.expires_at_s);
                    entry.challenge.spent_by(reserved, place).await;
                }
                // The account's place: the challenge is spent all the same
                // (one solution, one join), and its retry answers that place.
                Ok(Entered::Held(h)) => {
                    let place = (h.seq, h.ticket_id, h.issued_at_s, h.expires_at_s);
                    entry.challenge.spent_by(reserved, place).await;
                }
                Err(_) => entry.challenge.not_spent(reserved).await,
            }
        }
        match entered {
            Ok(Entered::New(joined)) => {
                let claims = joined.claims(room).for_account(account.as_ref());
                let ticket = Presented {
                    seq: joined.seq,
                    ticket_id: joined.ticket_id,
                    expires_at_s: joined.expires_at_s,
                };
                match self.keyring.load().sign(&claims) {
                    Ok(token) => {
                        let shown = Shown {
                            token: &token,
                            ticket: &ticket,
                            account: account.as_ref(),
                        };
                        self.ticket_answer(room, entry, shown, joined.status, now, true)
                    }
                    Err(_) => not_signed("ticket"),
                }
            }
            Ok(Entered::Held(held)) => self.held_answer(room, entry, held, account, now).await,
            Err(e) => {
                if matches!(e, JoinError::RateLimited { .. }) {
                    entry.count_rate_limited_join();
                }
                join_refused(e)
            }
        }
    }

    /// The store's enqueue token this join carries, checked: the account
    /// it names (`None` in a room without `[rooms.enqueue]`, or without a
    /// token where none is required), or the refusal to answer.
    fn entrant(
        &self,
        room: &str,
        entry: &RoomEntry,
        headers: &HeaderMap,
        body: &[u8],
        now: u64,
    ) -> Result<Option<AccountHash>, LocalResponse> {
        let body_token = enqueue::token_in_body(body).map_err(|_| enqueue::bad_body())?;
        let token = enqueue::token(body_token.as_deref(), headers);
        let entrant = entry
            .enqueue
            .check(room, token, &self.accounts, now / 1000)?;
        Ok(entrant.map(|e| e.account))
    }

    /// The answer to a join whose account holds a live place already: that
    /// place, as a poll of its ticket, with its ticket signed again (the
    /// same `sub` and `seq`).
    async fn held_answer(
        &self,
        room: &str,
        entry: &RoomEntry,
        held: HeldPlace,
        account: Option<AccountHash>,
        now: u64,
    ) -> LocalResponse {
        let claims = Claims::new(
            TokenType::Ticket,
            room,
            &held.ticket_id.to_string(),
            held.seq,
            held.issued_at_s,
            held.expires_at_s,
        )
        .for_account(account.as_ref());
        let Ok(token) = self.keyring.load().sign(&claims) else {
            return not_signed("ticket");
        };
        let ticket = Presented {
            seq: held.seq,
            ticket_id: held.ticket_id,
            expires_at_s: held.expires_at_s,
        };
        // Joining again sooner than told is an early poll.
        if let Some(retry_after_s) = entry.backend.early_poll(&ticket, now) {
            return too_early(retry_after_s);
        }
        match entry.backend.poll(&ticket, now).await {
            Ok(status) => {
                let shown = Shown {
                    token: &token,
                    ticket: &ticket,
                    account: account.as_ref(),
                };
                self.ticket_answer(room, entry, shown, status, now, true)
            }
            Err(PollRefused::TooEarly { retry_after_s }) => too_early(retry_after_s),
            Err(PollRefused::UnknownPlace) => {
                join_refused(JoinError::StoreUnavailable { retry_after_s: 1 })
            }
        }
    }

    /// A join whose challenge and solution already got a place (a retry
    /// whose answer was lost): that place again, with its ticket, while it
    /// is live; a place that is gone makes it a replay.
    async fn same_place(
        &self,
        room: &str,
        entry: &RoomEntry,
        by: sluice_admission::challenge::SpentBy,
        now: u64,
    ) -> LocalResponse {
        let Some(ticket_id) = TicketId::parse(&hex::encode(by.ticket_id)) else {
            return refused_replay(entry);
        };
        let claims = Claims::new(
            TokenType::Ticket,
            room,
            &ticket_id.to_string(),
            by.seq,
            by.issued_at_s,
            by.expires_at_s,
        );
        let ticket = Presented {
            seq: by.seq,
            ticket_id,
            expires_at_s: by.expires_at_s,
        };
        if by.expires_at_s <= now / 1000 {
            return refused_replay(entry);
        }
        // The retry's client has no ticket yet: one asked sooner than its
        // place's next poll gets the ticket with the line's public numbers
        // (the watermark's) instead of a `429` that would leave it none.
        let early = |retry_after_s| {
            let mark = entry.backend.watermark(now);
            Status::Waiting(challenge::answer::retry_wait(
                by.seq,
                &mark,
                retry_after_s,
                by.expires_at_s,
            ))
        };
        let polled = match entry.backend.early_poll(&ticket, now) {
            Some(retry_after_s) => Ok(early(retry_after_s)),
            None => match entry.backend.poll(&ticket, now).await {
                Err(PollRefused::TooEarly { retry_after_s }) => Ok(early(retry_after_s)),
                other => other,
            },
        };
        match polled {
            Ok(Status::Expired | Status::SoldOut) | Err(PollRefused::UnknownPlace) => {
                refused_replay(entry)
            }
            Err(PollRefused::TooEarly { retry_after_s }) => too_early(retry_after_s),
            Ok(status) => match self.keyring.load().sign(&claims) {
                Ok(token) => {
                    let shown = Shown {
                        token: &token,
                        ticket: &ticket,
                        account: None,
                    };
                    self.ticket_answer(room, entry, shown, status, now, true)
                }
                Err(_) => not_signed("ticket"),
            },
        }
    }

    async fn status(
        &self,
        room: &str,
        entry: &RoomEntry,
        headers: &HeaderMap,
        now: u64,
        metrics: &Metrics,
    ) -> LocalResponse {
        let invalid = |reason: &str| invalid_ticket(metrics, room, reason);
        let Some(token) = bearer(headers).or_else(|| cookie(headers, TICKET_COOKIE)) else {
            return invalid("missing");
        };
        // Most polls of a refresh storm are early: once the ticket is
        // verified, they are answered without the room's lock or the store
        // where the back end can, and without copying the claims.
        let verified = self.keyring.load().verify_then(
            token,
            &entry.expect_ticket(room),
            now / 1000,
            presented,
        );
        let (ticket, account) = match verified {
            Err(e) => return invalid(e.reason()),
            Ok(None) => return invalid("malformed"),
            Ok(Some(ticket)) => ticket,
        };
        if let Some(retry_after_s) = entry.backend.early_poll(&ticket, now) {
            return too_early(retry_after_s);
        }
        match entry.backend.poll(&ticket, now).await {
            Ok(status) => {
                page_used(entry, &ticket, &status, now);
                let shown = Shown {
                    token,
                    ticket: &ticket,
                    account: account.as_ref(),
                };
                self.ticket_answer(room, entry, shown, status, now, false)
            }
            Err(PollRefused::TooEarly { retry_after_s }) => too_early(retry_after_s),
            Err(PollRefused::UnknownPlace) => invalid("unknown_place"),
        }
    }

    /// The JSON for a ticket's state; mints the pass when admitted (for an
    /// account's place, with its account hash).
    fn ticket_answer(
        &self,
        room: &str,
        entry: &RoomEntry,
        shown: Shown<'_>,
        status: Status,
        now: u64,
        joined: bool,
    ) -> LocalResponse {
        let Shown {
            token,
            ticket,
            account,
        } = shown;
        let pass = match status {
            Status::Admitted(admitted) => {
                let claims = admitted.claims(room).for_account(account);
                match self.keyring.load().sign(&claims) {
                    Ok(pass) => {
                        if let Some(account) = account {
                            entry.backend.account_pass(
                                account,
                                admitted.seq,
                                admitted.expires_at_s,
                            );
                        }
                        Some((pass, admitted.expires_at_s))
                    }
                    Err(_) => return not_signed("pass"),
                }
            }
            _ => None,
        };
        let fair = entry.backend.fair_start();
        let event = entry.event.load();
        // After the close, a shopper still in line is told so; a pass
        // already out (collected before the close) is shown as it is.
        let closed = event.is_closed(now)
            && match &status {
                Status::Admitted(a) => event.closes_at_s().is_some_and(|at| a.issued_at_s >= at),
                Status::Expired | Status::SoldOut => false,
                _ => true,
            };
        let pass = if closed { None } else { pass };
        let odds = if event.show_units_left && !closed {
            self.stock.units_left(room).map(|left| {
                let beyond = match &status {
                    Status::Waiting(w) | Status::Paused(w) => {
                        Some(sluice_admission::odds::likely_beyond_stock(w.ahead, left))
                    }
                    _ => None,
                };
                (left.units, beyond)
            })
        } else {
            None
        };
        respond::ticket(respond::TicketAnswer {
            room,
            ticket: token,
            ticket_expires_at: ticket.expires_at_s,
            status,
            pass: pass.as_ref().map(|(p, exp)| (p.as_str(), *exp)),
            fair_start: fair.as_ref(),
            joined,
            secure: self.tls,
            now_s: now / 1000,
            closed,
            message: event.message.as_deref(),
            closes_at: event.closes_at_s(),
            units_left: odds.map(|(units, _)| units),
            likely_beyond_stock: odds.and_then(|(_, beyond)| beyond),
        })
    }
}

/// The account hasher: `[cluster] account_hash_key_env`'s key; else, with
/// a `data_dir` (one durable gateway), the key kept there (made once);
/// else a key made now (rooms in memory only).
fn account_hasher(config: &Config, data_dir: Option<&Path>) -> Result<AccountHasher, String> {
    let key = match (&config.cluster.account_hash_key, data_dir) {
        (Some(key), _) => key.expose().as_bytes().to_vec(),
        (None, Some(dir)) => secrets::load_or_create(dir, enqueue::ACCOUNT_KEY_FILE)?.to_vec(),
        (None, None) => {
            let mut key = [0u8; 32];
            rand::RngCore::fill_bytes(&mut rand::rng(), &mut key);
            key.to_vec()
        }
    };
    AccountHasher::new(&key).ok_or_else(|| "the account hash key is too short".to_owned())
}

/// `403 challenge_failed` for a challenge whose place is gone.
fn refused_replay(entry: &RoomEntry) -> LocalResponse {
    match entry
        .challenge
        .fail(sluice_admission::challenge::ChallengeError::Replayed)
    {
        challenge::Passed::Refused(answer) => answer,
        _ => unreachable!("a failed challenge is refused"),
    }
}

/// The campaign's door for a challenge: none is issued before
/// `prequeue_at` (`503 not_open`) or after `closes_at` (`410`).
fn door(entry: &RoomEntry, now: u64) -> Option<LocalResponse> {
    match entry.event.load().window(now) {
        JoinWindow::Open | JoinWindow::PreQueue => None,
        JoinWindow::NotOpen { retry_after_s } => Some(LocalResponse::error(
            &ApiError::new(
                ErrorCode::NotOpen,
                "This waiting room is not open yet; it opens shortly.",
            )
            .retry_after(retry_after_s.min(u64::from(u32::MAX)) as u32),
        )),
        JoinWindow::Closed => Some(LocalResponse::error(&ApiError::new(
            ErrorCode::EventClosed,
            "This event has closed; no new places are given.",
        ))),
    }
}

/// Whether `client` is in the gateway's deny list.
fn denied(deny: Option<&DenyList>, client: Option<IpAddr>) -> bool {
    matches!((deny, client), (Some(list), Some(ip)) if list.contains(ip))
}

/// `403 forbidden` for a client from a denied network.
fn network_denied() -> LocalResponse {
    LocalResponse::error(&ApiError::new(
        ErrorCode::Forbidden,
        "Joining this waiting room is not possible from your network.",
    ))
}

/// A ticket being answered: the token as presented (or signed now), the
/// place it names, and the account that holds it (if any).
struct Shown<'a> {
    token: &'a str,
    ticket: &'a Presented,
    account: Option<&'a AccountHash>,
}

/// `500` for a token that could not be signed.
fn not_signed(what: &str) -> LocalResponse {
    LocalResponse::error(&ApiError::new(
        ErrorCode::Internal,
        format!("The {what} could not be signed."),
    ))
}

/// The place a verified ticket presents, if its `sub` is a ticket id, and
/// the account hash it carries (an `acct` that is not one: none).
fn presented(claims: &Claims) -> Option<(Presented, Option<AccountHash>)> {
    let ticket = Presented {
        seq: claims.seq,
        ticket_id: TicketId::parse(&claims.sub)?,
        expires_at_s: claims.exp,
    };
    Some((ticket, claims.acct.as_deref().and_then(account_of_hex)))
}

/// The account hash written as 32 lowercase hex digits.
fn account_of_hex(hex_digits: &str) -> Option<AccountHash> {
    let mut out = [0u8; 16];
    hex::decode_to_slice(hex_digits, &mut out).ok()?;
    Some(AccountHash(out))
}

/// The answer to a join the room refused.
pub(crate) fn join_refused(e: JoinError) -> LocalResponse {
    match e {
        JoinError::QueueFull { retry_after_s } => LocalResponse::error(
            &ApiError::new(
                ErrorCode::QueueFull,
                "The line is full right now; please try again shortly.",
            )
            .retry_after(retry_after_s as u32),
        ),
        JoinError::Paused { retry_after_s } => LocalResponse::error(
            &ApiError::new(
                ErrorCode::AdmissionsPaused,
                "Admissions are paused for a moment; please try again shortly.",
            )
            .retry_after(retry_after_s as u32),
        ),
        JoinError::SoldOut => LocalResponse::error(&ApiError::new(
            ErrorCode::SoldOut,
            "Everything in this drop has been sold.",
        )),
        JoinError::StoreUnavailable { retry_after_s } => LocalResponse::error(
            &ApiError::new(
                ErrorCode::StoreUnavailable,
                "The line cannot take new places right now; please try again shortly.",
            )
            .retry_after(retry_after_s as u32),
        ),
        JoinError::RateLimited { retry_after_s } => too_many_joins(retry_after_s),
    }
}

/// The page's status call (or its join carrying its own ticket) with an
/// admitted place is the pass's use (`pass_idle_s`), as the contract says.
/// A join answered with an account's place is not: it carries neither the
/// pass nor the ticket, and would let anyone holding the account's enqueue
/// token keep an unused pass alive.
fn page_used(entry: &RoomEntry, ticket: &Presented, status: &Status, now: u64) {
    if matches!(status, Status::Admitted(_)) {
        entry.backend.touch_pass(ticket.seq, &ticket.ticket_id, now);
    }
}

/// `429 rate_limited` for a client over the per-client join limit.
fn too_many_joins(retry_after_s: u64) -> LocalResponse {
    LocalResponse::error(
        &ApiError::new(
            ErrorCode::RateLimited,
            "Too many joins from your address; try again shortly.",
        )
        .retry_after(retry_after_s as u32),
    )
}

/// The per-client join limit: `Some(429)` when `client` is over it.
pub(crate) fn limit_join(entry: &RoomEntry, client: Option<IpAddr>) -> Option<LocalResponse> {
    let ip = client?;
    let checked = entry.limiter.load().joins.check(ClientKey::from_ip(ip));
    let JoinRateLimited {
        retry_after_s: retry,
    } = checked.err()?;
    entry.count_rate_limited_join();
    Some(too_many_joins(retry))
}

/// The `429 rate_limited` of a poll sooner than told: the answer the
/// gateway gives most under a refresh storm, so written from a template
/// rather than through [`ApiError`]'s serializer, with the very bytes and
/// headers [`ApiError`] makes of it (a test compares them).
pub(crate) fn too_early(retry_after_s: u64) -> LocalResponse {
    const HEAD: &str = concat!(
        r#"{"error":"rate_limited","message":""#,
        "Asked sooner than told; the page updates by itself.",
        r#"","retry_after_s":"#
    );
    let seconds = http::HeaderValue::from((retry_after_s as u32).max(1));
    let mut body = Vec::with_capacity(HEAD.len() + 12);
    body.extend_from_slice(HEAD.as_bytes());
    body.extend_from_slice(seconds.as_bytes());
    body.extend_from_slice(b"}\n");
    LocalResponse {
        status: ErrorCode::RateLimited.status(),
        headers: vec![
            (
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            ),
            (
                http::header::CACHE_CONTROL,
                http::HeaderValue::from_static("no-store"),
            ),
            (http::header::RETRY_AFTER, seconds),
        ],
        body: body.into(),
        source: "local",
    }
}

/// [`too_early`] as [`ApiError`] writes it.
#[cfg(test)]
fn too_early_as_api_error(retry_after_s: u64) -> LocalResponse {
    LocalResponse::error(
        &ApiError::new(
            ErrorCode::RateLimited,
            "Asked sooner than told; the page updates by itself.",
        )
        .retry_after(retry_after_s as u32),
    )
}

/// The `aud` a token claims, read without verifying anything: only to
/// choose the one room to verify it against. Bounded like the keyring's
/// own decode (tokens are about 300 bytes).
fn claimed_room(token: &str) -> Option<String> {
    use base64::Engine;
    const TOKEN_BYTES_MAX: usize = 4096;
    #[derive(serde::Deserialize)]
    struct Aud {
        aud: String,
    }
    if token.len() > TOKEN_BYTES_MAX {
        return None;
    }
    let payload = token.split('.').nth(1)?;
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    serde_json::from_slice::<Aud>(&json).ok().map(|a| a.aud)
}

/// `401 invalid_ticket`, counted in `sluice_ticket_rejections_total` by
/// `reason`.
pub(in crate::queue) fn invalid_ticket(
    metrics: &Metrics,
    room: &str,
    reason: &str,
) -> LocalResponse {
    metrics
        .ticket_rejections
        .with_label_values(&[room, reason])
        .inc();
    LocalResponse::error(&ApiError::new(
        ErrorCode::InvalidTicket,
        "This queue ticket is not valid; please join again.",
    ))
}

/// The token of `Authorization: Bearer <token>`. A repeated
/// `Authorization` header has no token here; `route()` refuses such a
/// request with `400` before any handler runs.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    sluice_edge::auth::bearer(headers).ok().flatten()
}

/// The value of cookie `name`.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    sluice_edge::auth::cookie(headers, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_must_list_its_signing_keys_and_has_no_fair_start_with_account_places() {
        let room =
            "[[rooms]]\nname = \"r\"\nmax_active = 1\nqueue_capacity = 1\nrelease_per_second = 1\n";
        let src = format!("[gateway]\n[cluster]\nredis_url = \"redis://127.0.0.1:7000\"\n{room}");
        let parse = |src: &str| {
            sluice_policies::validate::parse_with_env(src, std::path::Path::new("p.toml"), &|_| {
                None
            })
            .unwrap()
        };
        let stock = Arc::new(sluice_admission::InMemoryStock::new());
        let err = Rooms::open(&parse(&src), false, stock.clone())
            .err()
            .unwrap();
        assert!(err.contains("[[keys]]"), "{err}");
        let keys = "[[keys]]\nkid = \"k1\"\nalg = \"HS256\"\nsecret = \"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"\n";
        let fair = format!("{src}opens_at = 2099-01-01T00:00:00Z\n{keys}");
        assert!(Rooms::open(&parse(&fair), false, stock.clone()).is_ok());
        // A fair start with one place per account is not built on a fleet.
        let accounts = format!(
            "{}opens_at = 2099-01-01T00:00:00Z\n[rooms.enqueue]\nrequired = true\n[[rooms.enqueue.keys]]\nkid = \"s\"\nalg = \"HS256\"\nsecret = \"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"\n{keys}",
            src.replace("[cluster]\n", "[cluster]\naccount_hash_key_env = \"K\"\n")
        );
        let parsed = sluice_policies::validate::parse_with_env(
            &accounts,
            std::path::Path::new("p.toml"),
            &|_| Some("an-account-hash-key-of-32-bytes-or-more".into()),
        )
        .unwrap();
        let err = Rooms::open(&parsed, false, stock.clone()).err().unwrap();
        assert!(
            err.contains("opens_at") && err.contains("[rooms.enqueue]"),
            "{err}"
        );
        // A fleet that sells without a shared PostgreSQL would sell each
        // gateway's own stock: refused, naming the key that fixes it.
        let products = "[[products]]\nsku = \"a\"\nstock = 1\nprice_cents = 1\nroom = \"r\"\n";
        let selling = format!("{src}{keys}{products}");
        let err = Rooms::open(&parse(&selling), false, stock.clone())
            .err()
            .unwrap();
        assert!(err.contains("sell the stock N times"), "{err}");
        assert!(err.contains("needs [cluster] postgres_url"), "{err}");
        // With the stock on the fleet's PostgreSQL, the same fleet opens.
        let shared = src.replace(
            "[cluster]\n",
            "[cluster]\npostgres_url = \"postgres://u@127.0.0.1:7/db\"\n",
        );
        let selling = format!("{shared}{keys}{products}");
        assert!(Rooms::open(&parse(&selling), false, stock.clone()).is_ok());
        // Keys listed: the rooms open without Redis up (its tasks connect).
        assert!(Rooms::open(&parse(&format!("{src}{keys}")), false, stock).is_ok());
    }

    #[test]
    fn lanes_are_refused_until_they_are_built() {
        let src = "[gateway]\n[[rooms]]\nname = \"r\"\nmax_active = 1\nqueue_capacity = 1\nrelease_per_second = 1\n[rooms.enqueue]\nrequired = false\n[[rooms.enqueue.keys]]\nkid = \"s\"\nalg = \"HS256\"\nsecret = \"c3RvcmUtZW5xdWV1ZS1zZWNyZXQtMzItYnl0ZXMtb2s\"\n";
        let parse = |src: &str| {
            sluice_policies::validate::parse_with_env(src, std::path::Path::new("p.toml"), &|_| {
                None
            })
            .unwrap()
        };
        let stock = Arc::new(sluice_admission::InMemoryStock::new());
        assert!(Rooms::new(&parse(src), false, stock.clone()).is_ok());
        let lanes = format!("{src}[[rooms.lanes]]\nname = \"members\"\nshare = 0.3\n");
        let err = Rooms::new(&parse(&lanes), false, stock).err().unwrap();
        assert!(err.contains("not built yet"), "{err}");
    }

    #[test]
    fn an_early_poll_gets_the_bytes_and_headers_an_api_error_would_make() {
        assert!(too_early(1).body.starts_with(b"{"));
        for s in [
            0,
            1,
            2,
            9,
            10,
            59,
            300,
            86_400,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let (fast, slow) = (too_early(s), too_early_as_api_error(s));
            assert_eq!(fast.status, slow.status, "{s}");
            assert_eq!(fast.headers, slow.headers, "{s}");
            assert_eq!(fast.body, slow.body, "{s}");
            assert_eq!(fast.source, slow.source);
        }
    }

    #[test]
    fn the_claimed_room_is_read_from_the_payload_only() {
        use base64::Engine;
        let enc = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let token = format!("{}.{}.sig", enc("{}"), enc(r#"{"aud":"drop","seq":1}"#));
        assert_eq!(claimed_room(&token).as_deref(), Some("drop"));
        assert_eq!(claimed_room("no-dots"), None);
        assert_eq!(claimed_room(&format!("h.{}.s", enc("[1]"))), None);
        assert_eq!(claimed_room(&format!("h.{}.s", "a".repeat(5000))), None);
    }
}
