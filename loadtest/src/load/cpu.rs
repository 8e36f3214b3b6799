//! CPU time the system under test spends, read from `/proc/PID/stat`
//! (Linux): `utime + stime` of a process (all its threads), plus
//! `cutime + cstime` (its children that ended and were waited for), plus
//! the `utime + stime` of its live children. For a gateway that is the
//! process; for PostgreSQL, given the postmaster, it is the server: every
//! backend and background process, including the ones that ended between
//! two samples.
//!
//! `sluice-load capacity --cpu` samples before the first request of a step
//! and after its last answer, and divides by the checkouts confirmed in
//! between.

use std::collections::HashMap;
use std::fs;
use std::io;

use anyhow::{Context, Result};

/// The processes whose CPU time a step is charged with.
#[derive(Debug, Clone, Default)]
pub struct Meter {
    /// Gateway processes (summed).
    pub gateways: Vec<u32>,
    /// The PostgreSQL postmaster, with every child of it.
    pub postgres: Option<u32>,
}

/// Seconds of CPU at one instant: the gateways', PostgreSQL's.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reading {
    pub gateways_s: f64,
    pub postgres_s: f64,
}

impl Meter {
    /// The CPU seconds so far.
    pub fn read(&self) -> Result<Reading> {
        let tick = ticks_per_s()?;
        let mut gateways = 0;
        for pid in &self.gateways {
            gateways += tree_ticks(*pid).with_context(|| format!("/proc/{pid}/stat"))?;
        }
        let postgres = match self.postgres {
            Some(pid) => tree_ticks(pid).with_context(|| format!("PostgreSQL /proc/{pid}"))?,
            None => 0,
        };
        Ok(Reading {
            gateways_s: gateways as f64 / tick,
            postgres_s: postgres as f64 / tick,
        })
    }
}

/// Clock ticks per second (`getconf CLK_TCK`).
fn ticks_per_s() -> Result<f64> {
    let t = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .context("sysconf(CLK_TCK)")?
        .context("CLK_TCK has no value")?;
    Ok(t as f64)
}

/// One line of `/proc/PID/stat` read: the parent, own ticks, waited-for
/// children's ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub ppid: u32,
    pub own: u64,
    pub children: u64,
}

/// Parses a `/proc/PID/stat` line; the command name (field 2) is in
/// parentheses and may hold spaces or parentheses itself, so the fields
/// are counted from the last `)`.
pub fn parse_stat(line: &str) -> Option<Stat> {
    let rest = &line[line.rfind(')')? + 1..];
    // After ")": state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17).
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i)?.parse::<u64>().ok();
    Some(Stat {
        ppid: u32::try_from(n(1)?).ok()?,
        own: n(11)? + n(12)?,
        children: n(13)? + n(14)?,
    })
}

fn stat(pid: u32) -> io::Result<Stat> {
    let line = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&line).ok_or_else(|| io::Error::other(format!("unreadable /proc/{pid}/stat")))
}

/// `pid`'s ticks, its ended children's and its live children's.
pub fn tree_ticks(pid: u32) -> io::Result<u64> {
    let root = stat(pid)?;
    let mut total = root.own + root.children;
    for (_, s) in live_children(pid)? {
        total += s.own;
    }
    Ok(total)
}

fn live_children(parent: u32) -> io::Result<HashMap<u32, Stat>> {
    let mut out = HashMap::new();
    for entry in fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // A process may end between the listing and the read.
        if let Ok(s) = stat(pid) {
            if s.ppid == parent {
                out.insert(pid, s);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_past_a_name_with_spaces_and_parentheses() {
        let line = "4242 (postgres: a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 \
                    250 31 7 5 20 0 1 0 12345 1000 10 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                ppid: 17,
                own: 281,
                children: 12
            })
        );
        assert_eq!(parse_stat("4242 (x) S 1"), None);
    }

    #[test]
    fn this_process_is_charged_for_the_work_it_does() {
        let me = std::process::id();
        let before = tree_ticks(me).unwrap();
        // Busy until the kernel has charged a tick, with a deadline.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut x = 0u64;
        let mut after = before;
        while after == before && std::time::Instant::now() < deadline {
            for _ in 0..1_000_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            after = tree_ticks(me).unwrap();
        }
        std::hint::black_box(x);
        assert!(after > before, "no CPU charged in 10 s of spinning");
    }
}
