//! Heap cost of waiting people, measured with a counting allocator: the
//! contract is at most 64 MiB for 1,000,000 waiting tickets (67 bytes each).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{nz, policy, room, T0_MS};

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

/// Contract: 64 MiB per million waiting tickets.
const BYTES_PER_TICKET_MAX: usize = 64 * 1024 * 1024 / 1_000_000;

#[test]
fn waiting_tickets_cost_a_few_bytes_each() {
    // Tests run unoptimised: 200,000 joins show the per-ticket cost; the
    // benchmark (`cargo bench --bench memory`) runs the full million.
    let tickets: u32 = 200_000;
    let mut p = policy();
    p.queue_capacity = nz(tickets);
    let mut r = room(p);
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    for i in 0..u64::from(tickets) {
        r.join(T0_MS + i / 1000).expect("room for everyone");
    }
    let after = LIVE_BYTES.load(Ordering::Relaxed);
    assert_eq!(r.stats(T0_MS + 200_000).waiting, u64::from(tickets));
    let per_ticket = (after - before) / tickets as usize;
    eprintln!(
        "{tickets} waiting tickets: {} bytes of heap, {per_ticket} bytes per ticket",
        after - before
    );
    assert!(
        per_ticket <= BYTES_PER_TICKET_MAX,
        "{per_ticket} bytes per ticket"
    );
    // The record itself is 12 bytes; growth slack of the ring at most doubles it.
    assert!(per_ticket <= 2 * 12 + 2, "{per_ticket} bytes per ticket");
}
