//! The embedded room store: each room's events (see
//! `sluice_admission::journal`) in `data_dir/rooms/<room>/`, so a `kill -9`
//! and a restart keep every place, ticket and pass.
//!
//! Files, by generation `g`:
//! - `journal.<g>`: events appended as they happen, one `write` per room
//!   operation before its answer (a killed process loses nothing the page
//!   cache got); the release worker `fsync`s it every [`SYNC_EVERY`], so a
//!   power cut loses at most that much;
//! - `snapshot.<g>`: the room as it was when `journal.<g>` began (written
//!   as `snapshot.<g>.tmp`, synced, then renamed: present means whole).
//!
//! Start: the newest snapshot, then every journal from its generation on.
//! A torn last record (a crash mid-write) is cut off; a damaged record with
//! more after it stops the start with a message naming the file.
//!
//! Compaction keeps the files bounded: when a generation has more events
//! than [`compaction_due`] allows, the release worker (holding the room's
//! lock, so no event slips between) takes the room's snapshot and starts
//! generation `g + 1`; the snapshot is written and the old generation
//! deleted afterwards, outside the room's lock.
//!
//! Why a hand-written log and not SQLite (which the checkout store uses):
//! a join is one fixed 40-byte append, and the room must answer without a
//! round trip to a writer thread; a log with a checksum per record is the
//! whole of what is needed, about as much code as its SQL would be.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
pub use sluice_admission::journal::RECORD_BYTES;
use sluice_admission::journal::{EventSink, RoomEvent, SinkError};

/// How often the release worker makes the journals' writes durable
/// against power loss.
pub const SYNC_EVERY: Duration = Duration::from_millis(100);
/// A generation of fewer events than this is never compacted.
pub const COMPACT_EVENTS_MIN: u64 = 262_144;
/// A generation is compacted when it holds this many times the events its
/// snapshot would.
pub const COMPACT_RATIO: u64 = 4;

/// Whether a generation of `appended` events should give way to a
/// snapshot of about `snapshot_records` events.
pub fn compaction_due(appended: u64, snapshot_records: u64) -> bool {
    appended > COMPACT_EVENTS_MIN.max(snapshot_records.saturating_mul(COMPACT_RATIO))
}

/// A room's files, shared by the room (which appends) and the release
/// worker (which syncs and compacts).
#[derive(Clone)]
pub struct RoomJournal {
    files: Arc<Mutex<Files>>,
}

struct Files {
    /// Held for the journal's life: a second process on the same
    /// `data_dir` is refused instead of interleaving its writes.
    _lock: Flock<File>,
    dir: PathBuf,
    generation: u64,
    journal: File,
    /// Events in the current generation.
    appended: u64,
    /// Written since the last sync.
    dirty: bool,
    /// A snapshot taken and not yet on disk.
    snapshot: Option<Pending>,
    /// The last append failed (logged once until one succeeds).
    failing: bool,
}

/// A snapshot taken and not yet on disk: its generation, its records, and
/// the journal it replaces (synced before the snapshot is relied on).
struct Pending {
    generation: u64,
    records: Vec<u8>,
    replaced: File,
}

/// What a room's directory held at start.
pub struct Opened {
    pub events: Vec<RoomEvent>,
    pub journal: RoomJournal,
}

