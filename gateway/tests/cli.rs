//! `sluice check`, `sluice keygen` and `sluice run`'s refusals as an operator runs them.

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

#[test]
fn an_admin_listen_flag_off_loopback_needs_a_token_as_the_file_would() {
    let dir = tempfile::tempdir().unwrap();
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../policies/demo.toml");
    let mut child = sluice()
        .args(["run", "--config", demo, "--listen", "127.0.0.1:0"])
        .args(["--admin-listen", "0.0.0.0:0", "--data-dir"])
        .arg(dir.path())
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .env_remove("SLUICE_ADMIN_TOKEN")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Refused at start; a gateway that came up would still be running.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the gateway started with its admin routes open on 0.0.0.0");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    assert!(!status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("admin_token_env"), "{stderr}");
}
