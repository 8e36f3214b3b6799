//! A policy mounted from a Kubernetes ConfigMap. The kubelet lays a
//! ConfigMap volume out as
//!
//! ```text
//! ..2026_12_04_13_00_00.000000001/sluice.toml   the data, one folder per version
//! ..data -> ..2026_12_04_13_00_00.000000001
//! sluice.toml -> ..data/sluice.toml             what --config names
//! ```
//!
//! and updates it by writing a new version's folder, pointing a new link
//! `..data_tmp` at it, renaming that over `..data` (atomic) and deleting the
//! old folder. The file the gateway was given never changes as a file: only
//! a link two steps away does, so a watcher that resolved the path once, or
//! watches the file's own inode, misses the kill switch.

mod common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;

/// A ConfigMap volume holding `sluice.toml`, updated as the kubelet does.
struct ConfigMapVolume {
    dir: PathBuf,
    version: u32,
}

impl ConfigMapVolume {
    /// Turns the gateway's config file into a ConfigMap layout holding the
    /// same text (the gateway must not be running).
    fn take_over(config_path: &Path) -> ConfigMapVolume {
        let text = std::fs::read_to_string(config_path).unwrap();
        std::fs::remove_file(config_path).unwrap();
        let mut volume = ConfigMapVolume {
            dir: config_path.parent().unwrap().to_path_buf(),
            version: 0,
        };
        volume.update(&text);
        symlink("..data/sluice.toml", config_path).unwrap();
        volume
    }

    fn folder(&self, version: u32) -> PathBuf {
        self.dir
            .join(format!("..2026_12_04_13_00_{version:02}.{version:09}"))
    }

    /// Publishes `text` as the next version: new folder, `..data` swapped
    /// by renaming a new link over it, old folder removed.
    fn update(&mut self, text: &str) {
        let next = self.version + 1;
        let folder = self.folder(next);
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("sluice.toml"), text).unwrap();
        let tmp = self.dir.join("..data_tmp");
        symlink(folder.file_name().unwrap(), &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
        if self.version > 0 {
            std::fs::remove_dir_all(self.folder(self.version)).unwrap();
        }
        self.version = next;
    }

    fn text(&self) -> String {
        std::fs::read_to_string(self.dir.join("sluice.toml")).unwrap()
    }
}

/// A gateway started with `--config` naming a ConfigMap volume's
/// `sluice.toml` link.
fn gateway_on_a_configmap() -> (Gateway, ConfigMapVolume) {
    let mut gw = Gateway::start(GatewayOptions::default());
    gw.kill9();
    let volume = ConfigMapVolume::take_over(&gw.config_path);
    gw.restart();
    assert!(
        std::fs::symlink_metadata(&gw.config_path)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the gateway runs on the link, as on Kubernetes"
    );
    assert_eq!(admissions(&gw), "open");
    (gw, volume)
}

fn admissions(gw: &Gateway) -> String {
    gw.admin_json("/admin/state")["admissions"]
        .as_str()
        .unwrap()
        .to_string()
}

fn paused(text: &str) -> String {
    text.replace("[gateway]\n", "[gateway]\nadmissions = \"paused\"\n")
}

fn join_status_and_body(gw: &Gateway) -> (u16, String) {
    let resp = raw_request(
        gw.listen,
        "POST /queue/drop/join HTTP/1.1\r\nHost: s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    let body = resp.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    (raw_status(&resp), body.unwrap_or_default())
}

#[test]
fn a_configmap_update_to_a_paused_policy_pauses_admissions_within_a_second() {
    let (gw, mut volume) = gateway_on_a_configmap();
    assert_eq!(join_status_and_body(&gw).0, 202, "open before the update");

    let text = volume.text();
    volume.update(&paused(&text));
    let took = eventually(Duration::from_secs(1), || admissions(&gw) == "paused");
    assert!(
        took.is_some(),
        "the kill switch in a ConfigMap update was not seen within 1 s; log:\n{}",
        gw.log()
    );
    let (status, body) = join_status_and_body(&gw);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("\"admissions_paused\""), "{body}");

    // And back: the next update is followed too (the first folder is gone).
    volume.update(&text);
    assert!(
        eventually(Duration::from_secs(5), || admissions(&gw) == "open").is_some(),
        "reopening by a second update not seen; log:\n{}",
        gw.log()
    );
    assert_eq!(
        gw.metric("sluice_config_reloads_total{result=\"success\"}"),
        Some(2.0)
    );
}

#[test]
fn a_configmap_update_to_a_bad_policy_keeps_the_last_good_one() {
    let (gw, mut volume) = gateway_on_a_configmap();
    let text = volume.text();
    volume.update(&paused(&text));
    assert!(eventually(Duration::from_secs(5), || admissions(&gw) == "paused").is_some());

    volume.update(&text.replace("[gateway]\n", "[gateway]\nadmissions = \"opne\"\n"));
    let failed = eventually(Duration::from_secs(2), || {
        gw.metric("sluice_config_reloads_total{result=\"failure\"}") == Some(1.0)
    });
    assert!(
        failed.is_some(),
        "bad update not refused; log:\n{}",
        gw.log()
    );
    let state = gw.admin_json("/admin/state");
    assert_eq!(
        state["admissions"], "paused",
        "the last good policy runs on"
    );
    let error = state["config"]["last_reload_error"].as_str().unwrap();
    let expected = format!("{}:2:14:", gw.config_path.display());
    assert!(
        error.contains(&expected),
        "error {error:?} should name the path the operator gave, {expected}"
    );
    assert_eq!(join_status_and_body(&gw).0, 503, "still paused");

    // A good update after the bad one is taken.
    volume.update(&text);
    assert!(eventually(Duration::from_secs(5), || admissions(&gw) == "open").is_some());
}
