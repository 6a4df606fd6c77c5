//! The REST API under `/api/v1/` (see `docs/api.md`), scoped to the
//! caller's tenant: a pipeline of another tenant is a 404, exactly like
//! one that does not exist. `/healthz` needs no token.

use super::auth::{Auth, Caller, TenantLimits};
use super::deployments::{Deployment, DeploymentKind, SwapRequest};
use super::errors::{CreateError, SwapError};
use super::operations::{OperationKind, Operations};
use guard::{
    BODY_TIMEOUT, HANDLER_TIMEOUT, MAX_BODY_BYTES, MAX_FOLLOWERS_PER_TENANT, MAX_UPLOAD_BYTES,
};
pub mod guard;
mod tenants;
use super::supervisor::{PipelineKey, Supervisor};
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::{Arc, RwLock};
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// Tokens and tenants.
    pub auth: Arc<RwLock<Auth>>,
    /// The running pipelines.
    pub supervisor: Arc<Supervisor>,
    /// Long operations, pollable by id.
    pub operations: Arc<Operations>,
    /// Uploaded plugins, by digest.
    pub plugin_store: std::path::PathBuf,
    /// Plugin logs, per pipeline.
    pub logs: Arc<super::logs::LogStore>,
    /// Every pipeline's recent rates and ratios, for the dashboard.
    pub history: Arc<sluice_host::metrics::status::StatusHistory>,
    /// Rate limits, log-stream slots and the audit log.
    pub guard: Arc<guard::Guard>,
}

/// An error answer: a status and a message, as `{"error": ".."}`.
#[derive(Debug)]
pub struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

fn not_found(what: &str) -> ApiError {
    ApiError(StatusCode::NOT_FOUND, format!("no {what}"))
}

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, message.into())
}

fn internal(error: impl std::fmt::Display) -> ApiError {
    ApiError(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
}

/// The routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/api/v1/tenants",
            post(tenants::create_tenant).get(tenants::list_tenants),
        )
        .route(
            "/api/v1/tenants/{name}",
            axum::routing::patch(tenants::update_tenant),
        )
        .route(
            "/api/v1/plugins",
            post(upload_plugin).layer(DefaultBodyLimit::max(MAX_UPLOAD_BYTES)),
        )
        .route(
            "/api/v1/pipelines",
            post(create_pipeline).get(list_pipelines),
        )
        .route(
            "/api/v1/pipelines/{name}",
            get(show_pipeline).delete(delete_pipeline),
        )
        .route("/api/v1/pipelines/{name}/stop", post(stop_pipeline))
        .route("/api/v1/pipelines/{name}/start", post(start_pipeline))
        .route(
            "/api/v1/pipelines/{name}/checkpoints",
            get(list_checkpoints),
        )
        .route(
            "/api/v1/pipelines/{name}/operators/{operator}/plugin",
            post(push_plugin),
        )
        .route(
            "/api/v1/pipelines/{name}/operators/{operator}/rollback",
            post(rollback_plugin),
        )
        .route(
            "/api/v1/pipelines/{name}/operators/{operator}/versions",
            get(list_versions),
        )
        .route("/api/v1/pipelines/{name}/rollback", post(rollback_pipeline))
        .route(
            "/api/v1/pipelines/{name}/deployments",
            get(list_deployments),
        )
        .route("/api/v1/pipelines/{name}/logs", get(pipeline_logs))
        .route("/api/v1/pipelines/{name}/errors", get(pipeline_errors))
        .route(
            "/api/v1/pipelines/{name}/dead-letters",
            get(dead_letter_samples),
        )
        .route("/api/v1/operations/{id}", get(show_operation))
        .route("/metrics", get(metrics))
        .route("/api/v1/status", get(status_list))
        .route("/api/v1/pipelines/{name}/status", get(pipeline_status))
        .merge(crate::observe::dashboard::routes())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::guard,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(RequestBodyTimeoutLayer::new(BODY_TIMEOUT))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            HANDLER_TIMEOUT,
        ))
        .with_state(state)
}

/// A JSON request body, whatever its `Content-Type`; an empty body reads
/// as `null` (so `JsonBody<Option<T>>` takes none). Malformed JSON, or
/// JSON of the wrong shape, is a `400` saying where.
pub struct JsonBody<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> axum::extract::FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| ApiError(rejection.status(), rejection.body_text()))?;
        let text: &[u8] = match bytes.iter().all(u8::is_ascii_whitespace) {
            true => b"null",
            false => &bytes,
        };
        serde_json::from_slice(text)
            .map(JsonBody)
            .map_err(|error| bad_request(format!("the request body: {error}")))
    }
}

