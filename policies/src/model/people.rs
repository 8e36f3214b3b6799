//! A room's defences and its event: the join challenge, the store's
//! enqueue tokens, lanes, standby and the event's times
//! (`contract.md`, "People and events").

use std::num::NonZeroU32;
use std::time::Duration;

use super::{KeyAlg, Secret};

/// `mode`: whether the line always forms, or only under load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RoomMode {
    /// Every joiner waits in line (today's behaviour).
    #[default]
    Queue,
    /// While arrivals stay at or under `above_per_second`, a joiner is
    /// admitted at once (within `max_active`); above it the line forms.
    Standby { above_per_second: NonZeroU32 },
}

impl RoomMode {
    /// The word `/admin/state` and the status JSON show.
    pub fn as_str(self) -> &'static str {
        match self {
            RoomMode::Queue => "queue",
            RoomMode::Standby { .. } => "standby",
        }
    }
}

/// `[rooms.challenge]`: what a join must show before it gets a place.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Challenge {
    /// No challenge (default).
    #[default]
    None,
    /// `kind = "pow"`: a SHA-256 proof of work.
    Pow(PowChallenge),
    /// `kind = "siteverify"`: a Turnstile / hCaptcha / reCAPTCHA token
    /// checked with the vendor's verifier.
    SiteVerify(SiteVerify),
}

impl Challenge {
    pub fn kind(&self) -> &'static str {
        match self {
            Challenge::None => "none",
            Challenge::Pow(_) => "pow",
            Challenge::SiteVerify(_) => "siteverify",
        }
    }
}

/// `kind = "pow"`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PowChallenge {
    pub difficulty: Difficulty,
    /// How long an issued challenge may be solved and used (and how long
    /// the record that it was used is kept).
    pub ttl: Duration,
}

/// Leading zero bits a solution's SHA-256 must have.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Difficulty {
    Fixed(u8),
    /// `"adaptive"`: `min_bits` at or under `target_joins_per_second`,
    /// one bit more per doubling of the join rate above it, at most
    /// `max_bits`.
    Adaptive {
        min_bits: u8,
        max_bits: u8,
        target_joins_per_second: NonZeroU32,
    },
}

/// The widget a siteverify room's page embeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Widget {
    Turnstile,
    Hcaptcha,
    Recaptcha,
}

impl Widget {
    pub fn as_str(self) -> &'static str {
        match self {
            Widget::Turnstile => "turnstile",
            Widget::Hcaptcha => "hcaptcha",
            Widget::Recaptcha => "recaptcha",
        }
    }

    /// The vendor's verify endpoint (`verify_url` when the room names none).
    pub fn default_verify_url(self) -> &'static str {
        match self {
            Widget::Turnstile => "https://challenges.cloudflare.com/turnstile/v0/siteverify",
            Widget::Hcaptcha => "https://api.hcaptcha.com/siteverify",
            Widget::Recaptcha => "https://www.google.com/recaptcha/api/siteverify",
        }
    }

    /// The vendor's widget script (`script_url` when the room names none).
    pub fn default_script_url(self) -> &'static str {
        match self {
            Widget::Turnstile => "https://challenges.cloudflare.com/turnstile/v0/api.js",
            Widget::Hcaptcha => "https://js.hcaptcha.com/1/api.js",
            Widget::Recaptcha => "https://www.google.com/recaptcha/api.js",
        }
    }
}

/// What a join gets when the verifier is slow, down or answers nonsense.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnVerifierError {
    /// `403 challenge_failed` (default): no place without a verified "yes".
    #[default]
    Refuse,
    /// The join goes on as if the verifier had said yes.
    Admit,
}

/// `kind = "siteverify"`.
#[derive(Debug, Clone, PartialEq)]
pub struct SiteVerify {
    pub widget: Widget,
    /// `POST secret, response, remoteip` here; JSON `success` answers.
    pub verify_url: String,
    /// The verifier's secret, read from `secret_env` at load.
    pub secret: Secret,
    /// The public site key the page's widget is rendered with.
    pub site_key: String,
    /// The widget's script, named in the page's CSP.
    pub script_url: String,
    /// The verifier's `hostname` must be one of these; empty: not checked.
    pub hostnames: Vec<String>,
    pub on_verifier_error: OnVerifierError,
    /// One verifier call, at most; past it the call is a verifier error.
    pub timeout: Duration,
    /// Verifier calls in flight at once for this room; over it the join
    /// is `503` with `Retry-After`, whatever `on_verifier_error` says.
    pub in_flight_max: NonZeroU32,
}

/// `[rooms.enqueue]`: the store's signed enqueue tokens.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Enqueue {
    /// A join without a valid enqueue token is `401 enqueue_token_required`.
    pub required: bool,
    /// The store's keys, by `kid`; empty: no enqueue token is accepted.
    pub keys: Vec<EnqueueKey>,
}

/// One key that verifies the store's enqueue tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct EnqueueKey {
    pub kid: String,
    pub material: EnqueueKeyMaterial,
}

impl EnqueueKey {
    pub fn alg(&self) -> KeyAlg {
        match self.material {
            EnqueueKeyMaterial::Hs256(_) => KeyAlg::Hs256,
            EnqueueKeyMaterial::Ed25519Public(_) => KeyAlg::EdDsa,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum EnqueueKeyMaterial {
    /// The shared HS256 secret, decoded (at least 32 bytes).
    Hs256(SecretBytes),
    /// The store's Ed25519 public key (the 32 raw bytes).
    Ed25519Public([u8; 32]),
}

/// Secret bytes that must never reach a log line.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretBytes(Vec<u8>);

impl SecretBytes {
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for SecretBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretBytes(..)")
    }
}

/// The name of the lane of shoppers whose token names none (and of
/// shoppers without a token); a configured lane may not take it.
pub const DEFAULT_LANE: &str = "default";

/// `[[rooms.lanes]]`: a line of its own inside the room.
#[derive(Debug, Clone, PartialEq)]
pub struct Lane {
    /// `[a-z0-9_-]`, 1 to 32; the `lane` metric label.
    pub name: String,
    /// Of the places each release gives; 0 for a bypass lane.
    pub share: f64,
    /// Admitted at once (within `max_active`, never before `opens_at`).
    pub bypass: bool,
}