impl RoomJournal {
    /// Opens (creating if needed) the room directory `dir` and reads back
    /// every event in it.
    pub fn open(dir: &Path) -> Result<Opened, String> {
        let shown = dir.display();
        fs::create_dir_all(dir).map_err(|e| format!("creating {shown}: {e}"))?;
        let lock_path = dir.join("lock");
        let lock_file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| format!("opening {}: {e}", lock_path.display()))?;
        let lock = Flock::lock(lock_file, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
            format!(
                "{shown} is in use by another process ({e}): two gateways cannot share a data_dir"
            )
        })?;
        let mut journals = Vec::new();
        let mut snapshots = Vec::new();
        for entry in fs::read_dir(dir).map_err(|e| format!("reading {shown}: {e}"))? {
            let entry = entry.map_err(|e| format!("reading {shown}: {e}"))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(g) = generation_of(&name, "journal.") {
                journals.push(g);
            } else if let Some(g) = generation_of(&name, "snapshot.") {
                snapshots.push(g);
            } else if name.ends_with(".tmp") {
                // A snapshot whose writing was cut short.
                let _ = fs::remove_file(entry.path());
            }
        }
        journals.sort_unstable();
        let base = snapshots.iter().copied().max();
        let mut events = Vec::new();
        if let Some(g) = base {
            read_records(&dir.join(format!("snapshot.{g}")), &mut events, false)?;
        }
        let from = base.unwrap_or(0);
        let live: Vec<u64> = journals.iter().copied().filter(|&g| g >= from).collect();
        for pair in live.windows(2) {
            if pair[1] != pair[0] + 1 {
                return Err(format!("{shown}: journal.{} is missing", pair[0] + 1));
            }
        }
        if let Some(&first) = live.first() {
            if first != from {
                return Err(format!("{shown}: journal.{from} is missing"));
            }
        }
        let snapshot_events = events.len() as u64;
        for (i, g) in live.iter().enumerate() {
            let last = i + 1 == live.len();
            read_records(&dir.join(format!("journal.{g}")), &mut events, last)?;
        }
        let generation = live.last().copied().unwrap_or(from);
        // Older generations are covered by the snapshot.
        for g in journals.iter().filter(|&&g| g < from) {
            let _ = fs::remove_file(dir.join(format!("journal.{g}")));
        }
        for g in snapshots.iter().filter(|&&g| g < from) {
            let _ = fs::remove_file(dir.join(format!("snapshot.{g}")));
        }
        let path = dir.join(format!("journal.{generation}"));
        let journal = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| format!("opening {}: {e}", path.display()))?;
        let appended = events.len() as u64 - snapshot_events;
        Ok(Opened {
            events,
            journal: RoomJournal {
                files: Arc::new(Mutex::new(Files {
                    _lock: lock,
                    dir: dir.to_owned(),
                    generation,
                    journal,
                    appended,
                    dirty: false,
                    snapshot: None,
                    failing: false,
                })),
            },
        })
    }

    /// The sink the room appends through.
    pub fn sink(&self) -> Box<dyn EventSink> {
        Box::new(self.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Files> {
        self.files.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Events in the current generation.
    pub fn appended(&self) -> u64 {
        self.lock().appended
    }

    /// Starts a new generation whose base is `snapshot` (events encoded
    /// back to back). Call with the room's lock held, so the snapshot and
    /// the switch are one instant of the room; the snapshot itself reaches
    /// the disk at the next [`Self::sync`].
    pub fn rebase(&self, snapshot: Vec<u8>) -> Result<(), String> {
        let mut files = self.lock();
        if files.snapshot.is_some() {
            return Ok(());
        }
        let next = files.generation + 1;
        let path = files.dir.join(format!("journal.{next}"));
        let journal = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)
            .map_err(|e| format!("opening {}: {e}", path.display()))?;
        let replaced = std::mem::replace(&mut files.journal, journal);
        files.generation = next;
        files.appended = 0;
        files.snapshot = Some(Pending {
            generation: next,
            records: snapshot,
            replaced,
        });
        Ok(())
    }

    /// Makes what was appended durable, and writes a pending snapshot
    /// (then drops the generation it replaces). Blocking: run it on a
    /// blocking thread. The room's lock is not needed.
    pub fn sync(&self) -> Result<(), String> {
        let (journal, snapshot, dir, generation) = {
            let mut files = self.lock();
            let journal = if files.dirty {
                files.dirty = false;
                Some(files.journal.try_clone().map_err(|e| e.to_string())?)
            } else {
                None
            };
            (
                journal,
                files.snapshot.take(),
                files.dir.clone(),
                files.generation,
            )
        };
        if let Some(journal) = journal {
            journal
                .sync_data()
                .map_err(|e| format!("syncing a journal in {}: {e}", dir.display()))?;
        }
        if let Some(pending) = snapshot {
            let g = pending.generation;
            // The replaced journal is synced first: until the snapshot is
            // on disk, it and the new journal together are the record.
            let written = pending
                .replaced
                .sync_data()
                .map_err(|e| format!("syncing a journal in {}: {e}", dir.display()))
                .and_then(|()| write_snapshot(&dir, g, &pending.records));
            if let Err(e) = written {
                // Keep it for the next sync; the journals still hold it all.
                let mut files = self.lock();
                if files.generation == generation && files.snapshot.is_none() {
                    files.snapshot = Some(pending);
                }
                return Err(e);
            }
            for old in [format!("journal.{}", g - 1), format!("snapshot.{}", g - 1)] {
                let _ = fs::remove_file(dir.join(old));
            }
        }
        Ok(())
    }
}

impl EventSink for RoomJournal {
    fn append(&mut self, events: &[RoomEvent]) -> Result<(), SinkError> {
        let mut buf = Vec::with_capacity(events.len() * RECORD_BYTES);
        for event in events {
            buf.extend_from_slice(&event.encode());
        }
        let mut files = self.lock();
        match files.journal.write_all(&buf) {
            Ok(()) => {
                files.appended += events.len() as u64;
                files.dirty = true;
                if files.failing {
                    tracing::info!(dir = %files.dir.display(), "room journal writable again");
                }
                files.failing = false;
                Ok(())
            }
            Err(e) => {
                if !files.failing {
                    tracing::error!(dir = %files.dir.display(), "room journal write failed: {e}");
                }
                files.failing = true;
                Err(SinkError(e.to_string()))
            }
        }
    }
}

fn write_snapshot(dir: &Path, generation: u64, records: &[u8]) -> Result<(), String> {
    let tmp = dir.join(format!("snapshot.{generation}.tmp"));
    let done = dir.join(format!("snapshot.{generation}"));
    let write = || -> std::io::Result<()> {
        let mut file = File::create(&tmp)?;
        file.write_all(records)?;
        file.sync_all()?;
        fs::rename(&tmp, &done)?;
        File::open(dir)?.sync_all()
    };
    write().map_err(|e| format!("writing {}: {e}", done.display()))
}

fn generation_of(name: &str, prefix: &str) -> Option<u64> {
    name.strip_prefix(prefix)?.parse().ok()
}

/// Reads every record of `path` into `out`. In the file written last
/// (`tail`), an incomplete or damaged final record is a write cut short by
/// a crash: it is cut off the file. Anywhere else damage is an error.
fn read_records(path: &Path, out: &mut Vec<RoomEvent>, tail: bool) -> Result<(), String> {
    let shown = path.display();
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| format!("reading {shown}: {e}"))?;
    let whole = bytes.len() / RECORD_BYTES;
    let mut good = 0;
    for (i, chunk) in bytes.chunks_exact(RECORD_BYTES).enumerate() {
        let record: &[u8; RECORD_BYTES] = chunk.try_into().expect("chunks are whole");
        match RoomEvent::decode(record) {
            Ok(event) => {
                out.push(event);
                good = i + 1;
            }
            Err(e) if tail && i + 1 == whole => {
                tracing::warn!(file = %shown, "dropping a torn last record: {e}");
                break;
            }
            Err(e) => return Err(format!("{shown}: record {i} is damaged ({e})")),
        }
    }
    let keep = (good * RECORD_BYTES) as u64;
    if keep != bytes.len() as u64 {
        if !tail {
            return Err(format!("{shown}: ends in the middle of a record"));
        }
        OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| f.set_len(keep))
            .map_err(|e| format!("cutting the torn end of {shown}: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(place: u64) -> RoomEvent {
        RoomEvent::Joined { place, joined_s: 1 }
    }

    #[test]
    fn events_come_back_across_generations_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let room = dir.path().join("drop");
        let opened = RoomJournal::open(&room).unwrap();
        assert!(opened.events.is_empty());
        let mut sink = opened.journal.sink();
        sink.append(&[RoomEvent::Created { epoch_s: 5 }, joined(0)])
            .unwrap();
        let snapshot: Vec<u8> = [RoomEvent::Created { epoch_s: 5 }, joined(0)]
            .iter()
            .flat_map(|e| e.encode())
            .collect();
        opened.journal.rebase(snapshot).unwrap();
        sink.append(&[joined(1)]).unwrap();
        let err = RoomJournal::open(&room).err().unwrap();
        assert!(err.contains("in use by another process"), "{err}");
        // Restarted before the snapshot reached the disk: generation 0 and
        // 1 together hold everything.
        let pending = opened.journal.lock().snapshot.take();
        drop((sink, opened));
        let again = RoomJournal::open(&room).unwrap();
        assert_eq!(
            again.events,
            vec![RoomEvent::Created { epoch_s: 5 }, joined(0), joined(1)]
        );
        // The snapshot written, generation 0 goes.
        again.journal.lock().snapshot = pending;
        again.journal.sync().unwrap();
        drop(again);
        assert!(!room.join("journal.0").exists(), "the snapshot replaced it");
        // A crash mid-write leaves part of a record at the end.
        let mut f = OpenOptions::new()
            .append(true)
            .open(room.join("journal.1"))
            .unwrap();
        f.write_all(&joined(2).encode()[..17]).unwrap();
        let reopened = RoomJournal::open(&room).unwrap();
        assert_eq!(
            reopened.events,
            vec![RoomEvent::Created { epoch_s: 5 }, joined(0), joined(1)]
        );
        assert_eq!(
            fs::metadata(room.join("journal.1")).unwrap().len(),
            RECORD_BYTES as u64
        );
        drop(reopened);
        // Damage with records after it is not a torn write.
        let mut bytes = fs::read(room.join("snapshot.1")).unwrap();
        bytes[10] ^= 0xff;
        fs::write(room.join("snapshot.1"), bytes).unwrap();
        let err = RoomJournal::open(&room).err().unwrap();
        assert!(err.contains("record 0 is damaged"), "{err}");
    }

    #[test]
    fn compaction_waits_for_a_generation_well_past_its_snapshot() {
        assert!(!compaction_due(COMPACT_EVENTS_MIN, 10));
        assert!(compaction_due(COMPACT_EVENTS_MIN + 1, 10));
        assert!(!compaction_due(COMPACT_EVENTS_MIN * 2, COMPACT_EVENTS_MIN));
        assert!(compaction_due(
            COMPACT_EVENTS_MIN * 4 + 1,
            COMPACT_EVENTS_MIN
        ));
    }
}
