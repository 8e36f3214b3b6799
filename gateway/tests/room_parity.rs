//! One room, two back ends, the same answers: each scenario runs through
//! one embedded gateway (the line in `data_dir`) and through three
//! gateways sharing a throwaway Redis (`[cluster] redis_url`, requests
//! spread over the three), and what a shopper sees must be the same: the
//! order of places, positions and `ahead`, waits within 20 %, the pause,
//! sold out, the watermark.
//!
//! Built on the room seam (`gateway/src/queue/backend.rs`): a scenario
//! that passes here for one back end and not the other names a rule
//! written twice. What the fleet's room does not do yet (passing over
//! leavers) is listed in docs/scaling.md; each gets its scenario here when
//! it is built. The fair start runs here on both (the order admitted is
//! the one recomputed from the revealed seed; on the fleet one gateway is
//! SIGKILLed during the pre-queue). Lanes are built on neither back end
//! yet.

mod common;

use std::time::{Duration, Instant};

use common::redis::Redis;
use common::*;
use reqwest::StatusCode;
use serde_json::Value;

/// Every gateway of the fleet lists the same key; the embedded one too, so
/// both setups sign alike.
const KEYS: &str = "[[keys]]\nkid = \"parity\"\nalg = \"HS256\"\nsecret = \"c2x1aWNlLXBhcml0eS10ZXN0LWtleS0zMi1ieXRlcy1vaw==\"\n";

/// Where a scenario runs.
struct Setup {
    name: &'static str,
    gateways: Vec<Gateway>,
    _redis: Option<Redis>,
}

impl Setup {
    fn embedded(rooms: &str) -> Setup {
        let gw = Gateway::start(GatewayOptions {
            rest: format!("{KEYS}\n{rooms}"),
            ..GatewayOptions::default()
        });
        Setup {
            name: "embedded",
            gateways: vec![gw],
            _redis: None,
        }
    }

    fn fleet(rooms: &str) -> Setup {
        let redis = Redis::start();
        let gateways = (0..3)
            .map(|_| {
                Gateway::start(GatewayOptions {
                    rest: format!(
                        "[cluster]\nredis_url = \"{}\"\naccount_hash_key_env = \"SLUICE_ACCOUNT_KEY\"\n\n{KEYS}\n{rooms}",
                        redis.url()
                    ),
                    // The line alone is under test: each gateway's stock is
                    // its own (the same stock in every config).
                    env: vec![
                        ("SLUICE_ALLOW_TEST_KNOBS".into(), "1".into()),
                        (
                            "SLUICE_ACCOUNT_KEY".into(),
                            "parity-account-hash-key-of-32-characters".into(),
                        ),
                    ],
                    ..GatewayOptions::default()
                })
            })
            .collect();
        Setup {
            name: "fleet",
            gateways,
            _redis: Some(redis),
        }
    }

    /// The gateway the `i`-th request goes to (round robin).
    fn gw(&self, i: usize) -> &Gateway {
        &self.gateways[i % self.gateways.len()]
    }

    /// Edits every gateway's config and waits until each reports the
    /// admissions state `want`.
    fn set_admissions(&self, want: &str) {
        for gw in &self.gateways {
            gw.edit_config(|t| {
                let t = t.replace("admissions = \"paused\"\n", "");
                t.replace(
                    "[gateway]\n",
                    &format!("[gateway]\nadmissions = \"{want}\"\n"),
                )
            });
        }
        for gw in &self.gateways {
            eventually(Duration::from_secs(10), || {
                gw.admin_json("/admin/state")["admissions"] == want
            })
            .unwrap_or_else(|| panic!("{}: admissions never became {want}", self.name));
        }
    }
}

async fn join(client: &reqwest::Client, gw: &Gateway, room: &str) -> (StatusCode, Value) {
    let r = client
        .post(gw.url(&format!("/queue/{room}/join")))
        .send()
        .await
        .unwrap();
    (r.status(), r.json().await.unwrap())
}

