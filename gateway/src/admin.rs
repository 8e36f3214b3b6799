//! The admin listener: metrics, health, readiness and state.
//!
//! With `gateway.admin_token_env` set, every route but `/healthz` and
//! `/readyz` (which reveal nothing and must work for probes) needs
//! `Authorization: Bearer <token>`.

use std::sync::Arc;

use async_trait::async_trait;
use http::{header, Method, Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use serde_json::json;
use subtle::ConstantTimeEq;

use crate::body;
use crate::error::{ApiError, ErrorCode};
use crate::node::node_id;
use crate::readiness;
use crate::state::Shared;
use sluice_policies::model::ReleaseSource;

/// Largest inventory-adjustment body read.
const ADJUST_BODY_BYTES_MAX: usize = 4096;

pub struct Admin {
    shared: Arc<Shared>,
    /// `/admin/state` `node`: fixed at start, like the metrics' region.
    node: serde_json::Value,
}

impl Admin {
    pub fn new(shared: Arc<Shared>) -> Self {
        let gateway = &shared.runtime().config.gateway;
        let node = json!({"id": node_id(gateway), "region": gateway.region});
        Self { shared, node }
    }
}

#[async_trait]
impl ServeHttp for Admin {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let req = session.req_header();
        let path = req.uri.path().to_string();
        let method = req.method.clone();
        // Two `Authorization` headers are refused, as on the public listener.
        let Ok(presented) = sluice_edge::auth::bearer(&req.headers).map(|t| t.map(str::to_owned))
        else {
            return error(&ApiError::new(
                ErrorCode::BadRequest,
                "The request carries more than one Authorization header.",
            ));
        };
        let open_route = matches!(path.as_str(), "/healthz" | "/readyz");
        let runtime = self.shared.runtime();
        if let Some(token) = &runtime.config.gateway.admin_token {
            if !open_route && !token_matches(presented.as_deref(), token.expose()) {
                return error(&ApiError::new(
                    ErrorCode::Unauthorized,
                    "The admin routes need a bearer token.",
                ));
            }
        }
        if let Some(sku) = path
            .strip_prefix("/admin/inventory/")
            .and_then(|p| p.strip_suffix("/adjust"))
        {
            if method != Method::POST {
                return method_not_allowed("Adjust with POST.", "POST");
            }
            let deadline = self.shared.runtime().config.gateway.header_timeout;
            let body = match body::read(session, ADJUST_BODY_BYTES_MAX, deadline).await {
                Ok(body) => body,
                Err(e) => return error(&e.answer("The adjustment body is too large.", deadline)),
            };
            let (status, value) = self.shared.orders.adjust(sku, &body).await;
            let mut r = json_response(status, &value);
            if status == StatusCode::SERVICE_UNAVAILABLE {
                // Overloaded or the store away: nothing changed, try again.
                r.headers_mut()
                    .insert(header::RETRY_AFTER, http::HeaderValue::from_static("1"));
            }
            return r;
        }
        if method != Method::GET && method != Method::HEAD {
            return method_not_allowed("The admin routes only answer GET.", "GET, HEAD");
        }
        match path.as_str() {
            "/metrics" => respond(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                self.shared.metrics.render(),
            ),
            "/healthz" => json_response(StatusCode::OK, &json!({"status": "ok"})),
            "/readyz" => {
                let store = self.shared.orders.backend().clone();
                let (store, provider) = self
                    .shared
                    .readiness
                    .probe(store, &runtime.config.payments)
                    .await;
                let reasons =
                    readiness::reasons(self.shared.is_shutting_down(), &store, provider.as_ref());
                let status = if reasons.is_empty() {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                };
                let degraded = readiness::degraded(self.shared.rooms.fleet_store_health().as_ref());
                json_response(
                    status,
                    &json!({"ready": reasons.is_empty(), "reasons": reasons, "degraded": degraded}),
                )
            }
            "/admin/state" => json_response(StatusCode::OK, &self.state().await),
            _ => error(&ApiError::new(
                ErrorCode::NotFound,
                "No admin route at this path.",
            )),
        }
    }
}

