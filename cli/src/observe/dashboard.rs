//! The web dashboard: one page and its script and styles, embedded in the
//! binary (no web server or build step at run time). It reads the JSON
//! status routes; on `sluice serve` it asks for a token once and keeps it
//! in the page's session storage, sent as a bearer header, never in a URL.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/dashboard.js");
const STYLES: &str = include_str!("assets/dashboard.css");

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}

/// `GET /` and `GET /assets/...`: the dashboard (no authentication: the
/// page holds no data; the API it calls does).
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/assets/dashboard.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/assets/dashboard.css",
            get(|| async { asset("text/css; charset=utf-8", STYLES) }),
        )
}
