//! The bot farm (`[farm]`): the attacker the room's defences are for,
//! playing beside the honest shoppers.
//!
//! - **Every core solving.** One OS thread per core, each with its own
//!   HTTP client on a single-threaded runtime, in a loop: fetch a
//!   challenge, hash until it is solved (for real, with the harness's own
//!   solver, [`super::pow`]), join. Its CPU-seconds are its threads' own
//!   (`CLOCK_THREAD_CPUTIME_ID`), so the honest shoppers' work in the same
//!   process is not counted; its hash rate is hashes ÷ the CPU time spent
//!   inside the solver, in the same run.
//! - **Thousands of addresses.** Every request comes from the next address
//!   of `addresses` in 100.64.0.0/10 (`X-Forwarded-For`; the gateway
//!   trusts the harness as its proxy), so a per-client limit sees a new
//!   client each time.
//! - **A few accounts, reused.** When the room takes enqueue tokens the
//!   farm signs in with its `accounts` in turn, join after join, hoping a
//!   new address or a new solution gives an account a second place.
//! - **Replays.** Its first [`REPLAYS_MAX`] solved challenges that got a
//!   place are sent a second time from another address: a gateway that
//!   took one twice would give a second place for one proof of work.
//! - **Its places.** Each new place is followed on the harness's runtime
//!   (polls, the pass), then bought with (`quantity` units) or, for a
//!   share `hold_share`, held and never used.
//!
//! What it does not try (docs/load-testing.md): buying or stealing more
//! accounts, solving on GPUs or ASICs (a GPU does SHA-256 hundreds of times
//! faster than a core), solving challenges ahead of the sale, keeping held
//! passes busy so they never go idle, or reading the page's JavaScript.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::balancer::Sticky;
use super::pow::{solve, thread_cpu_s};
use super::record::Recorder;
use super::scenario::FarmSetup;
use super::shopper::{self, Plan, Shared};

/// Shopper indexes of the farm's places start here (Idempotency-Keys and
/// the balancer's stickiness), far above any honest shopper's.
pub const FARM_INDEX_BASE: u32 = 2_000_000;
/// Solved challenges the farm sends a second time, at most.
pub const REPLAYS_MAX: u64 = 32;
/// After the run's deadline, how long the farm's places get to finish.
pub const FOLLOW_GRACE: Duration = Duration::from_secs(5);
/// Pause after a request with no useful answer.
pub const FARM_BACKOFF: Duration = Duration::from_millis(50);

/// What the farm's threads need.
pub struct FarmPlan {
    pub setup: FarmSetup,
    /// The gateway's public URL.
    pub public: String,
    pub room: String,
    /// The store's key when the room takes enqueue tokens.
    pub store_key: Option<String>,
    /// What the farm buys.
    pub sku: String,
    pub request_timeout: Duration,
}

/// The farm's address `n`: 100.64.0.0/10, the carrier-NAT space where
/// residential proxies' exits sit.
pub fn farm_address(n: u64) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::from(0x6440_0000 | (n as u32 & 0x3F_FFFF))
}

/// The farm account `k`.
pub fn farm_account(k: u64) -> String {
    format!("farm-{k}")
}

/// A place the farm got, handed to its follower: `(seq, ticket)`.
type Place = (u64, String);

/// A running farm: its threads, and the task following its places.
pub struct Farm {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    follower: tokio::task::JoinHandle<()>,
}

impl Farm {
    /// Starts the solver threads and the follower.
    pub fn start(plan: FarmPlan, shared: Arc<Shared>) -> Farm {
        let stop = Arc::new(AtomicBool::new(false));
        let solvers = plan.setup.solver_threads();
        shared.rec.with(|i| i.farm.solvers = solvers);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Place>();
        let plan = Arc::new(plan);
        let counters = Arc::new(Counters::default());
        let threads = (0..solvers)
            .map(|t| {
                let (plan, rec, stop, tx, counters) = (
                    plan.clone(),
                    shared.rec.clone(),
                    stop.clone(),
                    tx.clone(),
                    counters.clone(),
                );
                let deadline = shared.deadline;
                std::thread::Builder::new()
                    .name(format!("farm-{t}"))
                    .spawn(move || {
                        solver_thread(&plan, &rec, &stop, deadline, &tx, &counters);
                    })
                    .expect("a farm thread starts")
            })
            .collect();
        drop(tx);
        let follower = tokio::spawn(follow_places(shared, plan, rx));
        Farm {
            stop,
            threads,
            follower,
        }
    }

    /// Stops the solvers (each ends within one solve's check, 4,096
    /// hashes) and waits for them; the places already handed over are
    /// followed until the run's deadline.
    pub async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let threads = self.threads;
        let _ = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        })
        .await;
        let _ = self.follower.await;
    }
}

/// Shared by the farm's threads: the next address and account.
#[derive(Default)]
struct Counters {
    address: AtomicU64,
    account: AtomicU64,
    sold_out: AtomicBool,
    replays: AtomicU64,
    /// Places already handed to the follower (two threads may join the
    /// same account and get its one place).
    followed: Mutex<HashSet<u64>>,
}

