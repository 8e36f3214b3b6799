//! Memory and speed of a million waiting tickets.
//!
//! `cargo bench -p sluice-admission --bench memory` prints heap bytes per
//! ticket (counting allocator), resident memory growth (`/proc/self/statm`)
//! and the cost of a join and a poll. Exits non-zero above the contract's
//! 64 MiB per million. Then, in alternating rounds, a million joins into a
//! room that lives in memory against one whose events go to a file (one
//! `write` per join, as the gateway's journal does), and the time to
//! rebuild the room from that file.

use std::alloc::{GlobalAlloc, Layout, System};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;
use sluice_admission::journal::{EventSink, RoomEvent, SinkError, RECORD_BYTES};
use sluice_admission::{InMemoryStock, Policy, Status, WaitingRoom};

/// Appends every event to a file with one `write` per operation, as the
/// gateway's journal does (without its fsync timer).
struct FileSink(std::fs::File);

impl EventSink for FileSink {
    fn append(&mut self, events: &[RoomEvent]) -> Result<(), SinkError> {
        use std::io::Write;
        let mut buf = Vec::with_capacity(events.len() * RECORD_BYTES);
        for e in events {
            buf.extend_from_slice(&e.encode());
        }
        self.0.write_all(&buf).map_err(|e| SinkError(e.to_string()))
    }
}

/// Nanoseconds per join of `TICKETS` joins, into memory only or through a
/// file (whose path is returned).
fn join_round(policy: &Policy, durable: bool, round: u32) -> (u128, Option<std::path::PathBuf>) {
    let stock = Arc::new(InMemoryStock::new());
    let path = std::env::temp_dir().join(format!(
        "sluice-bench-journal-{}-{round}",
        std::process::id()
    ));
    let mut room = if durable {
        let file = std::fs::File::create(&path).expect("temp file");
        WaitingRoom::restore(
            "drop",
            policy.clone(),
            stock,
            [7; 32],
            StdRng::seed_from_u64(1),
            T0_MS,
            Vec::new(),
            Box::new(FileSink(file)),
        )
        .expect("room")
    } else {
        WaitingRoom::new(
            "drop",
            policy.clone(),
            stock,
            StdRng::seed_from_u64(1),
            T0_MS,
        )
        .expect("policy")
    };
    let started = Instant::now();
    for i in 0..u64::from(TICKETS) {
        room.join(T0_MS + i / 10_000).expect("room for everyone");
    }
    let ns = started.elapsed().as_nanos() / u128::from(TICKETS);
    (ns, durable.then_some(path))
}

struct Counting;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: defers to the system allocator and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same layout, same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size, Ordering::Relaxed);
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const TICKETS: u32 = 1_000_000;
const LIMIT_BYTES: usize = 64 * 1024 * 1024;
const T0_MS: u64 = 1_767_225_600_000;

/// A sink for a restored room that is dropped at once.
fn tempfile_sink() -> std::fs::File {
    let path = std::env::temp_dir().join(format!("sluice-bench-sink-{}", std::process::id()));
    let file = std::fs::File::create(&path).expect("temp file");
    let _ = std::fs::remove_file(&path);
    file
}

fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    let n = |v| NonZeroU32::new(v).expect("non-zero");
    let policy = Policy {
        release_per_second: n(50),
        burst: n(50),
        max_active: n(500),
        queue_capacity: n(TICKETS),
        pass_ttl: Duration::from_secs(600),
        ticket_ttl: Duration::from_secs(3600),
        idle_timeout: Duration::from_secs(180),
        poll_min: Duration::from_secs(2),
        poll_max: Duration::from_secs(60),
        opens_at_ms: None,
        pass_idle: std::time::Duration::ZERO,
        max_orders_per_pass: n(1),
    };
    let stock = Arc::new(InMemoryStock::new());
    let mut room = WaitingRoom::new(
        "drop",
        policy.clone(),
        stock,
        StdRng::seed_from_u64(1),
        T0_MS,
    )
    .expect("policy");
    let mut tickets = Vec::with_capacity(TICKETS as usize / 1000 + 1);
    let (heap0, rss0) = (LIVE_BYTES.load(Ordering::Relaxed), resident_bytes());
    let started = Instant::now();
    for i in 0..u64::from(TICKETS) {
        let j = room.join(T0_MS + i / 10_000).expect("room for everyone");
        // Keep a sample to poll with (outside the measurement: 1 in 1000).
        if i % 1000 == 0 {
            tickets.push((j.seq, j.ticket_id));
        }
    }
    let join_ns = started.elapsed().as_nanos() / u128::from(TICKETS);
    let heap = LIVE_BYTES.load(Ordering::Relaxed) - heap0;
    let rss = resident_bytes().saturating_sub(rss0);
    let now = T0_MS + 150_000;
    let started = Instant::now();
    let mut polled = 0u32;
    for (seq, id) in &tickets {
        if let Ok(Status::Waiting(_)) = room.status(*seq, id, now) {
            polled += 1;
        }
    }
    let poll_ns = started.elapsed().as_nanos() / u128::from(polled.max(1));
    let started = Instant::now();
    room.release_once(now, 10_000);
    let release_us = started.elapsed().as_micros();
    println!("waiting tickets:       {TICKETS}");
    println!(
        "heap growth:           {heap} bytes ({:.1} bytes/ticket)",
        heap as f64 / f64::from(TICKETS)
    );
    println!(
        "resident growth:       {rss} bytes ({:.1} bytes/ticket)",
        rss as f64 / f64::from(TICKETS)
    );
    println!("join:                  {join_ns} ns");
    println!("poll (1M in line):     {poll_ns} ns ({polled} polls)");
    println!("release_once (sweep):  {release_us} us");
    drop(room);

    // Fair start: the draw of a million-strong pre-queue at the opening
    // runs inside one call; how long does that call take?
    let opens_at_ms = T0_MS + 3_600_000;
    let fair = Policy {
        opens_at_ms: Some(opens_at_ms),
        ..policy
    };
    let stock = Arc::new(InMemoryStock::new());
    let mut room =
        WaitingRoom::new("drop", fair, stock, StdRng::seed_from_u64(2), T0_MS).expect("policy");
    for i in 0..u64::from(TICKETS) {
        room.join(T0_MS + i / 1000).expect("room for everyone");
    }
    let started = Instant::now();
    room.release_once(opens_at_ms, 10_000);
    println!(
        "opening draw (1M):     {} ms",
        started.elapsed().as_millis()
    );

    let mut memory_ns = Vec::new();
    let mut durable_ns = Vec::new();
    let mut restore_ms = Vec::new();
    let mut journal_bytes = 0;
    for round in 0..3 {
        memory_ns.push(join_round(&policy, false, round).0);
        let (ns, path) = join_round(&policy, true, round);
        durable_ns.push(ns);
        let path = path.expect("a file");
        let started = Instant::now();
        let bytes = std::fs::read(&path).expect("journal");
        journal_bytes = bytes.len();
        let events = bytes
            .chunks_exact(RECORD_BYTES)
            .map(|c| RoomEvent::decode(c.try_into().expect("whole")).expect("intact"));
        let room = WaitingRoom::restore(
            "drop",
            policy.clone(),
            Arc::new(InMemoryStock::new()),
            [7; 32],
            StdRng::seed_from_u64(1),
            T0_MS + 200_000,
            events,
            Box::new(FileSink(tempfile_sink())),
        )
        .expect("restored");
        restore_ms.push(started.elapsed().as_millis());
        assert_eq!(room.stats(T0_MS + 200_000).waiting, u64::from(TICKETS));
        let _ = std::fs::remove_file(&path);
    }
    let median = |v: &mut Vec<u128>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    println!(
        "join, memory only:     {} ns (median of 3 rounds)",
        median(&mut memory_ns)
    );
    println!(
        "join, journaled:       {} ns (median of 3 rounds, alternating)",
        median(&mut durable_ns)
    );
    println!(
        "journal for 1M joins:  {journal_bytes} bytes ({} B/ticket)",
        journal_bytes / TICKETS as usize
    );
    println!(
        "restore 1M from it:    {} ms (median; read, decode, replay)",
        median(&mut restore_ms)
    );

    if heap > LIMIT_BYTES {
        eprintln!("over the 64 MiB budget");
        std::process::exit(1);
    }
}
