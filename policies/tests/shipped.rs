//! Every config file the project ships must validate.

use std::path::{Path, PathBuf};

use sluice_policies::validate::parse_with_env;

fn shipped_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("demo.toml")];
    for entry in std::fs::read_dir(root.join("examples")).expect("policies/examples exists") {
        let path = entry.expect("readable dir entry").path();
        if path.extension().is_some_and(|e| e == "toml") {
            files.push(path);
        }
    }
    files.sort();
    files
}

#[test]
fn every_shipped_policy_file_validates() {
    let files = shipped_files();
    assert!(
        files.len() >= 2,
        "demo.toml and at least one example ship: {files:?}"
    );
    // Examples that protect their admin listener (or call a provider) name
    // the secret's variable; give it a value so the rest of the file is
    // what gets checked.
    let env = |name: &str| {
        matches!(name, "SLUICE_ADMIN_TOKEN" | "SLUICE_PSP_API_KEY")
            .then(|| "0123456789abcdef-example".to_string())
    };
    for file in files {
        let source = std::fs::read_to_string(&file).unwrap();
        if let Err(problems) = parse_with_env(&source, &file, &env) {
            panic!("{} does not validate:\n{problems}", file.display());
        }
    }
}

#[test]
fn demo_matches_the_demo_store() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("demo.toml");
    let config = sluice_policies::load_file(&file).unwrap();
    assert_eq!(config.gateway.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(config.gateway.admin_listen.to_string(), "127.0.0.1:9090");
    assert!(
        config.gateway.origin.is_none(),
        "the demo runs with nothing but the binary"
    );
    let static_dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(&config.gateway.static_dir);
    for product in &config.products {
        let page = static_dir
            .join("products")
            .join(format!("{}.html", product.sku));
        assert!(
            page.is_file(),
            "demo product {} has no page at {}",
            product.sku,
            page.display()
        );
    }
}
