//! Why the supervisor refused or failed a request, by whose fault: the API
//! maps each kind to its HTTP status (`api::create_error`, `api::swap_error`),
//! never a 400 for a failure of the server's own.

/// A request over a tenant's quota (the message names the resource).
#[derive(Debug, thiserror::Error)]
#[error("quota: {0}")]
pub struct QuotaExceeded(pub String);

/// Why a pipeline could not be created: the caller's fault or the
/// server's, so that the API answers 400, 429 or 500 accordingly.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// The file does not load or is outside the tenant's reach (the error
    /// names file, line and field).
    #[error(transparent)]
    Invalid(#[from] sluice_host::config::ConfigError),
    /// It would take the tenant over a quota.
    #[error(transparent)]
    Quota(#[from] QuotaExceeded),
    /// The server could not store or start it (disk, threads).
    #[error("{0:#}")]
    Server(#[from] anyhow::Error),
}

/// Why a swap did not happen.
#[derive(Debug)]
pub enum SwapError {
    /// No such pipeline (for this tenant).
    NotFound,
    /// The request cannot be done (the message says why); nothing changed.
    Refused(String),
    /// The pipeline's file is outside its tenant's reach (the message
    /// names the field); nothing changed.
    Invalid(String),
    /// Something broke on the way.
    Failed(String),
}
