//! `[rooms.challenge]`: the proof of work (`kind = "pow"`) or the
//! siteverify widget (`kind = "siteverify"`) a join must pass.
//!
//! Each key belongs to one kind (and `min_bits`, `max_bits`,
//! `target_joins_per_second` to `difficulty_bits = "adaptive"`); a key given
//! for another kind is refused rather than ignored.

use std::time::Duration;

use toml::Spanned;

use super::{nz32, Validator};
use crate::file::{ChallengeFile, RateFile};
use crate::model::{Challenge, Difficulty, OnVerifierError, PowChallenge, SiteVerify, Widget};

/// The least and most leading zero bits a proof of work may ask for. One
/// bit doubles the work: 28 bits is about 270 million hashes, minutes on
/// a phone; more would only shut honest shoppers out.
pub const DIFFICULTY_BITS: std::ops::RangeInclusive<i64> = 1..=28;
/// `difficulty_bits` when the table leaves it out.
pub const DIFFICULTY_BITS_DEFAULT: i64 = 18;
/// Adaptive bounds when the table leaves them out.
pub const MIN_BITS_DEFAULT: i64 = 12;
pub const MAX_BITS_DEFAULT: i64 = 24;
/// `challenge_ttl_s`: default and bounds.
pub const CHALLENGE_TTL_S_DEFAULT: i64 = 60;
pub const CHALLENGE_TTL_S: std::ops::RangeInclusive<i64> = 10..=600;
/// A verifier call: default timeout and bounds (ms).
pub const VERIFY_TIMEOUT_MS_DEFAULT: i64 = 2_000;
/// Verifier calls in flight per room and gateway, by default.
pub const VERIFY_IN_FLIGHT_DEFAULT: i64 = 256;
/// Most `hostnames` entries.
const HOSTNAMES_MAX: usize = 64;

