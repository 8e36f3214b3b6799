//! What a fleet's config must hold beyond a single gateway's.

use sluice_policies::Config;

/// What a fleet's config must hold beyond a single gateway's.
pub fn check_config(config: &Config) -> Result<(), String> {
    if config.keys.is_empty() {
        return Err(
            "[cluster] redis_url: every gateway of a fleet signs and checks the \
                    same tickets and passes, so the config must list its [[keys]] \
                    (the same on every gateway; `sluice keygen` makes one)"
                .into(),
        );
    }
    // One line for the fleet but a stock per gateway would sell the stock
    // once per gateway: a fleet that sells keeps its stock and orders on
    // the shared PostgreSQL (tests of the line alone opt in).
    let knobs =
        std::env::var(sluice_policies::validate::ALLOW_TEST_KNOBS_ENV).as_deref() == Ok("1");
    if !config.products.is_empty() && config.cluster.postgres_url.is_none() && !knobs {
        return Err(format!(
            "[cluster] redis_url with [[products]] needs [cluster] postgres_url (or \
             postgres_url_env): the rooms would be one line for the fleet but each gateway \
             would sell its own stock from its data_dir, so N gateways would sell the stock \
             N times; refused (set {}=1 to run a fleet's line alone, for tests)",
            sluice_policies::validate::ALLOW_TEST_KNOBS_ENV
        ));
    }
    // One place per account on any gateway needs the same account hash on
    // every gateway: a key each made for itself would hash one account
    // differently on each.
    if let Some(room) = config.rooms.iter().find(|r| !r.enqueue.keys.is_empty()) {
        if config.cluster.account_hash_key.is_none() {
            return Err(format!(
                "room {:?}: [rooms.enqueue] on [cluster] redis_url needs [cluster] \
                 account_hash_key_env (the same key on every gateway), so that an account \
                 has one place on any gateway",
                room.name
            ));
        }
    }
    // A fleet's account places are kept by seq, and a fair start's places
    // are drawn from the seqs at the opening: the two together are not
    // built on a fleet.
    if let Some(room) = config
        .rooms
        .iter()
        .find(|r| r.opens_at_unix.is_some() && !r.enqueue.keys.is_empty())
    {
        return Err(format!(
            "room {:?}: a fair start (opens_at) with one place per account \
             ([rooms.enqueue]) is not built for rooms on [cluster] redis_url; leave one \
             of them out",
            room.name
        ));
    }
    Ok(())
}
