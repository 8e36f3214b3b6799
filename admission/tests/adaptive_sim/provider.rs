//! The payment provider of `backend-degrades` as the real binaries meet
//! it: `paysim` with `workers = 1` behind the gateway's checkout driver.
//!
//! What the real parts do, and what this copies (exact to the
//! millisecond, not to the simulation's 10 ms tick):
//! - paysim (`loadtest/src/paysim/api.rs`, `workers.rs`): every `/v1`
//!   request waits, first come first served, for one of `workers`; a
//!   worker processes it at once and then holds it for `latency_ms` (a
//!   fixed time, not a random one) before answering. A request whose
//!   connection is dropped while it waits leaves the line unprocessed;
//!   one dropped while its worker holds it was processed, and frees the
//!   worker.
//! - the checkout driver (`checkout/src/driver.rs`, `retry.rs`): a
//!   checkout authorizes, then captures (a declined card stops after the
//!   authorization): two calls. Each call gives up after the provider
//!   timeout (`provider_timeout_ms`, 1 s in the scenario), waits a full
//!   jitter pause (0–50 ms, then 0–100 ms), looks the operation up (a
//!   call too, through the same workers) and sends it again if the
//!   provider never got it; after 3 tries it is unresolved: the order
//!   stays `authorizing`, a backend failure for the controller.
//!
//! Left out: the gateway's own time (the store's commit, HTTP: a few ms
//! on a quiet machine), webhooks (they do not go through the workers).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rand::rngs::StdRng;
use rand::Rng;

/// How the provider and the driver are set.
#[derive(Debug, Clone, Copy)]
pub struct ProviderCfg {
    pub workers: usize,
    /// paysim's `latency_ms` in each of the three phases.
    pub latency_ms: [u64; 3],
    pub timeout_ms: u64,
    /// The driver's tries per operation (`RetryPolicy::tries_max`).
    pub tries_max: u32,
    /// Its backoff before the second try, doubling (`backoff_base_ms`).
    pub backoff_base_ms: u64,
    /// Share of cards declined at authorization (the scenario's
    /// `pm_decline`).
    pub declined: f64,
}

/// `backend-degrades`: one worker, 25 then 80 then 25 ms, 1 s timeout,
/// the driver's defaults, 5 % declined.
pub const BACKEND_DEGRADES: ProviderCfg = ProviderCfg {
    workers: 1,
    latency_ms: [25, 80, 25],
    timeout_ms: 1000,
    tries_max: 3,
    backoff_base_ms: 50,
    declined: 0.05,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    LookUp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallState {
    Waiting,
    /// Held by this worker until then.
    Serving(usize, u64),
    /// Answered, or given up.
    Over,
}

#[derive(Debug, Clone, Copy)]
struct Call {
    checkout: usize,
    kind: Kind,
    sent_ms: u64,
    state: CallState,
}

#[derive(Debug, Clone, Copy)]
struct Checkout {
    arrived_ms: u64,
    who: usize,
    declined: bool,
    /// 0: authorizing, 1: capturing.
    op: u8,
    tries: u32,
    /// The provider took a send of the current operation.
    processed: bool,
}

/// What happens at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A call's worker answers it.
    Answer(usize),
    /// The caller gives up on a call (its provider timeout).
    Deadline(usize),
    /// The pause after a failed try of this checkout ended: look up.
    Retry(usize),
}

/// A checkout that ended: (at, latency, failed for the backend's sake,
/// who).
pub type Ended = (u64, u64, bool, usize);

pub struct Provider {
    cfg: ProviderCfg,
    phase_ms: u64,
    checkouts: Vec<Checkout>,
    calls: Vec<Call>,
    /// Calls waiting for a worker (some given up already: skipped).
    waiting: VecDeque<usize>,
    /// When each worker is free again.
    free_at: Vec<u64>,
    events: BinaryHeap<Reverse<(u64, Event)>>,
}

impl Provider {
    pub fn new(cfg: ProviderCfg, phase_ms: u64) -> Self {
        Self {
            cfg,
            phase_ms,
            checkouts: Vec::new(),
            calls: Vec::new(),
            waiting: VecDeque::new(),
            free_at: vec![0; cfg.workers.max(1)],
            events: BinaryHeap::new(),
        }
    }

