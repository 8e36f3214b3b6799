//! The join challenge (`[rooms.challenge]`) through the real binary, on
//! the embedded room and on three gateways sharing a throwaway Redis:
//! required, solved, retried (the same place), replayed (refused on
//! another gateway too), malformed, wrong, expired, kept across a
//! restart; the adaptive difficulty rising under a join flood (counted
//! fleet-wide); a siteverify room against a local verifier that
//! misbehaves (slow, 5xx, malformed JSON, wrong hostname, "no"), under
//! both `on_verifier_error` policies, and its bound of calls in flight.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::routing::post;
use axum::{Form, Router};
use common::redis::Redis;
use common::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use sluice_admission::challenge::{leading_zero_bits, solution_hash, solve};

const KEYS: &str = "[[keys]]\nkid = \"ch\"\nalg = \"HS256\"\nsecret = \"c2x1aWNlLWNoYWxsZW5nZS10ZXN0LWtleS0zMi1ieXRlcy1vaw==\"\n";

struct Setup {
    name: &'static str,
    gateways: Vec<Gateway>,
    _redis: Option<Redis>,
}

impl Setup {
    fn embedded(rooms: &str, env: Vec<(String, String)>) -> Setup {
        let gw = Gateway::start(GatewayOptions {
            rest: format!("{KEYS}\n{rooms}"),
            env,
            ..GatewayOptions::default()
        });
        Setup {
            name: "embedded",
            gateways: vec![gw],
            _redis: None,
        }
    }

