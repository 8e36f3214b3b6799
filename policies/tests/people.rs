//! "People and events" keys: a room's challenge, enqueue keys, lanes, event
//! times, message, mode, idle passes, the deny list and the account hash
//! key. Each has a default that keeps today's behaviour, converts to the
//! model with units, and is refused at FILE:LINE:COL when it makes no
//! sense.

use std::path::Path;
use std::time::Duration;

use sluice_policies::model::{
    Challenge, Difficulty, EnqueueKeyMaterial, KeyAlg, OnVerifierError, RoomMode, Widget,
};
use sluice_policies::validate::parse_with_env;
use sluice_policies::{Config, Diagnostics};

const GATEWAY: &str = "[gateway]\n";
const ROOM: &str = "[[rooms]]\nname = \"drop\"\nrelease_per_second = 50\nmax_active = 500\nqueue_capacity = 100000\n";
/// 32 bytes of zeros in base64url: a valid HS256 secret.
const SECRET: &str = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
const STORE_KEY: &str = "[rooms.enqueue]\nrequired = true\n[[rooms.enqueue.keys]]\nkid = \"store1\"\nalg = \"HS256\"\nsecret = \"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"\n";

fn env(name: &str) -> Option<String> {
    match name {
        "VERIFIER_SECRET" => Some("0x4AAAAAAAverifier-secret".into()),
        "STORE_SECRET" => Some(SECRET.into()),
        "HASH_KEY" => Some("k".repeat(40)),
        "SHORT_HASH_KEY" => Some("k".repeat(20)),
        _ => None,
    }
}

fn parse(src: &str) -> Result<Config, Diagnostics> {
    parse_with_env(src, Path::new("p.toml"), &env)
}

fn room(extra: &str) -> String {
    format!("{GATEWAY}{ROOM}{extra}")
}

