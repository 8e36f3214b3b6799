//! The public listener: a pingora `ProxyHttp` service.
//!
//! Phase chart (what each hook does, in the order pingora calls them):
//!
//! | phase | here |
//! | --- | --- |
//! | `new_ctx` | take the current [`Runtime`] snapshot for the whole request |
//! | `request_filter` | request id and [`client`], [`read_request`] (one `Host`, the canonical path, or `400`), then [`route`]: catalog, error, cache hit, or on to the origin |
//! | `request_body_filter` | enforce `max_body_bytes` on bodies without a declared length |
//! | `upstream_peer` | the configured origin, with its timeouts |
//! | `upstream_request_filter` | the canonical path as the target, forwarding headers (the client's `X-Forwarded-For` chain replaces the request's), drop hop-by-hop headers and any `Sluice-Room`/`Sluice-Pass-*` sent; on a protected path, the pass's room and `sub` ([`pass_headers`]) |
//! | `upstream_response_filter` | origin timing; decide whether the response may be cached |
//! | `upstream_response_body_filter` | collect a cacheable body, store it at the end |
//! | `response_filter` | echo the request id, drop hop-by-hop headers |
//! | `fail_to_proxy` | origin down → 502, slow → 504, in the contract's JSON |
//! | `suppress_error_log` | a client that went away mid-request is not logged as an error |
//! | `logging` | one access-log line and the request metrics |

use std::cell::OnceCell;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use http::{header, HeaderName, HeaderValue, Method};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::ErrorType;
use sluice_admission::tokens::Claims;
use sluice_admission::PassEnd;

use crate::body::{self, BodyError};
use crate::client::{self, Client};
use crate::error::{ApiError, ErrorCode};
use crate::headers;
use crate::metrics::status_class;
use crate::orders::{Env, OrderRoute, CHECKOUT_BODY_BYTES_MAX, WEBHOOK_BODY_BYTES_MAX};
use crate::origin_cache::RequestKey;
use crate::pass_end::{origin_ends_pass, SLUICE_PASS};
use crate::pass_headers;
use crate::queue::{QueueRequest, Rooms};
use crate::response::LocalResponse;
use crate::route::{
    is_origin_target, origin_target, read_request, route, PassCheck, RequestFacts, Route,
};
use crate::runtime::{Runtime, Unresolved};
use crate::state::Shared;

pub struct Proxy {
    shared: Arc<Shared>,
}