    fn fleet(rooms: &str, mut env: Vec<(String, String)>) -> Setup {
        let redis = Redis::start();
        env.push(("SLUICE_ALLOW_TEST_KNOBS".into(), "1".into()));
        let gateways = (0..3)
            .map(|_| {
                Gateway::start(GatewayOptions {
                    rest: format!(
                        "[cluster]\nredis_url = \"{}\"\n\n{KEYS}\n{rooms}",
                        redis.url()
                    ),
                    env: env.clone(),
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

    fn gw(&self, i: usize) -> &Gateway {
        &self.gateways[i % self.gateways.len()]
    }
}

async fn join_with(
    client: &reqwest::Client,
    gw: &Gateway,
    room: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = client.post(gw.url(&format!("/queue/{room}/join")));
    if let Some(body) = body {
        req = req.json(&body);
    }
    let r = req.send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// A join that a fleet room still warming up (`503 store_unavailable`)
/// gets again, within a deadline.
async fn join_settled(
    client: &reqwest::Client,
    gw: &Gateway,
    room: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, answer) = join_with(client, gw, room, body.clone()).await;
        if answer["error"] != "store_unavailable" || Instant::now() > deadline {
            return (status, answer);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn challenge(client: &reqwest::Client, gw: &Gateway, room: &str) -> Value {
    let r = client
        .get(gw.url(&format!("/queue/{room}/challenge")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["cache-control"], "no-store");
    r.json().await.unwrap()
}

/// The `n`-th solution (counting from 0) of a challenge object.
fn nth_solution(c: &Value, n: usize) -> String {
    let text = c["challenge"].as_str().unwrap();
    let bits = c["difficulty_bits"].as_u64().unwrap() as u8;
    let mut start = 0;
    let mut found = String::new();
    for _ in 0..=n {
        found = solve(text, bits, start, 1 << 24).expect("a solution");
        start = found.parse::<u64>().unwrap() + 1;
    }
    found
}

fn solved(c: &Value, n: usize) -> Value {
    json!({"challenge": c["challenge"], "solution": nth_solution(c, n)})
}

const POW_ROOM: &str = "[[rooms]]\nname = \"drop\"\nrelease_per_second = 1\nmax_active = 1\nqueue_capacity = 1000\njoins_per_minute_per_client = 100000\nticket_ttl_s = 600\n[rooms.challenge]\nkind = \"pow\"\ndifficulty_bits = 8\nchallenge_ttl_s = 10\n\n[[rooms]]\nname = \"other\"\nrelease_per_second = 1\nmax_active = 1\nqueue_capacity = 1000\n[rooms.challenge]\nkind = \"pow\"\ndifficulty_bits = 8\n";

async fn pow_scenario(setup: &Setup) {
    let client = client();
    let name = setup.name;
    // No challenge at all: 401 with a fresh one to solve.
    let (status, body) = join_settled(&client, setup.gw(0), "drop", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{name}: {body}");
    assert_eq!(body["error"], "challenge_required");
    let offered = &body["challenge"];
    assert_eq!(offered["room"], "drop");
    assert_eq!(offered["algorithm"], "sha256-leading-zero-bits");
    assert_eq!(offered["difficulty_bits"], 8);
    // The one offered with the 401 works as a GET's does.
    let (status, first) =
        join_settled(&client, setup.gw(1), "drop", Some(solved(offered, 0))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{name}: {first}");

    let c = challenge(&client, setup.gw(0), "drop").await;
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let expires = c["expires_at"].as_u64().unwrap();
    assert!((now_s + 8..=now_s + 11).contains(&expires), "{name}: {c}");
    let (status, joined) = join_settled(&client, setup.gw(0), "drop", Some(solved(&c, 0))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{name}: {joined}");
    let seq_of = |ticket: &Value| -> u64 {
        use base64::Engine;
        let payload = ticket.as_str().unwrap().split('.').nth(1).unwrap();
        let claims: Value = serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(payload)
                .unwrap(),
        )
        .unwrap();
        claims["seq"].as_u64().unwrap()
    };
    let seq = seq_of(&joined["ticket"]);
    assert!(seq > seq_of(&first["ticket"]), "{name}");
    // The same challenge and solution again, on another gateway: the same
    // place (a retry whose answer was lost). Early: asked again later.
    let (status, again) = join_with(&client, setup.gw(1), "drop", Some(solved(&c, 0))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{name}: {again}");
    assert_eq!(again["state"], "waiting", "{name}: {again}");
    assert_eq!(seq_of(&again["ticket"]), seq, "{name}: {again}");
    // Another solution of the same challenge, on a third gateway: replayed.
    let (status, replay) = join_with(&client, setup.gw(2), "drop", Some(solved(&c, 1))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{name}: {replay}");
    assert_eq!(replay["error"], "challenge_failed");

    // A wrong solution, a challenge of another room, malformed bodies.
    let c2 = challenge(&client, setup.gw(1), "drop").await;
    let text = c2["challenge"].as_str().unwrap();
    let wrong = (0u64..)
        .map(|n| n.to_string())
        .find(|s| leading_zero_bits(&solution_hash(text, s)) < 8)
        .unwrap();
    let (status, body) = join_with(
        &client,
        setup.gw(2),
        "drop",
        Some(json!({"challenge": text, "solution": wrong})),
    )
    .await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::FORBIDDEN, &json!("challenge_failed")),
        "{name}: {body}"
    );
    let elsewhere = challenge(&client, setup.gw(0), "other").await;
    let (status, body) = join_with(&client, setup.gw(0), "drop", Some(solved(&elsewhere, 0))).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::FORBIDDEN, &json!("challenge_failed")),
        "{name}: {body}"
    );
    for bad in [
        json!({"challenge": "v1.drop.8.1.x", "solution": "1"}),
        json!({"challenge": text}),
        json!({"challenge": text, "solution": "12a"}),
        json!({"challenge": text, "solution": 12}),
        json!([]),
    ] {
        let (status, body) = join_with(&client, setup.gw(1), "drop", Some(bad.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name}: {bad} {body}");
        assert_eq!(body["error"], "bad_request");
    }
    // The challenge that was not spent by the wrong solution still works.
    let (status, body) = join_settled(&client, setup.gw(1), "drop", Some(solved(&c2, 0))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{name}: {body}");

    // Expired: solved, then used after its expiry.
    let late = challenge(&client, setup.gw(2), "drop").await;
    let late_join = solved(&late, 0);
    let expires_at = late["expires_at"].as_u64().unwrap();
    while std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        < expires_at
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, body) = join_with(&client, setup.gw(0), "drop", Some(late_join)).await;
    assert_eq!(
        (status, &body["error"]),
        (StatusCode::FORBIDDEN, &json!("challenge_failed")),
        "{name}: {body}"
    );

    // Counted by result.
    let mut required = 0.0;
    let mut failed = 0.0;
    for gw in &setup.gateways {
        let text = gw.metrics_text().await;
        let count = |result: &str| {
            text.lines()
                .find(|l| {
                    l.starts_with("sluice_queue_joins_total{")
                        && l.contains("room=\"drop\"")
                        && l.contains(&format!("result=\"{result}\""))
                })
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        required += count("challenge_required");
        failed += count("challenge_failed");
    }
    assert!(required >= 1.0, "{name}: challenge_required {required}");
    // replay, wrong, other room, 5 malformed, expired
    assert!(failed >= 9.0, "{name}: challenge_failed {failed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pow_challenge_is_required_solved_spent_once_and_retried_on_both_back_ends() {
    let embedded = Setup::embedded(POW_ROOM, Vec::new());
    pow_scenario(&embedded).await;
    drop(embedded);
    let fleet = Setup::fleet(POW_ROOM, Vec::new());
    pow_scenario(&fleet).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_room_keeps_its_spent_challenges_across_a_kill_9() {
    let mut setup = Setup::embedded(
        &POW_ROOM.replace("challenge_ttl_s = 10", "challenge_ttl_s = 120"),
        Vec::new(),
    );
    let client = client();
    let c = challenge(&client, setup.gw(0), "drop").await;
    let (status, first) = join_with(&client, setup.gw(0), "drop", Some(solved(&c, 0))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    setup.gateways[0].kill9_and_restart();
    let (status, again) = join_with(&client, setup.gw(0), "drop", Some(solved(&c, 0))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{again}");
    assert_eq!(
        again["ticket"], first["ticket"],
        "the same ticket after the restart"
    );
    let (status, replay) = join_with(&client, setup.gw(0), "drop", Some(solved(&c, 1))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{replay}");
}

const ADAPTIVE_ROOM: &str = "[[rooms]]\nname = \"hot\"\nrelease_per_second = 1\nmax_active = 1\nqueue_capacity = 10000\njoins_per_minute_per_client = 100000\n[rooms.challenge]\nkind = \"pow\"\ndifficulty_bits = \"adaptive\"\nmin_bits = 4\nmax_bits = 12\ntarget_joins_per_second = 2\n";

async fn adaptive_scenario(setup: &Setup) {
    let client = client();
    let name = setup.name;
    let quiet = challenge(&client, setup.gw(2), "hot").await;
    assert_eq!(quiet["difficulty_bits"], 4, "{name}: {quiet}");
    // A flood on the first gateway only: 80 joins in about a second is
    // 16 a second over the window, 8 times the target: 3 bits more.
    let flood = (0..80).map(|_| join_with(&client, setup.gw(0), "hot", None));
    for (status, body) in futures_util::future::join_all(flood).await {
        assert!(
            status == StatusCode::UNAUTHORIZED || body["error"] == "store_unavailable",
            "{name}: {status} {body}"
        );
    }
    // Read on the last gateway: on a fleet it saw none of the flood.
    let mut seen = 0;
    let risen = eventually_await(Duration::from_secs(4), || {
        let client = client.clone();
        let gw = setup.gw(2);
        let url = gw.url("/queue/hot/challenge");
        async move {
            let c: Value = client.get(url).send().await.unwrap().json().await.unwrap();
            let bits = c["difficulty_bits"].as_u64().unwrap();
            bits >= 7
        }
    })
    .await;
    if risen.is_none() {
        seen = challenge(&client, setup.gw(2), "hot").await["difficulty_bits"]
            .as_u64()
            .unwrap();
    }
    assert!(
        risen.is_some(),
        "{name}: the difficulty stayed at {seen} bits"
    );
    // A hard challenge still verifies.
    let hard = challenge(&client, setup.gw(2), "hot").await;
    let (status, body) = join_settled(&client, setup.gw(1), "hot", Some(solved(&hard, 0))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{name}: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adaptive_difficulty_rises_under_a_join_flood_counted_fleet_wide() {
    let embedded = Setup::embedded(ADAPTIVE_ROOM, Vec::new());
    adaptive_scenario(&embedded).await;
    drop(embedded);
    let fleet = Setup::fleet(ADAPTIVE_ROOM, Vec::new());
    adaptive_scenario(&fleet).await;
}

/// What the verifier was sent: (secret, response, remoteip) per call.
type Calls = Arc<Mutex<Vec<(String, String, String)>>>;

/// A verifier of the siteverify shape that misbehaves by the token it is
/// given: `yes`, `no`, `slow` (answers after 3 s), `fail` (500), `junk`
/// (not JSON), `elsewhere` (a yes for another hostname). It records what
/// it was sent.
struct Verifier {
    addr: SocketAddr,
    calls: Calls,
    _stop: tokio::sync::oneshot::Sender<()>,
}

#[derive(serde::Deserialize)]
struct VerifyForm {
    secret: String,
    response: String,
    #[serde(default)]
    remoteip: String,
}

async fn verify(
    State(calls): State<Calls>,
    Form(form): Form<VerifyForm>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    calls.lock().unwrap().push((
        form.secret.clone(),
        form.response.clone(),
        form.remoteip.clone(),
    ));
    let yes = |host: &str| {
        axum::Json(
            json!({"success": true, "hostname": host, "challenge_ts": "2026-12-04T00:00:00Z"}),
        )
        .into_response()
    };
    match form.response.as_str() {
        "yes" => yes("shop.example"),
        "elsewhere" => yes("evil.example"),
        "slow" => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            yes("shop.example")
        }
        "fail" => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "oops").into_response(),
        "junk" => "<html>not json</html>".into_response(),
        _ => axum::Json(json!({"success": false, "error-codes": ["invalid-input-response"]}))
            .into_response(),
    }
}

impl Verifier {
    fn start() -> Verifier {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let state = calls.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let app = Router::new()
                    .route("/siteverify", post(verify))
                    .with_state(state);
                axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
            });
        });
        Verifier {
            addr,
            calls,
            _stop: stop,
        }
    }
}

fn site_rooms(verifier: &Verifier) -> String {
    let room = |name: &str, policy: &str, in_flight: u32| {
        format!(
            "[[rooms]]\nname = \"{name}\"\nrelease_per_second = 1\nmax_active = 1\nqueue_capacity = 1000\njoins_per_minute_per_client = 100000\n[rooms.challenge]\nkind = \"siteverify\"\nwidget = \"turnstile\"\nverify_url = \"http://{}/siteverify\"\nscript_url = \"http://127.0.0.1:9/stub.js\"\nsecret_env = \"TEST_SITEVERIFY_SECRET\"\nsite_key = \"site-key-1\"\nhostnames = [\"shop.example\"]\non_verifier_error = \"{policy}\"\ntimeout_ms = 500\nin_flight_max = {in_flight}\n",
            verifier.addr
        )
    };
    format!(
        "{}\n{}\n{}",
        room("refuse", "refuse", 64),
        room("admit", "admit", 64),
        room("narrow", "refuse", 1)
    )
}

async fn siteverify_scenario(setup: &Setup, verifier: &Verifier) {
    let client = client();
    let name = setup.name;
    let (status, body) = join_settled(&client, setup.gw(0), "refuse", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{name}: {body}");
    assert_eq!(body["error"], "challenge_required");
    assert_eq!(body["challenge"]["widget"], "turnstile");
    assert_eq!(body["challenge"]["site_key"], "site-key-1");
    let token = |t: &str| Some(json!({ "challenge_response": t }));
    for (room, t, want) in [
        ("refuse", "yes", StatusCode::ACCEPTED),
        ("refuse", "no", StatusCode::FORBIDDEN),
        ("refuse", "elsewhere", StatusCode::FORBIDDEN),
        ("refuse", "slow", StatusCode::FORBIDDEN),
        ("refuse", "fail", StatusCode::FORBIDDEN),
        ("refuse", "junk", StatusCode::FORBIDDEN),
        ("admit", "yes", StatusCode::ACCEPTED),
        ("admit", "no", StatusCode::FORBIDDEN),
        ("admit", "elsewhere", StatusCode::FORBIDDEN),
        ("admit", "slow", StatusCode::ACCEPTED),
        ("admit", "fail", StatusCode::ACCEPTED),
        ("admit", "junk", StatusCode::ACCEPTED),
    ] {
        let started = Instant::now();
        let (status, body) = join_settled(&client, setup.gw(1), room, token(t)).await;
        assert_eq!(status, want, "{name}: {room} {t}: {body}");
        if want == StatusCode::FORBIDDEN {
            assert_eq!(body["error"], "challenge_failed", "{name}: {room} {t}");
        }
        if t == "slow" {
            // Answered at the room's timeout, not the verifier's 3 s.
            assert!(
                started.elapsed() < Duration::from_millis(2500),
                "{name}: {:?}",
                started.elapsed()
            );
        }
    }
    // The form carried the secret and the client's address.
    let calls = verifier.calls.lock().unwrap().clone();
    assert!(calls
        .iter()
        .all(|(secret, _, ip)| secret == "verifier-secret-0123456789" && ip == "127.0.0.1"));
    // One call in flight at most: a second join meanwhile is 503.
    let gw = setup.gw(2);
    let slow = join_settled(&client, gw, "narrow", token("slow"));
    let quick = async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let r = client
            .post(gw.url("/queue/narrow/join"))
            .json(&json!({"challenge_response": "yes"}))
            .send()
            .await
            .unwrap();
        let retry = r.headers().get("retry-after").cloned();
        (r.status(), retry, r.json::<Value>().await.unwrap())
    };
    let ((slow_status, _), (status, retry, body)) = tokio::join!(slow, quick);
    assert_eq!(slow_status, StatusCode::FORBIDDEN, "{name}");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{name}: {body}");
    assert!(retry.is_some(), "{name}: no Retry-After");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_siteverify_room_holds_under_a_misbehaving_verifier_with_both_policies() {
    let verifier = Verifier::start();
    let env = vec![(
        "TEST_SITEVERIFY_SECRET".to_string(),
        "verifier-secret-0123456789".to_string(),
    )];
    let embedded = Setup::embedded(&site_rooms(&verifier), env.clone());
    siteverify_scenario(&embedded, &verifier).await;
    drop(embedded);
    let fleet = Setup::fleet(&site_rooms(&verifier), env);
    siteverify_scenario(&fleet, &verifier).await;
}
