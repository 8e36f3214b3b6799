//! `release_per_second = "adaptive"` and `[rooms.adaptive]`: accepted with
//! their bounds, refused at FILE:LINE:COL when they do not make sense.

use std::path::Path;

use sluice_policies::model::{Adaptive, ReleaseSource};
use sluice_policies::validate::parse_with_env;
use sluice_policies::Diagnostics;

fn parse(src: &str) -> Result<sluice_policies::Config, Diagnostics> {
    parse_with_env(src, Path::new("p.toml"), &|_| None)
}

fn room(rate: &str, table: &str) -> String {
    format!("[gateway]\n[[rooms]]\nname = \"r\"\nrelease_per_second = {rate}\nmax_active = 10\nqueue_capacity = 10\n{table}")
}

/// Exactly one problem, at `line:col`, whose message contains `needle`.
fn refused_at(src: &str, line: usize, col: usize, needle: &str) {
    let problems = parse(src).expect_err("config should be refused").0;
    assert_eq!(problems.len(), 1, "one problem expected: {problems:?}");
    let p = &problems[0];
    assert!(
        p.message.contains(needle),
        "{:?} lacks {needle:?}",
        p.message
    );
    assert_eq!(
        (p.line, p.col),
        (line, col),
        "wrong place for {:?}",
        p.message
    );
    assert!(p.to_string().starts_with(&format!("p.toml:{line}:{col}: ")));
}

const TABLE: &str = "[rooms.adaptive]\ntarget_p99_ms = 800\nmax_error_ratio = 0.05\nmin_per_second = 5\nmax_per_second = 500\n";

#[test]
fn adaptive_takes_its_bounds_and_starts_between_them() {
    let c = parse(&room("\"adaptive\"", TABLE)).unwrap();
    let r = c.room("r").unwrap();
    assert_eq!(
        r.release_source,
        ReleaseSource::Adaptive(Adaptive {
            target_p99_ms: 800,
            max_error_ratio: 0.05,
            min_per_second: 5.try_into().unwrap(),
            max_per_second: 500.try_into().unwrap(),
        })
    );
    // sqrt(5 × 500) = 50
    assert_eq!(r.release_per_second.get(), 50);
    assert_eq!(
        r.burst.get(),
        50,
        "burst defaults to one second of the start rate"
    );
    let minimal = "[rooms.adaptive]\ntarget_p99_ms = 800\nmax_per_second = 100\n";
    let c = parse(&room("\"adaptive\"", minimal)).unwrap();
    match c.room("r").unwrap().release_source {
        ReleaseSource::Adaptive(a) => {
            assert_eq!(a.min_per_second.get(), 1);
            assert_eq!(a.max_error_ratio, 0.02);
        }
        ref other => panic!("{other:?}"),
    }
    assert_eq!(c.room("r").unwrap().release_per_second.get(), 10);
}

#[test]
fn adaptive_problems_are_located() {
    refused_at(
        &room("\"adaptive\"", ""),
        4,
        22,
        "needs a [rooms.adaptive] table",
    );
    refused_at(
        &room("5", TABLE),
        7,
        1,
        "only applies to release_per_second = \"adaptive\"",
    );
    refused_at(
        &room(
            "\"adaptive\"",
            &TABLE.replace("min_per_second = 5", "min_per_second = 600"),
        ),
        11,
        18,
        "must be at least `min_per_second` (600)",
    );
    refused_at(
        &room("\"adaptive\"", &TABLE.replace("0.05", "1.5")),
        9,
        19,
        "`max_error_ratio` must be above 0 and below 1",
    );
    refused_at(
        &room(
            "\"adaptive\"",
            &TABLE.replace("target_p99_ms = 800", "target_p99_ms = 0"),
        ),
        8,
        17,
        "`target_p99_ms` must be between 1 and 600000",
    );
    refused_at(
        &room("\"adaptive\"", "[rooms.adaptive]\nmax_per_second = 100\n"),
        7,
        1,
        "needs `target_p99_ms`",
    );
    refused_at(
        &room("\"adaptive\"", &format!("{TABLE}speed = 3\n")),
        12,
        1,
        "unknown field",
    );
}
