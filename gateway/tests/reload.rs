//! Live config: the kill switch by file save and by SIGHUP, a bad reload
//! keeping the last good config, and no request dropped while reloading.

mod common;

use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;

fn admissions(gw: &Gateway) -> String {
    gw.admin_json("/admin/state")["admissions"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn kill_switch_by_saving_the_file_shows_within_a_second() {
    let gw = Gateway::start(GatewayOptions::default());
    assert_eq!(admissions(&gw), "open");
    assert_eq!(gw.metric("sluice_admissions_open"), Some(1.0));

    gw.edit_config(|t| t.replace("[gateway]\n", "[gateway]\nadmissions = \"paused\"\n"));
    let took = eventually(Duration::from_secs(1), || admissions(&gw) == "paused");
    assert!(
        took.is_some(),
        "kill switch not visible within 1 s; log:\n{}",
        gw.log()
    );
    assert_eq!(gw.metric("sluice_admissions_open"), Some(0.0));
    assert_eq!(
        gw.metric("sluice_config_reloads_total{result=\"success\"}"),
        Some(1.0)
    );
}

#[test]
fn kill_switch_by_sighup() {
    let gw = Gateway::start(GatewayOptions::default());
    gw.edit_config(|t| t.replace("[gateway]\n", "[gateway]\nadmissions = \"paused\"\n"));
    gw.signal(Signal::SIGHUP);
    assert!(eventually(Duration::from_secs(5), || admissions(&gw) == "paused").is_some());
    gw.edit_config(|t| t.replace("admissions = \"paused\"", "admissions = \"open\""));
    gw.signal(Signal::SIGHUP);
    assert!(eventually(Duration::from_secs(5), || admissions(&gw) == "open").is_some());
}

#[test]
fn a_bad_reload_is_refused_with_its_location_and_the_last_good_config_runs_on() {
    let gw = Gateway::start(GatewayOptions::default());
    gw.edit_config(|t| t.replace("[gateway]\n", "[gateway]\nadmissions = \"paused\"\n"));
    assert!(eventually(Duration::from_secs(5), || admissions(&gw) == "paused").is_some());

    gw.edit_config(|t| t.replace("admissions = \"paused\"", "admissions = \"opne\""));
    let failed = eventually(Duration::from_secs(2), || {
        gw.metric("sluice_config_reloads_total{result=\"failure\"}") == Some(1.0)
    });
    assert!(failed.is_some(), "failure not counted; log:\n{}", gw.log());
    let state = gw.admin_json("/admin/state");
    assert_eq!(state["admissions"], "paused", "last good config still runs");
    let error = state["config"]["last_reload_error"].as_str().unwrap();
    let expected = format!("{}:2:14:", gw.config_path.display());
    assert!(
        error.contains(&expected),
        "error {error:?} should point at {expected}"
    );
    assert!(gw.log().contains(&expected), "the log says why");

    // Still serving.
    let resp = raw_request(
        gw.listen,
        "GET / HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(raw_status(&resp), 200);
}

#[tokio::test]
async fn requests_in_flight_survive_a_reload() {
    let origin = Origin::start();
    let gw = Gateway::start(GatewayOptions {
        origin: Some(origin.url()),
        ..Default::default()
    });
    let c = client();
    let slow = tokio::spawn(c.get(gw.url("/slow")).send());
    // The origin has the request (and holds it 1.5 s) before the reload.
    let in_flight = eventually_async(Duration::from_secs(5), || origin.hits() == 1).await;
    assert!(
        in_flight.is_some(),
        "the slow request never reached the origin"
    );
    gw.edit_config(|t| t.replace("[gateway]\n", "[gateway]\nadmissions = \"paused\"\n"));
    gw.signal(Signal::SIGHUP);
    let r = slow.await.unwrap().unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "slow answer");
    assert_eq!(gw.admin_json("/admin/state")["admissions"], "paused");
}