impl Proxy {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

/// Per-request state.
pub struct Ctx {
    runtime: Arc<Runtime>,
    request_id: HeaderValue,
    /// The request's canonical path, once `request_filter` has read it.
    path: Option<sluice_edge::path::CanonicalPath>,
    /// Who is asking, decided once in `request_filter` ([`client::identify`]).
    client: Client,
    started: Instant,
    /// How the answer was produced, for metrics and the access log.
    source: &'static str,
    upstream_sent: Option<Instant>,
    upstream_time: Option<Duration>,
    cache: Option<RequestKey>,
    fill: Option<Fill>,
    body_bytes: u64,
    /// The pass `route()` verified for this request (room, claims), so the
    /// handlers do not verify it again.
    pass: Option<(String, Claims)>,
    _inflight: InflightGuard,
}

/// A cacheable origin response being collected.
struct Fill {
    key: String,
    status: u16,
    headers: Vec<(HeaderName, HeaderValue)>,
    ttl: Duration,
    age: Duration,
    body: BytesMut,
}

struct InflightGuard(prometheus::IntGauge);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[async_trait]
impl ProxyHttp for Proxy {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        self.shared.metrics.inflight.inc();
        Ctx {
            runtime: self.shared.runtime(),
            request_id: HeaderValue::from_static(""),
            path: None,
            client: Client::default(),
            started: Instant::now(),
            source: "local",
            upstream_sent: None,
            upstream_time: None,
            cache: None,
            fill: None,
            body_bytes: 0,
            pass: None,
            _inflight: InflightGuard(self.shared.metrics.inflight.clone()),
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let peer = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        let req = session.req_header();
        ctx.request_id = headers::request_id(req.headers.get(headers::X_REQUEST_ID));
        ctx.client = client::identify(
            peer,
            &req.headers,
            &ctx.runtime.config.gateway.trusted_proxies,
        );
        // A target that is not UTF-8 reaches `uri` with U+FFFD in it, which
        // the normaliser refuses (raw non-ASCII).
        let path = match read_request(req.version, req.uri.path(), &req.headers) {
            Ok(path) => path,
            Err(local) => {
                ctx.source = local.source;
                self.write_local(session, ctx, local).await?;
                return Ok(true);
            }
        };
        let req = session.req_header();
        let host = req
            .headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or(req.uri.host())
            .unwrap_or("");
        let facts = RequestFacts {
            method: &req.method,
            path: &path,
            query: req.uri.query(),
            host,
            headers: &req.headers,
        };
        let passes = Passes {
            rooms: &self.shared.rooms,
            headers: &req.headers,
            metrics: &self.shared.metrics,
            verified: OnceCell::new(),
        };
        let routed = route(&ctx.runtime, &facts, &passes, Instant::now());
        ctx.path = Some(path);
        ctx.pass = passes
            .verified
            .into_inner()
            .and_then(|(room, claims)| Some((room, claims?)));
        if ctx.pass.is_none() && !matches!(routed, Route::Queue) {
            self.shared.rooms.note_pass_use(&req.headers);
        }
        match routed {
            Route::Webhook => {
                ctx.source = "webhook";
                // Boxed: the provider and checkout futures are large, and
                // inline they would make every request's `request_filter`
                // future (allocated and moved per request) as large.
                let local = Box::pin(self.webhook(session, ctx)).await?;
                self.write_local(session, ctx, local).await?;
                Ok(true)
            }
            Route::Orders => {
                ctx.source = "orders";
                let local = Box::pin(self.orders(session, ctx)).await?;
                self.write_local(session, ctx, local).await?;
                Ok(true)
            }
            Route::Queue => {
                ctx.source = "queue";
                // A join's body (a challenge's solution, the store's
                // enqueue token): small, read whole within the header
                // timeout.
                let body = if session.req_header().method == Method::POST {
                    let too_large = "A join body is a few short fields; this one is too large.";
                    let max = crate::queue::challenge::JOIN_BODY_BYTES_MAX;
                    match self.read_body(session, ctx, max, too_large).await {
                        Ok(body) => body,
                        Err(refused) => {
                            self.write_local(session, ctx, refused).await?;
                            return Ok(true);
                        }
                    }
                } else {
                    bytes::Bytes::new()
                };
                let req = session.req_header();
                let path = ctx.path.as_ref().map_or("", |p| p.decoded());
                let deny = ctx.runtime.config.gateway.deny_cidrs.as_ref();
                let queue = QueueRequest {
                    method: &req.method,
                    path,
                    query: req.uri.query(),
                    headers: &req.headers,
                    client: ctx.client.ip,
                    body: &body,
                };
                let local =
                    self.shared
                        .rooms
                        .handle(queue, deny.map(|d| &d.list), &self.shared.metrics);
                let local = local.await;
                self.write_local(session, ctx, local).await?;
                Ok(true)
            }
            Route::Local(local) => {
                ctx.source = local.source;
                self.write_local(session, ctx, local).await?;
                Ok(true)
            }
            Route::CacheHit {
                response,
                not_modified,
            } => {
                ctx.source = "cache_hit";
                self.shared.metrics.origin_cache_by.inc("hit");
                let status = if not_modified { 304 } else { response.status };
                let mut head = ResponseHeader::build(status, Some(response.headers.len() + 3))?;
                for (name, value) in &response.headers {
                    head.append_header(name.clone(), value.clone())?;
                }
                let age = response.age(Instant::now()).as_secs();
                head.insert_header(header::AGE, HeaderValue::from(age))?;
                head.insert_header("x-cache", "HIT")?;
                head.insert_header(headers::X_REQUEST_ID, ctx.request_id.clone())?;
                let body = (!not_modified && session.req_header().method != Method::HEAD)
                    .then(|| response.body.clone());
                if not_modified {
                    head.remove_header(&header::CONTENT_LENGTH);
                }
                session
                    .write_response_header(Box::new(head), body.is_none())
                    .await?;
                if let Some(body) = body {
                    session.write_response_body(Some(body), true).await?;
                }
                Ok(true)
            }
            Route::Origin { cache } => {
                ctx.source = "origin";
                if cache.is_some() {
                    self.shared.metrics.origin_cache_by.inc("miss");
                }
                ctx.cache = cache;
                Ok(false)
            }
        }
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(chunk) = body {
            ctx.body_bytes += chunk.len() as u64;
            if ctx.body_bytes > ctx.runtime.config.gateway.max_body_bytes.get() {
                self.shared.metrics.body_too_large.inc();
                return Error::e_explain(
                    ErrorType::HTTPStatus(413),
                    "request body over max_body_bytes",
                );
            }
        }
        Ok(())
    }

    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let peer = match ctx.runtime.origin_peer() {
            Some(Ok(peer)) => peer,
            // 502 bad_gateway, as when the origin refuses the connection.
            Some(Err(Unresolved)) => {
                return Error::e_explain(
                    ErrorType::ConnectNoRoute,
                    "the origin's host name has no known address yet",
                )
            }
            // route() answers 404 itself when there is no origin.
            None => return Error::e_explain(ErrorType::HTTPStatus(404), "no origin configured"),
        };
        ctx.upstream_sent = Some(Instant::now());
        Ok(Box::new(peer))
    }

