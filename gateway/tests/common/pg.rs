//! The gateway tests' throwaway PostgreSQL: a thin face over
//! `sluice_loadtest::throwaway::ThrowawayPostgres` (`initdb` into a temp
//! dir, a free loopback port never 5432, stopped and removed when dropped,
//! also when a test panics; never the machine's own server). One cluster
//! per test: the gateways use its default database.

use sluice_loadtest::throwaway::{Durability, ThrowawayPostgres};

pub struct Pg(ThrowawayPostgres);

impl Pg {
    pub fn start() -> Pg {
        let pg = ThrowawayPostgres::start(Durability::Fast)
            .expect("a throwaway PostgreSQL (scripts/deps.sh --test installs its binaries)");
        assert_ne!(pg.port(), 5432, "never the machine's PostgreSQL port");
        Pg(pg)
    }

    /// What `[cluster] postgres_url` is set to.
    pub fn url(&self) -> String {
        self.0.url()
    }

    /// Stops the server at once (`-m immediate`, as a crash would).
    pub fn stop(&self) {
        self.0.stop();
    }

    /// Starts it again on the same port, with its data.
    pub fn start_again(&self) {
        self.0.restart().expect("PostgreSQL starts again");
    }

    /// One statement's unaligned output, trimmed.
    pub fn sql(&self, sql: &str) -> String {
        self.0.psql(sql).expect("psql").trim().to_string()
    }

    /// One statement's single number.
    pub fn count(&self, sql: &str) -> i64 {
        let out = self.sql(sql);
        out.parse()
            .unwrap_or_else(|_| panic!("{sql} gave {out:?}, not a number"))
    }
}
