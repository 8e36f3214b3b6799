//! `sluice-load`: rehearse a flash sale against the real gateway.
//!
//! A run reads a [`scenario`] file, starts `sluice` on free loopback ports
//! (or reaches a running one, [`gateway`]) — or a [`fleet`] of them on a
//! shared throwaway Redis and PostgreSQL, each through its own relay —
//! and plays virtual people ([`shopper`]) who arrive on a seeded schedule
//! ([`arrivals`]), reach the gateways through a sticky [`balancer`], wait
//! in line, check out and follow their order, while faults are injected
//! (kill switch, SIGKILL and restart, stores restarted, a gateway cut off,
//! the room's message changed)
//! and `/admin/state` is sampled ([`sampler`]). Everything seen goes into
//! the [`record`]. At the end the [`books`] are checked with the system's
//! own records (for a fleet, the line's too: [`fleet_books`]; for a
//! backend that changes mid-run, whether the release rate [`follow`]ed
//! it; for a campaign, the [`event_day`] checks; beside a [`farm`], the
//! [`bot_farm`] checks), and the [`summary`] and an HTML [`report`] (with [`svg`] charts)
//! are written. [`capacity`]
//! finds the release rate to configure.
//!
//! | file | job |
//! | --- | --- |
//! | `scenario.rs` | the TOML scenario: parse, validate, scale |
//! | `arrivals.rs` | seeded arrival times: spike, constant, ramp |
//! | `gateway.rs` | start / restart `sluice`, or target URLs; admin calls |
//! | `fleet.rs` | the gateways of a run, the stores they share, the relays between |
//! | `balancer.rs` | sticky sessions: where each shopper's requests go, health checks |
//! | `ports.rs` | free ports, and proof that the subprocess got them |
//! | `shopper.rs` | one virtual person, every loop bounded |
//! | `http.rs` | one request as a shopper sees it |
//! | `record.rs` | what happened, shared by every task |
//! | `sampler.rs` | `/admin/state` every 500 ms |
//! | `books.rs` | the end-of-run checks, the verdict |
//! | `fleet_books.rs` | the line fleet-wide: rate, max_active, FIFO, places kept |
//! | `follow.rs` | the phases of a changing backend; the adaptive-release bar |
//! | `event_day.rs` | a room as a campaign: not open before the pre-queue, the draw recomputed, the message live, the close |
//! | `datetime.rs` | unix seconds as UTC dates |
//! | `summary.rs`, `report.rs`, `svg.rs` | `summary.json`, `report.html` |
//! | `progress.rs` | the status line on stderr |
//! | `faults.rs` | the kill switch, SIGKILL and restart, paysim's knobs, stores restarted, cut-offs, at their second |
//! | `run.rs` | a whole run |
//! | `capacity.rs` | step the offered checkout rate up to the limit |
//! | `cpu.rs` | CPU seconds of the gateways and PostgreSQL, from `/proc` |
//! | `pow.rs` | the room's proof of work, solved as the contract says; a thread's CPU time |
//! | `store.rs` | the store's enqueue tokens, signed for each account |
//! | `farm.rs` | the bot farm: every core solving, thousands of addresses, a few accounts |
//! | `bot_farm.rs` | the farm's verdict: units by accounts, joins priced by the difficulty, held passes reclaimed |

pub mod arrivals;
pub mod balancer;
pub mod books;
pub mod bot_farm;
pub mod capacity;
pub mod cpu;
pub mod datetime;
pub mod event_day;
pub mod farm;
pub mod faults;
pub mod fleet;
pub mod fleet_books;
pub mod follow;
pub mod gateway;
pub mod http;
pub mod phase_capacity;
pub mod ports;
pub mod pow;
pub mod progress;
pub mod record;
pub mod report;
pub mod run;
pub mod sampler;
pub mod scenario;
pub mod shopper;
pub mod store;
pub mod summary;
pub mod svg;

pub use run::{run, Remote, RunOptions, RunResult};
pub use scenario::Scenario;
