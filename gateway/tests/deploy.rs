//! The deployment files (`ops/container`, `ops/systemd`, `ops/kubernetes`)
//! agree with the gateway: the policies they ship pass `sluice check`, the
//! Kubernetes one refuses to start until its placeholder key is replaced,
//! every stop timeout outlasts the drain, and the manifests give the ports
//! and environment variables the policy reads. (The files' own syntax and
//! sandboxing are checked by `scripts/test-ops.sh`, the image by
//! `scripts/test-image.sh`.)

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::repo_root;

const ADMIN_TOKEN: &str = "deploy-test-admin-token-0123";

fn ops(path: &str) -> PathBuf {
    repo_root().join("ops").join(path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `sluice check FILE` with the variables the deploy files set (the
/// ticket key, when given).
fn check_with(file: &Path, ticket_key: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.arg("check")
        .arg(file)
        .env("SLUICE_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("SLUICE_REDIS_URL", "redis://redis.example:6379")
        .env("SLUICE_PG_URL", "postgres://sluice@pg.example/sluice")
        .env_remove("SLUICE_TICKET_KEY");
    if let Some(key) = ticket_key {
        cmd.env("SLUICE_TICKET_KEY", key);
    }
    cmd.output().unwrap()
}

/// The value of the first `key = value` line (TOML) or `key: value` line
/// (YAML) of `text`, unquoted.
fn value<'t>(text: &'t str, key: &str) -> &'t str {
    text.lines()
        .map(str::trim_start)
        .find_map(|l| {
            let rest = l.strip_prefix(key)?.trim_start();
            let rest = rest.strip_prefix('=').or_else(|| rest.strip_prefix(':'))?;
            let v = rest.split('#').next().unwrap().trim();
            Some(v.trim_matches('"'))
        })
        .unwrap_or_else(|| panic!("no `{key}` in:\n{text}"))
}

fn port(addr: &str) -> &str {
    addr.rsplit_once(':').unwrap().1
}

/// A fresh ticket key, the `secret` of `sluice keygen`, as the docs tell
/// the operator to put in the Secret.
fn a_ticket_key() -> String {
    let keygen = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("keygen")
        .output()
        .unwrap();
    let keygen = String::from_utf8(keygen.stdout).unwrap();
    value(&keygen, "secret").to_string()
}

#[test]
fn the_policies_the_deploy_files_ship_pass_sluice_check() {
    let key = a_ticket_key();
    for file in [ops("container/sluice.toml"), ops("kubernetes/sluice.toml")] {
        let out = check_with(&file, Some(&key));
        assert!(
            out.status.success(),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_kubernetes_policy_refuses_to_start_without_its_ticket_key() {
    let file = ops("kubernetes/sluice.toml");
    let out = check_with(&file, None);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("SLUICE_TICKET_KEY (a key's secret) is not set"),
        "{stderr}"
    );
}

#[test]
fn every_stop_timeout_outlasts_the_drain() {
    // The drain: shutdown_grace_s, then pingora's last second.
    let drain = |policy: &str| value(policy, "shutdown_grace_s").parse::<u64>().unwrap() + 1;

    let image = read(&ops("container/sluice.toml"));
    let unit = read(&ops("systemd/sluice.service"));
    let stop = value(&unit, "TimeoutStopSec").parse::<u64>().unwrap();
    assert!(
        stop > drain(&image),
        "TimeoutStopSec={stop} must outlast the drain of the policy installed with the unit"
    );

    let k8s = read(&ops("kubernetes/sluice.toml"));
    let deployment = read(&ops("kubernetes/deployment.yaml"));
    let grace = value(&deployment, "terminationGracePeriodSeconds")
        .parse::<u64>()
        .unwrap();
    let pre_stop = value(&deployment, "seconds").parse::<u64>().unwrap();
    assert!(
        grace > pre_stop + drain(&k8s),
        "terminationGracePeriodSeconds {grace} must outlast preStop {pre_stop} s + the drain"
    );
}

#[test]
fn the_manifests_give_what_the_policy_reads() {
    let policy = read(&ops("kubernetes/sluice.toml"));
    let deployment = read(&ops("kubernetes/deployment.yaml"));
    let named_port = |name: &str| {
        let at = deployment
            .find(&format!("- name: {name}\n"))
            .unwrap_or_else(|| panic!("no port {name}"));
        value(&deployment[at..], "containerPort").to_string()
    };
    assert_eq!(named_port("http"), port(value(&policy, "listen")));
    assert_eq!(named_port("admin"), port(value(&policy, "admin_listen")));
    assert_eq!(
        value(&deployment, "prometheus.io/port").trim_matches('"'),
        port(value(&policy, "admin_listen"))
    );
    for key in [
        "redis_url_env",
        "postgres_url_env",
        "admin_token_env",
        "secret_env",
    ] {
        let var = value(&policy, key);
        assert!(
            deployment.contains(&format!("- name: {var}\n")),
            "the Deployment does not set {var} ({key})"
        );
    }
    assert!(deployment.contains("\"--config\", \"/etc/sluice/sluice.toml\""));
    assert!(deployment.contains("mountPath: /etc/sluice\n"));
    assert_eq!(value(&policy, "data_dir"), "/var/lib/sluice");
    assert!(deployment.contains("mountPath: /var/lib/sluice\n"));

    // The image's defaults are the same ports, policy path and data_dir.
    let image = read(&ops("container/sluice.toml"));
    assert_eq!(port(value(&image, "listen")), named_port("http"));
    assert_eq!(port(value(&image, "admin_listen")), named_port("admin"));
    assert_eq!(value(&image, "data_dir"), "/var/lib/sluice");
}
