//! A reload is all or nothing: when any step fails, the store rows (prices,
//! TTLs), the rooms' settings and `/admin/state` are what they were.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

const CONFIG: &str = "[[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\"]\nrelease_per_second = 10\nmax_active = 10\nqueue_capacity = 100\nreservation_ttl_s = 600\n\
     [[products]]\nsku = \"a\"\nstock = 5\nprice_cents = 100\nroom = \"drop\"\n\
     [[products]]\nsku = \"b\"\nstock = 5\nprice_cents = 200\nroom = \"drop\"\n";

/// (sku, price_cents, reservation_ttl_ms) as stored.
fn rows(gw: &Gateway) -> Vec<(String, i64, i64)> {
    let db = gw.dir.path().join("var").join("checkout.db");
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut stmt = conn
        .prepare("SELECT sku, price_cents, reservation_ttl_ms FROM stock ORDER BY sku")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// `/admin/state` without what moves by itself.
fn state(gw: &Gateway) -> Value {
    let mut s = gw.admin_json("/admin/state");
    s["config"]
        .as_object_mut()
        .unwrap()
        .remove("last_reload_error");
    s
}

fn failures(gw: &Gateway) -> f64 {
    gw.metric("sluice_config_reloads_total{result=\"failure\"}")
        .unwrap_or(0.0)
}

/// Saves `edit` of the config and waits for its reload to be refused.
fn refused_reload(gw: &Gateway, edit: impl FnOnce(String) -> String) {
    let before = failures(gw);
    gw.edit_config(edit);
    let failed = eventually(Duration::from_secs(3), || failures(gw) > before);
    assert!(
        failed.is_some(),
        "the reload was not refused; log:\n{}",
        gw.log()
    );
}

fn changes_everything(t: String) -> String {
    t.replace("price_cents = 100", "price_cents = 4242")
        .replace("price_cents = 200", "price_cents = 888")
        .replace("reservation_ttl_s = 600", "reservation_ttl_s = 60")
        .replace("release_per_second = 10", "release_per_second = 20")
        .replace("[gateway]\n", "[gateway]\nadmissions = \"paused\"\n")
}

#[test]
fn a_reload_whose_store_write_fails_changes_nothing() {
    let gw = Gateway::start(GatewayOptions {
        rest: CONFIG.into(),
        ..Default::default()
    });
    let rows_before = rows(&gw);
    assert_eq!(rows_before[0], ("a".into(), 100, 600_000));
    let state_before = state(&gw);
    assert_eq!(state_before["admissions"], "open");
    // The store refuses one of the new prices: the last step of the reload,
    // the store write, fails.
    rusqlite::Connection::open(gw.dir.path().join("var").join("checkout.db"))
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER refuse_price BEFORE UPDATE ON stock WHEN NEW.price_cents = 4242
             BEGIN SELECT RAISE(ABORT, 'price refused'); END;",
        )
        .unwrap();
    refused_reload(&gw, changes_everything);
    assert_eq!(rows(&gw), rows_before, "no price or TTL was written");
    assert_eq!(state(&gw), state_before, "rooms and admissions unchanged");
    let error = gw.admin_json("/admin/state")["config"]["last_reload_error"].clone();
    assert!(
        error.as_str().is_some_and(|e| e.contains("price refused")),
        "{error}"
    );

    // The same edit without the refused price goes through whole.
    gw.edit_config(|t| t.replace("price_cents = 4242", "price_cents = 300"));
    let applied = eventually(Duration::from_secs(3), || {
        state(&gw)["admissions"] == "paused"
    });
    assert!(applied.is_some(), "log:\n{}", gw.log());
    assert_eq!(
        rows(&gw),
        vec![("a".into(), 300, 60_000), ("b".into(), 888, 60_000)]
    );
    assert_eq!(state(&gw)["rooms"][0]["release_per_second"], 20);
}

#[test]
fn a_reload_refused_after_its_first_steps_leaves_no_side_effect() {
    let gw = Gateway::start(GatewayOptions {
        rest: CONFIG.into(),
        ..Default::default()
    });
    let rows_before = rows(&gw);
    let state_before = state(&gw);
    // A key that is valid base64 of 32 bytes, so the file validates, but
    // no Ed25519 key: the keyring cannot be built. Prices, TTLs and rooms
    // change in the same edit.
    let bad_key = "[[keys]]\nkid = \"bad\"\nalg = \"EdDSA\"\nsecret = \"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"\n";
    refused_reload(&gw, |t| format!("{}\n{bad_key}", changes_everything(t)));
    assert_eq!(rows(&gw), rows_before, "no price or TTL was written");
    assert_eq!(state(&gw), state_before, "rooms and admissions unchanged");
}

/// (live partitions, rows, free units per row) of `sku` as stored.
fn partitions(gw: &Gateway, sku: &str) -> (i64, Vec<i64>) {
    let db = gw.dir.path().join("var").join("checkout.db");
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let live = conn
        .query_row("SELECT partitions FROM stock WHERE sku = ?1", [sku], |r| {
            r.get(0)
        })
        .unwrap();
    let mut stmt = conn
        .prepare("SELECT available FROM stock_partitions WHERE sku = ?1 ORDER BY part")
        .unwrap();
    let free = stmt
        .query_map([sku], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    (live, free)
}

#[test]
fn partitions_follow_the_config_and_move_by_a_logged_rebalance() {
    let gw = Gateway::start(GatewayOptions {
        rest: CONFIG.replace(
            "sku = \"a\"\nstock = 5\n",
            "sku = \"a\"\nstock = 5\npartitions = 4\n",
        ),
        ..Default::default()
    });
    assert_eq!(partitions(&gw, "a"), (4, vec![2, 1, 1, 1]));
    assert_eq!(partitions(&gw, "b"), (1, vec![5]));
    gw.edit_config(|t| t.replace("partitions = 4", "partitions = 2"));
    let moved = eventually(Duration::from_secs(5), || partitions(&gw, "a").0 == 2);
    assert!(
        moved.is_some(),
        "the reload did not apply; log:\n{}",
        gw.log()
    );
    // Rows 2 and 3 are retired: their free units went to the live ones.
    assert_eq!(partitions(&gw, "a"), (2, vec![3, 2, 0, 0]));
    assert!(
        gw.log().contains("stock moved between partitions"),
        "each move is logged; log:\n{}",
        gw.log()
    );
    let total: i64 = gw.admin_json("/admin/state")["inventory"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["sku"] == "a")
        .unwrap()["available"]
        .as_i64()
        .unwrap();
    assert_eq!(total, 5);
}
