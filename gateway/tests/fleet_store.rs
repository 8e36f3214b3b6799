//! The Redis room store on its own, against a throwaway Redis: the release
//! is paced by Redis's clock however often it is called, slots bound the
//! passes, a released place nobody collects takes no slot and is a no-show
//! after its claim window (and the release makes up for no-shows), the
//! state reaches joins, the Functions come back when Redis loses them, and
//! after Redis lost a room the gateways' re-seeding only raises what it holds.

mod common;

use std::time::{Duration, Instant};

use common::redis::Redis;
use sluice_admission::fleet::ClaimReply;
use sluice_admission::join_limiter::ClientKey;
use sluice_gateway::fleet_store::{ClaimArgs, JoinBatch, RedisStore, Reseed, RoomStore, TickArgs};

fn args(rate: u32, burst: u32, max_active: u32, claim_window_ms: u64) -> TickArgs {
    TickArgs {
        release_per_second: rate,
        burst,
        max_active,
        queue_capacity: 1_000_000,
        claim_window_ms,
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

/// A gateway's re-seed, its numbers read at store time 0.
fn seed<'a>(
    id: &'a str,
    pending_seen: u64,
    lost_from: u64,
    passes: &'a [(u64, u64)],
) -> Reseed<'a> {
    Reseed {
        id,
        pending_seen,
        lost_from,
        read_at_ms: 0,
        passes,
        spent: &[],
    }
}

/// Claims place `seq` of room "r" until the answer is no longer `Full`
/// (the warm-up after a loss), for at most 5 s.
async fn claim_past_the_warm_up(store: &RedisStore, seq: u64, c: &ClaimArgs) -> ClaimReply {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match store.claim("r", seq, c).await.unwrap() {
            ClaimReply::Full if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            reply => return reply,
        }
    }
}

fn claim_args(a: &TickArgs) -> ClaimArgs {
    ClaimArgs {
        pass_ttl_ms: a.pass_ttl_ms,
        max_active: a.max_active,
        claim_window_ms: a.claim_window_ms,
    }
}

/// A batch of `n` joins of unknown clients (no per-client limit).
fn joins(n: usize, capacity: u32) -> (Vec<Option<ClientKey>>, u32) {
    (vec![None; n], capacity)
}

fn batch((clients, capacity): &(Vec<Option<ClientKey>>, u32)) -> JoinBatch<'_> {
    JoinBatch {
        clients,
        capacity: *capacity,
        hw_next: 0,
        period_us: 600,
        burst: 100_000,
    }
}

/// Joins `n` once the new room's warm-up is over.
async fn join_after_warm_up(store: &RedisStore, room: &str, n: u32) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let reply = store
            .join(room, &batch(&joins(n as usize, 1_000_000)))
            .await
            .unwrap();
        if !reply.warming {
            assert_eq!(reply.granted, n);
            return reply.first;
        }
        assert!(Instant::now() < deadline, "the warm-up ends");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_release_is_paced_by_redis_time_however_often_it_is_called() {
    let redis = Redis::start();
    let store = RedisStore::new(&redis.url()).unwrap();
    join_after_warm_up(&store, "r", 100).await;
    let started = Instant::now();
    let mut serving = 0;
    let mut calls = 0;
    while started.elapsed() < Duration::from_millis(1500) {
        let tick = store.tick("r", &args(10, 3, 1000, 60_000)).await.unwrap();
        serving = tick.numbers.serving;
        calls += 1;
        let bound = 3 + (10.0 * started.elapsed().as_secs_f64()).ceil() as u64;
        assert!(serving <= bound, "{serving} after {:?}", started.elapsed());
    }
    assert!(calls > 50, "called often: {calls}");
    assert!(serving >= 3 + 10, "the rate is given: {serving}");
}

