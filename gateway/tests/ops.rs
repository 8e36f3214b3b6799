//! The operations kit against a real gateway: the alert rules pass
//! `promtool`, every metric the rules and the dashboard name is exported,
//! every sample carries `region` and no label names a person, the node is
//! in `/admin/state`, webhooks are chosen by provider, the simulator sends
//! its signed webhooks to the gateway itself, and an HTTP provider gets the
//! configured API key and currency.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const SIM_SECRET: &str = "sim-webhook-secret-0123456789";
const ACME_SECRET: &str = "acme-webhook-secret-0123456789";

/// A room whose pass may make several orders (the test buys, declines and
/// refunds with one), a product, the simulator with its webhook secret, and
/// a second provider with its own.
fn rest() -> String {
    format!(
        "{}[[products]]\nsku = \"hot\"\nstock = 20\nprice_cents = 1000\nroom = \"drop\"\n\n[payments]\nprovider = \"simulated\"\n\n[payments.webhooks.simulated]\nsecrets = [\"{SIM_SECRET}\"]\n\n[payments.webhooks.acme]\nsecrets = [\"{ACME_SECRET}\"]\n",
        GatewayOptions::default()
            .rest
            .replacen("[[rooms]]\n", "[[rooms]]\nmax_orders_per_pass = 10\n", 1)
    )
}

fn gateway(origin: Option<String>) -> Gateway {
    Gateway::start(GatewayOptions {
        origin,
        extra_gateway: "region = \"sa-east-1\"\nnode_id = \"gw-test-1\"\n".into(),
        rest: rest(),
        ..GatewayOptions::default()
    })
}

/// `promtool` with `args`, or `None` when it is not installed and the
/// suite does not require it (`SLUICE_REQUIRE_TOOLS` unset).
fn promtool(args: &[&str]) -> Option<std::process::Output> {
    match Command::new("promtool").args(args).output() {
        Ok(out) => Some(out),
        Err(e) => {
            assert!(
                std::env::var_os("SLUICE_REQUIRE_TOOLS").is_none(),
                "promtool is required: {e}"
            );
            eprintln!("promtool not installed, skipping the rules check");
            None
        }
    }
}

fn ops_dir() -> std::path::PathBuf {
    repo_root().join("ops")
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let rules = ops_dir().join("prometheus/sluice-rules.yml");
    let Some(out) = promtool(&["check", "rules", rules.to_str().unwrap()]) else {
        return;
    };
    assert!(
        out.status.success(),
        "promtool check rules:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let tests: Vec<String> = std::fs::read_dir(ops_dir().join("prometheus/tests"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml"))
        .map(|p| p.display().to_string())
        .collect();
    assert!(tests.len() >= 3, "{tests:?}");
    let mut args = vec!["test", "rules"];
    args.extend(tests.iter().map(String::as_str));
    let out = promtool(&args).expect("promtool ran above");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "promtool test rules:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every alert has a test that fires it and one that expects quiet.
    let rules_text = std::fs::read_to_string(&rules).unwrap();
    let tests_text: String = tests
        .iter()
        .map(|t| std::fs::read_to_string(t).unwrap())
        .collect();
    for alert in rules_text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        let cases: Vec<&str> = tests_text
            .split("alertname: ")
            .skip(1)
            .filter(|c| c.starts_with(&format!("{alert}\n")))
            .collect();
        assert!(
            cases.iter().any(|c| c.contains("exp_labels")),
            "no test fires {alert}"
        );
        assert!(
            cases.iter().any(|c| c.contains("exp_alerts: []")),
            "no test keeps {alert} quiet"
        );
    }
}

/// Metric names in `text`: `sluice_…` tokens not inside a recording rule's
/// name (`room:sluice_x:rate5m`).
fn metric_names(text: &str) -> BTreeSet<String> {
    let bytes = text.as_bytes();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while let Some(at) = text[i..].find("sluice_") {
        let start = i + at;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        let before = start.checked_sub(1).map(|b| bytes[b]);
        let inside_word =
            before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':');
        let after_colon = bytes.get(end) == Some(&b':');
        if !inside_word && !after_colon {
            names.insert(text[start..end].to_string());
        }
        i = end;
    }
    names
}

/// The `expr` of every panel target in a Grafana dashboard.
fn dashboard_exprs(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    out
}