/// The caller of a request, from its `Authorization: Bearer` header.
pub(super) fn caller(state: &AppState, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let token = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .ok_or_else(|| ApiError(StatusCode::UNAUTHORIZED, "a bearer token is needed".into()))?;
    let auth = state
        .auth
        .read()
        .map_err(|_| internal("auth lock poisoned"))?;
    auth.authenticate(token.trim())
        .ok_or_else(|| ApiError(StatusCode::UNAUTHORIZED, "unknown token".into()))
}

fn tenant(state: &AppState, headers: &HeaderMap) -> Result<String, ApiError> {
    match caller(state, headers)? {
        Caller::Tenant(tenant) => Ok(tenant),
        Caller::Admin => Err(ApiError(
            StatusCode::FORBIDDEN,
            "the admin token manages tenants; use a tenant's token".into(),
        )),
    }
}

fn admin(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    match caller(state, headers)? {
        Caller::Admin => Ok(()),
        Caller::Tenant(_) => Err(ApiError(StatusCode::FORBIDDEN, "admin only".into())),
    }
}

/// `POST /api/v1/plugins`: a component's bytes; answers its digest. The
/// same bytes always get the same digest (content-addressed).
async fn upload_plugin(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = tenant(&state, &headers)?;
    let limit = limits(&state, &tenant)?
        .max_plugin_bytes
        .min(MAX_UPLOAD_BYTES);
    let too_large = || {
        ApiError(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("quota: plugins of tenant `{tenant}` may have {limit} bytes"),
        )
    };
    // Refused before reading when the length is announced, and never read
    // past the limit when it is not.
    let announced = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|length| length > limit as u64) {
        return Err(too_large());
    }
    use http_body_util::BodyExt as _;
    let body = http_body_util::Limited::new(body, limit)
        .collect()
        .await
        .map_err(
            |error| match error.downcast_ref::<http_body_util::LengthLimitError>() {
                Some(_) => too_large(),
                None => bad_request(format!("reading the upload: {error}")),
            },
        )?
        .to_bytes();
    if !wasmparser::Parser::is_component(&body) {
        return Err(bad_request(
            "not a WebAssembly component (build it with `sluice plugin build`)",
        ));
    }
    use sha2::Digest as _;
    let digest = hex::encode(sha2::Sha256::digest(&body));
    let path = state.plugin_store.join(format!("{digest}.wasm"));
    if !path.exists() {
        let temporary = state.plugin_store.join(format!("{digest}.wasm.tmp"));
        std::fs::write(&temporary, &body).map_err(internal)?;
        std::fs::rename(&temporary, &path).map_err(internal)?;
    }
    Ok((
        StatusCode::CREATED,
        Json(json!({ "sha256": digest, "bytes": body.len() })),
    ))
}

fn limits(state: &AppState, tenant: &str) -> Result<TenantLimits, ApiError> {
    let auth = state
        .auth
        .read()
        .map_err(|_| internal("auth lock poisoned"))?;
    Ok(auth.limits(tenant).cloned().unwrap_or_default())
}

/// The `Idempotency-Key` header, if any.
fn idempotency_key(headers: &HeaderMap) -> Option<String> {
    headers
        .get("idempotency-key")
        .and_then(|value| value.to_str().ok())
        .map(str::to_string)
}

/// `POST /api/v1/pipelines`: a pipeline file as the body. Checked and
/// stored at once (a 400 names what is wrong); starting it is an
/// operation to poll.
async fn create_pipeline(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: String,
) -> Result<Response, ApiError> {
    let tenant = tenant(&state, &headers)?;
    let key_header = idempotency_key(&headers);
    if let Some(key) = &key_header
        && let Some(operation) = state.operations.by_idempotency_key(&tenant, key)
    {
        return Ok((StatusCode::ACCEPTED, Json(operation)).into_response());
    }
    let admitted = super::admission::admit(&body, &tenant).map_err(bad_request)?;
    let key: PipelineKey = (tenant.clone(), admitted.name.clone());
    if state.supervisor.exists(&key) {
        return Err(ApiError(
            StatusCode::CONFLICT,
            format!("pipeline `{}` exists; delete it first", admitted.name),
        ));
    }
    let limit = limits(&state, &tenant)?.max_pipelines;
    if state.supervisor.count(&tenant) >= limit {
        return Err(ApiError(
            StatusCode::TOO_MANY_REQUESTS,
            format!("quota: tenant `{tenant}` may have {limit} pipelines"),
        ));
    }
    for digest in &admitted.plugins {
        if !state.plugin_store.join(format!("{digest}.wasm")).exists() {
            return Err(bad_request(format!(
                "plugin sha256:{digest} was not uploaded (POST /api/v1/plugins)"
            )));
        }
    }
    let supervisor = state.supervisor.clone();
    let store = state.plugin_store.clone();
    let text = admitted.text.clone();
    let plugins = admitted.plugins.clone();
    let created_key = key.clone();
    tokio::task::spawn_blocking(move || supervisor.create(&created_key, &text, &plugins, &store))
        .await
        .map_err(internal)?
        .map_err(|error| match error {
            CreateError::Invalid(error) => bad_request(error.to_string()),
            CreateError::Quota(quota) => ApiError(StatusCode::TOO_MANY_REQUESTS, quota.to_string()),
            CreateError::Server(error) => internal(format!("{error:#}")),
        })?;
    let operation = state.operations.start(
        &tenant,
        key_header.as_deref(),
        OperationKind::Start,
        &admitted.name,
    );
    Ok((StatusCode::ACCEPTED, Json(operation)).into_response())
}

