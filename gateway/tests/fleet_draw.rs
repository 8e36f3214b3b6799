//! The fair-start draw's Function (`sluice_7_draw` of `sluice.lua`) on a
//! throwaway Redis, called as the gateways call it: the first proposed
//! seed stands, the pre-queue is frozen at the opening by Redis's clock
//! and the tick releases nobody before it, and after Redis lost the room
//! a gateway that saw the draw gets the same one back, even when a
//! gateway that never saw it called first.

mod common;

use std::time::{Duration, Instant};

use common::redis::Redis;
use sha2::{Digest, Sha256};
use sluice_gateway::fleet_store::{JoinBatch, RedisStore, RoomStore, TickArgs};

fn tick_args() -> TickArgs {
    TickArgs {
        release_per_second: 1000,
        burst: 1000,
        max_active: 1000,
        queue_capacity: 1_000_000,
        claim_window_ms: 10_000,
        hw_next: 0,
        hw_serving: 0,
        hw_tat_us: 0,
        members_live: 0,
        sold_out_seen: false,
        share_milli: 0,
        pass_ttl_ms: 60_000,
        adaptive: None,
    }
}

/// `sluice_7_draw`'s answer: (first, seed, entrants ("" before)).
async fn draw(
    conn: &mut redis::aio::MultiplexedConnection,
    opens_ms: u64,
    known: Option<(u64, &str, Option<u64>)>,
    own_seed: &str,
    hw_next: u64,
) -> (String, String, String) {
    let (first, seed, n) = match known {
        Some((first, seed, n)) => (
            first.to_string(),
            seed,
            n.map(|n| n.to_string()).unwrap_or_default(),
        ),
        None => (String::new(), own_seed, String::new()),
    };
    let commitment = hex::encode(Sha256::digest(hex::decode(seed).unwrap()));
    let r: Vec<String> = redis::cmd("FCALL")
        .arg("sluice_7_draw")
        .arg(1)
        .arg("sluice2:{r}")
        .arg(opens_ms.to_string())
        .arg(first)
        .arg(seed)
        .arg(&commitment)
        .arg(n)
        .arg(hw_next.to_string())
        .query_async(conn)
        .await
        .unwrap();
    assert_eq!(
        r[3],
        commitment_of(&r[2]),
        "the commitment stored is the seed's"
    );
    (r[1].clone(), r[2].clone(), r[4].clone())
}

fn commitment_of(seed: &str) -> String {
    hex::encode(Sha256::digest(hex::decode(seed).unwrap()))
}

async fn redis_ms(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let t: Vec<u64> = redis::cmd("TIME").query_async(conn).await.unwrap();
    t[0] * 1000 + t[1] / 1000
}