    async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(path) = &ctx.path {
            let query = upstream.uri.query();
            if !is_origin_target(upstream.raw_path(), path, query) {
                let target = origin_target(path, query);
                let uri = http::Uri::try_from(target)
                    .map_err(|e| Error::because(ErrorType::InternalError, "canonical path", e))?;
                upstream.set_uri(uri);
            }
        }
        for name in headers::hop_by_hop(&upstream.headers) {
            upstream.remove_header(&name);
        }
        for name in headers::not_forwarded_in(&upstream.headers, ctx.client.trusted_peer) {
            upstream.remove_header(&name);
        }
        // Replaces every X-Forwarded-For the request carried.
        match ctx.client.forwarded_for() {
            Some(chain) => upstream.insert_header(headers::X_FORWARDED_FOR, chain)?,
            None => {
                upstream.remove_header(&headers::X_FORWARDED_FOR);
            }
        }
        let proto = if self.shared.tls { "https" } else { "http" };
        upstream.insert_header(headers::X_FORWARDED_PROTO, proto)?;
        upstream.insert_header(headers::X_REQUEST_ID, ctx.request_id.clone())?;
        // Set only where route() verified a pass: a protected path.
        if let Some((room, pass)) = &ctx.pass {
            for (name, value) in pass_headers::of_pass(room, pass) {
                upstream.insert_header(name, value)?;
            }
        }
        Ok(())
    }

    async fn upstream_response_filter(
        &self,
        session: &mut Session,
        upstream: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if origin_ends_pass(&upstream.headers) {
            self.end_pass(session, upstream, ctx)?;
        }
        upstream.remove_header(&SLUICE_PASS);
        if let Some(sent) = ctx.upstream_sent {
            let elapsed = sent.elapsed();
            ctx.upstream_time = Some(elapsed);
            self.shared
                .metrics
                .upstream_seconds
                .observe(elapsed.as_secs_f64());
        }
        for name in headers::hop_by_hop(&upstream.headers) {
            upstream.remove_header(&name);
        }
        let Some(key) = ctx.cache.as_ref().filter(|k| k.fill) else {
            return Ok(());
        };
        let cache = &ctx.runtime.origin_cache;
        match cache.freshness(
            upstream.status.as_u16(),
            &upstream.headers,
            SystemTime::now(),
        ) {
            Ok((ttl, age)) => {
                let headers = upstream
                    .headers
                    .iter()
                    .filter(|(name, _)| *name != header::TRANSFER_ENCODING && *name != header::AGE)
                    .map(|(n, v)| (n.clone(), v.clone()))
                    .collect();
                ctx.fill = Some(Fill {
                    key: key.key.clone(),
                    status: upstream.status.as_u16(),
                    headers,
                    ttl,
                    age,
                    body: BytesMut::new(),
                });
            }
            Err(_) => self.shared.metrics.origin_cache_by.inc("uncacheable"),
        }
        Ok(())
    }

    fn upstream_response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<Option<Duration>> {
        let Some(fill) = ctx.fill.as_mut() else {
            return Ok(None);
        };
        if let Some(chunk) = body {
            if fill.body.len() + chunk.len() > ctx.runtime.origin_cache.max_object_bytes() {
                ctx.fill = None;
                self.shared.metrics.origin_cache_by.inc("uncacheable");
                return Ok(None);
            }
            fill.body.extend_from_slice(chunk);
        }
        if end_of_stream {
            if let Some(fill) = ctx.fill.take() {
                let cache = &ctx.runtime.origin_cache;
                let stored = cache.insert(
                    fill.key,
                    fill.status,
                    fill.headers,
                    fill.body.freeze(),
                    fill.ttl,
                    fill.age,
                    Instant::now(),
                );
                let result = if stored { "stored" } else { "uncacheable" };
                self.shared.metrics.origin_cache_by.inc(result);
                let (bytes, entries) = cache.usage();
                self.shared.metrics.origin_cache_bytes.set(bytes as i64);
                self.shared.metrics.origin_cache_entries.set(entries as i64);
            }
        }
        Ok(None)
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        for name in headers::hop_by_hop(&response.headers) {
            response.remove_header(&name);
        }
        response.insert_header(headers::X_REQUEST_ID, ctx.request_id.clone())?;
        if ctx.cache.is_some() {
            response.insert_header("x-cache", "MISS")?;
        }
        Ok(())
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy {
        let (code, failure) = classify(e);
        if let Some(failure) = failure {
            self.shared
                .metrics
                .origin_errors
                .with_label_values(&[failure])
                .inc();
        }
        ctx.source = "local";
        let status = match code {
            Some(code) if session.response_written().is_none() => {
                let api = ApiError::new(code, message(code));
                let local = LocalResponse::error(&api);
                let status = local.status.as_u16();
                if self.write_local(session, ctx, local).await.is_err() {
                    0
                } else {
                    status
                }
            }
            // The header already went out (or the client is gone): nothing
            // more can be said on this connection.
            _ => session.response_written().map_or(0, |r| r.status.as_u16()),
        };
        FailToProxy {
            error_code: status,
            can_reuse_downstream: false,
        }
    }

    /// A client that went away mid-request is not an error of ours: the
    /// access-log line still names what happened (`error`).
    fn suppress_error_log(&self, _session: &Session, _ctx: &Ctx, e: &Error) -> bool {
        client_went_away(e)
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Ctx) {
        let status = session.response_written().map_or(0, |r| r.status.as_u16());
        let m = &self.shared.metrics;
        m.requests_by_class.inc(status_class(status));
        m.served_by.inc(ctx.source);
        let req = session.req_header();
        // The path only: query strings and headers may carry tokens.
        tracing::info!(
            target: "access",
            request_id = %ctx.request_id.to_str().unwrap_or(""),
            client = ctx.client.ip.map(tracing::field::display),
            method = %req.method,
            path = %req.uri.path(),
            status,
            source = ctx.source,
            upstream_ms = ctx.upstream_time.map(|d| d.as_secs_f64() * 1000.0),
            total_ms = ctx.started.elapsed().as_secs_f64() * 1000.0,
            error = e.map(|e| e.etype().as_str()),
        );
    }
}

