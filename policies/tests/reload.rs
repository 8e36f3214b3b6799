//! The live snapshot is swapped whole, and only for a valid file.

use sluice_policies::model::Admissions;
use sluice_policies::{ConfigHandle, ReloadError};

fn temp_file(name: &str, content: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-policies-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sluice.toml");
    std::fs::write(&path, content).unwrap();
    path
}

#[test]
fn good_reload_swaps_and_bad_reload_keeps_last_good() {
    let path = temp_file("swap", "[gateway]\nadmissions = \"open\"\n");
    let handle = ConfigHandle::load(&path).unwrap();
    let before = handle.current();
    assert_eq!(before.gateway.admissions, Admissions::Open);

    std::fs::write(&path, "[gateway]\nadmissions = \"paused\"\n").unwrap();
    handle.reload(&|_| Ok(())).unwrap();
    assert_eq!(handle.current().gateway.admissions, Admissions::Paused);
    // A snapshot taken before the reload is untouched.
    assert_eq!(before.gateway.admissions, Admissions::Open);

    std::fs::write(&path, "[gateway]\nadmissions = \"paus\"\n").unwrap();
    let err = handle.reload(&|_| Ok(())).unwrap_err();
    let ReloadError::Invalid(d) = err else {
        panic!("{err}")
    };
    assert_eq!((d.0[0].line, d.0[0].col), (2, 14));
    assert_eq!(handle.current().gateway.admissions, Admissions::Paused);
}

#[test]
fn reload_if_changed_ignores_an_unchanged_file_and_reports_restart_only_keys() {
    let path = temp_file("changed", "[gateway]\n");
    let handle = ConfigHandle::load(&path).unwrap();
    assert!(handle.reload_if_changed(&|_| Ok(())).is_none());
    std::fs::write(&path, "[gateway]\nlisten = \"127.0.0.1:8081\"\n").unwrap();
    let outcome = handle.reload_if_changed(&|_| Ok(())).unwrap().unwrap();
    assert_eq!(outcome.restart_required, vec!["gateway.listen"]);
    assert!(handle.reload_if_changed(&|_| Ok(())).is_none());
}

#[test]
fn overrides_are_reapplied_on_reload() {
    let path = temp_file("override", "[gateway]\n");
    let handle = ConfigHandle::load(&path).unwrap();
    std::fs::write(&path, "[gateway]\nadmissions = \"paused\"\n").unwrap();
    let port = "127.0.0.1:18080".parse().unwrap();
    handle
        .reload(&|c| {
            c.gateway.listen = port;
            Ok(())
        })
        .unwrap();
    assert_eq!(handle.current().gateway.listen, port);
}

#[test]
fn a_refusing_prepare_step_keeps_the_last_good_snapshot() {
    let path = temp_file("prepare", "[gateway]\n");
    let handle = ConfigHandle::load(&path).unwrap();
    std::fs::write(&path, "[gateway]\nadmissions = \"paused\"\n").unwrap();
    let err = handle
        .reload(&|_| Err("catalog unreadable".into()))
        .unwrap_err();
    assert!(
        matches!(err, ReloadError::Rejected(ref m) if m == "catalog unreadable"),
        "{err}"
    );
    assert_eq!(handle.current().gateway.admissions, Admissions::Open);
}
