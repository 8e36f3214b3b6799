//! Bad config files are refused with every problem located at FILE:LINE:COL.

use std::path::Path;
use std::time::Duration;

use sluice_policies::model::Admissions;
use sluice_policies::validate::parse_with_env;
use sluice_policies::Diagnostics;

const ROOM: &str = r#"
[[rooms]]
name = "drop"
protect = ["/checkout", "/orders/*"]
release_per_second = 50
max_active = 500
queue_capacity = 100000
"#;

fn no_env(_: &str) -> Option<String> {
    None
}

fn parse(src: &str) -> Result<sluice_policies::Config, Diagnostics> {
    parse_with_env(src, Path::new("p.toml"), &no_env)
}

/// Asserts exactly one problem, at `line:col`, whose message contains `needle`.
fn refused_at(src: &str, line: usize, col: usize, needle: &str) {
    let problems = parse(src).expect_err("config should be refused").0;
    assert_eq!(problems.len(), 1, "one problem expected: {problems:?}");
    let p = &problems[0];
    assert!(
        p.message.contains(needle),
        "message {:?} should contain {needle:?}",
        p.message
    );
    assert_eq!(
        (p.line, p.col),
        (line, col),
        "wrong place for {:?}",
        p.message
    );
    let rendered = p.to_string();
    assert!(
        rendered.starts_with(&format!("p.toml:{line}:{col}: ")),
        "{rendered}"
    );
}

