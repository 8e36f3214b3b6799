//! `[cluster]`: the Redis and PostgreSQL a fleet of gateways shares.
//!
//! Each store is named either inline (`redis_url`) or by the environment
//! variable holding it (`redis_url_env`), never both; the URL is a
//! [`Secret`] (it usually carries a password) and must use the store's own
//! scheme.
//!
//! `account_hash_key_env` names the variable holding the key of the account
//! hash (the keyed hash an enqueue token's `sub` is kept as), at least 32
//! characters, the same on every gateway.
//!
//! `postgres_prepared_statements` (a bool, default true) is whether a
//! PostgreSQL connection keeps its prepared statements; it needs
//! PostgreSQL named.

use toml::Spanned;

use super::Validator;
use crate::file::ClusterFile;
use crate::model::{Cluster, Secret};

/// The account hash key's least length, in characters.
pub const ACCOUNT_HASH_KEY_MIN: usize = 32;

impl Validator<'_> {
    pub(super) fn cluster(&mut self, file: Option<Spanned<ClusterFile>>) -> Cluster {
        let Some(file) = file else {
            return Cluster::default();
        };
        let span = file.span();
        let file = file.into_inner();
        let names_postgres = file.postgres_url.is_some() || file.postgres_url_env.is_some();
        let redis_url = self.store_url(
            file.redis_url,
            file.redis_url_env,
            "redis_url",
            &["redis://", "rediss://"],
        );
        let postgres_url = self.store_url(
            file.postgres_url,
            file.postgres_url_env,
            "postgres_url",
            &["postgres://", "postgresql://"],
        );
        let postgres_prepared_statements = match file.postgres_prepared_statements {
            Some(keep) if !names_postgres => {
                self.problem(
                    &keep,
                    "`cluster.postgres_prepared_statements` needs `postgres_url` or `postgres_url_env`",
                );
                true
            }
            Some(keep) => keep.into_inner(),
            None => true,
        };
        let names_hash_key = file.account_hash_key_env.is_some();
        let account_hash_key = file
            .account_hash_key_env
            .and_then(|name| self.account_hash_key(name));
        if redis_url.is_none()
            && postgres_url.is_none()
            && !names_hash_key
            && self.problems.is_empty()
        {
            self.problems.push(self.loc.at(
                Some(span),
                "[cluster] needs `redis_url`/`redis_url_env` or `postgres_url`/`postgres_url_env` (leave the table out to keep everything embedded)",
            ));
        }
        Cluster {
            redis_url,
            postgres_url,
            postgres_prepared_statements,
            account_hash_key,
        }
    }

    /// The account hash's key: at least 32 characters, the same on every
    /// gateway (never echoed).
    fn account_hash_key(&mut self, name: Spanned<String>) -> Option<Secret> {
        let var = name.get_ref().clone();
        let key = self.secret_env(
            name.clone(),
            "cluster.account_hash_key_env",
            "the account hash key",
        )?;
        if key.expose().len() < ACCOUNT_HASH_KEY_MIN {
            self.problem(
                &name,
                format!("environment variable {var} (the account hash key) must hold at least {ACCOUNT_HASH_KEY_MIN} characters"),
            );
            return None;
        }
        Some(key)
    }

    fn store_url(
        &mut self,
        inline: Option<Spanned<String>>,
        env: Option<Spanned<String>>,
        key: &str,
        schemes: &[&str],
    ) -> Option<Secret> {
        let (value, span) = match (inline, env) {
            (None, None) => return None,
            (Some(_), Some(env)) => {
                self.problem(
                    &env,
                    format!("set `cluster.{key}` or `cluster.{key}_env`, not both"),
                );
                return None;
            }
            (Some(url), None) => {
                let span = url.span();
                (url.into_inner(), span)
            }
            (None, Some(name)) => {
                let var = name.get_ref().clone();
                let valid_name =
                    !var.is_empty() && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !valid_name {
                    self.problem(
                        &name,
                        format!(
                            "`cluster.{key}_env` must name an environment variable, got {var:?}"
                        ),
                    );
                    return None;
                }
                match (self.env)(&var) {
                    Some(url) => (url, name.span()),
                    None => {
                        self.problem(
                            &name,
                            format!("environment variable {var} (`cluster.{key}`) is not set"),
                        );
                        return None;
                    }
                }
            }
        };
        if !schemes
            .iter()
            .any(|s| value.len() > s.len() && value.starts_with(s))
        {
            // Never echo the value: it may carry a password.
            self.problems.push(self.loc.at(
                Some(span),
                format!(
                    "`cluster.{key}` must be a URL starting with {}",
                    schemes.join(" or ")
                ),
            ));
            return None;
        }
        Some(Secret::new(value))
    }
}
