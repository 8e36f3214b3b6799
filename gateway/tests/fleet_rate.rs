//! One adaptive release rate for a fleet (issue 12 item 2): real `sluice`
//! processes on one throwaway Redis, an adaptive room, checkouts slow on
//! ONE gateway only (its store's commit delay). Every gateway shows the
//! same decision at every sample, the rate falls for the whole fleet, and
//! when the gateway that steps it is SIGKILLed another takes over and goes
//! on from the stored rate. A number set by reload pins the rate
//! fleet-wide. And the store's Functions on their own: the lease, the
//! stale-step guard, the rate in force inside the caller's bounds.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::redis::Redis;
use common::*;
use serde_json::{json, Value};
use sluice_admission::adaptive::{Bounds, Decision, Reason};
use sluice_gateway::fleet_store::{RedisStore, RoomStore, TickArgs};

const KEYS: &str = "[[keys]]\nkid = \"fleet\"\nalg = \"HS256\"\nsecret = \"c2x1aWNlLWZsZWV0LXRlc3Qta2V5LTMyLWJ5dGVzLW9r\"\n";
/// sqrt(2 × 200) = 20: the start rate.
const ADAPTIVE: &str = "\"adaptive\"\n[rooms.adaptive]\ntarget_p99_ms = 50\nmax_error_ratio = 0.05\nmin_per_second = 2\nmax_per_second = 200";
const START: u64 = 20;
/// The slow gateway's store commit delay.
const SLOW_COMMIT_MS: u64 = 300;

fn rooms(release: &str) -> String {
    format!(
        "[[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\", \"/orders/*\"]\nmax_active = 1000\nqueue_capacity = 100000\njoins_per_minute_per_client = 100000\npoll_min_s = 1\npoll_max_s = 1\nrelease_per_second = {release}\n\
         [[products]]\nsku = \"sneaker-42\"\nstock = 100000\nprice_cents = 1000\nroom = \"drop\"\n"
    )
}

/// Gateway `gw-<i>` of the fleet; `slow`: its checkouts' commits wait.
fn start(redis: &Redis, i: usize, slow: bool) -> Gateway {
    let delay = if slow {
        format!("test_store_commit_delay_ms = {SLOW_COMMIT_MS}\n")
    } else {
        String::new()
    };
    Gateway::start(GatewayOptions {
        extra_gateway: format!("node_id = \"gw-{i}\"\n{delay}"),
        rest: format!(
            "[cluster]\nredis_url = \"{}\"\n\n{KEYS}\n{}",
            redis.url(),
            rooms(ADAPTIVE)
        ),
        env: vec![("SLUICE_ALLOW_TEST_KNOBS".into(), "1".into())],
        ..GatewayOptions::default()
    })
}

/// The rate in force on one gateway, as `/admin/state` shows it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    in_force: u64,
    exact: f64,
    reason: String,
    at_ms: u64,
    by: Option<String>,
    scope: String,
}

fn seen(gw: &Gateway) -> Seen {
    let room = gw.admin_json("/admin/state")["rooms"][0].clone();
    let src = &room["release_source"];
    assert_eq!(src["kind"], "adaptive", "{room}");
    Seen {
        in_force: room["release_per_second"].as_u64().unwrap(),
        exact: src["exact_per_second"].as_f64().unwrap(),
        reason: src["reason"].as_str().unwrap().to_string(),
        at_ms: src["decided_at_ms"].as_u64().unwrap_or(0),
        by: src["decided_by"].as_str().map(str::to_string),
        scope: src["scope"].as_str().unwrap_or("").to_string(),
    }
}

/// How long another gateway may take to go on stepping the fleet's rate
/// once the leader died.
const TAKEOVER_MAX: Duration = Duration::from_secs(5);

/// Every live gateway's view at one moment; checks that they show one
/// rate: the same decision (or one step apart while the newest reaches
/// them), and each decision ever seen the same everywhere.
struct Samples {
    decisions: HashMap<u64, (f64, u64, String)>,
    taken: usize,
}