impl Proxy {
    /// The origin said `Sluice-Pass: end`: ends the pass the request
    /// carried (the one its protected path was checked with, else any valid
    /// pass it presents) and clears its cookie. The answer is
    /// never cached with the cookie cleared (a `Set-Cookie` answer is not
    /// stored).
    fn end_pass(&self, session: &Session, upstream: &mut ResponseHeader, ctx: &Ctx) -> Result<()> {
        let rooms = &self.shared.rooms;
        let pass = ctx
            .pass
            .clone()
            .or_else(|| rooms.pass_of(&session.req_header().headers, &self.shared.metrics));
        let Some((room, claims)) = pass else {
            return Ok(());
        };
        // Counted by the room (`sluice_passes_ended_total`).
        rooms.end_pass(&room, &claims, PassEnd::Origin);
        let (name, value) = crate::queue::clear_pass_cookie(self.shared.tls);
        upstream.append_header(name, value)?;
        Ok(())
    }

    /// The request's body, at most `max` bytes within the header timeout;
    /// otherwise the answer that refuses it (`413` saying `too_large`, or
    /// `408`), counted.
    async fn read_body(
        &self,
        session: &mut Session,
        ctx: &Ctx,
        max: usize,
        too_large: &str,
    ) -> std::result::Result<bytes::Bytes, LocalResponse> {
        let deadline = ctx.runtime.config.gateway.header_timeout;
        body::read(session.as_downstream_mut(), max, deadline)
            .await
            .map_err(|e| {
                if e == BodyError::TooLarge {
                    self.shared.metrics.body_too_large.inc();
                }
                LocalResponse::error(&e.answer(too_large, deadline))
            })
    }