#[test]
fn minimal_file_gets_documented_defaults() {
    let c = parse("[gateway]\n").unwrap();
    let g = &c.gateway;
    assert_eq!(g.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(g.admin_listen.to_string(), "127.0.0.1:9090");
    assert_eq!(g.admissions, Admissions::Open);
    assert_eq!(g.max_body_bytes.get(), 1024 * 1024);
    assert_eq!(g.origin_connect_timeout, Duration::from_secs(2));
    assert_eq!(g.origin_read_timeout, Duration::from_secs(10));
    assert!(g.origin.is_none());
    assert!(g.origin_cache.paths.is_empty());
    assert!(c.rooms.is_empty() && c.products.is_empty());
}

#[test]
fn full_room_and_product_convert_with_units() {
    let src = format!("[gateway]\nadmissions = \"paused\"\norigin = \"http://127.0.0.1:3000\"\n{ROOM}pass_ttl_s = 30\n[[products]]\nsku = \"a-1\"\nstock = 5\nprice_cents = 100\nroom = \"drop\"\n");
    let c = parse(&src).unwrap();
    assert_eq!(c.gateway.admissions, Admissions::Paused);
    let origin = c.gateway.origin.as_ref().unwrap();
    assert_eq!(
        (origin.tls, origin.address().as_str()),
        (false, "127.0.0.1:3000")
    );
    let room = c.room("drop").unwrap();
    assert_eq!(room.pass_ttl, Duration::from_secs(30));
    assert_eq!(room.ticket_ttl, Duration::from_secs(3600));
    assert_eq!(room.release_per_second.get(), 50);
    assert_eq!(c.products[0].stock, 5);
}

#[test]
fn syntax_error_points_at_the_line() {
    refused_at(
        "[gateway]\nlisten = \"127.0.0.1:8080\n",
        2,
        25,
        "invalid basic string",
    );
}

#[test]
fn unknown_key_is_refused_where_it_stands() {
    refused_at(
        "[gateway]\nlisten = \"127.0.0.1:8080\"\nadmisions = \"open\"\n",
        3,
        1,
        "unknown field `admisions`",
    );
}

#[test]
fn bad_values_are_located() {
    refused_at(
        "[gateway]\nadmissions = \"closed\"\n",
        2,
        14,
        "\"open\" or \"paused\"",
    );
    refused_at("[gateway]\nlisten = \"localhost\"\n", 2, 10, "IP:PORT");
    refused_at("[gateway]\nmax_body_bytes = 0\n", 2, 18, "between 1 and");
    refused_at(
        "[gateway]\norigin = \"ftp://x\"\n",
        2,
        10,
        "http:// or https://",
    );
    refused_at(
        "[gateway]\norigin = \"http://x:1/path\"\n",
        2,
        10,
        "no path",
    );
    refused_at(
        "[gateway]\ntls_cert = \"/nonexistent/cert.pem\"\n",
        2,
        12,
        "needs `tls_key`",
    );
    refused_at(
        "[gateway]\n[[gateway.cache_control]]\npattern = \"catalog\"\nvalue = \"public\"\n",
        3,
        11,
        "starting with /",
    );
    refused_at("[gateway]\n[[gateway.cache_control]]\npattern = \"/a/**\"\nvalue = \"x\\r\\nSet-Cookie: a\"\n", 4, 9, "printable ASCII");
}

#[test]
fn admin_listener_off_loopback_needs_a_token() {
    refused_at(
        "[gateway]\nadmin_listen = \"0.0.0.0:9090\"\n",
        2,
        16,
        "not a loopback address",
    );
    let src = "[gateway]\nadmin_listen = \"0.0.0.0:9090\"\nadmin_token_env = \"TOK\"\n";
    refused_at(src, 3, 19, "TOK (the admin token) is not set");
    let short = |_: &str| Some("short".to_string());
    let err = parse_with_env(src, Path::new("p.toml"), &short).unwrap_err();
    assert!(err.0[0].message.contains("shorter than 16"), "{err}");
    let good = |_: &str| Some("a-long-enough-admin-token".to_string());
    let c = parse_with_env(src, Path::new("p.toml"), &good).unwrap();
    assert_eq!(
        c.gateway.admin_token.unwrap().expose(),
        "a-long-enough-admin-token"
    );
}

#[test]
fn rooms_and_products_are_cross_checked() {
    let dup_room = format!("[gateway]\n{ROOM}{ROOM}");
    let problems = parse(&dup_room).unwrap_err().0;
    let messages: Vec<_> = problems.iter().map(|p| p.message.as_str()).collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("room \"drop\" is defined twice")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("already protected by room \"drop\"")),
        "{messages:?}"
    );

    let orphan = format!(
        "[gateway]\n{ROOM}[[products]]\nsku = \"x\"\nstock = 1\nprice_cents = 1\nroom = \"nope\"\n"
    );
    refused_at(&orphan, 13, 8, "room \"nope\", which is not defined");

    let negative = format!("[gateway]\n{ROOM}[[products]]\nsku = \"x\"\nstock = -1\nprice_cents = 1\nroom = \"drop\"\n");
    refused_at(&negative, 11, 9, "`stock` must be between 0");

    let zero_rate = "[gateway]\n[[rooms]]\nname = \"r\"\nrelease_per_second = 0\nmax_active = 1\nqueue_capacity = 1\n";
    refused_at(zero_rate, 4, 22, "`release_per_second` must be between 1");

    let bad_name = "[gateway]\n[[rooms]]\nname = \"Drop Room\"\nrelease_per_second = 1\nmax_active = 1\nqueue_capacity = 1\n";
    refused_at(bad_name, 3, 8, "room name");
}

#[test]
fn every_problem_is_reported_in_file_order() {
    let src = "[gateway]\nlisten = \"nope\"\nadmissions = \"maybe\"\nthreads = 0\n";
    let problems = parse(src).unwrap_err().0;
    let lines: Vec<_> = problems.iter().map(|p| p.line).collect();
    assert_eq!(lines, vec![2, 3, 4]);
}

#[test]
fn missing_file_is_a_diagnostic_not_a_panic() {
    let err = sluice_policies::load_file(Path::new("/nonexistent/sluice.toml")).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("/nonexistent/sluice.toml:1:1: cannot read config file"),
        "{err}"
    );
}