/// 1-based line and column of the last `needle` in `src`.
fn pos(src: &str, needle: &str) -> (usize, usize) {
    let at = src
        .rfind(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in source"));
    let before = &src[..at];
    let line = before.matches('\n').count() + 1;
    let col = before[before.rfind('\n').map_or(0, |i| i + 1)..]
        .chars()
        .count()
        + 1;
    (line, col)
}

/// Exactly one problem, at the last `at` in `src`, whose message holds
/// `needle`; rendered as `p.toml:LINE:COL: …`.
fn refused_at(src: &str, at: &str, needle: &str) {
    let problems = parse(src).expect_err("config should be refused").0;
    assert_eq!(problems.len(), 1, "one problem expected: {problems:#?}");
    let p = &problems[0];
    assert!(
        p.message.contains(needle),
        "message {:?} should contain {needle:?}",
        p.message
    );
    let (line, col) = pos(src, at);
    assert_eq!(
        (p.line, p.col),
        (line, col),
        "wrong place for {:?}",
        p.message
    );
    assert!(p.to_string().starts_with(&format!("p.toml:{line}:{col}: ")));
}

/// Exactly one problem, anywhere, whose message holds `needle`.
fn refused(src: &str, needle: &str) {
    let problems = parse(src).expect_err("config should be refused").0;
    assert_eq!(problems.len(), 1, "one problem expected: {problems:#?}");
    assert!(
        problems[0].message.contains(needle),
        "message {:?} should contain {needle:?}",
        problems[0].message
    );
}

#[test]
fn every_new_key_defaults_to_todays_behaviour() {
    let c = parse(&room("")).unwrap();
    let r = c.room("drop").unwrap();
    assert_eq!(r.pass_idle, None);
    assert_eq!(
        (r.prequeue_at_unix, r.opens_at_unix, r.closes_at_unix),
        (None, None, None)
    );
    assert_eq!(r.message, None);
    assert_eq!(r.mode, RoomMode::Queue);
    assert!(!r.show_units_left);
    assert_eq!(r.challenge, Challenge::None);
    assert!(!r.enqueue.required && r.enqueue.keys.is_empty());
    assert!(r.lanes.is_empty());
    assert_eq!(r.default_lane_share(), 1.0);
    assert!(c.gateway.deny_cidrs.is_none());
    assert!(c.cluster.account_hash_key.is_none());
}

/// `[[rooms.enqueue.keys]]` with no `[rooms.enqueue]` header above it
/// makes that table implicitly, as TOML says: a key, not a parse error.
/// (toml 0.8 refused it with serde's "invalid type: string \"keys\"".)
#[test]
fn enqueue_keys_without_their_tables_header_are_read() {
    let src = room(&format!(
        "[[rooms.enqueue.keys]]\nkid = \"store1\"\nalg = \"HS256\"\nsecret = \"{SECRET}\"\n"
    ));
    let c = parse(&src).unwrap_or_else(|d| panic!("{d}"));
    let r = &c.rooms[0];
    assert!(!r.enqueue.required);
    assert_eq!(r.enqueue.keys.len(), 1);
    assert_eq!(r.enqueue.keys[0].kid, "store1");
}

#[test]
fn the_contracts_example_converts_with_units() {
    let src = room(
        "pass_idle_s = 120\nprequeue_at = 2026-12-05T09:45:00Z\nopens_at = 2026-12-05T10:00:00Z\ncloses_at = 2026-12-05T12:00:00Z\nmessage = \"Restock of size 42 at 14:00\"\nmode = \"standby\"\nstandby_above_per_second = 100\nshow_units_left = true\n[rooms.challenge]\nkind = \"pow\"\ndifficulty_bits = \"adaptive\"\nmin_bits = 12\nmax_bits = 24\ntarget_joins_per_second = 200\nchallenge_ttl_s = 90\n[rooms.enqueue]\nrequired = true\n[[rooms.enqueue.keys]]\nkid = \"store1\"\nalg = \"HS256\"\nsecret_env = \"STORE_SECRET\"\n[[rooms.enqueue.keys]]\nkid = \"store2\"\nalg = \"EdDSA\"\npublic_key = \"BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc\"\n[[rooms.lanes]]\nname = \"members\"\nshare = 0.3\n[[rooms.lanes]]\nname = \"staff\"\nbypass = true\n",
    );
    let c = parse(&src).unwrap();
    let r = c.room("drop").unwrap();
    assert_eq!(r.pass_idle, Some(Duration::from_secs(120)));
    let opens = 1_796_464_800; // 2026-12-05T10:00:00Z
    assert_eq!(r.opens_at_unix, Some(opens));
    assert_eq!(r.prequeue_at_unix, Some(opens - 15 * 60));
    assert_eq!(r.closes_at_unix, Some(opens + 2 * 3600));
    assert_eq!(r.message.as_deref(), Some("Restock of size 42 at 14:00"));
    assert_eq!(r.mode.as_str(), "standby");
    assert!(
        matches!(r.mode, RoomMode::Standby { above_per_second } if above_per_second.get() == 100)
    );
    assert!(r.show_units_left);
    let Challenge::Pow(pow) = &r.challenge else {
        panic!("pow expected: {:?}", r.challenge)
    };
    assert_eq!(pow.ttl, Duration::from_secs(90));
    assert!(matches!(
        pow.difficulty,
        Difficulty::Adaptive { min_bits: 12, max_bits: 24, target_joins_per_second } if target_joins_per_second.get() == 200
    ));
    assert!(r.enqueue.required);
    assert_eq!(r.enqueue.keys.len(), 2);
    assert_eq!(r.enqueue.keys[0].alg(), KeyAlg::Hs256);
    assert!(
        matches!(&r.enqueue.keys[0].material, EnqueueKeyMaterial::Hs256(s) if s.expose() == [0u8; 32])
    );
    assert!(
        matches!(r.enqueue.keys[1].material, EnqueueKeyMaterial::Ed25519Public(k) if k == [7u8; 32])
    );
    assert_eq!(r.lanes.len(), 2);
    assert!(r.lane("staff").unwrap().bypass);
    assert!((r.default_lane_share() - 0.7).abs() < 1e-12);
    // The secret never reaches a debug print.
    assert!(!format!("{:?}", r.enqueue).contains("AAAA"));
}

#[test]
fn a_pow_challenge_takes_sensible_defaults() {
    let c = parse(&room("[rooms.challenge]\nkind = \"pow\"\n")).unwrap();
    let Challenge::Pow(pow) = c.room("drop").unwrap().challenge else {
        panic!("pow expected")
    };
    assert_eq!(pow.difficulty, Difficulty::Fixed(18));
    assert_eq!(pow.ttl, Duration::from_secs(60));
    let c = parse(&room("[rooms.challenge]\nkind = \"pow\"\ndifficulty_bits = \"adaptive\"\ntarget_joins_per_second = 50\n")).unwrap();
    let Challenge::Pow(pow) = c.room("drop").unwrap().challenge else {
        panic!("pow expected")
    };
    assert!(matches!(
        pow.difficulty,
        Difficulty::Adaptive {
            min_bits: 12,
            max_bits: 24,
            ..
        }
    ));
    // An explicit "none" is no challenge.
    let c = parse(&room("[rooms.challenge]\nkind = \"none\"\n")).unwrap();
    assert_eq!(c.room("drop").unwrap().challenge, Challenge::None);
}

#[test]
fn a_siteverify_challenge_takes_the_widgets_endpoints() {
    let src = room("[rooms.challenge]\nkind = \"siteverify\"\nwidget = \"hcaptcha\"\nsecret_env = \"VERIFIER_SECRET\"\nsite_key = \"10000000-ffff-ffff-ffff-000000000001\"\nhostnames = [\"Shop.Example\"]\n");
    let c = parse(&src).unwrap();
    let Challenge::SiteVerify(s) = &c.room("drop").unwrap().challenge else {
        panic!("siteverify expected")
    };
    assert_eq!(s.widget, Widget::Hcaptcha);
    assert_eq!(s.verify_url, "https://api.hcaptcha.com/siteverify");
    assert_eq!(s.script_url, "https://js.hcaptcha.com/1/api.js");
    assert_eq!(s.secret.expose(), "0x4AAAAAAAverifier-secret");
    assert_eq!(s.hostnames, ["shop.example"]);
    assert_eq!(s.on_verifier_error, OnVerifierError::Refuse);
    assert_eq!(s.timeout, Duration::from_secs(2));
    assert_eq!(s.in_flight_max.get(), 256);
    let local = src.replace(
        "hostnames",
        "verify_url = \"http://127.0.0.1:9999/siteverify\"\nscript_url = \"http://127.0.0.1:9999/api.js\"\non_verifier_error = \"admit\"\ntimeout_ms = 500\nin_flight_max = 8\nhostnames",
    );
    let c = parse(&local).unwrap();
    let Challenge::SiteVerify(s) = &c.room("drop").unwrap().challenge else {
        panic!("siteverify expected")
    };
    assert_eq!(s.verify_url, "http://127.0.0.1:9999/siteverify");
    assert_eq!(s.on_verifier_error, OnVerifierError::Admit);
    assert_eq!(
        (s.timeout, s.in_flight_max.get()),
        (Duration::from_millis(500), 8)
    );
}

#[test]
fn event_times_out_of_order_are_refused() {
    let src = room("opens_at = 2026-12-05T10:00:00Z\ncloses_at = 2026-12-05T09:00:00Z\n");
    refused_at(&src, "2026-12-05T09:00:00Z", "close before it opens");
    let src = room("opens_at = 2026-12-05T10:00:00Z\ncloses_at = 2026-12-05T10:00:00+00:00\n");
    refused_at(
        &src,
        "2026-12-05T10:00:00+00:00",
        "`closes_at` is not after `opens_at`",
    );
    let src = room("prequeue_at = 2026-12-05T10:00:01Z\nopens_at = 2026-12-05T10:00:00Z\n");
    refused_at(
        &src,
        "2026-12-05T10:00:01Z",
        "`prequeue_at` is 1 s after `opens_at`",
    );
    let src = room("prequeue_at = 2026-12-05T10:00:00Z\ncloses_at = 2026-12-05T08:00:00Z\n");
    refused_at(&src, "2026-12-05T08:00:00Z", "not after `prequeue_at`");
    let src = room("closes_at = 2026-12-05\n");
    refused_at(&src, "2026-12-05", "full date-time with an offset");
    // In order, each alone, or none: all accepted.
    for ok in [
        "prequeue_at = 2026-12-05T09:00:00Z\nopens_at = 2026-12-05T10:00:00Z\ncloses_at = 2026-12-05T11:00:00Z\n",
        "prequeue_at = 2026-12-05T10:00:00Z\nopens_at = 2026-12-05T10:00:00Z\n",
        "closes_at = 2026-12-05T11:00:00Z\n",
        "prequeue_at = 2026-12-05T09:00:00Z\n",
    ] {
        parse(&room(ok)).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
}

#[test]
fn a_message_is_one_line_of_at_most_280_characters() {
    let long = "é".repeat(281);
    refused_at(
        &room(&format!("message = \"{long}\"\n")),
        "\"éé",
        "281 characters long, at most 280",
    );
    let just = "é".repeat(280);
    let c = parse(&room(&format!("message = \"{just}\"\n"))).unwrap();
    assert_eq!(
        c.room("drop").unwrap().message.as_deref(),
        Some(just.as_str())
    );
    refused_at(&room("message = \"two\\nlines\"\n"), "\"two", "one line");
    let c = parse(&room("message = \"  \"\n")).unwrap();
    assert_eq!(c.room("drop").unwrap().message, None);
}

#[test]
fn mode_and_standby_threshold_go_together() {
    refused_at(
        &room("mode = \"surge\"\n"),
        "\"surge\"",
        "\"queue\" or \"standby\"",
    );
    refused_at(
        &room("mode = \"standby\"\n"),
        "\"standby\"",
        "needs `standby_above_per_second`",
    );
    refused_at(
        &room("standby_above_per_second = 10\n"),
        "10\n",
        "only applies to mode = \"standby\"",
    );
    refused_at(
        &room("mode = \"standby\"\nstandby_above_per_second = 0\n"),
        "0\n",
        "`standby_above_per_second` must be between 1 and",
    );
}

#[test]
fn pass_idle_is_off_or_between_ten_seconds_and_the_pass_ttl() {
    let c = parse(&room("pass_idle_s = 0\n")).unwrap();
    assert_eq!(c.room("drop").unwrap().pass_idle, None);
    refused_at(&room("pass_idle_s = 5\n"), "5\n", "0 (off) or at least 10");
    refused_at(
        &room("pass_ttl_s = 300\npass_idle_s = 300\n"),
        "300",
        "must be less than `pass_ttl_s` (300)",
    );
    // The span is the pass_idle_s value, not pass_ttl_s: check it precisely.
    let src = room("pass_ttl_s = 300\npass_idle_s = 301\n");
    refused_at(&src, "301", "must be less than `pass_ttl_s`");
    refused_at(&room("pass_idle_s = -1\n"), "-1", "between 0 and 86400");
}

#[test]
fn a_challenge_that_makes_no_sense_is_refused() {
    let table = |body: &str| room(&format!("[rooms.challenge]\n{body}"));
    refused_at(
        &table("kind = \"captcha\"\n"),
        "\"captcha\"",
        "\"none\", \"pow\" or \"siteverify\"",
    );
    refused_at(
        &table("kind = \"pow\"\ndifficulty_bits = 0\n"),
        "0\n",
        "`difficulty_bits` must be between 1 and 28, got 0",
    );
    refused_at(
        &table("kind = \"pow\"\ndifficulty_bits = 40\n"),
        "40",
        "between 1 and 28, got 40",
    );
    refused_at(
        &table("kind = \"pow\"\ndifficulty_bits = \"hard\"\n"),
        "\"hard\"",
        "a number of bits or \"adaptive\"",
    );
    refused_at(
        &table("kind = \"pow\"\ndifficulty_bits = \"adaptive\"\nmin_bits = 20\nmax_bits = 16\ntarget_joins_per_second = 100\n"),
        "20",
        "`min_bits` (20) must not be above `max_bits` (16)",
    );
    refused_at(
        &table("kind = \"pow\"\ndifficulty_bits = \"adaptive\"\nmax_bits = 30\ntarget_joins_per_second = 100\n"),
        "30",
        "`max_bits` must be between 1 and 28",
    );
    refused_at(
        &table("kind = \"pow\"\ndifficulty_bits = \"adaptive\"\n"),
        "\"adaptive\"",
        "needs `target_joins_per_second`",
    );
    refused_at(
        &table("kind = \"pow\"\ndifficulty_bits = 18\nmin_bits = 10\n"),
        "10",
        "only applies to difficulty_bits = \"adaptive\"",
    );
    refused_at(
        &table("kind = \"pow\"\nchallenge_ttl_s = 601\n"),
        "601",
        "`challenge_ttl_s` must be between 10 and 600",
    );
    refused_at(
        &table("kind = \"pow\"\nwidget = \"turnstile\"\n"),
        "\"turnstile\"",
        "`widget` only applies to kind = \"siteverify\"",
    );
    refused_at(
        &table("difficulty_bits = 18\n"),
        "18",
        "`difficulty_bits` only applies to kind = \"pow\"",
    );
    let sv = |body: &str| {
        table(&format!(
            "kind = \"siteverify\"\nsecret_env = \"VERIFIER_SECRET\"\nsite_key = \"abc\"\n{body}"
        ))
    };
    refused_at(
        &sv("widget = \"friendlycaptcha\"\n"),
        "\"friendlycaptcha\"",
        "\"turnstile\", \"hcaptcha\" or \"recaptcha\"",
    );
    refused(&sv(""), "needs `widget`");
    refused_at(
        &sv("widget = \"turnstile\"\non_verifier_error = \"ignore\"\n"),
        "\"ignore\"",
        "\"refuse\" or \"admit\"",
    );
    refused_at(
        &sv("widget = \"turnstile\"\nverify_url = \"ftp://x/\"\n"),
        "\"ftp",
        "http:// or https:// URL",
    );
    refused_at(
        &sv("widget = \"turnstile\"\nscript_url = \"https://x/a.js\\\"><script>\"\n"),
        "\"https://x/a.js",
        "http:// or https:// URL",
    );
    refused_at(
        &sv("widget = \"turnstile\"\nhostnames = [\"shop.example\", \"bad host\"]\n"),
        "\"bad host\"",
        "host names",
    );
    refused_at(
        &sv("widget = \"turnstile\"\ntimeout_ms = 0\n"),
        "0\n",
        "`timeout_ms` must be between 1 and 30000",
    );
    refused_at(
        &sv("widget = \"turnstile\"\ndifficulty_bits = 18\n"),
        "18",
        "only applies to kind = \"pow\"",
    );
    refused_at(
        &table("kind = \"siteverify\"\nwidget = \"turnstile\"\nsecret_env = \"NOT_SET\"\nsite_key = \"abc\"\n"),
        "\"NOT_SET\"",
        "NOT_SET (the siteverify secret) is not set",
    );
    refused_at(
        &sv("widget = \"turnstile\"\n").replace("\"abc\"", "\"a<b\""),
        "\"a<b\"",
        "`site_key` must be",
    );
    refused(
        &table("kind = \"siteverify\"\nwidget = \"turnstile\"\nsite_key = \"abc\"\n"),
        "needs `secret_env`",
    );
}

#[test]
fn enqueue_keys_that_make_no_sense_are_refused() {
    let key = |fields: &str| {
        room(&format!(
            "[rooms.enqueue]\n[[rooms.enqueue.keys]]\nkid = \"store1\"\n{fields}"
        ))
    };
    refused_at(
        &room("[rooms.enqueue]\nrequired = true\n"),
        "true",
        "`required = true` needs at least one valid [[rooms.enqueue.keys]]",
    );
    refused_at(
        &format!("{GATEWAY}[[keys]]\nkid = \"k1\"\nalg = \"HS256\"\nsecret = \"{SECRET}\"\n{ROOM}[rooms.enqueue]\n[[rooms.enqueue.keys]]\nkid = \"k1\"\nalg = \"HS256\"\nsecret = \"{SECRET}\"\n"),
        "\"k1\"",
        "repeats a [[keys]] kid",
    );
    refused_at(
        &format!(
            "{}[[rooms.enqueue.keys]]\nkid = \"store1\"\nalg = \"HS256\"\nsecret = \"{SECRET}\"\n",
            key(&format!("alg = \"HS256\"\nsecret = \"{SECRET}\"\n"))
        ),
        "\"store1\"",
        "enqueue key \"store1\" is defined twice",
    );
    refused(
        &format!(
            "{}[[rooms.enqueue.keys]]\nkid = \"store1\"\nalg = \"HS256\"\nsecret = \"{SECRET}\"\n",
            key(&format!("alg = \"HS256\"\nsecret = \"{SECRET}\"\n"))
        ),
        "enqueue key \"store1\" is defined twice",
    );
    refused_at(
        &key(&format!("alg = \"RS256\"\nsecret = \"{SECRET}\"\n")),
        "\"RS256\"",
        "\"HS256\" or \"EdDSA\"",
    );
    refused_at(
        &key("alg = \"HS256\"\n"),
        "\"store1\"",
        "needs one of `secret`, `secret_env` or `secret_file`",
    );
    refused_at(
        &key(&format!(
            "alg = \"HS256\"\nsecret = \"{SECRET}\"\nsecret_env = \"STORE_SECRET\"\n"
        )),
        "\"STORE_SECRET\"",
        "not several",
    );
    refused_at(
        &key("alg = \"HS256\"\nsecret_env = \"UNSET\"\n"),
        "\"UNSET\"",
        "UNSET (a key's secret) is not set",
    );
    refused_at(
        &key("alg = \"HS256\"\nsecret = \"AAAA\"\n"),
        "\"AAAA\"",
        "at least 32 bytes, got 3",
    );
    refused_at(
        &key("alg = \"HS256\"\nsecret_file = \"/nonexistent/store.key\"\n"),
        "\"/nonexistent",
        "`secret_file` \"/nonexistent/store.key\"",
    );
    refused_at(
        &key("alg = \"HS256\"\npublic_key = \"BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc\"\n"),
        "\"BwcH",
        "only applies to alg = \"EdDSA\"",
    );
    refused_at(
        &key(&format!("alg = \"EdDSA\"\nsecret = \"{SECRET}\"\n")),
        "\"AAAA",
        "never a secret",
    );
    refused_at(
        &key("alg = \"EdDSA\"\n"),
        "\"store1\"",
        "needs `public_key`",
    );
    refused_at(
        &key("alg = \"EdDSA\"\npublic_key = \"AAAA\"\n"),
        "\"AAAA\"",
        "Ed25519 public key",
    );
    // A ticket-signing key cannot take a public key.
    refused_at(
        &format!("{GATEWAY}[[keys]]\nkid = \"k1\"\nalg = \"EdDSA\"\npublic_key = \"BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc\"\n"),
        "\"BwcH",
        "only applies to an EdDSA key in [[rooms.enqueue.keys]]",
    );
}

#[test]
fn key_secrets_come_inline_from_the_environment_or_from_a_file() {
    let dir = std::env::temp_dir().join(format!("sluice-people-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ticket.key");
    std::fs::write(&file, format!("{SECRET}\n")).unwrap();
    let src = format!(
        "{GATEWAY}[[keys]]\nkid = \"from-file\"\nalg = \"HS256\"\nsecret_file = {:?}\n[[keys]]\nkid = \"from-env\"\nalg = \"HS256\"\nsecret_env = \"STORE_SECRET\"\n",
        file.display().to_string()
    );
    let c = parse(&src).unwrap();
    assert_eq!(c.keys.len(), 2);
    assert_eq!(
        c.keys[0].secret.expose(),
        SECRET,
        "the file's newline is trimmed"
    );
    assert_eq!(c.keys[1].secret.expose(), SECRET);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn lanes_that_make_no_sense_are_refused() {
    let lanes = |body: &str| room(&format!("{STORE_KEY}{body}"));
    let ok = parse(&lanes("[[rooms.lanes]]\nname = \"members\"\nshare = 0.7\n[[rooms.lanes]]\nname = \"partners\"\nshare = 0.2\n[[rooms.lanes]]\nname = \"app-beta\"\nshare = 0.1\n")).unwrap();
    assert!(
        ok.room("drop").unwrap().default_lane_share() < 1e-9,
        "0.7 + 0.2 + 0.1 is 1, give or take a rounding"
    );
    refused_at(
        &lanes("[[rooms.lanes]]\nname = \"members\"\nshare = 0.7\n[[rooms.lanes]]\nname = \"partners\"\nshare = 0.4\n"),
        "0.4",
        "add up to 1.100 with this one, more than 1",
    );
    refused_at(
        &lanes("[[rooms.lanes]]\nname = \"Members\"\nshare = 0.1\n"),
        "\"Members\"",
        "1 to 32 of a-z",
    );
    refused_at(
        &lanes(&format!(
            "[[rooms.lanes]]\nname = \"{}\"\nshare = 0.1\n",
            "a".repeat(33)
        )),
        "\"aaa",
        "1 to 32 of a-z",
    );
    refused_at(
        &lanes("[[rooms.lanes]]\nname = \"default\"\nshare = 0.1\n"),
        "\"default\"",
        "pick another name",
    );
    refused_at(
        &lanes("[[rooms.lanes]]\nname = \"vip\"\nshare = 0.1\n[[rooms.lanes]]\nname = \"vip\"\nshare = 0.1\n"),
        "\"vip\"",
        "lane \"vip\" is defined twice",
    );
    refused(&lanes("[[rooms.lanes]]\nname = \"vip\"\nshare = 0.1\n[[rooms.lanes]]\nname = \"vip\"\nshare = 0.1\n"), "lane \"vip\" is defined twice");
    refused_at(
        &lanes("[[rooms.lanes]]\nname = \"vip\"\nshare = 0\n"),
        "0\n",
        "above 0 and at most 1",
    );
    refused_at(
        &lanes("[[rooms.lanes]]\nname = \"vip\"\n"),
        "\"vip\"",
        "needs `share`",
    );
    refused_at(
        &lanes("[[rooms.lanes]]\nname = \"staff\"\nbypass = true\nshare = 0.5\n"),
        "0.5",
        "a bypass lane takes no `share`",
    );
    refused_at(
        &room("[[rooms.lanes]]\nname = \"vip\"\nshare = 0.5\n"),
        "\"vip\"",
        "needs [[rooms.enqueue.keys]]",
    );
}

#[test]
fn the_deny_list_is_read_at_load_and_a_bad_line_names_its_file_and_line() {
    let dir = std::env::temp_dir().join(format!("sluice-people-deny-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("deny.txt");
    std::fs::write(&good, "# farm\n203.0.113.0/24\n2001:db8::/32 # v6 farm\n").unwrap();
    let src = format!(
        "[gateway]\ndeny_cidrs_file = {:?}\n",
        good.display().to_string()
    );
    let c = parse(&src).unwrap();
    let deny = c.gateway.deny_cidrs.as_ref().unwrap();
    assert_eq!(deny.path, good);
    assert!(deny.list.contains("203.0.113.77".parse().unwrap()));
    assert!(!deny.list.contains("198.51.100.1".parse().unwrap()));

    let bad = dir.join("bad.txt");
    std::fs::write(&bad, "203.0.113.0/24\n\n# ok so far\n203.0.113.0/33\n").unwrap();
    let src = format!(
        "[gateway]\ndeny_cidrs_file = {:?}\n",
        bad.display().to_string()
    );
    let problems = parse(&src).unwrap_err().0;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].file, bad);
    assert_eq!(problems[0].line, 4);
    assert!(problems[0]
        .to_string()
        .starts_with(&format!("{}:4:1: not a CIDR", bad.display())));

    let src = "[gateway]\ndeny_cidrs_file = \"/nonexistent/deny.txt\"\n";
    refused_at(
        src,
        "\"/nonexistent",
        "`deny_cidrs_file` \"/nonexistent/deny.txt\"",
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_account_hash_key_comes_from_the_environment() {
    let c = parse("[gateway]\n[cluster]\naccount_hash_key_env = \"HASH_KEY\"\n").unwrap();
    assert_eq!(c.cluster.account_hash_key.unwrap().expose(), "k".repeat(40));
    refused_at(
        "[gateway]\n[cluster]\naccount_hash_key_env = \"SHORT_HASH_KEY\"\n",
        "\"SHORT",
        "at least 32 characters",
    );
    refused_at(
        "[gateway]\n[cluster]\naccount_hash_key_env = \"NOPE\"\n",
        "\"NOPE\"",
        "NOPE (the account hash key) is not set",
    );
}
