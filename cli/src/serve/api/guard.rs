//! What keeps the API itself from being abused, in one middleware around
//! every route, and the limits the server's HTTP layer applies:
//!
//! * mutating requests (`POST`, `PATCH`, `PUT`, `DELETE`) are rate-limited
//!   per caller (each tenant, the admin, anonymous callers together):
//!   over the limit is `429` with `Retry-After`;
//! * request bodies are at most [`MAX_BODY_BYTES`] (plugin uploads: the
//!   tenant's `max_plugin_bytes`), and must arrive within
//!   [`BODY_TIMEOUT`]; request heads at most [`MAX_HEAD_BYTES`] and
//!   [`MAX_HEADERS`] headers within [`HEAD_TIMEOUT`]; a handler answers
//!   within [`HANDLER_TIMEOUT`] (`408` otherwise). Handlers run on tokio
//!   tasks, so a slow or stuck client holds a task, never a thread;
//! * each tenant may follow at most [`MAX_FOLLOWERS_PER_TENANT`] log
//!   streams at once;
//! * every action and every refusal is written to the audit log.

use super::AppState;
use crate::serve::audit::{AuditEntry, AuditLog, outcome};
use crate::serve::auth::Caller;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::{DefaultKeyedRateLimiter, Quota};
use sluice_host::sync::lock;
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The largest request body, but for plugin uploads.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// The largest plugin upload any tenant may be allowed.
pub const MAX_UPLOAD_BYTES: usize = 512 << 20;

/// The largest request line and headers together.
pub const MAX_HEAD_BYTES: usize = 64 << 10;

/// The most headers in a request.
pub const MAX_HEADERS: usize = 100;

/// How long a client may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client may take to send its request body.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a handler may take to answer (a hot swap waits for a barrier,
/// at most a minute).
pub const HANDLER_TIMEOUT: Duration = Duration::from_secs(120);

/// Log streams (`logs?follow=true`) a tenant may hold open at once.
pub const MAX_FOLLOWERS_PER_TENANT: usize = 8;

/// Mutating requests per second a caller may make, sustained.
pub const DEFAULT_MUTATIONS_PER_SECOND: u32 = 20;

/// Mutating requests a caller may make in a burst.
pub const DEFAULT_MUTATION_BURST: u32 = 100;

/// The API's limits and audit log, shared by every request.
pub struct Guard {
    mutations: DefaultKeyedRateLimiter<String>,
    followers: Mutex<HashMap<String, usize>>,
    audit: AuditLog,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard").field("audit", &self.audit).finish()
    }
}

impl Guard {
    /// A guard allowing `per_second` mutating requests per caller (bursts
    /// of `burst`), auditing to `audit`.
    pub fn new(per_second: u32, burst: u32, audit: AuditLog) -> Guard {
        let per_second = NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(burst).unwrap_or(per_second);
        Guard {
            mutations: DefaultKeyedRateLimiter::keyed(
                Quota::per_second(per_second).allow_burst(burst),
            ),
            followers: Mutex::new(HashMap::new()),
            audit,
        }
    }

    /// A slot for one more log stream of `tenant`, released when dropped;
    /// none if the tenant holds [`MAX_FOLLOWERS_PER_TENANT`] already.
    pub fn follower(self: &Arc<Self>, tenant: &str) -> Option<FollowerSlot> {
        let mut followers = lock(&self.followers);
        let count = followers.entry(tenant.to_string()).or_default();
        if *count >= MAX_FOLLOWERS_PER_TENANT {
            return None;
        }
        *count += 1;
        Some(FollowerSlot {
            guard: Arc::clone(self),
            tenant: tenant.to_string(),
        })
    }
}

/// One open log stream of a tenant (see [`Guard::follower`]).
#[derive(Debug)]
pub struct FollowerSlot {
    guard: Arc<Guard>,
    tenant: String,
}

impl Drop for FollowerSlot {
    fn drop(&mut self) {
        let mut followers = lock(&self.guard.followers);
        if let Some(count) = followers.get_mut(&self.tenant) {
            *count = count.saturating_sub(1);
        }
    }
}

fn mutates(method: &Method) -> bool {
    matches!(
        *method,
        Method::POST | Method::PATCH | Method::PUT | Method::DELETE
    )
}

/// The middleware: rate limit, then the handler, then the audit line.
pub async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let caller = super::caller(&state, request.headers()).ok();
    let (who, tenant) = match &caller {
        Some(Caller::Admin) => ("admin", None),
        Some(Caller::Tenant(name)) => ("tenant", Some(name.as_str())),
        None => ("anonymous", None),
    };
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let key = tenant.map_or_else(|| who.to_string(), |t| format!("tenant:{t}"));
    let response = match mutates(&method) {
        true => match state.guard.mutations.check_key(&key) {
            Ok(()) => next.run(request).await,
            Err(not_until) => {
                let wait = not_until.wait_time_from(governor::clock::Clock::now(
                    &governor::clock::DefaultClock::default(),
                ));
                too_many(wait)
            }
        },
        false => next.run(request).await,
    };
    let status = response.status().as_u16();
    if mutates(&method) || matches!(status, 401 | 403 | 429) {
        state.guard.audit.record(&AuditEntry {
            at_ms: sluice_host::time::now_ms(),
            who,
            tenant,
            method: method.as_str(),
            path: &path,
            status,
            outcome: outcome(status),
        });
    }
    response
}

fn too_many(wait: Duration) -> Response {
    let seconds = wait.as_secs() + 1;
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, seconds.to_string())],
        axum::Json(serde_json::json!({
            "error": format!("rate limit: too many changes from this caller; retry in {seconds} s")
        })),
    )
        .into_response()
}
