//! The join body's challenge fields: `challenge` and `solution` (pow),
//! `challenge_response` (siteverify). Other fields (the store's
//! `enqueue_token`) are read elsewhere and ignored here. An empty body has
//! none; a body that is not a JSON object, or a field that is not a
//! string, is `400 bad_request`.

use serde::Deserialize;

/// Longest `challenge_response` read (a Turnstile token is about 2 KB).
pub const RESPONSE_BYTES_MAX: usize = 4096;

#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
pub struct JoinFields {
    #[serde(default)]
    pub challenge: Option<String>,
    #[serde(default)]
    pub solution: Option<String>,
    #[serde(default)]
    pub challenge_response: Option<String>,
}

impl JoinFields {
    /// The fields of `body`, or the sentence a `400` says.
    pub fn read(body: &[u8]) -> Result<Self, &'static str> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self::default());
        }
        const NOT_OURS: &str = "A join body is a JSON object whose challenge fields are strings.";
        let value: serde_json::Value = serde_json::from_slice(body).map_err(|_| NOT_OURS)?;
        if !value.is_object() {
            return Err(NOT_OURS);
        }
        let fields: Self = serde_json::from_value(value).map_err(|_| NOT_OURS)?;
        if fields
            .challenge_response
            .as_ref()
            .is_some_and(|r| r.is_empty() || r.len() > RESPONSE_BYTES_MAX)
        {
            return Err("The challenge response is empty or too long.");
        }
        Ok(fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_and_others_ignored() {
        assert_eq!(JoinFields::read(b"").unwrap(), JoinFields::default());
        assert_eq!(JoinFields::read(b" \n").unwrap(), JoinFields::default());
        let f =
            JoinFields::read(br#"{"challenge":"c","solution":"1","enqueue_token":"x"}"#).unwrap();
        assert_eq!(f.challenge.as_deref(), Some("c"));
        assert_eq!(f.solution.as_deref(), Some("1"));
        assert_eq!(f.challenge_response, None);
        for bad in [
            &b"{"[..],
            b"[]",
            b"\"c\"",
            br#"{"solution":1}"#,
            br#"{"challenge":null,"solution":["1"]}"#,
            br#"{"challenge_response":""}"#,
        ] {
            assert!(
                JoinFields::read(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