/// A new place; a fleet room warming up (a new room takes joins after
/// about 2 s) answers `503 store_unavailable`, and is asked again.
async fn ticket(client: &reqwest::Client, gw: &Gateway, room: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = join(client, gw, room).await;
        if status == StatusCode::ACCEPTED {
            return body;
        }
        assert!(
            body["error"] == "store_unavailable" && Instant::now() < deadline,
            "{status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn status(client: &reqwest::Client, gw: &Gateway, room: &str, ticket: &str) -> Value {
    let r = client
        .get(gw.url(&format!("/queue/{room}/status")))
        .bearer_auth(ticket)
        .send()
        .await
        .unwrap();
    let code = r.status();
    let body: Value = r.json().await.unwrap();
    assert!(
        code == StatusCode::OK || body["error"] == "rate_limited",
        "{code} {body}"
    );
    body
}

/// Polls `ticket` until `done` holds for its status, honouring each
/// answer's `poll_after_s` / `retry_after_s`.
async fn poll_until(
    client: &reqwest::Client,
    setup: &Setup,
    room: &str,
    ticket: &str,
    within: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + within;
    let mut i = 0;
    loop {
        let body = status(client, setup.gw(i), room, ticket).await;
        i += 1;
        if done(&body) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{}: the ticket never got there; last answer {body}",
            setup.name
        );
        let wait_s = body["poll_after_s"]
            .as_u64()
            .or(body["retry_after_s"].as_u64())
            .unwrap_or(1)
            .max(1);
        tokio::time::sleep(Duration::from_secs(wait_s).min(Duration::from_millis(1100))).await;
    }
}

