//! The checkout tests' throwaway PostgreSQL: a thin face over
//! `sluice_loadtest::throwaway::ThrowawayPostgres` (`initdb` into a temp dir
//! as the `postgres` user when run as root, a free loopback port never
//! 5432, `fsync = off`, `pg_ctl stop -m immediate` and removal when the last
//! user drops it — also when a test panics). Each test gets its own
//! database.

use std::sync::{Arc, Mutex, Weak};

use sluice_loadtest::throwaway::{Durability, ThrowawayPostgres};

pub struct ThrowawayPg(ThrowawayPostgres);

impl ThrowawayPg {
    fn start() -> Self {
        let pg = ThrowawayPostgres::start(Durability::Fast)
            .expect("a throwaway PostgreSQL (scripts/deps.sh --test installs its binaries)");
        assert_ne!(pg.port(), 5432, "never the machine's PostgreSQL port");
        Self(pg)
    }

    /// Starts (or restarts) the server on the same port and data dir.
    pub fn pg_ctl_start(&self) {
        self.0.restart().expect("PostgreSQL starts again");
    }

    /// Stops the server at once (`-m immediate`), as a crash would.
    pub fn pg_ctl_stop(&self) {
        self.0.stop();
    }

    /// The server's log so far.
    #[allow(dead_code)] // pg_prepared's
    pub fn log(&self) -> String {
        self.0.log().expect("the throwaway server's log")
    }

    /// Runs `sql` with `psql` as the superuser (database `postgres`); its
    /// output.
    #[allow(dead_code)] // pg_prepared's
    pub fn psql(&self, sql: &str) -> String {
        self.0.psql(sql).expect("psql")
    }

    /// A new, empty database; returns its URL.
    pub fn create_database(&self) -> String {
        self.0.create_database().expect("create a test database")
    }
}

/// The cluster shared by the tests of this binary that run at the same
/// time; started on first use, stopped and removed when the last of them
/// drops its handle (so a binary's end leaves nothing behind).
pub fn shared() -> Arc<ThrowawayPg> {
    static SHARED: Mutex<Weak<ThrowawayPg>> = Mutex::new(Weak::new());
    let mut slot = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(pg) = slot.upgrade() {
        return pg;
    }
    let pg = Arc::new(ThrowawayPg::start());
    *slot = Arc::downgrade(&pg);
    pg
}

/// A cluster of one's own (for tests that stop the server).
pub fn own() -> ThrowawayPg {
    ThrowawayPg::start()
}