impl Counters {
    fn first_sight(&self, seq: u64) -> bool {
        self.followed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(seq)
    }
}

fn solver_thread(
    plan: &FarmPlan,
    rec: &Recorder,
    stop: &AtomicBool,
    deadline: Instant,
    tx: &tokio::sync::mpsc::UnboundedSender<Place>,
    counters: &Counters,
) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let Ok(http) = reqwest::Client::builder()
        .no_proxy()
        .timeout(plan.request_timeout)
        .build()
    else {
        return;
    };
    let stopped = || {
        stop.load(Ordering::Relaxed)
            || counters.sold_out.load(Ordering::Relaxed)
            || Instant::now() >= deadline
    };
    let addresses = u64::from(plan.setup.addresses);
    let next_address =
        || farm_address(counters.address.fetch_add(1, Ordering::Relaxed) % addresses).to_string();
    let challenge_url = format!("{}/queue/{}/challenge", plan.public, plan.room);
    let join_url = format!("{}/queue/{}/join", plan.public, plan.room);
    let mut local = Tally::default();
    while !stopped() {
        let fetched = rt.block_on(get_json(
            http.get(&challenge_url)
                .header("x-forwarded-for", next_address()),
        ));
        local.challenges += 1;
        let (Some(challenge), Some(bits)) = (
            fetched.1["challenge"].as_str().map(str::to_string),
            fetched.1["difficulty_bits"]
                .as_u64()
                .and_then(|b| u8::try_from(b).ok()),
        ) else {
            local.refuse(format!("challenge {}", fetched.0));
            std::thread::sleep(FARM_BACKOFF);
            continue;
        };
        let cpu = thread_cpu_s();
        let solved = solve(&challenge, bits, 0, u64::MAX, &stopped);
        local.solve_cpu_s += thread_cpu_s() - cpu;
        let Some(solved) = solved else { break };
        local.hashes += solved.tries;
        *local.bits.entry(bits).or_default() += 1;
        let account = match plan.setup.accounts {
            n if plan.store_key.is_some() => Some(farm_account(
                counters.account.fetch_add(1, Ordering::Relaxed) % u64::from(n),
            )),
            _ => None,
        };
        let mut body = serde_json::json!({"challenge": challenge, "solution": solved.solution});
        if let (Some(key), Some(a)) = (&plan.store_key, &account) {
            body["enqueue_token"] = super::store::enqueue_token(key, &plan.room, a).into();
        }
        let join = |body: &Value| {
            rt.block_on(get_json(
                http.post(&join_url)
                    .header("x-forwarded-for", next_address())
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.to_string()),
            ))
        };
        let (status, answer) = join(&body);
        local.joins += 1;
        let placed = |answer: &Value| {
            let ticket = answer["ticket"].as_str()?;
            Some((shopper::ticket_seq(ticket)?, ticket.to_string()))
        };
        match (status, placed(&answer)) {
            (200 | 202, Some((seq, ticket))) => {
                local.placed += 1;
                local.place(account.clone().unwrap_or_default(), seq);
                if counters.first_sight(seq) {
                    let _ = tx.send((seq, ticket));
                }
                // The same proof of work again, from another address (the
                // first REPLAYS_MAX times: a farm learns that it fails).
                if counters.replays.fetch_add(1, Ordering::Relaxed) >= REPLAYS_MAX {
                    continue;
                }
                let (status, again) = join(&body);
                local.joins += 1;
                if let (200 | 202, Some((seq2, ticket2))) = (status, placed(&again)) {
                    local.replays += 1;
                    if seq2 != seq {
                        local.replay_new_places += 1;
                        local.place(account.clone().unwrap_or_default(), seq2);
                        if counters.first_sight(seq2) {
                            let _ = tx.send((seq2, ticket2));
                        }
                    }
                }
            }
            (410, _) => {
                local.refuse(format!("410 {}", answer["error"].as_str().unwrap_or("")));
                counters.sold_out.store(true, Ordering::Relaxed);
            }
            _ => local.refuse(format!(
                "{status} {}",
                answer["error"].as_str().unwrap_or("")
            )),
        }
    }
    local.cpu_s = thread_cpu_s();
    let used = counters.address.load(Ordering::Relaxed).min(addresses);
    rec.with(|i| {
        let f = &mut i.farm;
        f.hashes += local.hashes;
        f.solve_cpu_s += local.solve_cpu_s;
        f.cpu_s += local.cpu_s;
        f.challenges += local.challenges;
        f.joins += local.joins;
        f.joins_placed += local.placed;
        f.replays += local.replays;
        f.replay_new_places += local.replay_new_places;
        f.addresses_used = f.addresses_used.max(used);
        for (k, v) in local.refused {
            *f.refused.entry(k).or_default() += v;
        }
        for (k, v) in local.bits {
            *f.bits.entry(k).or_default() += v;
        }
        for (a, seqs) in local.places {
            f.places.entry(a).or_default().extend(seqs);
        }
    });
}