async fn list_pipelines(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = tenant(&state, &headers)?;
    Ok(Json(json!({ "pipelines": state.supervisor.list(&tenant) })))
}

async fn show_pipeline(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = tenant(&state, &headers)?;
    let status = state
        .supervisor
        .status(&(tenant, name))
        .ok_or_else(|| not_found("such pipeline"))?;
    Ok(Json(status))
}

/// `GET .../logs` query: lines numbered above `after` and written at or
/// after `since_ms`, at most `limit` (the newest); `follow` streams new
/// lines as server-sent events.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogsQuery {
    #[serde(default)]
    after: u64,
    #[serde(default)]
    since_ms: i64,
    #[serde(default = "default_log_limit")]
    limit: usize,
    #[serde(default)]
    follow: bool,
}

fn default_log_limit() -> usize {
    200
}

/// How often a follower is sent the lines written since.
const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// The pipeline's plugin logs: a JSON list, or with `follow=true` a
/// stream of server-sent events (`event: log`, the line as JSON data)
/// that lasts until the client goes away or the pipeline is deleted.
async fn pipeline_logs(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    axum::extract::Query(query): axum::extract::Query<LogsQuery>,
) -> Result<Response, ApiError> {
    let tenant = tenant(&state, &headers)?;
    let key: PipelineKey = (tenant, name);
    if !state.supervisor.exists(&key) {
        return Err(not_found("such pipeline"));
    }
    let lines = state
        .logs
        .read(&key.0, &key.1, query.after, query.since_ms, query.limit);
    if !query.follow {
        return Ok(Json(json!({ "lines": lines })).into_response());
    }
    let slot = state.guard.follower(&key.0).ok_or_else(|| {
        ApiError(
            StatusCode::TOO_MANY_REQUESTS,
            format!("quota: a tenant may follow {MAX_FOLLOWERS_PER_TENANT} log streams at once"),
        )
    })?;
    use axum::response::sse::{Event, KeepAlive, Sse};
    let after = lines.last().map_or(query.after, |line| line.seq);
    let first = futures::stream::iter(lines);
    let later = futures::stream::unfold(after, move |after| {
        let (logs, supervisor, key) = (state.logs.clone(), state.supervisor.clone(), key.clone());
        // The slot lives as long as the stream.
        let _slot = &slot;
        async move {
            loop {
                tokio::time::sleep(FOLLOW_EVERY).await;
                if !supervisor.exists(&key) {
                    return None;
                }
                let lines = logs.read(&key.0, &key.1, after, 0, usize::MAX);
                if let Some(last) = lines.last() {
                    let after = last.seq;
                    return Some((futures::stream::iter(lines), after));
                }
            }
        }
    });
    use futures::StreamExt as _;
    let events = first.chain(later.flatten()).map(|line| {
        Event::default()
            .event("log")
            .json_data(&line)
            .map_err(|e| e.to_string())
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// The pipeline's recent errors: why it failed (if it did) and its
/// plugins' latest faults.
async fn pipeline_errors(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = tenant(&state, &headers)?;
    let key: PipelineKey = (tenant, name);
    let status = state
        .supervisor
        .status(&key)
        .ok_or_else(|| not_found("such pipeline"))?;
    let failure = match status.state {
        super::supervisor::PipelineState::Failed(reason) => Some(reason),
        _ => None,
    };
    let faults = state
        .supervisor
        .pipeline_metrics(&key)
        .map(|metrics| metrics.recent_faults())
        .unwrap_or_default();
    Ok(Json(json!({ "failure": failure, "faults": faults })))
}

/// The latest records the pipeline dead-lettered, with their reasons.
async fn dead_letter_samples(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = tenant(&state, &headers)?;
    let key: PipelineKey = (tenant, name);
    if !state.supervisor.exists(&key) {
        return Err(not_found("such pipeline"));
    }
    let samples = state
        .supervisor
        .pipeline_metrics(&key)
        .map(|metrics| metrics.dead_letter_samples.list())
        .unwrap_or_default();
    Ok(Json(json!({ "samples": samples })))
}

async fn stop_pipeline(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    lifecycle(state, headers, name, OperationKind::Stop).await
}

async fn start_pipeline(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    lifecycle(state, headers, name, OperationKind::Start).await
}

async fn delete_pipeline(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    lifecycle(state, headers, name, OperationKind::Delete).await
}

/// Stop, start or delete: an operation to poll.
async fn lifecycle(
    state: AppState,
    headers: HeaderMap,
    name: String,
    kind: OperationKind,
) -> Result<(StatusCode, Json<super::operations::Operation>), ApiError> {
    let tenant = tenant(&state, &headers)?;
    let key_header = idempotency_key(&headers);
    if let Some(key) = &key_header
        && let Some(operation) = state.operations.by_idempotency_key(&tenant, key)
    {
        return Ok((StatusCode::ACCEPTED, Json(operation)));
    }
    let key: PipelineKey = (tenant.clone(), name.clone());
    if !state.supervisor.exists(&key) {
        return Err(not_found("such pipeline"));
    }
    let operation = state
        .operations
        .start(&tenant, key_header.as_deref(), kind, &name);
    let supervisor = state.supervisor.clone();
    let operations = state.operations.clone();
    let logs = state.logs.clone();
    let id = operation.id.clone();
    tokio::task::spawn_blocking(move || {
        let result = match kind {
            OperationKind::Stop => supervisor.stop(&key),
            OperationKind::Delete => supervisor.delete(&key).inspect(|()| {
                logs.remove(&key.0, &key.1);
            }),
            // Done once the pipeline runs: see `Operations::get`.
            OperationKind::Start => match supervisor.start(&key) {
                Ok(()) => return,
                Err(error) => Err(error),
            },
        };
        operations.finish_now(&id, result.map_err(|e| format!("{e:#}")));
    });
    Ok((StatusCode::ACCEPTED, Json(operation)))
}

async fn list_checkpoints(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = tenant(&state, &headers)?;
    let key: PipelineKey = (tenant, name);
    if !state.supervisor.exists(&key) {
        return Err(not_found("such pipeline"));
    }
    let file = state.supervisor.pipeline_dir(&key).join("pipeline.toml");
    let listed = tokio::task::spawn_blocking(move || crate::checkpoints::list(&file, true))
        .await
        .map_err(internal)?
        .map_err(|e| internal(format!("{e:#}")))?;
    // One JSON document per line.
    let checkpoints = listed
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(serde_json::from_str::<Value>)
        .collect::<Result<Vec<_>, _>>()
        .map_err(internal)?;
    Ok(Json(json!({ "checkpoints": checkpoints })))
}

async fn show_operation(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = tenant(&state, &headers)?;
    let operation = state
        .operations
        .get(&tenant, &id, &state.supervisor)
        .ok_or_else(|| not_found("such operation"))?;
    Ok(Json(operation))
}

/// `GET /metrics`: Prometheus text of the caller's tenant's pipelines
/// (every tenant's with the admin token).
async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let tenant = match caller(&state, &headers)? {
        Caller::Admin => None,
        Caller::Tenant(tenant) => Some(tenant),
    };
    let supervisor = state.supervisor.clone();
    let text = tokio::task::spawn_blocking(move || {
        crate::observe::metrics_text(supervisor.as_ref(), tenant.as_deref())
    })
    .await
    .map_err(internal)?;
    Ok(crate::observe::metrics_response(text))
}

/// `GET /api/v1/status`: a summary line per pipeline of the caller's
/// tenant (the dashboard's list).
async fn status_list(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = tenant(&state, &headers)?;
    let mut list =
        crate::observe::status_list(state.supervisor.as_ref(), &state.history, Some(&tenant));
    list["mode"] = json!("serve");
    list["tenant"] = json!(tenant);
    Ok(Json(list))
}

/// `GET /api/v1/pipelines/{name}/status`: everything the dashboard shows
/// of one pipeline.
async fn pipeline_status(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = tenant(&state, &headers)?;
    crate::observe::pipeline_status(
        state.supervisor.as_ref(),
        &state.history,
        Some(&tenant),
        &name,
    )
    .map(Json)
    .ok_or_else(|| not_found("such running pipeline"))
}

/// `POST .../operators/{operator}/plugin` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PushPlugin {
    sha256: String,
}

/// Swaps an operator's plugin to an uploaded component at the next
/// barrier; answers the deployment record once every instance swapped.
async fn push_plugin(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((name, operator)): Path<(String, String)>,
    JsonBody(body): JsonBody<PushPlugin>,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = tenant(&state, &headers)?;
    if body.sha256.len() != 64 || !body.sha256.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(bad_request("`sha256` is not a sha256 digest"));
    }
    swap(
        state,
        (tenant.clone(), name),
        operator,
        body.sha256,
        DeploymentKind::Deploy,
        tenant,
    )
    .await
}

