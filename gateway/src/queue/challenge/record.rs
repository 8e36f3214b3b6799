//! Where a room keeps which challenges were spent, and the join rate its
//! adaptive difficulty reads.
//!
//! [`SpendRecord`] is the seam: [`LocalRecord`] for a room in this
//! process, `crate::queue::fleet::challenge::FleetRecord` for a room on the
//! fleet's line (Redis, so a challenge is spent once fleet-wide). Both
//! answer with what they held before ([`SpentState`]) and the caller
//! applies the one rule, `sluice_admission::challenge::decide_spend`.
//!
//! The local record is durable when the room is: each spend is appended
//! (one `write`, as the room's journal does) to
//! `data_dir/rooms/<room>/challenges.<b>`, `b` the 600-second period it
//! was written in; a start reads the last two periods (no challenge lives
//! longer than 605 s) and deletes older ones, so a retry after a restart
//! still gets its place and a replay is still refused.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use async_trait::async_trait;
use sluice_admission::challenge::{SpentBy, SpentChallenges, SpentState};

use crate::error::{ApiError, ErrorCode};
use crate::response::LocalResponse;

/// A challenge held for one join: confirm it with the place, or release
/// it.
#[derive(Debug, Clone, Copy)]
pub struct Reserved {
    pub nonce: [u8; 16],
    pub solution_tag: u64,
    pub expires_at_s: u64,
}

/// Where a room's spent challenges are kept.
#[async_trait]
pub trait SpendRecord: Send + Sync {
    /// Holds `nonce` for this join unless it is held or spent already:
    /// `(None, Some(reserved))` when this join took it, else what the
    /// record holds. `Err` is the answer when the record cannot say
    /// (full, or its store unreachable).
    async fn reserve(
        &self,
        nonce: [u8; 16],
        solution_tag: u64,
        expires_at_s: u64,
        now_ms: u64,
    ) -> Result<(Option<SpentState>, Option<Reserved>), LocalResponse>;

    /// The join got place `by`: the challenge is spent.
    async fn confirm(&self, reserved: Reserved, by: SpentBy);

    /// The join got no place: the challenge may be used again.
    async fn release(&self, reserved: Reserved);

    /// A join reached the challenge (for a fleet-wide rate).
    fn count_join(&self, _now_ms: u64) {}

    /// The fleet's joins over the rate's window, when counted fleet-wide.
    fn joins_in_window(&self) -> Option<u64> {
        None
    }
}

/// Seconds a file of spends covers: longer than any challenge lives.
const PERIOD_S: u64 = 600;

/// A room's record in this process: at most `capacity` unexpired
/// challenges (a join past it is `503 queue_full` until the oldest
/// expires), and its file when the room is durable.
pub struct LocalRecord {
    inner: Mutex<Inner>,
}

struct Inner {
    spent: SpentChallenges,
    dir: Option<PathBuf>,
    /// The open file and the period it is for.
    file: Option<(u64, File)>,
}

