//! `gateway.deny_cidrs_file`: networks whose joins and pass collections are
//! refused at the door (`403 forbidden`).
//!
//! The file is one CIDR (`203.0.113.0/24`, `2001:db8::/32`) or single
//! address a line; `#` starts a comment (a whole line or the rest of one);
//! blank lines are skipped. [`parse`] is pure so the gateway can call it on
//! every reload of the file (through [`load`]) and the config validator on
//! every `sluice check`; a bad line is reported as `FILE:LINE: message`.
//!
//! The networks are merged into sorted, disjoint address ranges, so a
//! lookup is one binary search whatever the file's length.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// Most entries a deny file may hold (a large threat feed is ~100,000).
pub const DENY_ENTRIES_MAX: usize = 1_000_000;
/// Largest deny file read, in bytes.
pub const DENY_FILE_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Bad lines reported at most; past it the file is refused all the same.
const PROBLEMS_MAX: usize = 20;

/// One bad line of a deny file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenyLineError {
    /// 1-based line number.
    pub line: usize,
    pub message: String,
}

/// Why a deny file was refused: it could not be read, or some lines are bad.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DenyFileError {
    #[error("{}: cannot read deny list: {message}", file.display())]
    Unreadable { file: PathBuf, message: String },
    #[error("{}", render(file, lines))]
    BadLines {
        file: PathBuf,
        lines: Vec<DenyLineError>,
    },
}

fn render(file: &Path, lines: &[DenyLineError]) -> String {
    lines
        .iter()
        .map(|l| format!("{}:{}: {}", file.display(), l.line, l.message))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The denied networks, merged into disjoint ranges.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DenyList {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
    entries: usize,
}

impl fmt::Debug for DenyList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DenyList")
            .field("entries", &self.entries)
            .field("v4_ranges", &self.v4.len())
            .field("v6_ranges", &self.v6.len())
            .finish()
    }
}

impl DenyList {
    /// Whether `ip` is in a denied network. An IPv4-mapped IPv6 address
    /// (`::ffff:203.0.113.7`) is looked up as the IPv4 address it carries.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) => in_ranges(&self.v4, u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => in_ranges(&self.v4, u32::from(v4)),
                None => in_ranges(&self.v6, u128::from(v6)),
            },
        }
    }

    /// Entries the file listed (before merging).
    pub fn entries(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }
}

fn in_ranges<T: Ord + Copy>(ranges: &[(T, T)], x: T) -> bool {
    // The last range starting at or before `x` is the only one that can
    // hold it (the ranges are disjoint and sorted).
    let i = ranges.partition_point(|&(start, _)| start <= x);
    i > 0 && x <= ranges[i - 1].1
}

/// Parses a deny file's text. Every bad line is reported (up to 20), with
/// its 1-based number; nothing is accepted from a file with a bad line.
pub fn parse(text: &str) -> Result<DenyList, Vec<DenyLineError>> {
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    let mut problems = Vec::new();
    let mut entries = 0usize;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        if problems.len() >= PROBLEMS_MAX {
            break;
        }
        entries += 1;
        if entries > DENY_ENTRIES_MAX {
            problems.push(DenyLineError {
                line,
                message: format!("a deny list holds at most {DENY_ENTRIES_MAX} entries"),
            });
            break;
        }
        match parse_entry(content) {
            Ok(ipnet::IpNet::V4(net)) => {
                v4.push((u32::from(net.network()), u32::from(net.broadcast())))
            }
            // An IPv4-mapped network (`::ffff:a.b.c.d/n`, n >= 96) is the
            // IPv4 network it carries: `contains` looks mapped clients up
            // in the IPv4 table.
            Ok(ipnet::IpNet::V6(net)) => match (net.network().to_ipv4_mapped(), net.prefix_len()) {
                (Some(first), prefix) if prefix >= 96 => {
                    let last = net.broadcast().to_ipv4_mapped().unwrap_or(first);
                    v4.push((u32::from(first), u32::from(last)))
                }
                _ => v6.push((u128::from(net.network()), u128::from(net.broadcast()))),
            },
            Err(message) => problems.push(DenyLineError { line, message }),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(DenyList {
        v4: merge(v4),
        v6: merge(v6),
        entries,
    })
}

/// One entry: a CIDR without host bits past its prefix, or an address.
fn parse_entry(text: &str) -> Result<ipnet::IpNet, String> {
    if text.contains(char::is_whitespace) {
        return Err(format!(
            "one CIDR or address a line (comments start with #), got {:?}",
            shorten(text)
        ));
    }
    let net = text
        .parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| {
            format!(
                "not a CIDR (like 203.0.113.0/24 or 2001:db8::/32) or an address: {:?}",
                shorten(text)
            )
        })?;
    if net.trunc() != net {
        return Err(format!(
            "{text:?} has bits set past its prefix; did you mean \"{}\"?",
            net.trunc()
        ));
    }
    Ok(net)
}

