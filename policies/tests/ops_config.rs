//! The operations keys: `gateway.region` and `gateway.node_id` (metric
//! label and node id), `payments.api_key_env`, `payments.currency` and the
//! per-provider webhook secrets.

use std::path::Path;

use sluice_policies::validate::parse_with_env;
use sluice_policies::{Config, Diagnostics};

fn parse_env(src: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, Diagnostics> {
    parse_with_env(src, Path::new("p.toml"), env)
}

fn parse(src: &str) -> Result<Config, Diagnostics> {
    parse_env(src, &|_| None)
}

fn refused(src: &str, needle: &str) -> (usize, usize) {
    let problems = parse(src).expect_err("refused").0;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].message.contains(needle), "{problems:?}");
    (problems[0].line, problems[0].col)
}

#[test]
fn region_defaults_to_local_and_must_be_label_safe() {
    let c = parse("[gateway]\n").unwrap();
    assert_eq!(c.gateway.region, "local");
    assert_eq!(c.gateway.node_id, None);
    let c = parse("[gateway]\nregion = \"sa-east-1\"\nnode_id = \"gw-A.1:8080\"\n").unwrap();
    assert_eq!(c.gateway.region, "sa-east-1");
    assert_eq!(c.gateway.node_id.as_deref(), Some("gw-A.1:8080"));
    for bad in ["\"\"", "\"Sa East\"", "\"a\\\"b\"", "\"sa/east\""] {
        assert_eq!(
            refused(&format!("[gateway]\nregion = {bad}\n"), "`region` must be"),
            (2, 10),
            "{bad}"
        );
    }
    refused("[gateway]\nnode_id = \"a b\"\n", "`node_id` must be");
}

#[test]
fn the_api_key_comes_from_the_environment() {
    let src = "[gateway]\n[payments]\nprovider = \"http\"\nurl = \"http://127.0.0.1:7070\"\napi_key_env = \"PSP_KEY\"\ncurrency = \"EUR\"\n";
    let c = parse_env(src, &|name| {
        (name == "PSP_KEY").then(|| "sk_live_0123456789abcdef".to_string())
    })
    .unwrap();
    assert_eq!(
        c.payments.api_key.as_ref().map(|k| k.expose()),
        Some("sk_live_0123456789abcdef")
    );
    assert_eq!(c.payments.currency, "EUR");
    assert_eq!(
        format!("{:?}", c.payments.api_key),
        "Some(Secret(..))",
        "never printed"
    );
    let problems = parse(src).expect_err("unset variable").0;
    assert!(
        problems[0]
            .message
            .contains("PSP_KEY (the payment provider's API key) is not set"),
        "{problems:?}"
    );
    let short = parse_env(src, &|_| Some("short".into())).expect_err("short key");
    assert!(short.0[0].message.contains("shorter than 16"), "{short:?}");
}

#[test]
fn webhook_secrets_are_chosen_by_provider() {
    let src = r#"[gateway]
[payments]
webhook_secrets = ["shared-secret-0123456789"]
[payments.webhooks.simulated]
secrets = ["sim-secret-0123456789ab"]
[payments.webhooks.acme]
secrets = ["acme-new-0123456789abc", "acme-old-0123456789abc"]
"#;
    let c = parse(src).unwrap();
    let names = |provider: &str| -> Option<Vec<String>> {
        c.payments
            .webhook_secrets_for(provider)
            .map(|s| s.iter().map(|s| s.expose().to_string()).collect())
    };
    assert_eq!(names("simulated").unwrap(), ["sim-secret-0123456789ab"]);
    assert_eq!(names("acme").unwrap().len(), 2);
    // A provider without a section falls back to the shared list ...
    assert_eq!(names("paysim").unwrap(), ["shared-secret-0123456789"]);
    // ... but never a path that is not a provider name.
    assert_eq!(names("acme/extra"), None);
    assert_eq!(names(""), None);
    // Without a shared list, a provider without a section has no endpoint.
    let only = parse(
        "[gateway]\n[payments]\n[payments.webhooks.acme]\nsecrets = [\"acme-new-0123456789abc\"]\n",
    )
    .unwrap();
    assert!(only.payments.webhook_secrets_for("acme").is_some());
    assert!(only.payments.webhook_secrets_for("paysim").is_none());

    refused(
        "[gateway]\n[payments]\n[payments.webhooks.acme]\nsecrets = [\"short\"]\n",
        "at least 16 characters",
    );
    refused(
        "[gateway]\n[payments]\n[payments.webhooks.Acme]\nsecrets = [\"acme-new-0123456789abc\"]\n",
        "webhook provider name",
    );
    refused(
        "[gateway]\n[payments]\n[payments.webhooks.acme]\nsecret = [\"acme-new-0123456789abc\"]\n",
        "unknown field",
    );
}