impl Samples {
    fn new() -> Self {
        Self {
            decisions: HashMap::new(),
            taken: 0,
        }
    }

    fn take(&mut self, fleet: &[&Gateway]) -> Vec<Seen> {
        let all: Vec<Seen> = fleet.iter().map(|gw| seen(gw)).collect();
        self.taken += 1;
        for s in &all {
            assert_eq!(s.scope, "fleet", "{all:?}");
            if s.by.is_none() {
                // No decision stored yet: the start rate everywhere.
                assert_eq!(s.in_force, START, "{all:?}");
                continue;
            }
            let d = (s.exact, s.in_force, s.by.clone().unwrap());
            let known = self.decisions.entry(s.at_ms).or_insert_with(|| d.clone());
            assert_eq!(*known, d, "one decision, two rates: {all:?}");
        }
        let decided: Vec<u64> = all
            .iter()
            .filter(|s| s.by.is_some())
            .map(|s| s.at_ms)
            .collect();
        if decided.len() == all.len() {
            let spread = decided.iter().max().unwrap() - decided.iter().min().unwrap();
            // A step a second; a tick (100 ms) brings it to each gateway,
            // and the gateways are read one after the other: at most a step
            // apart, with a loaded machine's delays (a gateway that stopped
            // reading the store falls behind by a step every second). Across
            // a change of leader, the dead leader's last decision and the new
            // one's first are the takeover apart (under TAKEOVER_MAX, as the
            // test asserts), not a step: a gateway one tick behind then shows
            // the one while another shows the other (CI saw 2.7 s).
            let leaders: std::collections::HashSet<_> = all.iter().map(|s| &s.by).collect();
            let bound = if leaders.len() > 1 {
                2_500 + TAKEOVER_MAX.as_millis() as u64
            } else {
                2_500
            };
            assert!(spread <= bound, "gateways more than a step apart: {all:?}");
        }
        all
    }
}

/// The JSON answer to `req`; `None` when it could not be had (the gateway
/// went away).
async fn json_of(req: reqwest::RequestBuilder) -> Option<Value> {
    req.send().await.ok()?.json().await.ok()
}

/// One shopper on `base`: join, wait for the pass, check out once. `None`
/// when the gateway went away or said no.
async fn shop(client: &reqwest::Client, base: &str, key: String) -> Option<u16> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let ticket = loop {
        let joined = json_of(client.post(format!("{base}/queue/drop/join"))).await?;
        if let Some(t) = joined["ticket"].as_str() {
            break t.to_string();
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let pass = loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let status = json_of(
            client
                .get(format!("{base}/queue/drop/status"))
                .bearer_auth(&ticket),
        )
        .await?;
        if let Some(p) = status["pass"].as_str() {
            break p.to_string();
        }
        if Instant::now() > deadline {
            return None;
        }
    };
    let r = client
        .post(format!("{base}/checkout"))
        .bearer_auth(pass)
        .header("idempotency-key", key)
        .json(&json!({"sku": "sneaker-42", "quantity": 1, "payment_method": "pm_ok"}))
        .send()
        .await
        .ok()?;
    Some(r.status().as_u16())
}

/// Idempotency keys, one per checkout of the test.
static KEY: AtomicUsize = AtomicUsize::new(0);

