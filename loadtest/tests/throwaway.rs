//! The throwaway stores and the relay, against the real servers: each on a
//! port of its own (never the machine's 6379 or 5432), restarts that keep
//! or lose data as asked, and nothing left behind.

use sluice_loadtest::relay::{Link, Relay};
use sluice_loadtest::throwaway::{Durability, Persistence, ThrowawayPostgres, ThrowawayRedis};

#[test]
fn redis_restarts_empty_or_with_its_data_as_asked() {
    let mut empty = ThrowawayRedis::start(Persistence::None).unwrap();
    assert_ne!(empty.port(), 6379);
    assert!(empty.command("SET k v").unwrap().starts_with("+OK"));
    assert!(empty.command("GET k").unwrap().contains('v'));
    empty.restart(false).unwrap();
    assert!(
        empty.command("GET k").unwrap().starts_with("$-1"),
        "no persistence: empty after a restart"
    );

    let mut kept = ThrowawayRedis::start(Persistence::Aof).unwrap();
    assert_ne!(kept.port(), empty.port());
    assert!(kept.command("SET k kept").unwrap().starts_with("+OK"));
    kept.kill();
    assert!(kept.command("PING").is_err(), "killed");
    kept.restart(false).unwrap();
    assert!(
        kept.command("GET k").unwrap().contains("kept"),
        "AOF: every acknowledged write survives SIGKILL"
    );
    kept.restart(true).unwrap();
    assert!(kept.command("GET k").unwrap().starts_with("$-1"), "wiped");

    let dir = kept.dir();
    drop(kept);
    assert!(!dir.exists(), "its directory is removed");
}

#[test]
fn postgres_is_its_own_cluster_and_keeps_commits_across_a_crash() {
    let pg = ThrowawayPostgres::start(Durability::Fast).unwrap();
    let db = pg.create_database().unwrap();
    assert!(db.contains(&format!(":{}/t", pg.port())), "{db}");
    assert_ne!(pg.port(), 5432);
    pg.psql("CREATE TABLE t (v int); INSERT INTO t VALUES (7)")
        .unwrap();
    pg.restart().unwrap();
    assert_eq!(pg.psql("SELECT v FROM t").unwrap(), "7");
    pg.stop();
    assert!(pg.psql("SELECT 1").is_err(), "stopped");
    pg.restart().unwrap();
    assert_eq!(pg.psql("SELECT count(*) FROM t").unwrap(), "1");
}

#[test]
fn a_relay_cuts_a_client_off_its_store_and_heals() {
    let redis = ThrowawayRedis::start(Persistence::None).unwrap();
    let relay = Relay::start(format!("127.0.0.1:{}", redis.port()).parse().unwrap()).unwrap();
    let through = |line: &str| -> std::io::Result<String> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(relay.addr())?;
        s.set_read_timeout(Some(std::time::Duration::from_millis(300)))?;
        s.write_all(format!("{line}\r\n").as_bytes())?;
        let mut buf = [0u8; 256];
        let n = s.read(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    };
    assert_eq!(through("PING").unwrap(), "+PONG\r\n");
    relay.set(Link::Refused);
    assert!(through("PING").map_or(true, |r| r.is_empty()), "refused");
    relay.set(Link::Blackholed);
    assert!(through("PING").is_err(), "blackholed: no answer");
    relay.set(Link::Up);
    assert_eq!(through("PING").unwrap(), "+PONG\r\n");
    assert_eq!(relay.link(), Link::Up);
}