/// `(name, [(label, value)])` of every sample line.
fn samples(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, rest) = match line.find('{') {
            Some(b) => (&line[..b], &line[b + 1..]),
            None => (line.split(' ').next().unwrap(), ""),
        };
        let mut labels = Vec::new();
        let mut rest = rest;
        while let Some(eq) = rest.find("=\"") {
            let key = rest[..eq].trim_start_matches(',').to_string();
            let value_start = eq + 2;
            let mut value = String::new();
            let mut chars = rest[value_start..].char_indices();
            let mut end = rest.len();
            while let Some((j, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            value.push(n);
                        }
                    }
                    '"' => {
                        end = value_start + j + 1;
                        break;
                    }
                    c => value.push(c),
                }
            }
            labels.push((key, value));
            rest = &rest[end..];
            if rest.starts_with('}') {
                break;
            }
        }
        out.push((name.to_string(), labels));
    }
    out
}

/// Why a label value looks like it names a person or one purchase.
fn personal(value: &str) -> Option<&'static str> {
    if value.contains('@') {
        return Some("an email");
    }
    let parts: Vec<&str> = value.split('.').collect();
    if parts.len() == 4
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.parse::<u8>().is_ok())
    {
        return Some("an IPv4 address");
    }
    if value.matches(':').count() >= 2 && value.chars().all(|c| c.is_ascii_hexdigit() || c == ':') {
        return Some("an IPv6 address");
    }
    if value.starts_with("ord_") || value.starts_with("pay_") || value.starts_with("evt_") {
        return Some("an order, payment or event id");
    }
    let hex_run = value
        .split(|c: char| !c.is_ascii_hexdigit())
        .map(str::len)
        .max()
        .unwrap_or(0);
    if hex_run >= 16 {
        return Some("a ticket id (long hex)");
    }
    if value.len() > 40 {
        return Some("a token (too long for a label)");
    }
    None
}

#[test]
fn the_personal_data_check_catches_what_it_should() {
    for bad in [
        "a@b.example",
        "10.1.2.3",
        "::1",
        "fe80::1:2",
        "ord_8f2a",
        "0b5e2c9d4f6a7b8c9d0e1f2a",
        "eyJhbGciOiJFZERTQSIsImtpZCI6ImsxIn0.eyJpc3MiOiJzbHVpY2UifQ.sig",
    ] {
        assert!(personal(bad).is_some(), "{bad}");
    }
    for fine in [
        "drop",
        "sneaker-42",
        "sa-east-1",
        "2xx",
        "0.005",
        "+Inf",
        "queue_full",
        "simulated",
    ] {
        assert_eq!(personal(fine), None, "{fine}");
    }
}

/// The `sub` claim (ticket id) of a JWT.
fn subject(token: &str) -> String {
    use base64::Engine;
    let payload = token.split('.').nth(1).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    let claims: Value = serde_json::from_slice(&bytes).unwrap();
    claims["sub"].as_str().unwrap().to_string()
}

