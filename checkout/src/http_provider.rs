//! [`HttpProvider`]: the provider adapter for a card-provider-shaped HTTP
//! API (the one `paysim` implements), on the workspace's one HTTP client
//! ([`crate::http_client`]: `reqwest`, async, on a thread of its own).
//!
//! | call | request | answer |
//! | --- | --- | --- |
//! | authorize | `POST /v1/authorizations` + `Idempotency-Key`, `{"order_id","amount_cents","currency","payment_method"}` | `{"id","status":"authorized"\|"declined"}` |
//! | capture, void, refund | `POST /v1/authorizations/{id}/{capture,void,refund}` + `Idempotency-Key`, `{"amount_cents","currency"}` | `{"id","status"}` |
//! | look-up | `GET /v1/operations/{key}` | `{"key","operation","status","payment_id"}`, `404` never received |
//! | events | `GET /v1/events?after=<seq>&limit=<n>` | `{"events":[{"seq",…}],"next"}` |
//!
//! Every call carries `Authorization: Bearer <api key>` when a key is
//! configured, as card providers ask.
//!
//! Timeouts, resets, `5xx`, `408`, `409` (same key in flight), `429` and
//! unreadable answers are [`PaymentError::Ambiguous`]; `409
//! {"error":"invalid_state"}` and other `4xx` are definite refusals. An adapter for a real card provider changes the
//! paths, the bodies and [`classify_status`], not the shape.

use std::time::Duration;

use async_trait::async_trait;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::json;

use crate::http_client::{ClientError, HttpClient};
use crate::payment::{
    AuthorizeOutcome, EventPage, OperationOutcome, PaymentError, PaymentProvider,
};

/// Largest answer body read from the provider.
pub const PROVIDER_ANSWER_BYTES_MAX: u64 = 1024 * 1024;
/// The currency when the config names none.
pub const CURRENCY_DEFAULT: &str = "BRL";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpProviderConfig {
    /// e.g. `http://127.0.0.1:7070` (no trailing slash needed).
    pub base_url: String,
    /// Connecting, at most.
    pub connect_timeout_ms: u64,
    /// A whole call, at most; past it the answer is ambiguous.
    pub call_timeout_ms: u64,
    /// Sent as `Authorization: Bearer …` when set.
    pub api_key: Option<String>,
    /// ISO 4217 code every amount is in; sent with every call that moves
    /// money (authorize, capture, void, refund).
    pub currency: String,
    /// The `provider` metrics label.
    pub name: String,
}

impl Default for HttpProviderConfig {
    fn default() -> Self {
        Self {
            base_url: "http://127.0.0.1:7070".into(),
            connect_timeout_ms: 1_000,
            call_timeout_ms: 5_000,
            api_key: None,
            currency: CURRENCY_DEFAULT.into(),
            name: "http".into(),
        }
    }
}

pub struct HttpProvider {
    http: HttpClient,
    config: HttpProviderConfig,
}

impl std::fmt::Debug for HttpProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpProvider")
            .field("base_url", &self.config.base_url)
            .field("name", &self.config.name)
            .finish_non_exhaustive()
    }
}

/// What a status code means for a payment call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusClass {
    Ok,
    NotFound,
    /// May or may not have taken effect: look up, retry with the same key.
    Ambiguous,
    /// Definitely refused.
    Refused,
}

/// The one place that reads status codes.
pub fn classify_status(status: u16) -> StatusClass {
    match status {
        200..=299 => StatusClass::Ok,
        404 => StatusClass::NotFound,
        408 | 409 | 425 | 429 | 500..=599 => StatusClass::Ambiguous,
        _ => StatusClass::Refused,
    }
}

#[derive(Debug, Deserialize)]
struct PaymentAnswer {
    id: String,
    status: String,
    #[serde(default)]
    decline_code: Option<String>,
}