fn shorten(text: &str) -> String {
    text.chars().take(64).collect()
}

/// Sorts ranges and merges the ones that overlap or touch.
fn merge<T: Ord + Copy + Successor>(mut ranges: Vec<(T, T)>) -> Vec<(T, T)> {
    ranges.sort_unstable();
    let mut out: Vec<(T, T)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match out.last_mut() {
            Some(last) if last.1.next().is_none_or(|after| start <= after) => {
                last.1 = last.1.max(end);
            }
            _ => out.push((start, end)),
        }
    }
    out
}

/// The next address, `None` past the last one.
trait Successor: Sized {
    fn next(self) -> Option<Self>;
}
impl Successor for u32 {
    fn next(self) -> Option<Self> {
        self.checked_add(1)
    }
}
impl Successor for u128 {
    fn next(self) -> Option<Self> {
        self.checked_add(1)
    }
}

/// Reads and parses a deny file (the gateway calls this on each reload).
pub fn load(path: &Path) -> Result<DenyList, DenyFileError> {
    let unreadable = |message: String| DenyFileError::Unreadable {
        file: path.to_path_buf(),
        message,
    };
    let meta = std::fs::metadata(path).map_err(|e| unreadable(e.to_string()))?;
    if meta.len() > DENY_FILE_BYTES_MAX {
        return Err(unreadable(format!(
            "the file is {} bytes, more than the {DENY_FILE_BYTES_MAX} allowed",
            meta.len()
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| unreadable(e.to_string()))?;
    parse(&text).map_err(|lines| DenyFileError::BadLines {
        file: path.to_path_buf(),
        lines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv4_mapped_entry_denies_the_ipv4_client_it_carries() {
        let list = parse("::ffff:127.0.0.1\n::ffff:10.0.0.0/104\n").unwrap();
        assert!(list.contains("127.0.0.1".parse().unwrap()));
        assert!(list.contains("::ffff:127.0.0.1".parse().unwrap()));
        assert!(list.contains("10.1.2.3".parse().unwrap()));
        assert!(!list.contains("11.0.0.1".parse().unwrap()));
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cidrs_addresses_comments_and_blank_lines() {
        let list = parse(
            "# feed of 2026-12-04\n\n203.0.113.0/24\n198.51.100.7   # one host\n  2001:db8::/32\n\t\n",
        )
        .unwrap();
        assert_eq!(list.entries(), 3);
        for inside in [
            "203.0.113.0",
            "203.0.113.255",
            "198.51.100.7",
            "2001:db8:ffff::1",
        ] {
            assert!(list.contains(ip(inside)), "{inside} should be denied");
        }
        for outside in [
            "203.0.112.255",
            "203.0.114.0",
            "198.51.100.8",
            "2001:db9::",
            "::1",
        ] {
            assert!(!list.contains(ip(outside)), "{outside} should pass");
        }
        // IPv4 in IPv6 clothing is still the IPv4 client.
        assert!(list.contains(ip("::ffff:203.0.113.9")));
    }

    #[test]
    fn bad_lines_are_reported_by_number_and_nothing_is_accepted() {
        let problems = parse("10.0.0.0/8\nnot-an-ip\n\n10.1.2.3/8\n1.2.3.4 5.6.7.8\n1.2.3.0/33\n")
            .unwrap_err();
        let lines: Vec<usize> = problems.iter().map(|p| p.line).collect();
        assert_eq!(lines, vec![2, 4, 5, 6]);
        assert!(problems[1].message.contains("did you mean \"10.0.0.0/8\""));
        let rendered = DenyFileError::BadLines {
            file: PathBuf::from("deny.txt"),
            lines: problems,
        }
        .to_string();
        assert!(rendered.starts_with("deny.txt:2: not a CIDR"), "{rendered}");
    }

    #[test]
    fn overlapping_and_touching_ranges_merge() {
        let list = parse("10.0.0.0/24\n10.0.1.0/24\n10.0.0.128/25\n0.0.0.0/0\n").unwrap();
        assert_eq!(list.v4, vec![(0, u32::MAX)]);
        let list = parse("10.0.0.0/24\n10.0.1.0/24\n10.0.3.0/24\n").unwrap();
        assert_eq!(list.v4.len(), 2);
        assert!(list.contains(ip("10.0.1.200")) && !list.contains(ip("10.0.2.1")));
        let all6 = parse("::/0\n").unwrap();
        assert!(all6.contains(ip("ffff::1")) && !all6.contains(ip("1.2.3.4")));
    }

    #[test]
    fn an_empty_file_denies_nothing() {
        let list = parse("# nothing yet\n").unwrap();
        assert!(list.is_empty() && !list.contains(ip("1.2.3.4")));
    }

    #[test]
    fn a_missing_file_names_itself() {
        let e = load(Path::new("/nonexistent/deny.txt")).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("/nonexistent/deny.txt: cannot read"));
    }
}
