//! `GET /.well-known/sluice/jwks.json`: the public keys of the keyring's
//! `EdDSA` keys as a JWK Set (RFC 7517), each an RFC 8037 OKP key with its
//! `kid`, so an origin can verify a pass itself.
//!
//! Every EdDSA key of `[[keys]]` is listed, the signing one and those kept
//! only to verify: a key is published as soon as it is configured, so an
//! operator who adds a new key second (verify only), waits out the
//! document's `max-age`, then moves it first has it published before it
//! signs. HS256 keys are shared secrets with no public half: a keyring of
//! HS256 keys only (and the key made in `data_dir` when `[[keys]]` is
//! empty) publishes an empty set, and its passes can be checked only by
//! someone holding the secret.
//!
//! The document is built once per config ([`document`], kept in the
//! runtime snapshot) and served as is.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use bytes::Bytes;
use http::{header, HeaderValue, Method, StatusCode};
use jsonwebtoken::jwk::{
    AlgorithmParameters, CommonParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm,
    OctetKeyPairParameters, OctetKeyPairType, PublicKeyUse,
};
use sluice_admission::tokens::Keyring;
use sluice_policies::model::SigningKey;

use crate::error::{ApiError, ErrorCode};
use crate::response::LocalResponse;

/// Where the document is served.
pub const PATH: &str = "/.well-known/sluice/jwks.json";

/// How long a client or CDN may keep the document: also how long a new key
/// must be published before it signs.
const MAX_AGE: &str = "public, max-age=300";

/// The JWK Set of `keys`' EdDSA keys, as JSON. Keys the config check
/// refused never reach here; a list that still does not make a keyring
/// (none at all) publishes the empty set.
pub fn document(keys: &[SigningKey]) -> Bytes {
    let set = JwkSet {
        keys: Keyring::from_config(keys)
            .map(|ring| {
                ring.ed25519_public_keys()
                    .map(|(kid, x)| okp(kid, x))
                    .collect()
            })
            .unwrap_or_default(),
    };
    Bytes::from(serde_json::to_vec(&set).expect("a JWK set serializes"))
}

/// One Ed25519 public key as an RFC 8037 §2 OKP JWK.
fn okp(kid: &str, x: &[u8]) -> Jwk {
    Jwk {
        common: CommonParameters {
            public_key_use: Some(PublicKeyUse::Signature),
            key_algorithm: Some(KeyAlgorithm::EdDSA),
            key_id: Some(kid.to_owned()),
            ..CommonParameters::default()
        },
        algorithm: AlgorithmParameters::OctetKeyPair(OctetKeyPairParameters {
            key_type: OctetKeyPairType::OctetKeyPair,
            curve: EllipticCurve::Ed25519,
            x: URL_SAFE_NO_PAD.encode(x),
        }),
    }
}

/// The answer to a request for [`PATH`]: the document to `GET` and
/// `HEAD`, `405` to anything else.
pub fn answer(method: &Method, document: &Bytes) -> LocalResponse {
    if method != Method::GET && method != Method::HEAD {
        let mut refused = LocalResponse::error(&ApiError::new(
            ErrorCode::MethodNotAllowed,
            "The key set can only be read with GET or HEAD.",
        ));
        refused
            .headers
            .push((header::ALLOW, HeaderValue::from_static("GET, HEAD")));
        return refused;
    }
    LocalResponse {
        status: StatusCode::OK,
        headers: vec![
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/jwk-set+json"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static(MAX_AGE)),
        ],
        body: document.clone(),
        source: "local",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_admission::tokens::{generate_ed25519_pkcs8_der, Claims, TokenType};
    use sluice_policies::validate::parse_str;

    fn keys(toml: &str) -> Vec<SigningKey> {
        let config = parse_str(
            &format!("[gateway]\n{toml}"),
            std::path::Path::new("t.toml"),
        );
        config.unwrap().keys
    }

    fn ed_key(kid: &str, der: &[u8]) -> String {
        format!(
            "[[keys]]\nkid = \"{kid}\"\nalg = \"EdDSA\"\nsecret = \"{}\"\n",
            URL_SAFE_NO_PAD.encode(der)
        )
    }

    const HS: &str = "[[keys]]\nkid = \"hs\"\nalg = \"HS256\"\nsecret = \"crk73kV4fY9LZUm7L5elAyVdQw1NWD9gCIi6VQoY8t4\"\n";

    #[test]
    fn eddsa_keys_are_published_as_okp_jwks_and_verify_their_passes() {
        let (a, b) = (
            generate_ed25519_pkcs8_der().unwrap(),
            generate_ed25519_pkcs8_der().unwrap(),
        );
        let config = keys(&format!("{}{HS}{}", ed_key("ed1", &a), ed_key("ed2", &b)));
        let doc: serde_json::Value = serde_json::from_slice(&document(&config)).unwrap();
        let listed = doc["keys"].as_array().unwrap();
        assert_eq!(listed.len(), 2, "{doc}");
        for (jwk, kid) in listed.iter().zip(["ed1", "ed2"]) {
            let members: Vec<&str> = jwk
                .as_object()
                .unwrap()
                .keys()
                .map(|k| k.as_str())
                .collect();
            assert_eq!(members.len(), 6, "{jwk}");
            assert_eq!(
                (
                    &jwk["kty"],
                    &jwk["crv"],
                    &jwk["kid"],
                    &jwk["use"],
                    &jwk["alg"]
                ),
                (
                    &"OKP".into(),
                    &"Ed25519".into(),
                    &kid.into(),
                    &"sig".into(),
                    &"EdDSA".into()
                )
            );
            assert_eq!(
                URL_SAFE_NO_PAD
                    .decode(jwk["x"].as_str().unwrap())
                    .unwrap()
                    .len(),
                32
            );
        }
        // A pass the signing key made verifies with its published key, and
        // not with the other one.
        let ring = Keyring::from_config(&config).unwrap();
        let pass = Claims::new(TokenType::Pass, "drop", &"0".repeat(32), 1, 10, 20);
        let token = ring.sign(&pass).unwrap();
        let set: JwkSet = serde_json::from_value(doc).unwrap();
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::EdDSA);
        validation.validate_exp = false;
        validation.set_audience(&["drop"]);
        validation.set_issuer(&["sluice"]);
        let with = |kid: &str| {
            let key = jsonwebtoken::DecodingKey::from_jwk(set.find(kid).unwrap()).unwrap();
            jsonwebtoken::decode::<Claims>(&token, &key, &validation).map(|d| d.claims)
        };
        assert_eq!(with("ed1").unwrap(), pass);
        assert!(with("ed2").is_err());
    }

    #[test]
    fn hs256_only_or_no_keys_publish_an_empty_set() {
        assert_eq!(&document(&keys(HS))[..], br#"{"keys":[]}"#);
        assert_eq!(&document(&[])[..], br#"{"keys":[]}"#);
    }

    #[test]
    fn the_set_is_cacheable_and_read_only() {
        let doc = Bytes::from_static(br#"{"keys":[]}"#);
        let ok = answer(&Method::GET, &doc);
        assert_eq!(ok.status, StatusCode::OK);
        assert!(ok.headers.contains(&(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=300")
        )));
        assert_eq!(ok.body, doc);
        let refused = answer(&Method::POST, &doc);
        assert_eq!(refused.status, StatusCode::METHOD_NOT_ALLOWED);
    }
}
