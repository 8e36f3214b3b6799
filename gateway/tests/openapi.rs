//! `docs/openapi.yaml` against a running demo-like gateway: schemathesis
//! (installed by `scripts/deps.sh`) generates requests from the
//! description, with a real admission pass, and fails on any 5xx or any
//! answer the description does not allow (status, content type, headers,
//! body schema, `405` without `Allow`, a missing required header accepted).

mod common;

use std::process::Command;

use common::*;

/// What schemathesis checks on every answer.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,missing_required_header,unsupported_method,allow_header_conformance";
/// Test cases per operation and per phase, at most.
const EXAMPLES_MAX: &str = "25";
/// Seconds one run may take, at most (`timeout` stops it; schemathesis's
/// own `--max-time` would rather repeat fuzzing until it is spent).
const RUN_S_MAX: &str = "240";

/// `schemathesis --version`, or `None` when it is missing and the suite
/// does not require it.
fn schemathesis_present() -> bool {
    match Command::new("schemathesis").arg("--version").output() {
        Ok(out) if out.status.success() => true,
        other => {
            assert!(
                std::env::var_os("SLUICE_REQUIRE_TOOLS").is_none(),
                "schemathesis is required (scripts/deps.sh installs it): {other:?}"
            );
            eprintln!("schemathesis not installed, skipping the API description check");
            false
        }
    }
}

/// The demo's rooms, products, payments and cache rules, on free ports.
/// Its one pass may start many checkouts here (the demo allows one), so
/// the generated checkouts reach the store and not only `purchase_limit`.
fn demo_rest() -> String {
    let demo = std::fs::read_to_string(repo_root().join("policies/demo.toml")).unwrap();
    let start = demo
        .find("[[gateway.cache_control]]")
        .expect("the demo has cache rules after its [gateway] keys");
    let rest = demo[start..].replacen("[[rooms]]\n", "[[rooms]]\nmax_orders_per_pass = 1000\n", 1);
    assert!(
        rest.contains("max_orders_per_pass = 1000"),
        "the demo has a room"
    );
    rest
}

fn run(base_url: &str, tag: &str, pass: Option<&str>) {
    let spec = repo_root().join("docs/openapi.yaml");
    // Its report folder goes in a directory of its own, removed after.
    let cwd = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("timeout");
    cmd.args([RUN_S_MAX, "schemathesis", "run"])
        .arg(&spec)
        .args(["--url", base_url, "--include-tag", tag])
        .args(["--checks", CHECKS])
        .args(["--max-examples", EXAMPLES_MAX])
        .args(["--seed", "13", "--workers", "1", "--request-timeout", "10"])
        .args(["--phases", "examples,coverage,fuzzing,stateful"])
        .args(["--no-color"])
        .current_dir(cwd.path());
    if let Some(pass) = pass {
        cmd.args(["--header", &format!("Authorization: Bearer {pass}")]);
    }
    let out = cmd.output().expect("schemathesis runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found answers outside docs/openapi.yaml ({tag}):\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It really ran: every operation of the tag was tested.
    assert!(stdout.contains("passed"), "{stdout}");
    assert!(!stdout.contains("Tested: 0"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_answers_as_its_openapi_description_says() {
    if !schemathesis_present() {
        return;
    }
    let gw = Gateway::start(GatewayOptions {
        repo_static: true,
        rest: demo_rest(),
        ..GatewayOptions::default()
    });
    let pass = admitted_pass(&gw.url(""), &client(), "drop").await;
    let (public, admin) = (gw.url(""), gw.admin_url(""));
    tokio::task::spawn_blocking(move || {
        run(&public, "public", Some(&pass));
        run(&admin, "admin", None);
    })
    .await
    .unwrap();
    // The description's checkouts went through: orders were made (some
    // may have been cancelled again by the stateful phase).
    let state = gw.admin_json("/admin/state");
    let orders: u64 = state["orders"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert!(
        orders >= 2,
        "fewer than two checkouts made an order: {state}"
    );
}