impl Validator<'_> {
    pub(super) fn challenge(&mut self, table: Option<Spanned<ChallengeFile>>) -> Challenge {
        let Some(table) = table else {
            return Challenge::None;
        };
        let table_span = table.span();
        let c = table.into_inner();
        let kind = match &c.kind {
            None => "none".to_string(),
            Some(k) => k.get_ref().clone(),
        };
        if !matches!(kind.as_str(), "none" | "pow" | "siteverify") {
            let span = c.kind.as_ref().map(|k| k.span());
            self.problems.push(self.loc.at(
                span,
                format!("`kind` must be \"none\", \"pow\" or \"siteverify\", got {kind:?}"),
            ));
            return Challenge::None;
        }
        let owned = [
            (
                c.difficulty_bits.as_ref().map(|v| v.span()),
                "difficulty_bits",
                "pow",
            ),
            (c.min_bits.as_ref().map(|v| v.span()), "min_bits", "pow"),
            (c.max_bits.as_ref().map(|v| v.span()), "max_bits", "pow"),
            (
                c.target_joins_per_second.as_ref().map(|v| v.span()),
                "target_joins_per_second",
                "pow",
            ),
            (
                c.challenge_ttl_s.as_ref().map(|v| v.span()),
                "challenge_ttl_s",
                "pow",
            ),
            (c.widget.as_ref().map(|v| v.span()), "widget", "siteverify"),
            (
                c.verify_url.as_ref().map(|v| v.span()),
                "verify_url",
                "siteverify",
            ),
            (
                c.secret_env.as_ref().map(|v| v.span()),
                "secret_env",
                "siteverify",
            ),
            (
                c.site_key.as_ref().map(|v| v.span()),
                "site_key",
                "siteverify",
            ),
            (
                c.script_url.as_ref().map(|v| v.span()),
                "script_url",
                "siteverify",
            ),
            (
                c.hostnames.as_ref().map(|v| v.span()),
                "hostnames",
                "siteverify",
            ),
            (
                c.on_verifier_error.as_ref().map(|v| v.span()),
                "on_verifier_error",
                "siteverify",
            ),
            (
                c.timeout_ms.as_ref().map(|v| v.span()),
                "timeout_ms",
                "siteverify",
            ),
            (
                c.in_flight_max.as_ref().map(|v| v.span()),
                "in_flight_max",
                "siteverify",
            ),
        ];
        let mut foreign = false;
        for (at, key, owner) in owned {
            if at.is_some() && owner != kind {
                foreign = true;
                self.problems.push(
                    self.loc
                        .at(at, format!("`{key}` only applies to kind = \"{owner}\"")),
                );
            }
        }
        if foreign {
            return Challenge::None;
        }
        match kind.as_str() {
            "pow" => Challenge::Pow(self.pow(c)),
            "siteverify" => match self.siteverify(c, table_span) {
                Some(s) => Challenge::SiteVerify(s),
                None => Challenge::None,
            },
            _ => Challenge::None,
        }
    }

    fn bits(&mut self, value: Option<Spanned<i64>>, key: &str, default: i64) -> u8 {
        self.int(value, key, DIFFICULTY_BITS, default) as u8
    }

    fn pow(&mut self, c: ChallengeFile) -> PowChallenge {
        let ttl_s = self.int(
            c.challenge_ttl_s,
            "challenge_ttl_s",
            CHALLENGE_TTL_S,
            CHALLENGE_TTL_S_DEFAULT,
        );
        let ttl = Duration::from_secs(ttl_s as u64);
        let adaptive_span = match &c.difficulty_bits {
            Some(d) => {
                match d.get_ref() {
                    RateFile::Word(w) if w == "adaptive" => Some(d.span()),
                    RateFile::Word(w) => {
                        self.problem(
                        d,
                        format!("`difficulty_bits` must be a number of bits or \"adaptive\", got {w:?}"),
                    );
                        None
                    }
                    RateFile::Fixed(_) => None,
                }
            }
            None => None,
        };
        let Some(adaptive_span) = adaptive_span else {
            for (v, key) in [
                (&c.min_bits, "min_bits"),
                (&c.max_bits, "max_bits"),
                (&c.target_joins_per_second, "target_joins_per_second"),
            ] {
                if let Some(v) = v {
                    self.problem(
                        v,
                        format!("`{key}` only applies to difficulty_bits = \"adaptive\""),
                    );
                }
            }
            let bits = match c.difficulty_bits {
                Some(d) => {
                    let span = d.span();
                    match d.into_inner() {
                        RateFile::Fixed(n) => self.bits(
                            Some(Spanned::new(span, n)),
                            "difficulty_bits",
                            DIFFICULTY_BITS_DEFAULT,
                        ),
                        RateFile::Word(_) => DIFFICULTY_BITS_DEFAULT as u8,
                    }
                }
                None => DIFFICULTY_BITS_DEFAULT as u8,
            };
            return PowChallenge {
                difficulty: Difficulty::Fixed(bits),
                ttl,
            };
        };
        if c.target_joins_per_second.is_none() {
            self.problems.push(self.loc.at(
                Some(adaptive_span),
                "difficulty_bits = \"adaptive\" needs `target_joins_per_second`: the join rate above which the difficulty rises",
            ));
        }
        let target = self.int(
            c.target_joins_per_second,
            "target_joins_per_second",
            1..=1_000_000,
            1,
        );
        let min_span = c.min_bits.as_ref().map(|v| v.span());
        let max_span = c.max_bits.as_ref().map(|v| v.span());
        let min_bits = self.bits(c.min_bits, "min_bits", MIN_BITS_DEFAULT);
        let max_bits = self.bits(
            c.max_bits,
            "max_bits",
            MAX_BITS_DEFAULT.max(min_bits as i64),
        );
        if min_bits > max_bits {
            self.problems.push(self.loc.at(
                min_span.or(max_span),
                format!("`min_bits` ({min_bits}) must not be above `max_bits` ({max_bits})"),
            ));
        }
        PowChallenge {
            difficulty: Difficulty::Adaptive {
                min_bits: min_bits.min(max_bits),
                max_bits,
                target_joins_per_second: nz32(target),
            },
            ttl,
        }
    }

    fn siteverify(
        &mut self,
        c: ChallengeFile,
        table_span: std::ops::Range<usize>,
    ) -> Option<SiteVerify> {
        let widget = match &c.widget {
            None => {
                self.problems.push(self.loc.at(
                    Some(table_span.clone()),
                    "kind = \"siteverify\" needs `widget`: \"turnstile\", \"hcaptcha\" or \"recaptcha\"",
                ));
                None
            }
            Some(w) => match w.get_ref().as_str() {
                "turnstile" => Some(Widget::Turnstile),
                "hcaptcha" => Some(Widget::Hcaptcha),
                "recaptcha" => Some(Widget::Recaptcha),
                other => {
                    self.problem(
                        w,
                        format!("`widget` must be \"turnstile\", \"hcaptcha\" or \"recaptcha\", got {other:?}"),
                    );
                    None
                }
            },
        };
        let verify_url = c.verify_url.and_then(|u| self.http_url(u, "verify_url"));
        let script_url = c.script_url.and_then(|u| self.http_url(u, "script_url"));
        let secret = match c.secret_env {
            Some(name) => self.secret_env(name, "secret_env", "the siteverify secret"),
            None => {
                self.problems.push(self.loc.at(
                    Some(table_span.clone()),
                    "kind = \"siteverify\" needs `secret_env`: the variable holding the verifier's secret",
                ));
                None
            }
        };
        let site_key = match c.site_key {
            Some(k) => {
                let text = k.get_ref();
                let ok = (1..=256).contains(&text.len())
                    && text
                        .chars()
                        .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '-' | '_' | '.'));
                if ok {
                    Some(k.into_inner())
                } else {
                    self.problem(
                        &k,
                        "`site_key` must be 1 to 256 of letters, digits, `-`, `_` or `.`",
                    );
                    None
                }
            }
            None => {
                self.problems.push(self.loc.at(
                    Some(table_span),
                    "kind = \"siteverify\" needs `site_key`: the public key the page's widget is rendered with",
                ));
                None
            }
        };
        let hostnames = self.hostnames(c.hostnames);
        let on_verifier_error = match c.on_verifier_error {
            None => OnVerifierError::Refuse,
            Some(v) => {
                match v.get_ref().as_str() {
                    "refuse" => OnVerifierError::Refuse,
                    "admit" => OnVerifierError::Admit,
                    other => {
                        self.problem(
                        &v,
                        format!("`on_verifier_error` must be \"refuse\" or \"admit\", got {other:?}"),
                    );
                        OnVerifierError::Refuse
                    }
                }
            }
        };
        let timeout_ms = self.int(
            c.timeout_ms,
            "timeout_ms",
            1..=30_000,
            VERIFY_TIMEOUT_MS_DEFAULT,
        );
        let in_flight_max = self.int(
            c.in_flight_max,
            "in_flight_max",
            1..=100_000,
            VERIFY_IN_FLIGHT_DEFAULT,
        );
        let widget = widget?;
        Some(SiteVerify {
            widget,
            verify_url: verify_url.unwrap_or_else(|| widget.default_verify_url().to_string()),
            secret: secret?,
            site_key: site_key?,
            script_url: script_url.unwrap_or_else(|| widget.default_script_url().to_string()),
            hostnames,
            on_verifier_error,
            timeout: Duration::from_millis(timeout_ms as u64),
            in_flight_max: nz32(in_flight_max),
        })
    }

    /// An `http://` or `https://` URL with a host and no whitespace, quote
    /// or angle bracket (it is written into the page and its CSP).
    fn http_url(&mut self, value: Spanned<String>, key: &str) -> Option<String> {
        let text = value.get_ref().trim();
        let rest = text
            .strip_prefix("https://")
            .or_else(|| text.strip_prefix("http://"));
        let ok = rest.is_some_and(|r| {
            !r.is_empty()
                && !r.starts_with('/')
                && !r
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control() || "\"'<>`\\".contains(c))
        }) && text.len() <= 2048;
        if ok {
            Some(text.to_string())
        } else {
            self.problem(
                &value,
                format!("`{key}` must be an http:// or https:// URL, got {:?}", text),
            );
            None
        }
    }

    fn hostnames(&mut self, value: Option<Spanned<Vec<Spanned<String>>>>) -> Vec<String> {
        let Some(list) = value else {
            return Vec::new();
        };
        if list.get_ref().len() > HOSTNAMES_MAX {
            self.problem(
                &list,
                format!("`hostnames` holds at most {HOSTNAMES_MAX} names"),
            );
            return Vec::new();
        }
        let mut out = Vec::new();
        for name in list.into_inner() {
            let text = name.get_ref().to_ascii_lowercase();
            let ok = (1..=253).contains(&text.len())
                && text.split('.').all(|label| {
                    (1..=63).contains(&label.len())
                        && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                        && !label.starts_with('-')
                        && !label.ends_with('-')
                });
            if ok {
                out.push(text);
            } else {
                self.problem(
                    &name,
                    format!(
                        "`hostnames` entries must be host names like \"shop.example\", got {:?}",
                        name.get_ref()
                    ),
                );
            }
        }
        out
    }
}