#[tokio::test]
async fn slots_bound_the_passes_and_an_uncollected_place_frees_its_slot() {
    let redis = Redis::start();
    let store = RedisStore::new(&redis.url()).unwrap();
    join_after_warm_up(&store, "r", 3).await;
    let a = args(100, 100, 1, 300);
    let c = claim_args(&a);
    let tick = store.tick("r", &a).await.unwrap();
    // Place 0 is released; it takes no slot until collected, but counts
    // as the one expected to come (no no-show measured yet).
    assert_eq!(
        (
            tick.numbers.serving,
            tick.numbers.held,
            tick.numbers.pending
        ),
        (1, 0, 1)
    );
    assert_eq!(store.tick("r", &a).await.unwrap().numbers.serving, 1);
    // Place 0 is never collected: after the claim window it is a no-show
    // and place 1 goes.
    let deadline = Instant::now() + Duration::from_secs(3);
    let tick = loop {
        let tick = store.tick("r", &a).await.unwrap();
        if tick.numbers.serving >= 2 {
            break tick;
        }
        assert!(Instant::now() < deadline, "the slot came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!((tick.numbers.shows, tick.numbers.no_shows), (0, 1));
    assert_eq!(store.claim("r", 0, &c).await.unwrap(), ClaimReply::Gone);
    let ClaimReply::Admitted { expires_at_ms } = store.claim("r", 1, &c).await.unwrap() else {
        panic!("place 1 collects its pass")
    };
    assert_eq!(
        store.claim("r", 1, &c).await.unwrap(),
        ClaimReply::Admitted { expires_at_ms },
        "the same pass every time"
    );
    assert!(matches!(
        store.claim("r", 2, &c).await.unwrap(),
        ClaimReply::Waiting { serving: 2 }
    ));
    // A collected pass holds its slot for its lifetime, not the window.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let tick = store.tick("r", &a).await.unwrap();
    assert_eq!((tick.numbers.serving, tick.numbers.held), (2, 1));
    assert_eq!(tick.numbers.shows, 1);
    assert!(store.give_back("r", 1, a.pass_ttl_ms).await.unwrap());
    assert!(!store.give_back("r", 1, a.pass_ttl_ms).await.unwrap());
    let tick = store.tick("r", &a).await.unwrap();
    assert_eq!(
        (
            tick.numbers.serving,
            tick.numbers.held,
            tick.numbers.pending
        ),
        (3, 0, 1)
    );
    assert!(
        tick.numbers.hold_ms < 5_000,
        "the slot was held about 0.4 s, not a pass's 60 s: {} ms",
        tick.numbers.hold_ms
    );
}

#[tokio::test]
async fn a_measured_no_show_share_releases_more_but_a_claim_never_passes_max_active() {
    let redis = Redis::start();
    let store = RedisStore::new(&redis.url()).unwrap();
    join_after_warm_up(&store, "r", 10).await;
    // Half of the released places are taken as no-shows: with 2 slots, 4
    // places may wait for their holders at once.
    let a = TickArgs {
        share_milli: 500,
        ..args(1000, 100, 2, 60_000)
    };
    let c = claim_args(&a);
    let tick = store.tick("r", &a).await.unwrap();
    assert_eq!((tick.numbers.serving, tick.numbers.pending), (4, 4));
    assert_eq!(store.tick("r", &a).await.unwrap().numbers.serving, 4);
    // All four come back: two get the slots, two stay at the front.
    assert!(matches!(
        store.claim("r", 0, &c).await.unwrap(),
        ClaimReply::Admitted { .. }
    ));
    assert!(matches!(
        store.claim("r", 1, &c).await.unwrap(),
        ClaimReply::Admitted { .. }
    ));
    assert_eq!(store.claim("r", 2, &c).await.unwrap(), ClaimReply::Full);
    assert_eq!(store.claim("r", 3, &c).await.unwrap(), ClaimReply::Full);
    let tick = store.tick("r", &a).await.unwrap();
    assert_eq!((tick.numbers.held, tick.numbers.pending), (2, 2));
    assert_eq!(
        tick.numbers.serving, 4,
        "no slot free: nothing more released"
    );
    // A slot given back goes to a holder waiting at the front.
    assert!(store.give_back("r", 0, a.pass_ttl_ms).await.unwrap());
    assert!(matches!(
        store.claim("r", 2, &c).await.unwrap(),
        ClaimReply::Admitted { .. }
    ));
    assert_eq!(store.claim("r", 3, &c).await.unwrap(), ClaimReply::Full);
    // Without the make-up, the same room would have let only two wait.
    join_after_warm_up(&store, "plain", 10).await;
    let plain = store
        .tick("plain", &args(1000, 100, 2, 60_000))
        .await
        .unwrap();
    assert_eq!(plain.numbers.serving, 2);
}

#[tokio::test]
async fn the_state_stops_joins_and_release_and_the_functions_come_back() {
    let redis = Redis::start();
    let store = RedisStore::new(&redis.url()).unwrap();
    join_after_warm_up(&store, "r", 2).await;
    let v = store.set_state("r", true, false, false).await.unwrap();
    assert_eq!(store.set_state("r", true, false, false).await.unwrap(), v);
    let reply = store.join("r", &batch(&joins(1, 100))).await.unwrap();
    assert!(reply.paused && reply.granted == 0);
    let tick = store.tick("r", &args(100, 100, 10, 60_000)).await.unwrap();
    assert!(tick.numbers.paused);
    assert_eq!((tick.numbers.serving, tick.released), (0, 0));
    assert!(store.set_state("r", false, false, false).await.unwrap() > v);

    // Redis loses the library (as after a restart without data): the next
    // call loads it again and succeeds.
    assert!(redis
        .command(&["FUNCTION", "FLUSH"])
        .is_some_and(|r| r.starts_with("+OK")));
    let tick = store.tick("r", &args(100, 100, 10, 60_000)).await.unwrap();
    assert_eq!(tick.numbers.serving, 2);
    let fleet = store.heartbeat("gw-1", "sa-east-1").await.unwrap().members;
    assert_eq!(fleet.len(), 1);
    assert_eq!(
        (fleet[0].id.as_str(), fleet[0].region.as_str()),
        ("gw-1", "sa-east-1")
    );
}

#[tokio::test]
async fn a_starting_gateway_adopts_the_fleets_state_and_lost_writes_warm_up_again() {
    let redis = Redis::start();
    let store = RedisStore::new(&redis.url()).unwrap();
    // A new room takes the starting gateway's state...
    store.set_state("r", true, false, true).await.unwrap();
    let tick = store.tick("r", &args(100, 100, 10, 60_000)).await.unwrap();
    assert!(
        tick.numbers.paused,
        "a new room takes the first config's pause"
    );
    // ...and once the room has a state, a gateway starting with another
    // config changes nothing (a restart must not un-pause the fleet).
    let v = store.set_state("r", false, false, true).await.unwrap();
    let tick = store.tick("r", &args(100, 100, 10, 60_000)).await.unwrap();
    assert!(tick.numbers.paused, "a restarting gateway adopts the pause");
    assert_eq!(tick.numbers.version, v);
    // A change of a gateway's own config is written.
    store.set_state("r", false, false, false).await.unwrap();
    join_after_warm_up(&store, "r", 3).await;
    let tick = store.tick("r", &args(100, 100, 10, 60_000)).await.unwrap();
    assert!(!tick.numbers.paused);
    assert_eq!(tick.numbers.serving, 3);

    // A gateway that saw more than Redis holds (Redis lost writes): no
    // place is given or released until the warm-up is over.
    let lost = TickArgs {
        hw_next: 50,
        hw_serving: 40,
        ..args(100, 100, 10, 60_000)
    };
    let tick = store.tick("r", &lost).await.unwrap();
    assert_eq!((tick.numbers.next, tick.numbers.serving), (50, 40));
    assert_eq!(tick.released, 0, "no release while warming up again");
    let reply = store.join("r", &batch(&joins(1, 1_000_000))).await.unwrap();
    assert!(
        reply.warming && reply.granted == 0,
        "no join while warming up again"
    );
    let first = join_after_warm_up(&store, "r", 1).await;
    assert_eq!(
        first, 50,
        "the next place is past every place a gateway saw"
    );
}

#[tokio::test]
async fn after_a_loss_reseeded_slots_only_end_later_and_released_places_keep_their_claim() {
    let redis = Redis::start();
    let store = RedisStore::new(&redis.url()).unwrap();
    join_after_warm_up(&store, "r", 4).await;
    let a = args(1000, 100, 2, 60_000);
    let c = claim_args(&a);
    assert_eq!(store.tick("r", &a).await.unwrap().numbers.serving, 2);
    let ClaimReply::Admitted { expires_at_ms } = store.claim("r", 0, &c).await.unwrap() else {
        panic!("place 0 collects its pass");
    };
    // Redis loses the room (the Functions stay); a gateway's tick pushes
    // what it saw: two places released, one of them not collected yet.
    assert!(redis
        .command(&["FLUSHALL"])
        .is_some_and(|r| r.starts_with("+OK")));
    let lost = TickArgs {
        hw_next: 4,
        hw_serving: 2,
        ..a
    };
    let tick = store.tick("r", &lost).await.unwrap();
    assert_eq!((tick.numbers.serving, tick.released), (2, 0));
    // The gateway that collected pass 0 brings its slot back; an older end
    // pushed later by another does not shorten it.
    assert_eq!(
        store
            .reseed("r", &seed("a", 1, 1, &[(0, expires_at_ms)]))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store
            // A higher lost_from (a gateway started since) does not
            // narrow the places taken back: place 1 is collected below.
            .reseed("r", &seed("b", 0, 2, &[(0, expires_at_ms - 1_000)]))
            .await
            .unwrap(),
        0
    );
    // While warming up, no new slot is handed out.
    assert_eq!(store.claim("r", 1, &c).await.unwrap(), ClaimReply::Full);
    let tick = store.tick("r", &lost).await.unwrap();
    assert_eq!(
        (tick.numbers.held, tick.numbers.pending),
        (1, 1),
        "the pass holds its slot; the uncollected place counts as pending"
    );
    // After the warm-up, the place released before the loss is collected
    // (Redis had no record of it), and the two slots are full: nothing
    // more is released.
    let reply = claim_past_the_warm_up(&store, 1, &c).await;
    assert!(matches!(reply, ClaimReply::Admitted { .. }), "{reply:?}");
    let tick = store.tick("r", &lost).await.unwrap();
    assert_eq!(
        (
            tick.numbers.held,
            tick.numbers.pending,
            tick.numbers.serving
        ),
        (2, 0, 2)
    );
    assert_eq!(
        store.claim("r", 0, &c).await.unwrap(),
        ClaimReply::Admitted { expires_at_ms },
        "the pass from before keeps its end"
    );
}

/// A number from a raw Redis answer (`$n\r\nvalue\r\n`, `:n\r\n`).
fn number_in(raw: &str) -> f64 {
    raw.lines()
        .rev()
        .find_map(|l| l.trim_start_matches(':').trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no number in {raw:?}"))
}

#[tokio::test]
async fn a_failover_that_kept_released_places_counts_each_once_and_the_warm_up_keeps_their_holders()
{
    let redis = Redis::start();
    let store = RedisStore::new(&redis.url()).unwrap();
    join_after_warm_up(&store, "r", 4).await;
    let a = args(1000, 100, 3, 60_000);
    let c = claim_args(&a);
    let tick = store.tick("r", &a).await.unwrap();
    assert_eq!((tick.numbers.serving, tick.numbers.pending), (3, 3));
    // A failover to a replica that was behind: it has places 0 and 1
    // released and uncollected, not place 2 (nor serving 3).
    for cmd in [
        &["ZREM", "sluice2:{r}:released", "u2"][..],
        &["HSET", "sluice2:{r}", "serving", "2"],
    ] {
        assert!(redis.command(cmd).is_some());
    }
    let before = number_in(
        &redis
            .command(&["ZSCORE", "sluice2:{r}:released", "u0"])
            .unwrap(),
    );
    // A gateway's marks show the room is behind; it saw three uncollected.
    let lost = TickArgs {
        hw_next: 4,
        hw_serving: 3,
        ..a
    };
    store.tick("r", &lost).await.unwrap();
    store.reseed("r", &seed("a", 3, 0, &[])).await.unwrap();
    let tick = store.tick("r", &lost).await.unwrap();
    assert_eq!(
        tick.numbers.pending, 3,
        "two kept in Redis and one it lost, not the kept ones twice"
    );
    // Place 0's holder polls during the warm-up: no slot yet, but its claim
    // window starts again (it is not dropped as a no-show meanwhile).
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(store.claim("r", 0, &c).await.unwrap(), ClaimReply::Full);
    let after = number_in(
        &redis
            .command(&["ZSCORE", "sluice2:{r}:released", "u0"])
            .unwrap(),
    );
    assert!(
        after > before,
        "the claim window of a holder who came is renewed: {before} -> {after}"
    );
}

#[tokio::test]
async fn after_a_loss_slots_wait_for_every_live_gateways_reseed_but_not_for_ever() {
    let redis = Redis::start();
    let store = RedisStore::new(&redis.url()).unwrap();
    for room in ["r", "q"] {
        join_after_warm_up(&store, room, 4).await;
    }
    // Two gateways alive; one slot, held by a pass gateway b collected.
    let a = TickArgs {
        members_live: 2,
        ..args(1000, 100, 1, 60_000)
    };
    let c = claim_args(&a);
    for room in ["r", "q"] {
        store.tick(room, &a).await.unwrap();
        assert!(matches!(
            store.claim(room, 0, &c).await.unwrap(),
            ClaimReply::Admitted { .. }
        ));
    }
    assert!(redis
        .command(&["FLUSHALL"])
        .is_some_and(|r| r.starts_with("+OK")));
    let lost = TickArgs {
        hw_next: 4,
        hw_serving: 1,
        ..a
    };
    let lost_at = Instant::now();
    for room in ["r", "q"] {
        store.tick(room, &lost).await.unwrap();
        // Gateway a re-seeds (it holds no pass); b, which holds the pass of
        // place 0, is slow.
        store.reseed(room, &seed("a", 0, 0, &[])).await.unwrap();
    }
    // Past the 2 s warm-up nothing is released into the slot: b has not
    // counted its pass yet (a time-only warm-up released place 1 at 2 s).
    while lost_at.elapsed() < Duration::from_millis(3_000) {
        let t = store.tick("r", &lost).await.unwrap();
        assert_eq!(t.released, 0, "released at {:?}", lost_at.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // b re-seeds its pass: it holds the one slot, so nothing more is
    // released, now because the slot is taken.
    store
        .reseed("r", &seed("b", 0, 0, &[(0, u64::MAX / 2)]))
        .await
        .unwrap();
    let t = store.tick("r", &lost).await.unwrap();
    assert_eq!((t.released, t.numbers.held), (0, 1));
    // In room q b never comes back (it died with Redis): the release goes
    // on within the bound (10 s after the loss).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let t = store.tick("q", &lost).await.unwrap();
        if t.released > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the hold ends");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        lost_at.elapsed() >= Duration::from_secs(9),
        "{:?}",
        lost_at.elapsed()
    );
}

#[tokio::test]
async fn a_pause_survives_redis_restarted_empty() {
    let redis = Redis::start();
    let store = RedisStore::new(&redis.url()).unwrap();
    join_after_warm_up(&store, "r", 2).await;
    let a = args(1000, 100, 10, 60_000);
    store.set_state("r", true, false, false).await.unwrap();
    assert!(store.tick("r", &a).await.unwrap().numbers.paused);
    assert!(redis
        .command(&["FLUSHALL"])
        .is_some_and(|r| r.starts_with("+OK")));
    // The first tick after the loss makes the room anew (open, version 0);
    // the gateway that sees the version go back writes its config's pause
    // "only if new": the room has no state anybody set, so it takes it.
    let lost = TickArgs { hw_next: 2, ..a };
    assert!(!store.tick("r", &lost).await.unwrap().numbers.paused);
    store.set_state("r", true, false, true).await.unwrap();
    assert!(
        store.tick("r", &lost).await.unwrap().numbers.paused,
        "the kill switch holds across the loss"
    );
    // Once set, a starting gateway's "only if new" changes nothing.
    store.set_state("r", false, false, true).await.unwrap();
    assert!(store.tick("r", &lost).await.unwrap().numbers.paused);
}

#[tokio::test]
async fn after_a_loss_a_pass_given_back_is_not_collected_again_and_only_fresh_reads_count() {
    let redis = Redis::start();
    let store = RedisStore::new(&redis.url()).unwrap();
    join_after_warm_up(&store, "r", 4).await;
    let a = args(1000, 100, 2, 60_000);
    let c = claim_args(&a);
    assert_eq!(store.tick("r", &a).await.unwrap().numbers.serving, 2);
    assert!(matches!(
        store.claim("r", 0, &c).await.unwrap(),
        ClaimReply::Admitted { .. }
    ));
    // Pass 0's checkouts are done: its slot is given back.
    assert!(store.give_back("r", 0, a.pass_ttl_ms).await.unwrap());
    assert!(redis
        .command(&["FLUSHALL"])
        .is_some_and(|r| r.starts_with("+OK")));
    let lost = TickArgs {
        hw_next: 4,
        hw_serving: 2,
        members_live: 1,
        ..a
    };
    store.tick("r", &lost).await.unwrap();
    // The gateway read its numbers at store time 50,000: place 1 was
    // uncollected; it knows place 0 is spent.
    let fresh = Reseed {
        read_at_ms: 50_000,
        spent: &[0],
        ..seed("a", 1, 0, &[])
    };
    store.reseed("r", &fresh).await.unwrap();
    // A gateway cut off long before the loss speaks for nobody.
    let stale = Reseed {
        read_at_ms: 1_000,
        ..seed("b", 40, 0, &[])
    };
    store.reseed("r", &stale).await.unwrap();
    assert_eq!(
        store.tick("r", &lost).await.unwrap().numbers.pending,
        1,
        "the stale read's 40 uncollected are not counted"
    );
    // After the warm-up: the given-back place stays spent, place 1 (lost
    // uncollected) still collects its pass.
    let one = claim_past_the_warm_up(&store, 1, &c).await;
    assert!(matches!(one, ClaimReply::Admitted { .. }), "{one:?}");
    assert_eq!(
        store.claim("r", 0, &c).await.unwrap(),
        ClaimReply::Gone,
        "a pass given back before the loss is not handed out again"
    );
    // A fresher read replaces the older ones.
    let fresher = Reseed {
        read_at_ms: 60_000,
        ..seed("c", 0, 2, &[])
    };
    store.reseed("r", &fresher).await.unwrap();
    let lost_pending = redis
        .command(&["HGET", "sluice2:{r}", "lost_pending"])
        .unwrap();
    assert_eq!(number_in(&lost_pending), 0.0, "{lost_pending:?}");
}

#[tokio::test]
async fn a_clients_joins_are_limited_once_for_the_fleet_and_a_refused_join_takes_no_place() {
    use std::net::{IpAddr, Ipv4Addr};
    let redis = Redis::start();
    // Two gateways' stores on one Redis.
    let (a, b) = (
        RedisStore::new(&redis.url()).unwrap(),
        RedisStore::new(&redis.url()).unwrap(),
    );
    let first = join_after_warm_up(&a, "r", 1).await + 1;
    let client = |last: u8| {
        Some(ClientKey::from_ip(IpAddr::V4(Ipv4Addr::new(
            10, 0, 0, last,
        ))))
    };
    // 3 joins a minute per client, all 3 usable at once.
    let limited = |clients: Vec<Option<ClientKey>>| (clients, 1_000_000u32);
    fn on(clients: &(Vec<Option<ClientKey>>, u32)) -> JoinBatch<'_> {
        JoinBatch {
            period_us: 20_000_000,
            burst: 3,
            ..batch(clients)
        }
    }
    // Client 1 joins twice on A, in one batch with client 2 and an unknown
    // client: all within their limits.
    let batch_a = limited(vec![client(1), client(2), client(1), None]);
    let reply = a.join("r", &on(&batch_a)).await.unwrap();
    assert_eq!((reply.first, reply.granted), (first, 4));
    assert_eq!(reply.retry_after_ms, [0, 0, 0, 0]);
    // Client 1 then joins twice on B: its third join of the minute passes,
    // its fourth is refused as if it had come to A, and the refused join
    // takes no place: the unknown client after it gets the next seq.
    let batch_b = limited(vec![client(1), client(1), None]);
    let reply = b.join("r", &on(&batch_b)).await.unwrap();
    assert_eq!((reply.first, reply.granted), (first + 4, 2));
    assert_eq!(reply.retry_after_ms[0], 0);
    let wait_ms = reply.retry_after_ms[1];
    assert!(
        (19_000..=20_000).contains(&wait_ms),
        "the fourth join waits one period: {wait_ms} ms"
    );
    assert_eq!(reply.retry_after_ms[2], 0);
    // Client 2 has 2 joins left, wherever it comes.
    let batch = limited(vec![client(2), client(2), client(2)]);
    let reply = b.join("r", &on(&batch)).await.unwrap();
    assert_eq!(reply.granted, 2);
    assert_eq!(reply.retry_after_ms[..2], [0, 0]);
    assert!(reply.retry_after_ms[2] > 0);
    // Redis keeps a client only while its allowance is not whole: the key
    // expires within burst x period (60 s).
    let key = sluice_gateway::fleet_store::client_key("r", client(1).unwrap());
    let ttl: u64 = redis
        .command(&["PTTL", &key])
        .and_then(|r| r.trim_start_matches(':').trim().parse().ok())
        .expect("the client's allowance is kept");
    assert!((40_000..=60_000).contains(&ttl), "PTTL {ttl}");
}

#[tokio::test]
async fn gateways_with_different_limits_run_the_room_at_the_smallest_live_ones() {
    // Gateway A still has the old config (1 slot, 2 per second, burst 1, a
    // line of 5), gateway B the reloaded one (3 slots, 1,000 per second,
    // burst 1,000, a line of 1,000,000): while A is alive the room runs at
    // A's limits whoever ticks, joins or claims.
    let redis = Redis::start();
    let a_store = RedisStore::new(&redis.url()).unwrap();
    let b_store = RedisStore::new(&redis.url()).unwrap();
    let old = TickArgs {
        queue_capacity: 5,
        ..args(2, 1, 1, 60_000)
    };
    let new = args(1000, 1000, 3, 60_000);
    join_after_warm_up(&a_store, "r", 3).await;
    let limits = a_store.tick("r", &old).await.unwrap().limits;
    assert_eq!(
        (
            limits.rate,
            limits.burst,
            limits.max_active,
            limits.queue_capacity
        ),
        (2, 1, 1, 5)
    );
    // B ticks with its own config: A's are smaller and alive.
    let tick = b_store.tick("r", &new).await.unwrap();
    assert_eq!(
        (tick.limits.rate, tick.limits.burst, tick.limits.max_active),
        (2, 1, 1),
        "the smallest live limits"
    );
    assert_eq!(tick.rate_in_force, 2);
    assert!(
        tick.numbers.serving <= 1,
        "burst 1: {}",
        tick.numbers.serving
    );
    // B's join: the line holds 5 (A's capacity), not B's million.
    let reply = b_store
        .join("r", &batch(&joins(10, 1_000_000)))
        .await
        .unwrap();
    let waiting = reply.first - reply.serving;
    assert_eq!(
        u64::from(reply.granted),
        5 - waiting,
        "{waiting} waiting in a line of 5"
    );
    // B's claims: one slot (A's max_active), not three.
    let c = claim_args(&new);
    assert!(matches!(
        claim_past_the_warm_up(&b_store, 0, &c).await,
        ClaimReply::Admitted { .. }
    ));
    // For a second (two places' worth at 2/s) the one slot holds place 1
    // back, whoever ticks: with B's 3 slots it would go at once.
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_secs(1) {
        // A stays alive: it ticks too.
        a_store.tick("r", &old).await.unwrap();
        let tick = b_store.tick("r", &new).await.unwrap();
        assert_eq!(
            (tick.numbers.serving, tick.numbers.held),
            (1, 1),
            "one slot, held"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A is gone (its config no longer heard): within the 3 s of liveness
    // the room runs at B's limits, and place 1 takes a second slot.
    let deadline = Instant::now() + Duration::from_secs(6);
    let tick = loop {
        let tick = b_store.tick("r", &new).await.unwrap();
        if tick.limits.max_active == 3 {
            break tick;
        }
        assert!(Instant::now() < deadline, "A's limits stop counting");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        (
            tick.limits.rate,
            tick.limits.burst,
            tick.limits.queue_capacity
        ),
        (1000, 1000, 1_000_000)
    );
    assert!(tick.numbers.serving > 1, "the next places go");
    assert!(matches!(
        b_store.claim("r", 1, &c).await.unwrap(),
        ClaimReply::Admitted { .. }
    ));
}

#[tokio::test]
async fn the_smallest_live_burst_and_rate_pace_the_release_whoever_ticks() {
    // A: 2 per second, burst 1; B: 1,000 per second, burst 1,000; slots
    // for all. B's tick lets one in (A's burst), not 50.
    let redis = Redis::start();
    let a_store = RedisStore::new(&redis.url()).unwrap();
    let b_store = RedisStore::new(&redis.url()).unwrap();
    let old = args(2, 1, 1000, 60_000);
    let new = args(1000, 1000, 1000, 60_000);
    join_after_warm_up(&a_store, "r", 50).await;
    a_store.tick("r", &old).await.unwrap();
    let tick = b_store.tick("r", &new).await.unwrap();
    assert_eq!((tick.limits.rate, tick.limits.burst), (2, 1));
    assert_eq!(tick.tighter_by.len(), 1, "{:?}", tick.tighter_by);
    assert!(
        tick.tighter_by[0].starts_with("store/"),
        "{:?}",
        tick.tighter_by
    );
    assert!(
        tick.numbers.serving <= 1,
        "A's burst of 1, not B's: {}",
        tick.numbers.serving
    );
    // An adaptive gateway publishes its max_per_second as its rate: a
    // fixed 1,000 elsewhere runs at most at that.
    let adaptive = TickArgs {
        adaptive: Some((1, 5)),
        ..args(3, 1000, 1000, 60_000)
    };
    let c_store = RedisStore::new(&redis.url()).unwrap();
    c_store.tick("r", &adaptive).await.unwrap();
    let tick = b_store.tick("r", &new).await.unwrap();
    assert_eq!(tick.limits.rate, 2, "A's 2 is still the smallest");
    assert_eq!(tick.tighter_by.len(), 2, "{:?}", tick.tighter_by);
    // A gone, C (adaptive, at most 5 per second) still alive.
    let deadline = Instant::now() + Duration::from_secs(6);
    loop {
        c_store.tick("r", &adaptive).await.unwrap();
        let tick = b_store.tick("r", &new).await.unwrap();
        if tick.limits.rate == 5 {
            assert!(tick.rate_in_force <= 5, "{}", tick.rate_in_force);
            break;
        }
        assert!(Instant::now() < deadline, "A stops counting");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
