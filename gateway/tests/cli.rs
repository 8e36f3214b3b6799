//! `sluice check` and `sluice keygen` as an operator runs them.

use std::process::Command;

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

#[test]
fn check_accepts_the_shipped_demo() {
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../policies/demo.toml");
    let out = sluice().args(["check", demo]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn check_reports_each_problem_at_file_line_col_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[gateway]\nlisten = \"nowhere\"\nadmissions = \"shut\"\n",
    )
    .unwrap();
    let out = sluice().arg("check").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<_> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].starts_with(&format!("{}:2:10: ", bad.display())),
        "{err}"
    );
    assert!(
        lines[1].starts_with(&format!("{}:3:14: ", bad.display())),
        "{err}"
    );
}

#[test]
fn keygen_prints_a_key_the_config_accepts() {
    keygen_round_trip(&[]);
    keygen_round_trip(&["--alg", "eddsa"]);
}

fn keygen_round_trip(args: &[&str]) {
    let out = sluice().arg("keygen").args(args).output().unwrap();
    assert!(out.status.success());
    let key = String::from_utf8(out.stdout).unwrap();
    let again =
        String::from_utf8(sluice().arg("keygen").args(args).output().unwrap().stdout).unwrap();
    assert_ne!(key, again, "every key is fresh");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("k.toml");
    std::fs::write(&file, format!("[gateway]\n{key}")).unwrap();
    let out = sluice().arg("check").arg(&file).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn run_with_a_bad_config_exits_with_the_location() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[gateway]\nthreads = 0\n").unwrap();
    let out = sluice()
        .arg("run")
        .arg("--config")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("{}:2:11:", bad.display())));
}
