//! The admin listener: token, health, readiness, metrics that parse.

mod common;

use common::*;

#[tokio::test]
async fn admin_token_guards_everything_but_the_probes() {
    let token = "test-admin-token-0123456789";
    let gw = Gateway::start(GatewayOptions {
        extra_gateway: "admin_token_env = \"SLUICE_TEST_ADMIN_TOKEN\"\n".into(),
        env: vec![("SLUICE_TEST_ADMIN_TOKEN".into(), token.into())],
        ..Default::default()
    });
    let c = client();
    for path in ["/metrics", "/admin/state"] {
        let r = c.get(gw.admin_url(path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path} without token");
        assert_eq!(r.headers()["www-authenticate"], "Bearer");
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["error"], "unauthorized");
        let r = c
            .get(gw.admin_url(path))
            .bearer_auth("wrong-token-0123456789")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{path} with a wrong token");
        let r = c
            .get(gw.admin_url(path))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path} with the token");
        // The right token and a second header: refused, not picked.
        let r = c
            .get(gw.admin_url(path))
            .bearer_auth(token)
            .header("authorization", "Bearer wrong-token-0123456789")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{path} with two Authorization headers");
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["error"], "bad_request");
    }
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            c.get(gw.admin_url(path)).send().await.unwrap().status(),
            200,
            "{path}"
        );
    }
    assert!(!gw.log().contains(token), "the token never reaches the log");
}

#[tokio::test]
async fn state_lists_rooms_and_the_kill_switch() {
    let gw = Gateway::start(GatewayOptions::default());
    let v: serde_json::Value = client()
        .get(gw.admin_url("/admin/state"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["admissions"], "open");
    assert_eq!(v["rooms"][0]["name"], "drop");
    assert_eq!(v["rooms"][0]["release_per_second"], 10);
    assert_eq!(v["catalog"]["files"], 3);
    let r = client().get(gw.admin_url("/nope")).send().await.unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn metrics_pass_promtool() {
    let origin = Origin::start();
    let defaults = GatewayOptions::default();
    let gw = Gateway::start(GatewayOptions {
        origin: Some(origin.url()),
        // A product too, so the store's families carry their labels.
        rest: format!(
            "{}[[products]]\nsku = \"a-1\"\nstock = 3\nprice_cents = 1\nroom = \"drop\"\n",
            defaults.rest
        ),
        ..defaults
    });
    let c = client();
    c.get(gw.url("/")).send().await.unwrap();
    c.get(gw.url("/echo")).send().await.unwrap();
    // The access-log phase (which counts) runs just after the response is
    // sent, so give it a moment.
    let mut text = String::new();
    let mut raw = String::new();
    for _ in 0..50 {
        text = gw.metrics_text().await;
        raw = text.clone();
        text = without_region(&text);
        if text.contains("sluice_http_served_total{result=\"origin\"} 1") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    for name in [
        "sluice_admissions_open",
        "sluice_config_reloads_total",
        "sluice_http_requests_total",
        "sluice_upstream_seconds_bucket",
        "sluice_catalog_files",
        "sluice_queue_waiting{room=\"drop\"}",
        "sluice_wait_seconds_bucket{room=\"drop\",le=\"1\"}",
        "sluice_inventory_units{sku=\"a-1\",state=\"available\"} 3",
        "sluice_orders{state=\"confirmed\"} 0",
        "sluice_outbox_pending 0",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics");
    }
    assert!(
        text.contains("sluice_http_served_total{result=\"catalog\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("sluice_http_served_total{result=\"origin\"} 1"),
        "{text}"
    );

    let promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match promtool {
        Ok(child) => child,
        Err(e) => {
            // The test command installs promtool; a bare `cargo test` may not have it.
            assert!(
                std::env::var_os("SLUICE_REQUIRE_TOOLS").is_none(),
                "promtool is required: {e}"
            );
            eprintln!("promtool not installed, skipping the exposition check");
            return;
        }
    };
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(raw.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
