//! The store, as far as the room needs one: it signs an enqueue token for
//! each signed-in account (a JWT, HS256, header `kid` naming the key the
//! harness wrote into the room's `[rooms.enqueue]`, `sub` the account,
//! `aud` the room, `iat`, `exp`).

use base64::Engine;

use super::gateway::STORE_KID;

/// How long the tokens the harness signs are good for.
pub const TOKEN_LIFE_S: u64 = 3_600;

/// An enqueue token for `account` in `room`, signed with `key`
/// (base64url, as written into the room's config).
pub fn enqueue_token(key: &str, room: &str, account: &str) -> String {
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(key)
        .unwrap_or_default();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    header.kid = Some(STORE_KID.into());
    let claims = serde_json::json!({
        "sub": account, "aud": room, "iat": now, "exp": now + TOKEN_LIFE_S,
    });
    jsonwebtoken::encode(
        &header,
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(&secret),
    )
    .unwrap_or_default()
}