impl Admin {
    /// The fields of `/admin/state` that exist so far.
    async fn state(&self) -> serde_json::Value {
        let rt = self.shared.runtime();
        let config = &rt.config;
        let status = self
            .shared
            .reload_status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let now = crate::clock::now_ms();
        let rooms: Vec<_> = config
            .rooms
            .iter()
            .map(|r| {
                let adaptive = self.shared.rooms.adaptive_view(&r.name);
                // The rate in force: a fleet room runs at the fleet's
                // smallest rate while the gateways' configs differ.
                let in_force = self
                    .shared
                    .rooms
                    .get(&r.name)
                    .map(|e| e.backend.policy().release_per_second.get());
                let mut room = json!({
                    "name": r.name,
                    "release_per_second": adaptive
                        .as_ref()
                        .map(|a| a.in_force)
                        .or(in_force)
                        .unwrap_or(r.release_per_second.get()),
                    "release_source": match (&r.release_source, adaptive) {
                        (ReleaseSource::Auto { backend, exact_per_second }, _) => json!({
                            "kind": "auto",
                            "tightest_backend": backend,
                            "exact_per_second": exact_per_second,
                        }),
                        (ReleaseSource::Adaptive(_), Some(a)) => {
                            let mut source = json!({
                                "kind": "adaptive",
                                "target_p99_ms": a.bounds.target_p99_ms,
                                "max_error_ratio": a.bounds.max_error_ratio,
                                "min_per_second": a.bounds.min_per_second,
                                "max_per_second": a.bounds.max_per_second,
                                "exact_per_second": a.decision.rate,
                                "reason": a.decision.reason.as_str(),
                                "phase": a.decision.phase.as_str(),
                                "capacity_per_second": a.decision.capacity,
                                "queue": a.decision.queue,
                                "decided_at": a.decision.at_ms / 1000,
                                "scope": if a.fleet.is_some() { "fleet" } else { "gateway" },
                            });
                            if let Some(by) = a.fleet {
                                // The fleet's one rate: the step that took it.
                                source["decided_at_ms"] = json!(a.decision.at_ms);
                                source["decided_by"] = json!(by);
                            }
                            source
                        }
                        _ => json!({"kind": "fixed"}),
                    },
                    "max_active": r.max_active.get(),
                    "queue_capacity": r.queue_capacity.get(),
                });
                if let Some(s) = self.shared.rooms.stats(&r.name, now) {
                    room["waiting"] = json!(s.waiting);
                    room["serving"] = json!(s.serving);
                    room["active"] = json!(s.active_passes);
                    room["uncollected"] = json!(s.uncollected);
                    room["no_show_share"] = json!(s.no_show_share);
                    room["admitted_total"] = json!(s.admitted_total);
                    room["abandoned_total"] = json!(s.abandoned_total);
                    room["oldest_wait_s"] = json!(s.oldest_wait_s);
                    room["measured_release_rate"] = json!(s.release_rate);
                    room["paused"] = json!(s.paused);
                    room["sold_out"] = json!(s.sold_out);
                }
                if let Some(entry) = self.shared.rooms.get(&r.name) {
                    if let Some(l) = entry.backend.fleet_limits() {
                        // The smallest limits the fleet's live gateways'
                        // configs give: what the room runs at.
                        room["fleet_limits"] = json!({
                            "release_per_second": l.rate,
                            "burst": l.burst,
                            "max_active": l.max_active,
                            "queue_capacity": l.queue_capacity,
                        });
                    }
                    let fair = entry.backend.fair_start();
                    if let Some(f) = fair {
                        room["fair_start"] = json!({
                            "opens_at": f.opens_at_ms / 1000,
                            "commitment": f.commitment_hex,
                            "seed": f.seed_hex,
                            "entrants": f.entrants,
                        });
                    }
                }
                room
            })
            .collect();
        let (cache_bytes, cache_entries) = rt.origin_cache.usage();
        let (inventory, orders) = self.shared.orders.state().await;
        let fleet = self.shared.rooms.fleet_members().map(|members| {
            members
                .iter()
                .map(|m| json!({"id": m.id, "region": m.region, "last_seen_s": m.last_seen_s}))
                .collect::<Vec<_>>()
        });
        let mut state = json!({
            "node": self.node,
            "admissions": config.gateway.admissions.as_str(),
            "rooms": rooms,
            "inventory": inventory,
            "orders": orders,
            "config": {
                "source": config.source.display().to_string(),
                "last_reload_success_unix": status.last_success_unix,
                "last_reload_error": status.last_error,
            },
            "catalog": {"files": rt.catalog.len(), "bytes": rt.catalog.total_bytes()},
            "origin_cache": {"entries": cache_entries, "bytes": cache_bytes},
        });
        if let Some(fleet) = fleet {
            state["fleet"] = json!(fleet);
        }
        state
    }
}