/// Joins `n` once the room's warm-up is over; the first seq.
async fn join(store: &RedisStore, n: usize) -> u64 {
    let clients = vec![None; n];
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let reply = store
            .join(
                "r",
                &JoinBatch {
                    clients: &clients,
                    capacity: 1_000_000,
                    hw_next: 0,
                    period_us: 600,
                    burst: 100_000,
                },
            )
            .await
            .unwrap();
        if !reply.warming {
            assert_eq!(reply.granted as usize, n);
            return reply.first;
        }
        assert!(Instant::now() < deadline, "the warm-up ends");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn one_draw_for_the_fleet_frozen_at_the_opening_and_kept_through_a_loss() {
    let redis = Redis::start();
    let store = RedisStore::new(&redis.url()).unwrap();
    // The library is loaded by the store's first call.
    store.tick("other", &tick_args()).await.unwrap();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let (a, b, c) = ("aa".repeat(32), "bb".repeat(32), "cc".repeat(32));
    let opens_ms = redis_ms(&mut conn).await + 4_000;

    // Two gateways propose; the first seed stored stands.
    assert_eq!(
        draw(&mut conn, opens_ms, None, &a, 0).await,
        ("0".into(), a.clone(), "".into())
    );
    assert_eq!(
        draw(&mut conn, opens_ms, None, &b, 0).await,
        ("0".into(), a.clone(), "".into())
    );
    // Pre-queue joins; the tick releases nobody before the opening.
    assert_eq!(join(&store, 5).await, 0);
    let before = store.tick("r", &tick_args()).await.unwrap();
    assert!(
        before.store_now_ms < opens_ms,
        "the joins ran past the opening"
    );
    assert_eq!((before.numbers.next, before.numbers.serving), (5, 0));
    // At the opening (Redis's clock) the first call freezes the entrants;
    // later joins are not in the draw, and the line moves.
    while redis_ms(&mut conn).await < opens_ms {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = store.tick("r", &tick_args()).await.unwrap();
    assert_eq!(after.numbers.serving, 5, "released from the opening");
    assert_eq!(join(&store, 2).await, 5);
    let frozen = draw(&mut conn, opens_ms, Some((0, &a, None)), &b, 7).await;
    assert_eq!(frozen, ("0".into(), a.clone(), "5".into()));

    // Redis loses the room; a gateway that never saw the draw calls first
    // and stores its own, then one that saw it pushes it back: it stands.
    redis.command(&["FLUSHALL"]).unwrap();
    store.tick("other", &tick_args()).await.unwrap();
    let stranger = draw(&mut conn, opens_ms, None, &c, 0).await;
    assert_eq!(stranger.1, c, "{stranger:?}");
    let back = draw(&mut conn, opens_ms, Some((0, &a, Some(5))), &b, 7).await;
    assert_eq!(back, ("0".into(), a.clone(), "5".into()));
    // The stranger now pushes what it saw: the known draw stands.
    let again = draw(&mut conn, opens_ms, Some((0, &c, Some(0))), &c, 0).await;
    assert_eq!(again, ("0".into(), a.clone(), "5".into()));
    // A later join is not given a drawn seq again.
    let next: u64 = redis::cmd("HGET")
        .arg("sluice2:{r}")
        .arg("next")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(next >= 5, "{next}");
}

/// A room used for a later event (its `opens_at` set after the stored
/// draw's opening had come, the gateways restarted): the new pre-queue gets
/// a draw of its own, from the line's `next`, and nobody of it is released
/// before the new opening; a gateway still configured with the old opening
/// never brings the old draw back.
#[tokio::test]
async fn a_later_event_in_the_same_room_gets_a_draw_of_its_own() {
    let redis = Redis::start();
    let store = RedisStore::new(&redis.url()).unwrap();
    store.tick("other", &tick_args()).await.unwrap();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let (a, b, c) = ("aa".repeat(32), "bb".repeat(32), "cc".repeat(32));

    // The first event: three in its pre-queue, frozen at its opening.
    let first_opens = redis_ms(&mut conn).await + 4_000;
    draw(&mut conn, first_opens, None, &a, 0).await;
    assert_eq!(join(&store, 3).await, 0);
    while redis_ms(&mut conn).await < first_opens {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        store.tick("r", &tick_args()).await.unwrap().numbers.serving,
        3
    );
    let frozen = draw(&mut conn, first_opens, Some((0, &a, None)), &a, 3).await;
    assert_eq!(frozen, ("0".into(), a.clone(), "3".into()));

    // The restock: a restarted gateway configured with a later opening.
    let second_opens = redis_ms(&mut conn).await + 2_000;
    let fresh = draw(&mut conn, second_opens, None, &b, 3).await;
    assert_eq!(
        fresh,
        ("3".into(), b.clone(), "".into()),
        "a new draw from next"
    );
    assert_eq!(join(&store, 4).await, 3);
    let before = store.tick("r", &tick_args()).await.unwrap();
    assert!(
        before.store_now_ms < second_opens,
        "the joins ran past the opening"
    );
    assert_eq!(
        before.numbers.serving, 3,
        "nobody of the new pre-queue before its opening"
    );
    // A gateway still on the first event's config pushes the draw it saw.
    let stale = draw(&mut conn, first_opens, Some((0, &a, Some(3))), &c, 7).await;
    assert_eq!(
        stale,
        ("3".into(), b.clone(), "".into()),
        "the old draw stays gone"
    );
    // At the new opening its four entrants are frozen and released.
    while redis_ms(&mut conn).await < second_opens {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        store.tick("r", &tick_args()).await.unwrap().numbers.serving,
        7
    );
    let second = draw(&mut conn, second_opens, Some((3, &b, None)), &b, 7).await;
    assert_eq!(second, ("3".into(), b.clone(), "4".into()));
}
