//! The admin's routes: tenants, their limits and their reach.

use super::{ApiError, AppState, JsonBody, admin, bad_request, internal, not_found};
use crate::serve::auth::TenantLimits;
use crate::serve::reach::TenantReach;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::{Value, json};

/// `POST /api/v1/tenants` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NewTenant {
    name: String,
    #[serde(default)]
    limits: Option<TenantLimits>,
    /// What its pipelines may reach (`docs/api.md`); none: no Kafka, no
    /// catalog or registry, S3 only under the server's tenant bucket.
    #[serde(default)]
    reach: Option<TenantReach>,
}

/// `PATCH /api/v1/tenants/{name}` body: what to change.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TenantChange {
    #[serde(default)]
    limits: Option<TenantLimits>,
    #[serde(default)]
    reach: Option<TenantReach>,
}

/// Refuses limits and reach that cannot be kept.
fn check_tenant_settings(
    limits: Option<&TenantLimits>,
    reach: Option<&TenantReach>,
) -> Result<(), ApiError> {
    if let Some(cores) = limits.and_then(|l| l.cpu_cores)
        && !(cores.is_finite() && cores > 0.0)
    {
        return Err(bad_request(
            "limits.cpu_cores: a positive number of CPUs (e.g. 0.5)",
        ));
    }
    if let Some(reach) = reach {
        if let Some(s3) = &reach.s3
            && let Some(bad) = s3.prefixes.iter().find(|p| {
                p.strip_prefix("s3://")
                    .is_none_or(|rest| rest.split('/').next().is_none_or(str::is_empty))
            })
        {
            return Err(bad_request(format!(
                "reach.s3.prefixes: `{bad}` is not an s3://bucket/prefix/ location"
            )));
        }
        if reach.has_credentials() {
            crate::serve::reach::check_key().map_err(|e| bad_request(e.to_string()))?;
        }
    }
    Ok(())
}

pub(super) async fn create_tenant(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<NewTenant>,
) -> Result<impl IntoResponse, ApiError> {
    admin(&state, &headers)?;
    if body.name.is_empty()
        || body.name.len() > 63
        || !body
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(bad_request(
            "tenant names are 1 to 63 letters, digits, `-` and `_`",
        ));
    }
    check_tenant_settings(body.limits.as_ref(), body.reach.as_ref())?;
    let mut auth = state
        .auth
        .write()
        .map_err(|_| internal("auth lock poisoned"))?;
    let token = auth
        .add_tenant_token(&body.name, body.limits, body.reach)
        // Storing the tenant failed (disk, sealing): the server's fault.
        .map_err(|e| internal(format!("{e:#}")))?;
    if let Some(limits) = auth.limits(&body.name) {
        state.supervisor.set_limits(&body.name, limits);
    }
    if let Some(reach) = auth.reach(&body.name) {
        state.supervisor.set_reach(&body.name, reach);
    }
    drop(auth);
    Ok((
        StatusCode::CREATED,
        Json(json!({ "tenant": body.name, "token": token })),
    ))
}

/// Changes a tenant's limits or reach; pipelines that no longer fit the
/// reach are stopped and listed in the answer.
pub(super) async fn update_tenant(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<TenantChange>,
) -> Result<impl IntoResponse, ApiError> {
    admin(&state, &headers)?;
    check_tenant_settings(body.limits.as_ref(), body.reach.as_ref())?;
    let (limits, reach) = {
        let mut auth = state
            .auth
            .write()
            .map_err(|_| internal("auth lock poisoned"))?;
        let found = auth
            .update_tenant(&name, body.limits, body.reach)
            // Storing the tenant failed (disk, sealing): the server's fault.
            .map_err(|e| internal(format!("{e:#}")))?;
        if !found {
            return Err(not_found("such tenant"));
        }
        (
            auth.limits(&name).cloned().unwrap_or_default(),
            auth.reach(&name).cloned().unwrap_or_default(),
        )
    };
    state.supervisor.set_limits(&name, &limits);
    let supervisor = state.supervisor.clone();
    let tenant = name.clone();
    let shown = reach.shown();
    let stopped = tokio::task::spawn_blocking(move || supervisor.set_reach(&tenant, &reach))
        .await
        .map_err(internal)?;
    let stopped: Vec<Value> = stopped
        .into_iter()
        .map(|(pipeline, reason)| json!({ "pipeline": pipeline, "reason": reason }))
        .collect();
    Ok(Json(json!({
        "tenant": name,
        "limits": limits,
        "reach": shown,
        "stopped": stopped,
    })))
}

pub(super) async fn list_tenants(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    admin(&state, &headers)?;
    let auth = state
        .auth
        .read()
        .map_err(|_| internal("auth lock poisoned"))?;
    let tenants: Vec<_> = auth
        .tenants()
        .map(|(name, limits, reach)| json!({ "name": name, "limits": limits, "reach": reach.shown() }))
        .collect();
    Ok(Json(json!({ "tenants": tenants })))
}