/// Whether the presented bearer token is the admin token. The bytes are
/// compared by `subtle`, whose comparison the optimiser cannot turn into
/// an early exit, so the time taken does not tell a caller how much of a
/// guess was right (only whether its length was).
fn token_matches(presented: Option<&str>, token: &str) -> bool {
    presented
        .unwrap_or("")
        .as_bytes()
        .ct_eq(token.as_bytes())
        .into()
}

fn respond(status: StatusCode, content_type: &str, body: Vec<u8>) -> Response<Vec<u8>> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CONTENT_LENGTH, body.len())
        .header(header::CACHE_CONTROL, "no-store")
        .body(body)
        .expect("static header names are valid")
}

fn json_response(status: StatusCode, value: &serde_json::Value) -> Response<Vec<u8>> {
    let mut body = serde_json::to_vec(value).expect("JSON values serialize");
    body.push(b'\n');
    respond(status, "application/json", body)
}

/// `405` with the `Allow` header RFC 9110 asks for.
fn method_not_allowed(message: &str, allow: &'static str) -> Response<Vec<u8>> {
    let mut r = error(&ApiError::new(ErrorCode::MethodNotAllowed, message));
    r.headers_mut()
        .insert(header::ALLOW, http::HeaderValue::from_static(allow));
    r
}

fn error(e: &ApiError) -> Response<Vec<u8>> {
    let body = e.body().to_vec();
    let mut builder = Response::builder()
        .status(e.status())
        .header(header::CONTENT_LENGTH, body.len());
    for (name, value) in e.headers() {
        builder = builder.header(name, value);
    }
    builder.body(body).expect("static header names are valid")
}

#[cfg(test)]
mod tests {
    use super::token_matches;
    use http::{header, HeaderMap, HeaderValue};

    const TOKEN: &str = "admin-token-0123456789";

    /// The admin listener's own path: the edge parser, then the compare.
    fn opens(value: Option<HeaderValue>) -> bool {
        let mut headers = HeaderMap::new();
        if let Some(v) = value {
            headers.insert(header::AUTHORIZATION, v);
        }
        let presented = sluice_edge::auth::bearer(&headers).expect("one header");
        token_matches(presented, TOKEN)
    }

    fn presented(value: &str) -> bool {
        opens(Some(HeaderValue::from_str(value).unwrap()))
    }

    #[test]
    fn only_the_exact_bearer_token_opens() {
        assert!(presented("Bearer admin-token-0123456789"));
        assert!(!opens(None), "no header");
        for wrong in [
            "Bearer admin-token-012345678X",
            "Bearer Xdmin-token-0123456789",
            "Bearer admin-token-012345678",
            "Bearer admin-token-01234567890",
            "Bearer ",
            "Bearer",
            "admin-token-0123456789",
            "Basic admin-token-0123456789",
        ] {
            assert!(!presented(wrong), "{wrong:?} opened the admin routes");
        }
        let not_utf8 = HeaderValue::from_bytes(b"Bearer \xffadmin").unwrap();
        assert!(!opens(Some(not_utf8)));
    }
}