/// `workers` shoppers one after the other on `base` until `stop`.
fn shoppers(base: String, workers: usize, stop: Arc<AtomicBool>, done: Arc<AtomicUsize>) {
    for _ in 0..workers {
        let (base, stop, done) = (base.clone(), stop.clone(), done.clone());
        tokio::spawn(async move {
            let client = client();
            while !stop.load(Ordering::Relaxed) {
                let key = format!("fleet-rate-{}", KEY.fetch_add(1, Ordering::Relaxed));
                match shop(&client, &base, key).await {
                    Some(s) if (200..300).contains(&s) => {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    // Gone (killed) or refused: try again a little later.
                    _ => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_rate_for_the_fleet_follows_one_slow_gateway_and_outlives_its_leader() {
    let redis = Redis::start();
    let mut fleet: Vec<Gateway> = (0..3).map(|i| start(&redis, i, i == 0)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    // Most checkouts on the slow gateway, some on the fast ones: the
    // fleet's p99 is the slow one's.
    for (i, gw) in fleet.iter().enumerate() {
        shoppers(
            gw.url(""),
            if i == 0 { 8 } else { 2 },
            stop.clone(),
            done.clone(),
        );
    }

    // The rate falls from the start for the whole fleet, one decision at a
    // time, the same on every gateway at every sample.
    let mut samples = Samples::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    let fallen = loop {
        let all = samples.take(&fleet.iter().collect::<Vec<_>>());
        let s = &all[0];
        if s.by.is_some() && s.in_force <= START * 3 / 5 && s.reason == "latency" {
            break all;
        }
        assert!(
            Instant::now() < deadline,
            "the fleet's rate did not fall: {all:?}, {} checkouts",
            done.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let moved: Vec<f64> = samples.decisions.values().map(|d| d.0).collect();
    assert!(
        samples.decisions.len() >= 3,
        "several decisions seen: {:?}",
        samples.decisions
    );
    println!(
        "fell to {:?} in {} samples, decisions {moved:?}",
        fallen[0], samples.taken
    );

    // The gateway that steps the rate dies; another takes the lease and
    // goes on from the stored rate, not from the start.
    let leader_id = fallen[0].by.clone().unwrap();
    let leader: usize = leader_id.trim_start_matches("gw-").parse().unwrap();
    // The newest decision seen: the leader's own view may still be one
    // tick behind the one that fell (each gateway reads the stored
    // decision with its next tick).
    let before = {
        let leaders = seen(&fleet[leader]);
        if leaders.at_ms >= fallen[0].at_ms {
            leaders
        } else {
            fallen[0].clone()
        }
    };
    let killed_at = Instant::now();
    fleet[leader].kill9();
    let rest: Vec<&Gateway> = fleet
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leader)
        .map(|(_, g)| g)
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    let after = loop {
        let all = samples.take(&rest);
        if all
            .iter()
            .all(|s| s.by.as_deref().is_some_and(|b| b != leader_id) && s.at_ms > before.at_ms)
        {
            break all;
        }
        assert!(Instant::now() < deadline, "no gateway took over: {all:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = killed_at.elapsed();
    println!("{before:?} then {after:?} after {took:?}");
    assert!(took < TAKEOVER_MAX, "took over in {took:?}");
    let next = &after[0];
    assert!(
        next.exact >= before.exact * 0.5 && next.exact <= before.exact * 1.5 + 1.0,
        "the new leader goes on from {before:?}, not from the start: {next:?}"
    );
    assert!(next.in_force < START, "not back at the start: {next:?}");
    stop.store(true, Ordering::Relaxed);
}

/// Whether the room's hash holds an adaptive decision (raw RESP answer).
fn decision_stored(redis: &Redis) -> bool {
    let answer = redis.command(&["HEXISTS", "sluice2:{drop}", "ad_rate"]);
    match answer.as_deref().map(str::trim) {
        Some(":1") => true,
        Some(":0") => false,
        other => panic!("HEXISTS answered {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_number_by_reload_pins_the_fleets_rate() {
    let redis = Redis::start();
    let fleet: Vec<Gateway> = (0..2).map(|i| start(&redis, i, false)).collect();
    // A decision gets stored (reason steady: no checkouts to judge).
    let stored = eventually(Duration::from_secs(10), || {
        fleet.iter().all(|gw| seen(gw).by.is_some())
    });
    assert!(stored.is_some(), "{:?}", seen(&fleet[0]));
    assert!(decision_stored(&redis));
    for gw in &fleet {
        gw.edit_config(|c| c.replace(ADAPTIVE, "7"));
    }
    let pinned = eventually_await(Duration::from_secs(10), || async {
        let mut all = true;
        for gw in &fleet {
            let room = gw.admin_json("/admin/state")["rooms"][0].clone();
            let mark: Value = client()
                .get(gw.url("/queue/drop/watermark"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            all &= room["release_source"]["kind"] == "fixed"
                && room["release_per_second"] == 7
                && mark["release_per_second"] == 7;
        }
        all
    })
    .await;
    assert!(pinned.is_some(), "{}", fleet[0].admin_json("/admin/state"));
    // The fleet's decision is forgotten with it.
    let forgotten = eventually(Duration::from_secs(5), || !decision_stored(&redis));
    assert!(forgotten.is_some());
    let metrics = fleet[1].metrics_text().await;
    assert!(
        without_region(&metrics)
            .lines()
            .any(|l| l.starts_with("sluice_release_rate_limit{")
                && l.contains("reason=\"fixed\"")
                && l.ends_with(" 7")),
        "{metrics}"
    );
}

fn tick_args(rate: u32, adaptive: Option<(u32, u32)>) -> TickArgs {
    TickArgs {
        release_per_second: rate,
        burst: 1,
        max_active: 10,
        queue_capacity: 1_000_000,
        claim_window_ms: 60_000,
        hw_next: 0,
        hw_serving: 0,
        sold_out_seen: false,
        share_milli: 0,
        pass_ttl_ms: 60_000,
        adaptive,
        hw_tat_us: 0,
        members_live: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_keeps_one_leader_and_one_decision() {
    let redis = Redis::start();
    let store = RedisStore::new(&redis.url()).unwrap();
    // Both publish; the first takes the lease, the second does not.
    let a = store.adapt("r", "a", 1_000, "-", "0:10:0").await.unwrap();
    assert!(a.leads);
    assert_eq!(a.stored, None);
    let b = store.adapt("r", "b", 1_000, "-", "5:900:1").await.unwrap();
    assert!(!b.leads);
    assert_eq!(b.leader, "a");
    let texts: Vec<&str> = b.batches.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(texts, ["0:10:0", "5:900:1"]);
    let last = b.batches[1].0.clone();
    let again = store.adapt("r", "b", 1_000, &last, "").await.unwrap();
    assert!(again.batches.is_empty(), "{again:?}");

    // Only the lease holder writes, and only from the decision stored.
    let d = Decision {
        rate: 80.4,
        reason: Reason::Latency,
        at_ms: a.now_ms,
        ..Decision::start(
            &Bounds {
                target_p99_ms: 100,
                max_error_ratio: 0.05,
                min_per_second: 1,
                max_per_second: 100,
            },
            a.now_ms,
        )
    };
    assert!(!store.decide("r", "b", &d, None).await.unwrap());
    assert!(store.decide("r", "a", &d, None).await.unwrap());
    assert!(
        !store.decide("r", "a", &d, None).await.unwrap(),
        "stepped from a decision no longer stored"
    );
    let stored = store.adapt("r", "a", 1_000, &last, "").await.unwrap();
    assert_eq!(
        stored.stored.as_ref().map(|s| (s.decision, s.by.as_str())),
        Some((d, "a"))
    );

    // The tick runs at the stored rate inside the caller's bounds; a
    // pinned caller runs at its own number and forgets the decision.
    let t = store
        .tick("r", &tick_args(20, Some((2, 50))))
        .await
        .unwrap();
    assert_eq!(t.rate_in_force, 50);
    assert_eq!(t.adaptive.map(|s| s.decision), Some(d));
    let t = store
        .tick("r", &tick_args(20, Some((2, 100))))
        .await
        .unwrap();
    assert_eq!(t.rate_in_force, 80);
    let t = store.tick("r", &tick_args(7, None)).await.unwrap();
    assert_eq!((t.rate_in_force, t.adaptive), (7, None));
    let t = store
        .tick("r", &tick_args(20, Some((2, 100))))
        .await
        .unwrap();
    assert_eq!((t.rate_in_force, t.adaptive), (20, None));

    // The holder stops renewing: the lease lapses and the other takes it.
    let took = eventually_await(Duration::from_secs(5), || async {
        store.adapt("r", "b", 1_000, &last, "").await.unwrap().leads
    })
    .await;
    assert!(took.is_some());
    assert!(!store.adapt("r", "a", 1_000, &last, "").await.unwrap().leads);
}