#[derive(Debug, Deserialize)]
struct OperationAnswer {
    status: String,
    #[serde(default)]
    payment_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RawEventPage {
    events: Vec<serde_json::Value>,
    next: u64,
}

#[derive(Debug, Deserialize)]
struct ErrorAnswer {
    error: String,
}

/// One answer: its status class and body.
struct Answer {
    class: StatusClass,
    body: String,
}

impl HttpProvider {
    pub fn new(config: HttpProviderConfig) -> Result<Self, ClientError> {
        let builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(config.connect_timeout_ms))
            .timeout(Duration::from_millis(config.call_timeout_ms))
            // Every redirect would be a second call under the same key.
            .redirect(reqwest::redirect::Policy::none());
        let http = HttpClient::new(builder, "sluice-provider")?;
        Ok(Self { http, config })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.config.base_url.trim_end_matches('/'))
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        idempotency_key: Option<&str>,
        body: Option<serde_json::Value>,
    ) -> Result<Answer, PaymentError> {
        let mut request = self
            .http
            .client()
            .request(method.clone(), self.url(path))
            .header("Accept", "application/json");
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        if let Some(api_key) = &self.config.api_key {
            request = request.bearer_auth(api_key);
        }
        if method != reqwest::Method::GET {
            request = request
                .header("Content-Type", "application/json")
                .body(body.unwrap_or_default().to_string());
        }
        let (status, body) = self
            .http
            .spawn(read_answer(request))
            .await
            // The client's runtime stopped mid-call: nobody knows.
            .ok_or(PaymentError::Ambiguous)??;
        let error_code = serde_json::from_str::<ErrorAnswer>(&body)
            .map(|e| e.error)
            .ok();
        let class = match (status, error_code.as_deref()) {
            // The payment is in a state that forbids the operation: a
            // definite refusal, not "same key in flight".
            (409, Some("invalid_state")) => StatusClass::Refused,
            _ => classify_status(status),
        };
        match class {
            StatusClass::Ambiguous => Err(PaymentError::Ambiguous),
            StatusClass::Refused => Err(PaymentError::Refused(error_code.unwrap_or_else(|| {
                format!("refused: {}", body.chars().take(200).collect::<String>())
            }))),
            StatusClass::Ok | StatusClass::NotFound => Ok(Answer { class, body }),
        }
    }

    fn parse<T: DeserializeOwned>(body: &str) -> Result<T, PaymentError> {
        // A 2xx we cannot read says nothing definite.
        serde_json::from_str(body).map_err(|_| PaymentError::Ambiguous)
    }

    async fn movement(
        &self,
        key: &str,
        payment_id: &str,
        amount_cents: u64,
        action: &str,
        done: &str,
    ) -> Result<(), PaymentError> {
        let path = format!(
            "/v1/authorizations/{}/{action}",
            utf8_percent_encode(payment_id, NON_ALPHANUMERIC)
        );
        let answer = self
            .call(
                reqwest::Method::POST,
                &path,
                Some(key),
                Some(json!({ "amount_cents": amount_cents, "currency": self.config.currency })),
            )
            .await?;
        if answer.class == StatusClass::NotFound {
            return Err(PaymentError::Refused(format!("no payment {payment_id}")));
        }
        let payment: PaymentAnswer = Self::parse(&answer.body)?;
        if payment.status == done {
            Ok(())
        } else {
            Err(PaymentError::Refused(format!(
                "payment {} is {}",
                payment.id, payment.status
            )))
        }
    }
}

#[async_trait]
impl PaymentProvider for HttpProvider {
    fn name(&self) -> &str {
        &self.config.name
    }