    /// Provider events: POST only, signature first.
    async fn webhook(&self, session: &mut Session, ctx: &Ctx) -> Result<LocalResponse> {
        if session.req_header().method != Method::POST {
            let mut r = LocalResponse::error(&ApiError::new(
                ErrorCode::MethodNotAllowed,
                "Webhooks are POSTed.",
            ));
            r.headers
                .push((header::ALLOW, http::HeaderValue::from_static("POST")));
            return Ok(r);
        }
        let too_large = "A provider event is small; this body is not.";
        let body = match self
            .read_body(session, ctx, WEBHOOK_BODY_BYTES_MAX, too_large)
            .await
        {
            Ok(body) => body,
            Err(refused) => return Ok(refused),
        };
        let req = session.req_header();
        let provider = req.uri.path().strip_prefix("/webhooks/").unwrap_or("");
        Ok(self
            .shared
            .orders
            .webhook(provider, &req.headers, body, &ctx.runtime.config.payments)
            .await)
    }

    /// Reads the (small, bounded) body and lets the reservation core answer.
    async fn orders(&self, session: &mut Session, ctx: &mut Ctx) -> Result<LocalResponse> {
        let too_large = "An order body is a few short fields; this one is too large.";
        let body = match self
            .read_body(session, ctx, CHECKOUT_BODY_BYTES_MAX, too_large)
            .await
        {
            Ok(body) => body,
            Err(refused) => return Ok(refused),
        };
        let req = session.req_header();
        let path = ctx.path.as_ref().map_or("", |p| p.decoded());
        let Some(route) = OrderRoute::of(path) else {
            return Ok(LocalResponse::error(&ApiError::new(
                ErrorCode::NotFound,
                "Nothing is served at this path.",
            )));
        };
        Ok(self
            .shared
            .orders
            .handle(
                route,
                &req.method,
                &req.headers,
                body,
                ctx.pass.take(),
                &Env {
                    rooms: &self.shared.rooms,
                    config: &ctx.runtime.config,
                    metrics: &self.shared.metrics,
                },
            )
            .await)
    }

    async fn write_local(
        &self,
        session: &mut Session,
        ctx: &Ctx,
        local: LocalResponse,
    ) -> Result<()> {
        let mut head = ResponseHeader::build(local.status, Some(local.headers.len() + 2))?;
        for (name, value) in local.headers {
            head.append_header(name, value)?;
        }
        head.insert_header(headers::X_REQUEST_ID, ctx.request_id.clone())?;
        let is_head = session.req_header().method == Method::HEAD;
        if !head.headers.contains_key(header::CONTENT_LENGTH) && local.status.as_u16() != 304 {
            head.insert_header(header::CONTENT_LENGTH, HeaderValue::from(local.body.len()))?;
        }
        let body = (!is_head && !local.body.is_empty()).then_some(local.body);
        session
            .write_response_header(Box::new(head), body.is_none())
            .await?;
        if let Some(body) = body {
            session.write_response_body(Some(body), true).await?;
        }
        Ok(())
    }
}

/// The pass check of protected paths, over the request's headers. The
/// first check verifies the token and keeps the outcome: a request's pass
/// is verified once, and the verified claims go on to the handler.
struct Passes<'a> {
    rooms: &'a Rooms,
    headers: &'a http::HeaderMap,
    metrics: &'a crate::metrics::Metrics,
    /// The room first asked about, and the claims if its pass verified.
    verified: OnceCell<(String, Option<Claims>)>,
}

impl PassCheck for Passes<'_> {
    fn has_pass(&self, room: &str) -> bool {
        let verify = || {
            self.rooms
                .verify_pass(room, self.headers, self.metrics)
                .ok()
        };
        let (checked, claims) = self.verified.get_or_init(|| (room.to_owned(), verify()));
        if checked == room {
            claims.is_some()
        } else {
            // route() asks about one room per request; another room's
            // answer is not kept.
            verify().is_some()
        }
    }
}

/// The client closed or reset its connection (or stopped reading) before
/// its answer was out.
fn client_went_away(e: &Error) -> bool {
    use ErrorType::*;
    matches!(e.esource(), pingora::ErrorSource::Downstream)
        && matches!(
            e.etype(),
            ReadError | WriteError | ConnectionClosed | ReadTimedout | WriteTimedout
        )
}