async fn checkout(gw: &Gateway, pass: &str, key: &str, pm: &str) -> Value {
    let r = client()
        .post(gw.url("/checkout"))
        .bearer_auth(pass)
        .header("idempotency-key", key)
        .json(&json!({"sku": "hot", "quantity": 1, "payment_method": pm}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    r.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_rules_and_dashboard_name_is_exported_with_region_and_no_personal_data() {
    // An origin nobody listens on: origin failures get counted.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let gw = gateway(Some(dead));
    let c = client();
    let pass = admitted_pass(&gw.url(""), &c, "drop").await;
    let paid = checkout(&gw, &pass, "ops-key-paid-0001", "pm_ok").await;
    assert_eq!(paid["state"], "confirmed", "{paid}");
    let declined = checkout(&gw, &pass, "ops-key-declined-0001", "pm_decline").await;
    assert_eq!(declined["state"], "declined", "{declined}");
    // Cancelling a paid order refunds it: a compensation.
    let order_id = paid["order_id"].as_str().unwrap().to_string();
    let r = c
        .post(gw.url(&format!("/orders/{order_id}/cancel")))
        .bearer_auth(&pass)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    // A forged pass is refused (and counted); the origin fails.
    let r = c
        .get(gw.url("/orders/ord_x"))
        .bearer_auth("not.a.pass")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = c.get(gw.url("/storefront")).send().await.unwrap();
    assert_eq!(r.status(), 502);

    // The simulator's webhooks (authorized, captured, declined, refunded)
    // reach the gateway, signed.
    let delivered = eventually(Duration::from_secs(20), || {
        gw.metric("sluice_webhook_deliveries_total{result=\"delivered\"}")
            .unwrap_or(0.0)
            >= 4.0
            && gw
                .metric("sluice_compensations_total{kind=\"refund\",result=\"ok\"}")
                .is_some()
    });
    assert!(delivered.is_some(), "log:\n{}", gw.log());
    assert_eq!(
        gw.metric("sluice_webhook_events_total{result=\"invalid_signature\"}"),
        None,
        "every simulator webhook verifies"
    );
    assert_eq!(
        gw.metric("sluice_webhook_deliveries_total{result=\"failed\"}"),
        Some(0.0)
    );

    let text = gw.metrics_text().await;
    let exported: BTreeSet<String> = samples(&text).into_iter().map(|(n, _)| n).collect();

    let rules = std::fs::read_to_string(ops_dir().join("prometheus/sluice-rules.yml")).unwrap();
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(ops_dir().join("grafana/sluice-campaign.json")).unwrap(),
    )
    .unwrap();
    let from_rules = metric_names(&rules);
    let from_dashboard = metric_names(&dashboard_exprs(&dashboard).join("\n"));
    assert!(from_rules.len() >= 15, "{from_rules:?}");
    assert!(from_dashboard.len() >= 20, "{from_dashboard:?}");
    // Exported only with `[cluster] redis_url`: fleet_line.rs checks it.
    const FLEET_ONLY: [&str; 2] = ["sluice_fleet_clock_offset_seconds", "sluice_fleet_store_up"];
    for name in from_rules.iter().chain(&from_dashboard) {
        if FLEET_ONLY.contains(&name.as_str()) {
            continue;
        }
        assert!(
            exported.contains(name),
            "{name} is named by the rules or the dashboard but not exported:\n{text}"
        );
    }

    // Every sample carries the region; no label value names a person.
    let ticket = subject(&pass);
    for (name, labels) in samples(&text) {
        assert!(
            labels.contains(&("region".into(), "sa-east-1".into())),
            "{name} {labels:?} has no region"
        );
        for (key, value) in &labels {
            if let Some(why) = personal(value) {
                panic!("{name}{{{key}={value:?}}} looks like {why}");
            }
        }
    }
    for secret in [ticket.as_str(), order_id.as_str(), "127.0.0.1"] {
        assert!(!text.contains(secret), "{secret} appears in /metrics");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_state_names_the_node_and_its_region() {
    let gw = gateway(None);
    let state = gw.admin_json("/admin/state");
    assert_eq!(
        state["node"],
        json!({"id": "gw-test-1", "region": "sa-east-1"})
    );
    // Without node_id, the id is the host and the public port.
    let plain = Gateway::start(GatewayOptions::default());
    let node = &plain.admin_json("/admin/state")["node"];
    assert_eq!(node["region"], "local");
    let id = node["id"].as_str().unwrap();
    assert!(
        id.ends_with(&format!(":{}", plain.listen.port())) && id.len() > 6,
        "{id}"
    );
    // The region is fixed at start: a reload that changes it says so.
    gw.edit_config(|t| t.replace("region = \"sa-east-1\"", "region = \"us-east-1\""));
    gw.signal(nix::sys::signal::Signal::SIGHUP);
    let warned = eventually(Duration::from_secs(10), || {
        gw.log().contains("gateway.region")
    });
    assert!(warned.is_some(), "log:\n{}", gw.log());
    assert_eq!(gw.admin_json("/admin/state")["node"]["region"], "sa-east-1");
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_secrets_are_chosen_by_the_provider_segment() {
    let gw = gateway(None);
    let body = r#"{"id":"evt_ops_1","type":"payment.authorized","created":1,"data":{"payment_id":"pay_unknown","order_id":"ord_unknown","amount_cents":1000}}"#;
    let post = |provider: &'static str, secret: &'static str| {
        client()
            .post(gw.url(&format!("/webhooks/{provider}")))
            .header(
                "sluice-signature",
                sluice_checkout::webhook::sign(secret.as_bytes(), now_s(), body.as_bytes()),
            )
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let r = post("acme", SIM_SECRET).await.unwrap();
    assert_eq!(r.status(), 401, "another provider's secret does not verify");
    let r = post("acme", ACME_SECRET).await.unwrap();
    assert_eq!(r.status(), 200);
    for unknown in ["stripe", "acme/extra", "ACME"] {
        let r = client()
            .post(gw.url(&format!("/webhooks/{unknown}")))
            .header(
                "sluice-signature",
                sluice_checkout::webhook::sign(ACME_SECRET.as_bytes(), now_s(), body.as_bytes()),
            )
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{unknown}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], "not_found", "{v}");
    }
}

#[test]
fn the_simulator_outside_the_demo_is_warned_about() {
    let warning = "charges nothing";
    let with_origin = gateway(Some("http://127.0.0.1:9".into()));
    let warned = eventually(Duration::from_secs(10), || {
        with_origin.log().contains(warning)
    });
    assert!(warned.is_some(), "log:\n{}", with_origin.log());
    assert!(with_origin.log().contains("a storefront origin is set"));

    let demo_like = gateway(None);
    let started = eventually(Duration::from_secs(10), || {
        demo_like.log().contains("sluice starting")
    });
    assert!(started.is_some(), "log:\n{}", demo_like.log());
    assert!(!demo_like.log().contains(warning), "{}", demo_like.log());
}

#[test]
fn the_shipped_files_are_where_the_docs_say() {
    for file in [
        "ops/prometheus/sluice-rules.yml",
        "ops/grafana/sluice-campaign.json",
        "docs/openapi.yaml",
    ] {
        assert!(Path::new(&repo_root().join(file)).is_file(), "{file}");
        let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
        let ops = std::fs::read_to_string(repo_root().join("docs/operations.md")).unwrap();
        assert!(readme.contains(file), "README.md does not name {file}");
        assert!(
            ops.contains(file),
            "docs/operations.md does not name {file}"
        );
    }
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("ops/grafana/sluice-campaign.json")).unwrap(),
    )
    .unwrap();
    let vars = dashboard["templating"]["list"].as_array().unwrap();
    assert!(vars
        .iter()
        .any(|v| v["name"] == "datasource" && v["type"] == "datasource"));
    for panel in dashboard["panels"].as_array().unwrap() {
        if panel["type"] != "row" {
            assert_eq!(
                panel["datasource"]["uid"], "${datasource}",
                "{}",
                panel["title"]
            );
        }
    }
}

/// A card provider stand-in that notes what each call carried.
struct Provider {
    url: String,
    /// `(path, Authorization, body currency)` of every call.
    calls: std::sync::Arc<std::sync::Mutex<Vec<(String, String, Value)>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Provider {
    fn start() -> Provider {
        use axum::extract::{Path as UrlPath, State};
        use axum::http::{HeaderMap, StatusCode};
        use axum::routing::{get, post};
        type Calls = std::sync::Arc<std::sync::Mutex<Vec<(String, String, Value)>>>;
        fn note(calls: &Calls, path: String, headers: &HeaderMap, body: &Value) {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            calls
                .lock()
                .unwrap()
                .push((path, auth, body["currency"].clone()));
        }
        async fn authorize(
            State(calls): State<Calls>,
            headers: HeaderMap,
            axum::Json(body): axum::Json<Value>,
        ) -> (StatusCode, axum::Json<Value>) {
            note(&calls, "authorize".into(), &headers, &body);
            (
                StatusCode::CREATED,
                axum::Json(json!({"id": "pay_1", "status": "authorized"})),
            )
        }
        async fn movement(
            State(calls): State<Calls>,
            UrlPath((id, action)): UrlPath<(String, String)>,
            headers: HeaderMap,
            axum::Json(body): axum::Json<Value>,
        ) -> axum::Json<Value> {
            note(&calls, action.clone(), &headers, &body);
            let status = match action.as_str() {
                "capture" => "captured",
                "void" => "voided",
                _ => "refunded",
            };
            axum::Json(json!({"id": id, "status": status}))
        }
        async fn events() -> axum::Json<Value> {
            axum::Json(json!({"events": [], "next": 0}))
        }
        async fn operation() -> StatusCode {
            StatusCode::NOT_FOUND
        }
        let calls: Calls = Default::default();
        let app = axum::Router::new()
            .route("/v1/authorizations", post(authorize))
            .route("/v1/authorizations/{id}/{action}", post(movement))
            .route("/v1/events", get(events))
            .route("/v1/operations/{key}", get(operation))
            .with_state(calls.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
            });
        });
        Provider {
            url,
            calls,
            _stop: stop,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_provider_gets_the_configured_key_and_currency() {
    let provider = Provider::start();
    let key = "sk_live_from_the_environment_0123";
    let gw = Gateway::start(GatewayOptions {
        rest: format!(
            "{}[[products]]\nsku = \"hot\"\nstock = 20\nprice_cents = 1000\nroom = \"drop\"\n\n[payments]\nprovider = \"http\"\nurl = \"{}\"\napi_key_env = \"OPS_PSP_KEY\"\ncurrency = \"EUR\"\n",
            GatewayOptions::default().rest,
            provider.url
        ),
        env: vec![("OPS_PSP_KEY".into(), key.into())],
        ..GatewayOptions::default()
    });
    let pass = admitted_pass(&gw.url(""), &client(), "drop").await;
    let order = checkout(&gw, &pass, "ops-key-http-0001", "pm_ok").await;
    assert_eq!(order["state"], "confirmed", "{order}");
    let calls = provider.calls.lock().unwrap().clone();
    let paths: Vec<&str> = calls.iter().map(|(p, _, _)| p.as_str()).collect();
    assert_eq!(paths, ["authorize", "capture"], "{calls:?}");
    for (path, auth, currency) in &calls {
        assert_eq!(auth, &format!("Bearer {key}"), "{path}");
        assert_eq!(currency, &json!("EUR"), "{path}");
    }
    assert!(!gw.log().contains(key), "the key is never logged");
}