    async fn authorize(
        &self,
        idempotency_key: &str,
        order_id: &str,
        amount_cents: u64,
        payment_method: &str,
    ) -> Result<AuthorizeOutcome, PaymentError> {
        let body = json!({
            "order_id": order_id,
            "amount_cents": amount_cents,
            "currency": self.config.currency,
            "payment_method": payment_method,
        });
        let answer = self
            .call(
                reqwest::Method::POST,
                "/v1/authorizations",
                Some(idempotency_key),
                Some(body),
            )
            .await?;
        if answer.class == StatusClass::NotFound {
            return Err(PaymentError::Refused(
                "authorizations endpoint not found".into(),
            ));
        }
        let payment: PaymentAnswer = Self::parse(&answer.body)?;
        match payment.status.as_str() {
            "authorized" => Ok(AuthorizeOutcome::Authorized {
                payment_id: payment.id,
            }),
            "declined" => Ok(AuthorizeOutcome::Declined {
                reason: payment.decline_code.unwrap_or_else(|| "declined".into()),
            }),
            other => Err(PaymentError::Refused(format!("unexpected status {other}"))),
        }
    }

    async fn capture(
        &self,
        key: &str,
        payment_id: &str,
        amount_cents: u64,
    ) -> Result<(), PaymentError> {
        self.movement(key, payment_id, amount_cents, "capture", "captured")
            .await
    }

    async fn void(
        &self,
        key: &str,
        payment_id: &str,
        amount_cents: u64,
    ) -> Result<(), PaymentError> {
        self.movement(key, payment_id, amount_cents, "void", "voided")
            .await
    }

    async fn refund(
        &self,
        key: &str,
        payment_id: &str,
        amount_cents: u64,
    ) -> Result<(), PaymentError> {
        self.movement(key, payment_id, amount_cents, "refund", "refunded")
            .await
    }

    async fn lookup(
        &self,
        idempotency_key: &str,
    ) -> Result<Option<OperationOutcome>, PaymentError> {
        let path = format!(
            "/v1/operations/{}",
            utf8_percent_encode(idempotency_key, NON_ALPHANUMERIC)
        );
        let answer = self.call(reqwest::Method::GET, &path, None, None).await?;
        if answer.class == StatusClass::NotFound {
            return Ok(None);
        }
        let operation: OperationAnswer = Self::parse(&answer.body)?;
        let payment_id = operation.payment_id.unwrap_or_default();
        Ok(Some(match operation.status.as_str() {
            "authorized" | "captured" | "voided" | "refunded" => {
                OperationOutcome::Succeeded { payment_id }
            }
            "declined" => OperationOutcome::Declined {
                reason: "declined".into(),
            },
            // Received but not finished: as good as no answer yet.
            "pending" | "processing" => return Err(PaymentError::Ambiguous),
            other => OperationOutcome::Failed {
                reason: other.to_owned(),
            },
        }))
    }

    async fn events_since(&self, cursor: u64, limit: usize) -> Result<EventPage, PaymentError> {
        let path = format!("/v1/events?after={cursor}&limit={limit}");
        let answer = self.call(reqwest::Method::GET, &path, None, None).await?;
        if answer.class == StatusClass::NotFound {
            return Err(PaymentError::Refused("events endpoint not found".into()));
        }
        let page: RawEventPage = Self::parse(&answer.body)?;
        // An event of a kind this version does not know is skipped, not a
        // reason to stop reading the list (the cursor still moves past it).
        let events = page
            .events
            .into_iter()
            .filter_map(|event| serde_json::from_value(event).ok())
            .collect();
        Ok(EventPage {
            events,
            next: page.next,
        })
    }
}

/// Sends `request` and reads its answer, at most
/// [`PROVIDER_ANSWER_BYTES_MAX`] of it. A connect failure, reset, timeout
/// or an answer broken off mid-body (or too large to be one) is ambiguous:
/// nobody knows what happened.
async fn read_answer(request: reqwest::RequestBuilder) -> Result<(u16, String), PaymentError> {
    let mut response = request.send().await.map_err(|_| PaymentError::Ambiguous)?;
    let status = response.status().as_u16();
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|_| PaymentError::Ambiguous)?
    {
        if (body.len() + chunk.len()) as u64 > PROVIDER_ANSWER_BYTES_MAX {
            return Err(PaymentError::Ambiguous);
        }
        body.extend_from_slice(&chunk);
    }
    let body = String::from_utf8(body).map_err(|_| PaymentError::Ambiguous)?;
    Ok((status, body))
}