/// Maps a proxy failure to the answer and the origin-failure metric label.
fn classify(e: &Error) -> (Option<ErrorCode>, Option<&'static str>) {
    use ErrorType::*;
    match e.etype() {
        HTTPStatus(413) => (Some(ErrorCode::PayloadTooLarge), None),
        HTTPStatus(404) => (Some(ErrorCode::NotFound), None),
        HTTPStatus(400) => (Some(ErrorCode::BadRequest), None),
        ConnectTimedout | ReadTimedout | WriteTimedout => {
            (Some(ErrorCode::GatewayTimeout), Some("timeout"))
        }
        ConnectRefused | ConnectNoRoute | ConnectError | ConnectionClosed | TLSHandshakeFailure => {
            if matches!(e.esource(), pingora::ErrorSource::Downstream) {
                (None, None)
            } else {
                (Some(ErrorCode::BadGateway), Some("connect"))
            }
        }
        _ => match e.esource() {
            pingora::ErrorSource::Upstream => (Some(ErrorCode::BadGateway), Some("error")),
            pingora::ErrorSource::Downstream => match e.etype() {
                ReadError | WriteError => (None, None),
                _ => (Some(ErrorCode::BadRequest), None),
            },
            _ => (Some(ErrorCode::Internal), None),
        },
    }
}

fn message(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::GatewayTimeout => "The store did not answer in time.",
        ErrorCode::BadGateway => "The store cannot be reached right now.",
        ErrorCode::PayloadTooLarge => "The request body is too large.",
        ErrorCode::NotFound => "Nothing is served at this path.",
        ErrorCode::BadRequest => "The request could not be read.",
        _ => "Something went wrong on our side.",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_admission::tokens::{Keyring, TokenType};
    use sluice_admission::InMemoryStock;

    const CONFIG: &str = "[gateway]\n[[keys]]\nkid = \"k1\"\nalg = \"HS256\"\nsecret = \"crk73kV4fY9LZUm7L5elAyVdQw1NWD9gCIi6VQoY8t4\"\n\
        [[rooms]]\nname = \"a\"\nprotect = [\"/a/*\"]\nrelease_per_second = 1\nmax_active = 1\nqueue_capacity = 1\n\
        [[rooms]]\nname = \"b\"\nprotect = [\"/b/*\"]\nrelease_per_second = 1\nmax_active = 1\nqueue_capacity = 1\n";

    fn setup() -> (Rooms, Keyring, crate::metrics::Metrics) {
        let config =
            sluice_policies::validate::parse_str(CONFIG, std::path::Path::new("t.toml")).unwrap();
        let rooms = Rooms::new(&config, false, Arc::new(InMemoryStock::new())).unwrap();
        let keys = Keyring::from_config(&config.keys).unwrap();
        (rooms, keys, crate::metrics::Metrics::new("local"))
    }

    fn headers(token: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        );
        h
    }

    fn rejections(metrics: &crate::metrics::Metrics, room: &str) -> u64 {
        metrics
            .ticket_rejections
            .with_label_values(&[room, "bad_signature"])
            .get()
    }

    #[test]
    fn a_pass_is_verified_once_and_its_claims_kept_for_the_handler() {
        let (rooms, keys, metrics) = setup();
        let now = crate::clock::now_ms() / 1000;
        let claims = Claims::new(TokenType::Pass, "b", &"0".repeat(32), 3, now, now + 60);
        let token = keys.sign(&claims).unwrap();
        let h = headers(&token);
        let passes = Passes {
            rooms: &rooms,
            headers: &h,
            metrics: &metrics,
            verified: OnceCell::new(),
        };
        assert!(passes.has_pass("b"));
        assert!(passes.has_pass("b"));
        assert!(!passes.has_pass("a"), "a pass opens its own room only");
        assert_eq!(
            passes.verified.into_inner(),
            Some(("b".to_string(), Some(claims.clone())))
        );
        // The handler's own look-up (no pass from route()) verifies it
        // against the room its `aud` names, once.
        assert_eq!(rooms.pass_of(&h, &metrics), Some(("b".into(), claims)));
    }

    #[test]
    fn a_bad_pass_is_refused_once_per_request() {
        let (rooms, keys, metrics) = setup();
        let now = crate::clock::now_ms() / 1000;
        let claims = Claims::new(TokenType::Pass, "b", &"0".repeat(32), 3, now, now + 60);
        let mut token = keys.sign(&claims).unwrap();
        let last = token.pop().unwrap();
        token.push(if last == 'A' { 'B' } else { 'A' });
        let h = headers(&token);
        let passes = Passes {
            rooms: &rooms,
            headers: &h,
            metrics: &metrics,
            verified: OnceCell::new(),
        };
        assert!(!passes.has_pass("b"));
        assert!(!passes.has_pass("b"));
        assert_eq!(rejections(&metrics, "b"), 1, "verified once, refused once");
        assert_eq!(passes.verified.into_inner(), Some(("b".to_string(), None)));
    }
}