/// One thread's counts, added to the record when it ends.
#[derive(Default)]
struct Tally {
    hashes: u64,
    solve_cpu_s: f64,
    cpu_s: f64,
    challenges: u64,
    joins: u64,
    placed: u64,
    replays: u64,
    replay_new_places: u64,
    refused: std::collections::BTreeMap<String, u64>,
    bits: std::collections::BTreeMap<u8, u64>,
    places: std::collections::BTreeMap<String, std::collections::BTreeSet<u64>>,
}

impl Tally {
    fn refuse(&mut self, why: String) {
        *self.refused.entry(why).or_default() += 1;
    }
    fn place(&mut self, account: String, seq: u64) {
        self.places.entry(account).or_default().insert(seq);
    }
}

/// Status and JSON body (status 0, `null` when the request failed).
async fn get_json(req: reqwest::RequestBuilder) -> (u16, Value) {
    match req.send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let body = r.bytes().await.unwrap_or_default();
            (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
        }
        Err(_) => (0, Value::Null),
    }
}

/// Follows each place the farm got until the run's deadline: waits in
/// line for its pass, then buys or holds it.
async fn follow_places(
    shared: Arc<Shared>,
    plan: Arc<FarmPlan>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Place>,
) {
    let mut tasks = tokio::task::JoinSet::new();
    let n = Arc::new(Mutex::new(0u32));
    while let Some((seq, ticket)) = rx.recv().await {
        let (shared, plan, n) = (shared.clone(), plan.clone(), n.clone());
        tasks.spawn(async move {
            let Some(pass) = wait_for_pass(&shared, seq, &ticket).await else {
                return;
            };
            let k = {
                let mut n = n.lock().unwrap_or_else(|p| p.into_inner());
                *n += 1;
                *n
            };
            shared.rec.with(|i| i.farm.passes += 1);
            if holds(k, plan.setup.hold_share) {
                let at = shared.rec.now_s();
                shared.rec.with(|i| i.farm.held_at_s.push(at));
                return;
            }
            let index = FARM_INDEX_BASE + k;
            let buy = Plan {
                index,
                arrive_at_s: 0.0,
                sku: plan.sku.clone(),
                quantity: plan.setup.quantity,
                payment_method: "pm_ok".into(),
                gives_up_after_polls: None,
                impatient: false,
            };
            let mut at = Sticky::new(&shared.lb, index);
            if let Ok((order_id, state)) = shopper::checkout(&shared, &buy, &pass, &mut at).await {
                shared.rec.with(|i| i.farm.orders.insert(order_id.clone()));
                let _ = shopper::follow_order(&shared, &pass, &order_id, state, &mut at).await;
            }
        });
    }
    let _ = tokio::time::timeout_at((shared.deadline + FOLLOW_GRACE).into(), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
}

/// Pass number `k` (from 1) is held: spread evenly, `share` of them.
pub fn holds(k: u32, share: f64) -> bool {
    (f64::from(k) * share).floor() > (f64::from(k - 1) * share).floor()
}

/// Polls the place's status as told until its pass comes (or the run
/// ends); every poll from a new farm address.
async fn wait_for_pass(s: &Shared, seq: u64, ticket: &str) -> Option<String> {
    let url = format!("{}/queue/{}/status", s.lb.public(0), s.room);
    let mut n = seq.wrapping_mul(7919);
    for _ in 0..s.behaviour.polls_max {
        n += 1;
        let r = s
            .http
            .get(&url)
            .bearer_auth(ticket)
            .header("x-forwarded-for", farm_address(n).to_string())
            .send()
            .await;
        let wait = match r {
            Ok(r) => {
                let status = r.status().as_u16();
                let body: Value = serde_json::from_slice(&r.bytes().await.unwrap_or_default())
                    .unwrap_or(Value::Null);
                match (status, body["state"].as_str()) {
                    (200, Some("admitted")) => return body["pass"].as_str().map(str::to_string),
                    (200, Some("waiting" | "paused")) => body["poll_after_s"]
                        .as_f64()
                        .map_or(Duration::from_secs(1), Duration::from_secs_f64),
                    (429, _) => Duration::from_secs(1),
                    _ => return None,
                }
            }
            Err(_) => shopper::BACKOFF,
        };
        shopper::pause(s, wait.min(Duration::from_secs(30)))
            .await
            .ok()?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_farm_holds_its_share_of_passes_spread_evenly() {
        let held: Vec<bool> = (1..=10).map(|k| holds(k, 0.5)).collect();
        assert_eq!(held.iter().filter(|h| **h).count(), 5);
        assert!(!(1..=10).any(|k| holds(k, 0.0)));
        assert!((1..=10).all(|k| holds(k, 1.0)));
    }

    #[test]
    fn farm_addresses_are_carrier_nat_and_distinct() {
        let a: HashSet<_> = (0..5000).map(farm_address).collect();
        assert_eq!(a.len(), 5000);
        assert!(a.iter().all(|a| {
            let [x, y, ..] = a.octets();
            x == 100 && (64..128).contains(&y)
        }));
    }
}