/// `POST .../rollback` body: where to go back to.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rollback {
    /// The operator (for the pipeline-level route; default: the operator
    /// of the latest deployment).
    #[serde(default)]
    operator: Option<String>,
    /// A kept version, by its sha256 or a prefix of at least 8 hex digits
    /// (default: the version before the current one).
    #[serde(default)]
    to: Option<String>,
}

/// Swaps an operator back to one of its kept versions (by default the one
/// it ran before the current one).
async fn rollback_plugin(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((name, operator)): Path<(String, String)>,
    JsonBody(body): JsonBody<Option<Rollback>>,
) -> Result<impl IntoResponse, ApiError> {
    let body = body.unwrap_or_default();
    if body.operator.as_ref().is_some_and(|o| *o != operator) {
        return Err(bad_request(
            "`operator` differs from the operator in the path",
        ));
    }
    rollback(state, headers, name, Some(operator), body.to).await
}

/// Rolls back the pipeline's latest deployment (or `operator`'s) to a kept
/// version.
async fn rollback_pipeline(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<Option<Rollback>>,
) -> Result<impl IntoResponse, ApiError> {
    let body = body.unwrap_or_default();
    rollback(state, headers, name, body.operator, body.to).await
}

async fn rollback(
    state: AppState,
    headers: HeaderMap,
    name: String,
    operator: Option<String>,
    to: Option<String>,
) -> Result<Json<Deployment>, ApiError> {
    let tenant = tenant(&state, &headers)?;
    let key: PipelineKey = (tenant.clone(), name);
    let (operator, digest) = state
        .supervisor
        .rollback_target(&key, operator.as_deref(), to.as_deref())
        .map_err(swap_error)?;
    swap(
        state,
        key,
        operator,
        digest,
        DeploymentKind::Rollback,
        tenant,
    )
    .await
}