#[test]
fn signing_keys_are_checked() {
    let good = "[gateway]\n[[keys]]\nkid = \"k1\"\nalg = \"HS256\"\nsecret = \"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"\n";
    let c = parse(good).unwrap();
    assert_eq!(c.keys[0].kid, "k1");
    refused_at(&good.replace("HS256", "none"), 4, 7, "`alg` must be");
    refused_at(
        &good.replace("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "AAAA"),
        5,
        10,
        "at least 32 bytes",
    );
    refused_at(
        &good.replace("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "not base64!"),
        5,
        10,
        "base64url",
    );
}

#[test]
fn auto_release_rate_follows_the_tightest_backend() {
    let src = "[gateway]\n[[backends]]\nname = \"payments\"\nmax_rps = 100\ncalls_per_checkout = 2\n[[backends]]\nname = \"inventory\"\nmax_rps = 1000\ncalls_per_checkout = 3\n[[rooms]]\nname = \"r\"\nrelease_per_second = \"auto\"\nheadroom = 0.5\nmax_active = 10\nqueue_capacity = 10\n";
    let c = parse(src).unwrap();
    let room = c.room("r").unwrap();
    // payments: 100 * 0.5 / 2 = 25; inventory: 1000 * 0.5 / 3 = 166.7.
    assert_eq!(room.release_per_second.get(), 25);
    match &room.release_source {
        sluice_policies::model::ReleaseSource::Auto {
            backend,
            exact_per_second,
        } => {
            assert_eq!(backend, "payments");
            assert!((exact_per_second - 25.0).abs() < 1e-9);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        room.burst.get(),
        25,
        "burst defaults to one second of release"
    );

    let none = "[gateway]\n[[rooms]]\nname = \"r\"\nrelease_per_second = \"auto\"\nmax_active = 10\nqueue_capacity = 10\n";
    refused_at(none, 4, 22, "needs at least one [[backends]]");
    let word = none.replace("\"auto\"", "\"fast\"");
    refused_at(&word, 4, 22, "a number, \"auto\" or \"adaptive\"");
    let headroom_fixed = "[gateway]\n[[rooms]]\nname = \"r\"\nrelease_per_second = 5\nheadroom = 0.5\nmax_active = 10\nqueue_capacity = 10\n";
    refused_at(headroom_fixed, 5, 12, "only applies");
}

#[test]
fn polling_and_idle_bounds_are_consistent() {
    let base = "[gateway]\n[[rooms]]\nname = \"r\"\nrelease_per_second = 5\nmax_active = 10\nqueue_capacity = 10\n";
    let c = parse(base).unwrap();
    let r = c.room("r").unwrap();
    assert_eq!(
        (r.poll_min, r.poll_max),
        (Duration::from_secs(2), Duration::from_secs(60))
    );
    assert!(r.idle_timeout >= r.poll_max * 2);
    refused_at(
        &format!("{base}poll_max_s = 60\nidle_timeout_s = 100\n"),
        8,
        18,
        "at least twice",
    );
    refused_at(
        &format!("{base}poll_min_s = 10\npoll_max_s = 5\n"),
        8,
        14,
        "at least `poll_min_s`",
    );
}

#[test]
fn the_heartbeat_is_less_than_half_the_idle_timeout() {
    let base = "[gateway]\n[[rooms]]\nname = \"r\"\nrelease_per_second = 5\nmax_active = 10\nqueue_capacity = 10\n";
    let c = parse(base).unwrap();
    assert_eq!(c.room("r").unwrap().heartbeat, Duration::from_secs(30));
    // A short idle timeout shortens the default heartbeat with it.
    let c = parse(&format!("{base}poll_max_s = 5\nidle_timeout_s = 20\n")).unwrap();
    assert_eq!(c.room("r").unwrap().heartbeat, Duration::from_secs(9));
    let c = parse(&format!("{base}heartbeat_s = 89\n")).unwrap();
    assert_eq!(c.room("r").unwrap().heartbeat, Duration::from_secs(89));
    refused_at(
        &format!("{base}heartbeat_s = 90\n"),
        7,
        15,
        "more than twice `heartbeat_s`",
    );
    refused_at(&format!("{base}heartbeat_s = 0\n"), 7, 15, "heartbeat_s");
}

#[test]
fn opens_at_is_a_date_time_with_offset() {
    let base = "[gateway]\n[[rooms]]\nname = \"r\"\nrelease_per_second = 5\nmax_active = 10\nqueue_capacity = 10\n";
    let c = parse(&format!("{base}opens_at = 2026-11-29T12:00:00Z\n")).unwrap();
    assert_eq!(c.room("r").unwrap().opens_at_unix, Some(1_795_953_600));
    let c = parse(&format!("{base}opens_at = 2026-11-29T09:00:00-03:00\n")).unwrap();
    assert_eq!(c.room("r").unwrap().opens_at_unix, Some(1_795_953_600));
    refused_at(
        &format!("{base}opens_at = 2026-11-29\n"),
        7,
        12,
        "full date-time with an offset",
    );
}

#[test]
fn the_store_delay_is_a_test_knob() {
    let src = "[gateway]\ntest_store_commit_delay_ms = 50\n";
    if cfg!(debug_assertions) {
        assert_eq!(
            parse(src).unwrap().gateway.test_store_commit_delay,
            Duration::from_millis(50)
        );
    } else {
        refused_at(src, 2, 30, "is a test knob");
    }
    let allowed = |name: &str| (name == "SLUICE_ALLOW_TEST_KNOBS").then(|| "1".to_string());
    let c = parse_with_env(src, Path::new("p.toml"), &allowed).unwrap();
    assert_eq!(c.gateway.test_store_commit_delay, Duration::from_millis(50));
    assert_eq!(
        parse("[gateway]\n")
            .unwrap()
            .gateway
            .test_store_commit_delay,
        Duration::ZERO
    );
}

#[test]
fn outbox_url_is_checked() {
    let c = parse("[gateway]\n[outbox]\nurl = \"https://shop.example/events\"\n").unwrap();
    assert_eq!(c.outbox.url.as_deref(), Some("https://shop.example/events"));
    assert_eq!(c.outbox.timeout, Duration::from_secs(5));
    assert_eq!(parse("[gateway]\n").unwrap().outbox.url, None);
    refused_at(
        "[gateway]\n[outbox]\nurl = \"ftp://x\"\n",
        3,
        7,
        "http:// or https://",
    );
}

#[test]
fn payments_are_checked() {
    use sluice_policies::model::PaymentProviderKind;
    let c = parse("[gateway]\n").unwrap();
    assert_eq!(c.payments.provider, PaymentProviderKind::Simulated);
    assert_eq!(c.payments.simulated_slow, Duration::from_secs(3));
    let src = "[gateway]\n[payments]\nprovider = \"http\"\nurl = \"http://127.0.0.1:7000/\"\nwebhook_secrets = [\"whsec_0123456789abcdef\", \"whsec_rotated_0123456789\"]\nsimulated_timeout_ratio = 0.1\n";
    let c = parse(src).unwrap();
    assert_eq!(c.payments.provider, PaymentProviderKind::Http);
    assert_eq!(c.payments.url.as_deref(), Some("http://127.0.0.1:7000"));
    assert_eq!(c.payments.webhook_secrets.len(), 2);
    refused_at(
        "[gateway]\n[payments]\nprovider = \"http\"\n",
        2,
        1,
        "needs `payments.url`",
    );
    refused_at(
        "[gateway]\n[payments]\nprovider = \"stripe\"\n",
        3,
        12,
        "\"simulated\" or \"http\"",
    );
    refused_at(
        "[gateway]\n[payments]\nwebhook_secrets = [\"short\"]\n",
        3,
        20,
        "at least 16",
    );
    refused_at(
        "[gateway]\n[payments]\nsimulated_error_ratio = 1.5\n",
        3,
        25,
        "between 0 and 1",
    );
}

#[test]
fn protect_case_insensitive_is_read_and_folds_the_overlap_check() {
    let room = |name: &str, glob: &str, fold: bool| {
        format!("[[rooms]]\nname = \"{name}\"\nprotect = [\"{glob}\"]\nprotect_case_insensitive = {fold}\nrelease_per_second = 1\nmax_active = 1\nqueue_capacity = 1\n")
    };
    let c = parse(&format!("[gateway]\n{}", room("a", "/cart/**", true))).unwrap();
    assert!(c.rooms[0].protect_case_insensitive);
    let c = parse(&format!("[gateway]\n{ROOM}")).unwrap();
    assert!(!c.rooms[0].protect_case_insensitive, "off by default");
    // Two case-sensitive rooms may protect paths that differ in case only.
    parse(&format!(
        "[gateway]\n{}{}",
        room("a", "/cart/**", false),
        room("b", "/Cart/**", false)
    ))
    .unwrap();
    // With folding on either side they are the same paths.
    let folded = format!(
        "[gateway]\n{}{}",
        room("a", "/cart/**", false),
        room("b", "/Cart/**", true)
    );
    let problems = parse(&folded).unwrap_err().0;
    assert!(
        problems
            .iter()
            .any(|p| p.message.contains("already protected by room \"a\"")),
        "{problems:?}"
    );
    let not_bool = format!("[gateway]\n{}", room("a", "/cart/**", true)).replace(
        "protect_case_insensitive = true",
        "protect_case_insensitive = \"yes\"",
    );
    assert!(parse(&not_bool).is_err());
}

#[test]
fn client_identity_and_connection_keys_are_checked() {
    let c = parse("[gateway]\n").unwrap();
    assert!(c.gateway.trusted_proxies.is_empty());
    assert!(!c.gateway.proxy_protocol);
    assert!(c.gateway.max_connections.is_none());
    assert!(c.gateway.max_connections_per_client.is_none());
    assert_eq!(c.gateway.header_timeout, Duration::from_secs(10));

    let c = parse(
        "[gateway]\ntrusted_proxies = [\"10.0.0.0/8\", \"2001:db8::/32\", \"192.0.2.7\"]\nproxy_protocol = true\nmax_connections = 20000\n",
    )
    .unwrap();
    let nets: Vec<String> = c
        .gateway
        .trusted_proxies
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(nets, ["10.0.0.0/8", "2001:db8::/32", "192.0.2.7/32"]);
    assert!(c.gateway.proxy_protocol);
    assert_eq!(c.gateway.max_connections.unwrap().get(), 20_000);
    let c = parse("[gateway]\nmax_connections_per_client = 64\nheader_timeout_s = 3\n").unwrap();
    assert_eq!(c.gateway.max_connections_per_client.unwrap().get(), 64);
    assert_eq!(c.gateway.header_timeout, Duration::from_secs(3));
    refused_at(
        "[gateway]\nheader_timeout_s = 0\n",
        2,
        20,
        "`header_timeout_s` must be between 1",
    );
    refused_at(
        "[gateway]\nmax_connections_per_client = 0\n",
        2,
        30,
        "`max_connections_per_client` must be between 1",
    );

    refused_at(
        "[gateway]\ntrusted_proxies = [\"10.0.0.0/8\", \"10.0.0.0/33\"]\n",
        2,
        34,
        "must be CIDRs like",
    );
    refused_at(
        "[gateway]\ntrusted_proxies = [\"nope\"]\n",
        2,
        20,
        "must be CIDRs like",
    );
    refused_at(
        "[gateway]\ntrusted_proxies = [\"10.1.2.3/8\"]\n",
        2,
        20,
        "did you mean \"10.0.0.0/8\"",
    );
    refused_at(
        "[gateway]\nmax_connections = 0\n",
        2,
        19,
        "`max_connections` must be between 1",
    );
    refused_at(
        "[gateway]\nproxy_protocol = \"yes\"\n",
        2,
        18,
        "invalid type",
    );
}

#[test]
fn cluster_names_its_stores_inline_or_by_environment() {
    let none = parse("[gateway]\n").unwrap();
    assert_eq!(none.cluster, Default::default());

    let env = |name: &str| match name {
        "SLUICE_REDIS_URL" => Some("redis://:pw@10.0.0.5:6379/0".to_string()),
        "SLUICE_PG_URL" => Some("postgres://sluice:pw@10.0.0.6/sluice".to_string()),
        _ => None,
    };
    let src = "[gateway]\n[cluster]\nredis_url_env = \"SLUICE_REDIS_URL\"\npostgres_url_env = \"SLUICE_PG_URL\"\n";
    let c = parse_with_env(src, Path::new("p.toml"), &env).unwrap();
    assert_eq!(
        c.cluster.redis_url.as_ref().map(|s| s.expose()),
        Some("redis://:pw@10.0.0.5:6379/0")
    );
    assert_eq!(
        c.cluster.postgres_url.as_ref().map(|s| s.expose()),
        Some("postgres://sluice:pw@10.0.0.6/sluice")
    );

    let inline = parse("[gateway]\n[cluster]\nredis_url = \"redis://127.0.0.1:7000\"\n").unwrap();
    assert!(inline.cluster.postgres_url.is_none());
    assert!(inline.cluster.redis_url.is_some());
}

#[test]
fn cluster_refuses_bad_store_urls_without_echoing_them() {
    refused_at(
        "[gateway]\n[cluster]\nredis_url = \"http://secret@host\"\n",
        3,
        13,
        "must be a URL starting with redis:// or rediss://",
    );
    let problems = parse("[gateway]\n[cluster]\nredis_url = \"http://secret@host\"\n")
        .unwrap_err()
        .0;
    assert!(!problems[0].message.contains("secret"), "{problems:?}");
    refused_at(
        "[gateway]\n[cluster]\npostgres_url = \"postgres://a\"\npostgres_url_env = \"PG\"\n",
        4,
        20,
        "not both",
    );
    refused_at(
        "[gateway]\n[cluster]\npostgres_url_env = \"NOT_SET_ANYWHERE\"\n",
        3,
        20,
        "NOT_SET_ANYWHERE (`cluster.postgres_url`) is not set",
    );
    refused_at("[gateway]\n[cluster]\n", 2, 1, "[cluster] needs");
    refused_at(
        "[gateway]\n[cluster]\nredis = \"redis://x\"\n",
        3,
        1,
        "unknown field `redis`",
    );
}

#[test]
fn cluster_postgres_prepared_statements_is_a_bool_defaulting_to_true() {
    let pg = "[gateway]\n[cluster]\npostgres_url = \"postgres://sluice@10.0.0.6/sluice\"\n";
    assert!(parse(pg).unwrap().cluster.postgres_prepared_statements);
    assert!(
        parse("[gateway]\n")
            .unwrap()
            .cluster
            .postgres_prepared_statements
    );
    let with = |v: &str| format!("{pg}postgres_prepared_statements = {v}\n");
    assert!(
        parse(&with("true"))
            .unwrap()
            .cluster
            .postgres_prepared_statements
    );
    assert!(
        !parse(&with("false"))
            .unwrap()
            .cluster
            .postgres_prepared_statements
    );
    refused_at(
        &with("\"false\""),
        4,
        32,
        "invalid type: string \"false\", expected a boolean",
    );
    refused_at(&with("0"), 4, 32, "expected a boolean");
    refused_at(
        "[gateway]\n[cluster]\nredis_url = \"redis://x:1\"\npostgres_prepared_statements = false\n",
        4,
        32,
        "`cluster.postgres_prepared_statements` needs `postgres_url`",
    );
}

#[test]
fn partitions_default_to_one_and_are_bounded() {
    let product = |extra: &str| {
        format!("[gateway]\n{ROOM}[[products]]\nsku = \"x\"\nstock = 10\nprice_cents = 1\nroom = \"drop\"\n{extra}")
    };
    let c = parse(&product("")).unwrap();
    assert_eq!(c.products[0].partitions.get(), 1);
    let c = parse(&product("partitions = 8\n")).unwrap();
    assert_eq!(c.products[0].partitions.get(), 8);
    // ROOM has 7 lines after its leading newline; the product's keys follow.
    refused_at(&product("partitions = 0\n"), 14, 14, "partitions");
    refused_at(&product("partitions = 1025\n"), 14, 14, "partitions");
}