    /// A checkout reaches the gateway's driver at `at_ms`: it sends its
    /// authorization.
    pub fn arrive(&mut self, at_ms: u64, who: usize, rng: &mut StdRng) {
        let declined = rng.random_bool(self.cfg.declined);
        self.checkouts.push(Checkout {
            arrived_ms: at_ms,
            who,
            declined,
            op: 0,
            tries: 1,
            processed: false,
        });
        self.call(at_ms, self.checkouts.len() - 1, Kind::Send);
    }

    /// Everything up to `now_ms`, in the order it happens; the checkouts
    /// that ended.
    pub fn advance(&mut self, now_ms: u64, rng: &mut StdRng) -> Vec<Ended> {
        let mut ended = Vec::new();
        loop {
            let event = self
                .events
                .peek()
                .map(|&Reverse((at, _))| at)
                .filter(|&at| at <= now_ms);
            let start = self.next_start().filter(|&(at, _)| at <= now_ms);
            match (start, event) {
                (Some((at, w)), e) if e.is_none_or(|e| at <= e) => self.start(at, w),
                (_, Some(_)) => {
                    let Reverse((at, event)) = self.events.pop().unwrap();
                    self.handle(at, event, rng, &mut ended);
                }
                _ => break,
            }
        }
        ended
    }

    /// When the first waiting call gets a worker, and which.
    fn next_start(&mut self) -> Option<(u64, usize)> {
        while let Some(&c) = self.waiting.front() {
            if self.calls[c].state == CallState::Waiting {
                break;
            }
            self.waiting.pop_front();
        }
        let call = self.calls[*self.waiting.front()?];
        let (w, free) = self
            .free_at
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(_, t)| t)
            .unwrap();
        Some((free.max(call.sent_ms), w))
    }

    /// The first waiting call meets worker `w` at `start`: processed at
    /// once, answered `latency_ms` later.
    fn start(&mut self, start: u64, w: usize) {
        let c = self.waiting.pop_front().unwrap();
        let call = &mut self.calls[c];
        if call.kind == Kind::Send {
            self.checkouts[call.checkout].processed = true;
        }
        let done = start + self.cfg.latency_ms[((start / self.phase_ms) as usize).min(2)];
        call.state = CallState::Serving(w, done);
        self.free_at[w] = done;
        if done < call.sent_ms + self.cfg.timeout_ms {
            self.events.push(Reverse((done, Event::Answer(c))));
        }
    }

    fn call(&mut self, at_ms: u64, checkout: usize, kind: Kind) {
        self.calls.push(Call {
            checkout,
            kind,
            sent_ms: at_ms,
            state: CallState::Waiting,
        });
        let c = self.calls.len() - 1;
        self.waiting.push_back(c);
        self.events
            .push(Reverse((at_ms + self.cfg.timeout_ms, Event::Deadline(c))));
    }

    fn handle(&mut self, at: u64, event: Event, rng: &mut StdRng, ended: &mut Vec<Ended>) {
        match event {
            Event::Answer(c) => {
                let call = self.calls[c];
                self.calls[c].state = CallState::Over;
                let i = call.checkout;
                let checkout = self.checkouts[i];
                if call.kind == Kind::LookUp && !checkout.processed {
                    // Never received: send it again (the same try).
                    self.call(at, i, Kind::Send);
                } else if checkout.op == 0 && !checkout.declined {
                    let checkout = &mut self.checkouts[i];
                    checkout.op = 1;
                    checkout.tries = 1;
                    checkout.processed = false;
                    self.call(at, i, Kind::Send);
                } else {
                    ended.push((at, at - checkout.arrived_ms, false, checkout.who));
                }
            }
            Event::Deadline(c) => {
                let call = self.calls[c];
                match call.state {
                    CallState::Over => return,
                    // Gave up while waiting: it leaves the line
                    // unprocessed.
                    CallState::Waiting => {}
                    // Processed, but the answer comes too late: the
                    // caller drops the connection, and with it the worker.
                    CallState::Serving(w, _) => self.free_at[w] = at,
                }
                self.calls[c].state = CallState::Over;
                let i = call.checkout;
                let checkout = self.checkouts[i];
                if checkout.tries >= self.cfg.tries_max {
                    ended.push((at, at - checkout.arrived_ms, true, checkout.who));
                } else {
                    let ceiling =
                        (self.cfg.backoff_base_ms << (checkout.tries - 1).min(10)).min(1000);
                    let pause = rng.random_range(0..=ceiling);
                    self.events.push(Reverse((at + pause, Event::Retry(i))));
                }
            }
            Event::Retry(i) => {
                self.checkouts[i].tries += 1;
                self.call(at, i, Kind::LookUp);
            }
        }
    }
}