/// The versions an operator keeps for a rollback, the running one first.
async fn list_versions(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((name, operator)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = tenant(&state, &headers)?;
    let kept = state
        .supervisor
        .kept_versions(&(tenant, name), &operator)
        .map_err(swap_error)?;
    let versions: Vec<Value> = kept
        .iter()
        .enumerate()
        .map(|(i, digest)| json!({ "sha256": digest, "running": i == 0 }))
        .collect();
    Ok(Json(json!({ "operator": operator, "versions": versions })))
}

fn swap_error(error: SwapError) -> ApiError {
    match error {
        SwapError::NotFound => not_found("such pipeline"),
        SwapError::Refused(why) => ApiError(StatusCode::CONFLICT, why),
        SwapError::Invalid(why) => bad_request(why),
        SwapError::Failed(why) => internal(why),
    }
}

async fn swap(
    state: AppState,
    key: PipelineKey,
    operator: String,
    digest: String,
    kind: DeploymentKind,
    by: String,
) -> Result<Json<Deployment>, ApiError> {
    let supervisor = state.supervisor.clone();
    let plugin_store = state.plugin_store.clone();
    let result = tokio::task::spawn_blocking(move || {
        supervisor.swap_plugin(&SwapRequest {
            key: &key,
            operator: &operator,
            digest: &digest,
            plugin_store: &plugin_store,
            kind,
            by: &by,
        })
    })
    .await
    .map_err(internal)?;
    result.map(Json).map_err(swap_error)
}

async fn list_deployments(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = tenant(&state, &headers)?;
    let deployments = state
        .supervisor
        .deployments(&(tenant, name))
        .ok_or_else(|| not_found("such pipeline"))?;
    Ok(Json(json!({ "deployments": deployments })))
}
