//! The claims every ticket and pass carries, exactly as the contract names
//! them.

use serde::{Deserialize, Serialize};

/// The `iss` of every token Sluice mints.
pub const ISSUER: &str = "sluice";

/// What a token grants: a place in line, or entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenType {
    Ticket,
    Pass,
}

impl TokenType {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenType::Ticket => "ticket",
            TokenType::Pass => "pass",
        }
    }
}

/// JWT claims of a ticket or pass.
///
/// Unknown claims are refused rather than ignored: Sluice is the only issuer,
/// so a token with extra claims was not made by it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claims {
    /// Always [`ISSUER`].
    pub iss: String,
    /// The room name.
    pub aud: String,
    /// The ticket id: 128 bits, 32 lowercase hex digits. A pass carries the
    /// id of the ticket it was minted for.
    pub sub: String,
    /// The place in line the ticket was given at join.
    pub seq: u64,
    pub typ: TokenType,
    /// Issued at, unix seconds. Required: a token without it is malformed.
    pub iat: u64,
    /// Expires at, unix seconds; the token is valid while `now < exp`.
    pub exp: u64,
    /// For a place taken with a store's enqueue token: the account hash
    /// (32 lowercase hex digits, [`crate::enqueue::AccountHash`]), never
    /// the account id. The origin gets it as `Sluice-Pass-Account`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acct: Option<String>,
}

impl Claims {
    /// Claims of a ticket or pass for `room`.
    pub fn new(typ: TokenType, room: &str, sub: &str, seq: u64, iat: u64, exp: u64) -> Self {
        Self {
            iss: ISSUER.to_owned(),
            aud: room.to_owned(),
            sub: sub.to_owned(),
            seq,
            typ,
            iat,
            exp,
            acct: None,
        }
    }

    /// The same claims for a place held by `account`.
    pub fn for_account(mut self, account: Option<&crate::enqueue::AccountHash>) -> Self {
        self.acct = account.map(|a| a.to_hex());
        self
    }
}