async fn watermark(client: &reqwest::Client, gw: &Gateway, room: &str) -> Value {
    client
        .get(gw.url(&format!("/queue/{room}/watermark")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// A room whose one slot the first shopper takes and holds: everyone
/// after waits, so the line stands still while it is read.
const ONE_SLOT: &str = "[[rooms]]\nname = \"line\"\nrelease_per_second = 2\nburst = 1\nmax_active = 1\nqueue_capacity = 1000\njoins_per_minute_per_client = 100000\npoll_min_s = 1\npoll_max_s = 2\npass_ttl_s = 600\nticket_ttl_s = 600\n";

/// What a shopper sees of a line that stands still: the first place
/// collects its pass and holds the only slot; five more join one after
/// another (over every gateway); each then reads its place.
#[derive(Debug, PartialEq)]
struct StandingLine {
    /// The `seq` of each place after the first, in join order.
    seqs_from_first: Vec<u64>,
    /// (`position`, `ahead`) of each waiting place, in join order.
    places: Vec<(u64, u64)>,
    waits_s: Vec<u64>,
    watermark_waiting: u64,
    watermark_state: String,
}

async fn standing_line(setup: &Setup) -> StandingLine {
    let client = client();
    let first = ticket(&client, setup.gw(0), "line").await;
    let first_ticket = first["ticket"].as_str().unwrap().to_string();
    let admitted = poll_until(
        &client,
        setup,
        "line",
        &first_ticket,
        Duration::from_secs(15),
        |b| b["state"] == "admitted",
    )
    .await;
    assert!(admitted["pass"].is_string(), "{admitted}");
    let first_seq = seq_of(&first_ticket);
    let mut tickets = Vec::new();
    for i in 0..5 {
        let joined = ticket(&client, setup.gw(i + 1), "line").await;
        assert_eq!(joined["state"], "waiting", "{}: {joined}", setup.name);
        tickets.push(joined["ticket"].as_str().unwrap().to_string());
    }
    // Every place was counted by the fleet's store before it is read.
    let gw = setup.gw(0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mark = loop {
        let mark = watermark(&client, gw, "line").await;
        if mark["waiting"] == 5 || Instant::now() > deadline {
            break mark;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut places = Vec::new();
    let mut waits_s = Vec::new();
    for t in &tickets {
        let body = poll_until(&client, setup, "line", t, Duration::from_secs(10), |b| {
            b["state"] == "waiting"
        })
        .await;
        places.push((
            body["position"].as_u64().unwrap(),
            body["ahead"].as_u64().unwrap(),
        ));
        waits_s.push(body["estimated_wait_s"].as_u64().unwrap());
    }
    StandingLine {
        seqs_from_first: tickets.iter().map(|t| seq_of(t) - first_seq).collect(),
        places,
        waits_s,
        watermark_waiting: mark["waiting"].as_u64().unwrap(),
        watermark_state: mark["state"].as_str().unwrap().to_string(),
    }
}

/// The `seq` claim of a token (read only; the gateways verify it).
fn seq_of(token: &str) -> u64 {
    use base64::Engine;
    let payload = token.split('.').nth(1).unwrap();
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    serde_json::from_slice::<Value>(&json).unwrap()["seq"]
        .as_u64()
        .unwrap()
}

/// Waits within 20 % of each other (and both zero or both not).
fn close(a: u64, b: u64) -> bool {
    let (lo, hi) = (a.min(b) as f64, a.max(b) as f64);
    hi == 0.0 || lo >= 0.8 * hi
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standing_line_reads_the_same_on_one_gateway_and_on_a_fleet() {
    let embedded = standing_line(&Setup::embedded(ONE_SLOT)).await;
    let fleet = standing_line(&Setup::fleet(ONE_SLOT)).await;
    // Places in join order, positions counted from the front.
    assert_eq!(embedded.seqs_from_first, vec![1, 2, 3, 4, 5]);
    assert_eq!(
        embedded.places,
        vec![(1, 0), (2, 1), (3, 2), (4, 3), (5, 4)],
        "{embedded:?}"
    );
    assert_eq!(embedded.watermark_waiting, 5);
    assert_eq!(embedded.watermark_state, "open");
    assert_eq!(embedded.seqs_from_first, fleet.seqs_from_first);
    assert_eq!(embedded.places, fleet.places, "fleet: {fleet:?}");
    assert_eq!(embedded.watermark_waiting, fleet.watermark_waiting);
    assert_eq!(embedded.watermark_state, fleet.watermark_state);
    for (e, f) in embedded.waits_s.iter().zip(&fleet.waits_s) {
        assert!(
            close(*e, *f),
            "waits differ by more than 20 %: embedded {:?}, fleet {:?}",
            embedded.waits_s,
            fleet.waits_s
        );
    }
    // Waits grow with the place.
    assert!(
        embedded.waits_s.windows(2).all(|w| w[0] <= w[1]),
        "{:?}",
        embedded.waits_s
    );
}

/// The kill switch as a shopper sees it: joins refused with
/// `503 admissions_paused` and `Retry-After`, a waiting ticket told
/// `paused`, the watermark `paused`; reopened, the ticket is served.
#[derive(Debug, PartialEq)]
struct Paused {
    join: (u16, String, bool),
    ticket_state: String,
    watermark_state: String,
    reopened_state: String,
}

async fn paused(setup: &Setup) -> Paused {
    let client = client();
    let first = ticket(&client, setup.gw(0), "line").await;
    let first_ticket = first["ticket"].as_str().unwrap().to_string();
    poll_until(
        &client,
        setup,
        "line",
        &first_ticket,
        Duration::from_secs(15),
        |b| b["state"] == "admitted",
    )
    .await;
    let waiting = ticket(&client, setup.gw(1), "line").await;
    let waiting = waiting["ticket"].as_str().unwrap().to_string();
    setup.set_admissions("paused");
    let mut join_seen = None;
    for (i, gw) in setup.gateways.iter().enumerate() {
        // Each gateway refuses joins once the pause reached it.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = client
                .post(gw.url("/queue/line/join"))
                .send()
                .await
                .unwrap();
            let code = r.status().as_u16();
            let retry = r.headers().contains_key("retry-after");
            let body: Value = r.json().await.unwrap();
            if code == 503 {
                let seen = (code, body["error"].as_str().unwrap().to_string(), retry);
                assert_eq!(join_seen.get_or_insert(seen.clone()), &seen, "gateway {i}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: gateway {i} still joins: {code} {body}",
                setup.name
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let told = poll_until(
        &client,
        setup,
        "line",
        &waiting,
        Duration::from_secs(10),
        |b| b["state"] == "paused",
    )
    .await;
    let mark = watermark(&client, setup.gw(2), "line").await;
    setup.set_admissions("open");
    let reopened = poll_until(
        &client,
        setup,
        "line",
        &waiting,
        Duration::from_secs(10),
        |b| b["state"] == "waiting",
    )
    .await;
    Paused {
        join: join_seen.unwrap(),
        ticket_state: told["state"].as_str().unwrap().to_string(),
        watermark_state: mark["state"].as_str().unwrap().to_string(),
        reopened_state: reopened["state"].as_str().unwrap().to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kill_switch_reads_the_same_on_one_gateway_and_on_a_fleet() {
    let embedded = paused(&Setup::embedded(ONE_SLOT)).await;
    let fleet = paused(&Setup::fleet(ONE_SLOT)).await;
    assert_eq!(
        embedded,
        Paused {
            join: (503, "admissions_paused".into(), true),
            ticket_state: "paused".into(),
            watermark_state: "paused".into(),
            reopened_state: "waiting".into(),
        }
    );
    assert_eq!(embedded, fleet);
}

/// A room whose only product has no stock left.
const SOLD_OUT: &str = "[[rooms]]\nname = \"line\"\nrelease_per_second = 2\nmax_active = 10\nqueue_capacity = 100\n\n[[products]]\nsku = \"gone\"\nstock = 0\nprice_cents = 1\nroom = \"line\"\n";

async fn sold_out(setup: &Setup) -> (Vec<(u16, String)>, String) {
    let client = client();
    let mut joins = Vec::new();
    for gw in &setup.gateways {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (code, body) = join(&client, gw, "line").await;
            // A fleet room warming up answers 503 first.
            if body["error"] != "store_unavailable" || Instant::now() > deadline {
                joins.push((code.as_u16(), body["error"].as_str().unwrap_or("").into()));
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mark = watermark(&client, setup.gw(0), "line").await;
    (joins, mark["state"].as_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sold_out_reads_the_same_on_one_gateway_and_on_a_fleet() {
    let (embedded_joins, embedded_mark) = sold_out(&Setup::embedded(SOLD_OUT)).await;
    let (fleet_joins, fleet_mark) = sold_out(&Setup::fleet(SOLD_OUT)).await;
    assert_eq!(embedded_joins, vec![(410, "sold_out".to_string())]);
    assert_eq!(embedded_mark, "sold_out");
    assert!(
        fleet_joins.iter().all(|j| j == &embedded_joins[0]),
        "{fleet_joins:?}"
    );
    assert_eq!(fleet_mark, embedded_mark);
}

/// A room that needs the store's enqueue token; its one slot stays taken
/// by the first account, so the line stands still.
const ACCOUNTS: &str = "[[rooms]]\nname = \"line\"\nrelease_per_second = 2\nburst = 1\nmax_active = 1\nqueue_capacity = 1000\njoins_per_minute_per_client = 100000\npoll_min_s = 1\npoll_max_s = 2\npass_ttl_s = 600\nticket_ttl_s = 600\n[rooms.enqueue]\nrequired = true\n[[rooms.enqueue.keys]]\nkid = \"store\"\nalg = \"HS256\"\nsecret = \"c3RvcmUtZW5xdWV1ZS1zZWNyZXQtMzItYnl0ZXMtb2s\"\n";

/// A store's enqueue token for account `sub` of room `line`.
fn enqueue_token(sub: &str) -> String {
    use base64::Engine;
    let key = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode("c3RvcmUtZW5xdWV1ZS1zZWNyZXQtMzItYnl0ZXMtb2s")
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    header.kid = Some("store".into());
    let claims = serde_json::json!({"sub": sub, "aud": "line", "iat": now, "exp": now + 600});
    jsonwebtoken::encode(
        &header,
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(&key),
    )
    .unwrap()
}

/// What a line of accounts looks like: joins of accounts a, b, a, c, b, a
/// (spread over the gateways), each place's `seq` from the first's, and
/// whether the same account got the same ticket `sub`.
#[derive(Debug, PartialEq)]
struct AccountLine {
    seqs_from_first: Vec<u64>,
    same_sub_for_same_account: bool,
    without_token: (u16, String),
}

async fn account_line(setup: &Setup) -> AccountLine {
    let client = client();
    let mut tickets = Vec::new();
    for (i, sub) in ["a", "b", "a", "c", "b", "a"].into_iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(10);
        let body = loop {
            let r = client
                .post(setup.gw(i).url("/queue/line/join"))
                .json(&serde_json::json!({ "enqueue_token": enqueue_token(sub) }))
                .send()
                .await
                .unwrap();
            let code = r.status();
            let body: Value = r.json().await.unwrap();
            if code == StatusCode::ACCEPTED {
                break body;
            }
            assert!(Instant::now() < deadline, "{}: {code} {body}", setup.name);
            let wait_s = body["retry_after_s"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(100).max(Duration::from_secs(wait_s))).await;
        };
        tickets.push((sub, body["ticket"].as_str().unwrap().to_string()));
    }
    let sub_of = |t: &str| {
        use base64::Engine;
        let payload = t.split('.').nth(1).unwrap();
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap();
        serde_json::from_slice::<Value>(&json).unwrap()["sub"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let first = seq_of(&tickets[0].1);
    let same_sub_for_same_account = tickets.iter().all(|(a, t)| {
        tickets
            .iter()
            .filter(|(b, _)| a == b)
            .all(|(_, u)| sub_of(t) == sub_of(u))
    });
    let r = client
        .post(setup.gw(0).url("/queue/line/join"))
        .send()
        .await
        .unwrap();
    let code = r.status().as_u16();
    let body: Value = r.json().await.unwrap();
    AccountLine {
        seqs_from_first: tickets.iter().map(|(_, t)| seq_of(t) - first).collect(),
        same_sub_for_same_account,
        without_token: (code, body["error"].as_str().unwrap_or("").to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_place_per_account_reads_the_same_on_one_gateway_and_on_a_fleet() {
    let embedded = account_line(&Setup::embedded(ACCOUNTS)).await;
    let fleet = account_line(&Setup::fleet(ACCOUNTS)).await;
    assert_eq!(
        embedded,
        AccountLine {
            seqs_from_first: vec![0, 1, 0, 2, 1, 0],
            same_sub_for_same_account: true,
            without_token: (401, "enqueue_token_required".into()),
        }
    );
    assert_eq!(fleet, embedded);
}

/// Unix seconds now.
fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A TOML datetime (RFC 3339, UTC) for a unix second: the load
/// harness's, tested there.
use sluice_loadtest::load::datetime::toml_datetime as datetime;

/// The published draw (docs/waiting-room.md), written again here from its
/// text: `order[place] = arrival`.
fn published_draw(seed: &[u8], n: u32) -> Vec<u32> {
    use sha2::{Digest, Sha256};
    let mut order: Vec<u32> = (0..n).collect();
    for i in (1..n).rev() {
        let h = Sha256::new()
            .chain_update(seed)
            .chain_update(u64::from(i).to_be_bytes())
            .finalize();
        let j = u64::from_be_bytes(h[..8].try_into().unwrap()) % (u64::from(i) + 1);
        order.swap(i as usize, j as usize);
    }
    order
}

/// A room with a fair start at `opens_at`, one slot, passes of one second:
/// after the opening the drawn places are let in one at a time, so the
/// order they are admitted in is the draw's.
fn fair_room(opens_at: u64) -> String {
    format!(
        "[[rooms]]\nname = \"line\"\nopens_at = {}\nrelease_per_second = 5\nburst = 1\nmax_active = 1\nqueue_capacity = 1000\njoins_per_minute_per_client = 100000\npoll_min_s = 1\npoll_max_s = 2\npass_ttl_s = 1\nticket_ttl_s = 600\n",
        datetime(opens_at)
    )
}

/// Pre-queue tickets taken.
const ENTRANTS: usize = 9;

/// What a shopper of a fair start sees: the same on both back ends.
#[derive(Debug, PartialEq)]
struct FairStart {
    /// Each join's answer: (`state`, `pre_queue`, `expires_at` − opening).
    joins: Vec<(String, bool, u64)>,
    /// `entrants` told to every pre-queue ticket once all had joined.
    entrants: Vec<u64>,
    /// The admissions in arrival numbers, in the order they came, and the
    /// order recomputed from the revealed seed.
    admitted: Vec<u32>,
    drawn: Vec<u32>,
}

/// Pre-queue joins over every gateway before `opens_at`; the commitment is
/// the same everywhere and no seed is shown; with `kill`, the last gateway
/// is SIGKILLed during the pre-queue (its tickets are then polled through
/// the others); nobody is admitted before the opening; after it the seed
/// is shown, is the commitment's, and the tickets are admitted in the
/// order the seed draws.
async fn fair_start(mut setup: Setup, opens_at: u64, kill: bool) -> FairStart {
    let client = client();
    let name = setup.name;
    let mut tickets = Vec::new();
    let mut joins = Vec::new();
    for i in 0..ENTRANTS {
        let body = ticket(&client, setup.gw(i), "line").await;
        joins.push((
            body["state"].as_str().unwrap().to_string(),
            body["pre_queue"] == true,
            body["expires_at"]
                .as_u64()
                .unwrap()
                .saturating_sub(opens_at),
        ));
        let token = body["ticket"].as_str().unwrap().to_string();
        tickets.push((seq_of(&token), token));
    }
    assert!(now_s() < opens_at, "{name}: the joins ran past the opening");
    // Before the opening: every ticket is in the pre-queue, told how many
    // entered, with one commitment on every gateway and no seed.
    let mut entrants = Vec::new();
    let mut commitment = None;
    for (i, (_, token)) in tickets.iter().enumerate() {
        let body = poll_until(
            &client,
            &setup,
            "line",
            token,
            Duration::from_secs(10),
            |b| b["pre_queue"] == true && b["draw_commitment"].is_string(),
        )
        .await;
        assert!(
            body["draw_seed"].is_null(),
            "{name}: seed shown early: {body}"
        );
        entrants.push(body["entrants"].as_u64().unwrap());
        let c = body["draw_commitment"].as_str().unwrap().to_string();
        assert_eq!(
            commitment.get_or_insert(c.clone()),
            &c,
            "{name}: ticket {i} was shown another commitment"
        );
    }
    let commitment = commitment.unwrap();
    for gw in &setup.gateways {
        let fair = &gw.admin_json("/admin/state")["rooms"][0]["fair_start"];
        assert_eq!(fair["commitment"], commitment.as_str(), "{name}: {fair}");
        assert!(fair["seed"].is_null(), "{name}: {fair}");
    }
    if kill {
        // Its pre-queue tickets are in the shared store, not in it.
        let mut dead = setup.gateways.pop().unwrap();
        dead.kill9();
    }
    // Nobody is let in before the opening (a margin for the clocks).
    while now_s() + 1 < opens_at {
        for gw in &setup.gateways {
            let mark = watermark(&client, gw, "line").await;
            assert_eq!(
                mark["serving"], 0,
                "{name}: released before the opening: {mark}"
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // After the opening: poll everyone (through the gateways still up) and
    // note who is admitted, in order; one slot, so one at a time.
    let first_seq = tickets.iter().map(|(seq, _)| *seq).min().unwrap();
    let mut admitted: Vec<u32> = Vec::new();
    let mut seed = None;
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut i = 0;
    while admitted.len() < ENTRANTS {
        assert!(
            Instant::now() < deadline,
            "{name}: admitted so far {admitted:?}"
        );
        for (seq, token) in &tickets {
            let arrival = (seq - first_seq) as u32;
            if admitted.contains(&arrival) {
                continue;
            }
            let body = status(&client, setup.gw(i), "line", token).await;
            i += 1;
            if let Some(s) = body["draw_seed"].as_str() {
                assert_eq!(seed.get_or_insert(s.to_string()), s, "{name}: two seeds");
            }
            match body["state"].as_str() {
                Some("admitted") => admitted.push(arrival),
                Some("waiting") | None => {}
                other => panic!("{name}: ticket {arrival}: {other:?} {body}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let seed = hex::decode(seed.expect("the seed is shown after the opening")).unwrap();
    {
        use sha2::{Digest, Sha256};
        assert_eq!(
            hex::encode(Sha256::digest(&seed)),
            commitment,
            "{name}: the seed is not the commitment's"
        );
    }
    FairStart {
        joins,
        entrants,
        admitted,
        drawn: published_draw(&seed, ENTRANTS as u32),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_start_draws_the_same_way_on_one_gateway_and_on_a_fleet() {
    let opens_at = now_s() + 12;
    let embedded = fair_start(Setup::embedded(&fair_room(opens_at)), opens_at, false).await;
    // Three gateways take longer to start, and one is killed on the way.
    let opens_at = now_s() + 25;
    let fleet = fair_start(Setup::fleet(&fair_room(opens_at)), opens_at, true).await;
    for got in [&embedded, &fleet] {
        assert_eq!(
            got.admitted, got.drawn,
            "admitted in the drawn order: {got:?}"
        );
        assert_ne!(
            got.drawn,
            (0..ENTRANTS as u32).collect::<Vec<_>>(),
            "the draw reordered the arrivals"
        );
        assert!(
            got.joins
                .iter()
                .all(|j| j == &("waiting".into(), true, 600)),
            "{got:?}"
        );
        assert!(
            got.entrants.iter().all(|&n| n == ENTRANTS as u64),
            "{got:?}"
        );
    }
    // The same answers, but for the draw itself (each room its own seed).
    assert_eq!(embedded.joins, fleet.joins);
    assert_eq!(embedded.entrants, fleet.entrants);
}