impl LocalRecord {
    /// A record of at most `capacity` challenges; with `dir`, kept there
    /// and read back from it at `now_s`.
    pub fn open(capacity: usize, dir: Option<PathBuf>, now_s: u64) -> Self {
        let mut spent = SpentChallenges::new(capacity);
        if let Some(dir) = &dir {
            read_back(dir, &mut spent, now_s);
        }
        Self {
            inner: Mutex::new(Inner {
                spent,
                dir,
                file: None,
            }),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Reads the spends of the last two periods, and deletes older files.
fn read_back(dir: &PathBuf, spent: &mut SpentChallenges, now_s: u64) {
    let current = now_s / PERIOD_S;
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(period) = name
            .strip_prefix("challenges.")
            .and_then(|p| p.parse::<u64>().ok())
        else {
            continue;
        };
        if period + 1 < current {
            let _ = fs::remove_file(entry.path());
            continue;
        }
        let Ok(text) = fs::read_to_string(entry.path()) else {
            continue;
        };
        // A torn last line (a crash mid-write) does not parse: skipped.
        for line in text.lines() {
            if let Some((nonce, expires_at_s, SpentState::Spent(by))) = parse_line(line) {
                let _ = spent.record(nonce, by, expires_at_s, now_s);
            }
        }
    }
}

fn parse_line(line: &str) -> Option<([u8; 16], u64, SpentState)> {
    let (nonce_hex, rest) = line.split_once(' ')?;
    let (expires, state) = rest.split_once(' ')?;
    let mut nonce = [0u8; 16];
    hex::decode_to_slice(nonce_hex, &mut nonce).ok()?;
    Some((nonce, expires.parse().ok()?, SpentState::decode(state)?))
}

impl Inner {
    /// Appends a spend to this period's file (opened or made as needed).
    fn append(&mut self, reserved: &Reserved, by: SpentBy, now_s: u64) {
        let Some(dir) = &self.dir else {
            return;
        };
        let period = now_s / PERIOD_S;
        if self.file.as_ref().is_none_or(|(p, _)| *p != period) {
            let path = dir.join(format!("challenges.{period}"));
            match OpenOptions::new().create(true).append(true).open(&path) {
                Ok(file) => {
                    self.file = Some((period, file));
                    // Two periods back can hold nothing live any more.
                    if let Some(old) = period.checked_sub(2) {
                        let _ = fs::remove_file(dir.join(format!("challenges.{old}")));
                    }
                }
                Err(e) => {
                    tracing::error!("the record of spent challenges cannot be written: {e}");
                    self.file = None;
                    return;
                }
            }
        }
        let line = format!(
            "{} {} {}\n",
            hex::encode(reserved.nonce),
            reserved.expires_at_s,
            SpentState::Spent(by).encode()
        );
        if let Some((_, file)) = &mut self.file {
            if let Err(e) = file.write_all(line.as_bytes()) {
                tracing::error!("the record of spent challenges cannot be written: {e}");
            }
        }
    }
}

/// `503 queue_full` when the record is full of unexpired challenges.
pub fn record_full(retry_after_s: u64) -> LocalResponse {
    LocalResponse::error(
        &ApiError::new(
            ErrorCode::QueueFull,
            "Too many joins in too short a time; please try again shortly.",
        )
        .retry_after(retry_after_s.min(u64::from(u32::MAX)) as u32),
    )
}

#[async_trait]
impl SpendRecord for LocalRecord {
    async fn reserve(
        &self,
        nonce: [u8; 16],
        solution_tag: u64,
        expires_at_s: u64,
        now_ms: u64,
    ) -> Result<(Option<SpentState>, Option<Reserved>), LocalResponse> {
        let held = self
            .inner()
            .spent
            .reserve(nonce, solution_tag, expires_at_s, now_ms / 1000);
        match held {
            Ok(Some(state)) => Ok((Some(state), None)),
            Ok(None) => Ok((
                None,
                Some(Reserved {
                    nonce,
                    solution_tag,
                    expires_at_s,
                }),
            )),
            Err(full) => Err(record_full(full.retry_after_s)),
        }
    }

    async fn confirm(&self, reserved: Reserved, by: SpentBy) {
        let mut inner = self.inner();
        inner.spent.confirm(&reserved.nonce, by);
        inner.append(&reserved, by, crate::clock::now_ms() / 1000);
    }

    async fn release(&self, reserved: Reserved) {
        self.inner().spent.release(&reserved.nonce);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW_S: u64 = 1_800_000_000;

    #[test]
    fn a_spend_is_read_back_after_a_restart_until_it_expires() {
        let dir = tempfile::tempdir().unwrap();
        let by = SpentBy {
            seq: 4,
            solution_tag: 9,
            ticket_id: [3; 16],
            issued_at_s: NOW_S,
            expires_at_s: NOW_S + 600,
        };
        let reserved = Reserved {
            nonce: [1; 16],
            solution_tag: 9,
            expires_at_s: NOW_S + 60,
        };
        {
            let record = LocalRecord::open(10, Some(dir.path().into()), NOW_S);
            record
                .inner()
                .spent
                .reserve([1; 16], 9, NOW_S + 60, NOW_S)
                .unwrap();
            record.inner().spent.confirm(&[1; 16], by);
            record.inner().append(&reserved, by, NOW_S);
            // A torn line after it.
            let (_, file) = record.inner().file.take().unwrap();
            let mut file = file;
            file.write_all(b"0101").unwrap();
        }
        let again = LocalRecord::open(10, Some(dir.path().into()), NOW_S + 30);
        assert_eq!(
            again.inner().spent.lookup(&[1; 16], NOW_S + 30),
            Some(SpentState::Spent(by))
        );
        let later = LocalRecord::open(10, Some(dir.path().into()), NOW_S + 60);
        assert_eq!(later.inner().spent.lookup(&[1; 16], NOW_S + 60), None);
        // Files two periods old are deleted at start.
        let much_later = NOW_S + 3 * PERIOD_S;
        let _ = LocalRecord::open(10, Some(dir.path().into()), much_later);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
