//! The CLI as a client of `sluice serve`: `sluice deploy`, `sluice
//! pipelines ...`, `sluice tenants create`.
//!
//! The server and token come from `--server`/`--token`, else the
//! environment (`SLUICE_SERVER`, `SLUICE_TOKEN`), else the config file
//! (`$SLUICE_CONFIG`, default `~/.config/sluice/config.toml`, with `server
//! = ".."` and `token = ".."`).

use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the server is and who we are.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The server's base URL.
    pub server: String,
    /// The bearer token.
    pub token: Option<String>,
}

impl ClientConfig {
    /// From the flags, the environment or the config file, in that order.
    pub fn resolve(server: Option<String>, token: Option<String>) -> Result<ClientConfig> {
        let file = config_file_values()?;
        let server = server
            .or_else(|| std::env::var("SLUICE_SERVER").ok())
            .or_else(|| {
                file.as_ref()
                    .and_then(|f| f.get("server")?.as_str().map(str::to_string))
            })
            .unwrap_or_else(|| "http://127.0.0.1:7070".to_string());
        let token = token
            .or_else(|| std::env::var("SLUICE_TOKEN").ok())
            .or_else(|| {
                file.as_ref()
                    .and_then(|f| f.get("token")?.as_str().map(str::to_string))
            });
        Ok(ClientConfig {
            server: server.trim_end_matches('/').to_string(),
            token,
        })
    }
}

fn config_file_values() -> Result<Option<toml::Table>> {
    let path = match std::env::var_os("SLUICE_CONFIG") {
        Some(path) => PathBuf::from(path),
        None => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(".config/sluice/config.toml"),
            None => return Ok(None),
        },
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(
            toml::from_str(&text).with_context(|| format!("reading {}", path.display()))?,
        )),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error).with_context(|| format!("reading {}", path.display())),
    }
}

/// A blocking HTTP client for the API.
pub struct Client {
    config: ClientConfig,
    http: reqwest::blocking::Client,
}

impl Client {
    /// A client for `config`.
    pub fn new(config: ClientConfig) -> Result<Client> {
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .context("creating the HTTP client")?;
        Ok(Client { config, http })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::blocking::RequestBuilder {
        let builder = self
            .http
            .request(method, format!("{}{path}", self.config.server));
        match &self.config.token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    /// Sends `request`; the JSON answer, or an error with the server's
    /// message and status.
    fn send(&self, request: reqwest::blocking::RequestBuilder) -> Result<Value> {
        let response = request
            .send()
            .with_context(|| format!("cannot reach the server at {}", self.config.server))?;
        let status = response.status();
        let text = response.text().unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if !status.is_success() {
            let message = body["error"]
                .as_str()
                .map(str::to_string)
                .unwrap_or(body.to_string());
            bail!("the server answered {status}: {message}");
        }
        Ok(body)
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Result<Value> {
        self.send(self.request(reqwest::Method::GET, path))
    }

    /// `POST path` with a JSON body.
    pub fn post_json(&self, path: &str, body: &Value) -> Result<Value> {
        self.send(self.request(reqwest::Method::POST, path).json(body))
    }

    /// `PATCH path` with a JSON body.
    pub fn patch_json(&self, path: &str, body: &Value) -> Result<Value> {
        self.send(self.request(reqwest::Method::PATCH, path).json(body))
    }

    /// Runs a long operation (`method path`, optional text body) and waits
    /// until it is done; the idempotency key makes a retried request safe.
    pub fn operation(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<String>,
    ) -> Result<Value> {
        let mut key = [0u8; 16];
        getrandom::fill(&mut key).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
        let mut request = self
            .request(method, path)
            .header("Idempotency-Key", hex::encode(key));
        if let Some(body) = body {
            request = request
                .header("Content-Type", "application/toml")
                .body(body);
        }
        let started = self.send(request)?;
        let id = started["id"]
            .as_str()
            .context("the server answered no operation id")?
            .to_string();
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let operation = self.get(&format!("/api/v1/operations/{id}"))?;
            match operation["status"].as_str() {
                Some("succeeded") => return Ok(operation),
                Some("failed") => bail!(
                    "{} failed: {}",
                    operation["kind"].as_str().unwrap_or("the operation"),
                    operation["error"].as_str().unwrap_or("no reason given")
                ),
                _ if Instant::now() > deadline => {
                    bail!("operation {id} still pending after 5 minutes")
                }
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// `GET path` answered with server-sent events: calls `on_data` with
    /// each event's data until the server ends the stream (no timeout).
    pub fn follow_events(&self, path: &str, mut on_data: impl FnMut(&str)) -> Result<()> {
        use std::io::BufRead as _;
        let response = self
            .request(reqwest::Method::GET, path)
            .timeout(Duration::from_secs(u64::MAX / 4))
            .send()
            .with_context(|| format!("cannot reach the server at {}", self.config.server))?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().unwrap_or_default();
            bail!("the server answered {status}: {text}");
        }
        for line in std::io::BufReader::new(response).lines() {
            let line = line.context("reading the event stream")?;
            if let Some(data) = line.strip_prefix("data:") {
                on_data(data.trim_start());
            }
        }
        Ok(())
    }

    /// Uploads a component; its digest.
    pub fn upload_plugin(&self, component: &Path) -> Result<String> {
        let bytes =
            std::fs::read(component).with_context(|| format!("reading {}", component.display()))?;
        let answer = self.send(
            self.request(reqwest::Method::POST, "/api/v1/plugins")
                .header("Content-Type", "application/wasm")
                .body(bytes),
        )?;
        answer["sha256"]
            .as_str()
            .map(str::to_string)
            .context("the server answered no digest")
    }
}

/// `sluice deploy FILE`: builds the pipeline's plugins (if they are crate
/// directories), uploads them, and creates the pipeline with its plugins
/// named by digest; waits until it runs. Returns what to print.
pub fn deploy(client: &Client, file: &Path, json: bool) -> Result<String> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut document: toml_edit::DocumentMut = text
        .parse()
        .with_context(|| format!("{} is not valid TOML", file.display()))?;
    let base = file.parent().unwrap_or_else(|| Path::new("."));
    let mut uploaded = Vec::new();
    if let Some(operators) = document
        .get_mut("operators")
        .and_then(toml_edit::Item::as_array_of_tables_mut)
    {
        for operator in operators.iter_mut() {
            let Some(plugin) = operator.get("plugin").and_then(toml_edit::Item::as_str) else {
                continue;
            };
            if plugin.starts_with("sha256:") {
                continue;
            }
            let component = crate::build::resolve_plugin(&base.join(plugin))
                .map_err(|e| anyhow::anyhow!("plugin {plugin}: {e}"))?;
            let digest = client.upload_plugin(&component)?;
            uploaded.push((plugin.to_string(), digest.clone()));
            operator.insert("plugin", toml_edit::value(format!("sha256:{digest}")));
        }
    }
    let operation = client.operation(
        reqwest::Method::POST,
        "/api/v1/pipelines",
        Some(document.to_string()),
    )?;
    let name = operation["pipeline"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if json {
        return Ok(serde_json::json!({
            "pipeline": name,
            "plugins": uploaded.iter().map(|(p, d)| serde_json::json!({"plugin": p, "sha256": d})).collect::<Vec<_>>(),
            "operation": operation,
        })
        .to_string());
    }
    let mut out = format!("deployed pipeline `{name}`: running\n");
    for (plugin, digest) in uploaded {
        out.push_str(&format!("  plugin {plugin} -> sha256:{}\n", &digest[..12]));
    }
    Ok(out)
}

/// `sluice pipelines ls`: a line per pipeline.
pub fn list(client: &Client, json: bool) -> Result<String> {
    let answer = client.get("/api/v1/pipelines")?;
    if json {
        return Ok(answer.to_string());
    }
    let mut out = format!(
        "{:<24} {:<10} {:>12} {:>12} {:>10}\n",
        "NAME", "STATE", "IN", "OUT", "DLQ"
    );
    for pipeline in answer["pipelines"].as_array().into_iter().flatten() {
        let metrics = &pipeline["metrics"];
        out.push_str(&format!(
            "{:<24} {:<10} {:>12} {:>12} {:>10}\n",
            pipeline["name"].as_str().unwrap_or("?"),
            pipeline["state"].as_str().unwrap_or("?"),
            metrics["records_in"].as_u64().unwrap_or(0),
            metrics["records_out"].as_u64().unwrap_or(0),
            metrics["dead_letters"].as_u64().unwrap_or(0),
        ));
    }
    Ok(out)
}

/// `sluice pipelines show NAME`.
pub fn show(client: &Client, name: &str, json: bool) -> Result<String> {
    let answer = client.get(&format!("/api/v1/pipelines/{name}"))?;
    if json {
        return Ok(answer.to_string());
    }
    let metrics = &answer["metrics"];
    let mut out = format!(
        "pipeline {name}: {}{}\n",
        answer["state"].as_str().unwrap_or("?"),
        answer["detail"]
            .as_str()
            .map(|d| format!(" ({d})"))
            .unwrap_or_default()
    );
    if !metrics.is_null() {
        out.push_str(&format!(
            "  in {} out {} dead letters {}; checkpoints {} completed, {} failed\n",
            metrics["records_in"],
            metrics["records_out"],
            metrics["dead_letters"],
            metrics["checkpoints"]["completed"],
            metrics["checkpoints"]["failed"],
        ));
        for operator in metrics["operators"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "  operator {}: in {} out {} dlq {} traps {} state {} bytes\n",
                operator["name"].as_str().unwrap_or("?"),
                operator["records_in"],
                operator["records_out"],
                operator["dead_letters"],
                operator["traps"],
                operator["state_bytes"],
            ));
        }
    }
    Ok(out)
}

/// `sluice plugin push PATH --pipeline P --operator O`: builds the plugin
/// if `path` is a crate directory, uploads it, and swaps it in at the
/// pipeline's next barrier. Returns what to print.
pub fn push_plugin(
    client: &Client,
    path: &Path,
    pipeline: &str,
    operator: &str,
    wait: bool,
    json: bool,
) -> Result<String> {
    let component = crate::build::resolve_plugin(path)
        .map_err(|e| anyhow::anyhow!("plugin {}: {e}", path.display()))?;
    let digest = client.upload_plugin(&component)?;
    let mut deployment = client.post_json(
        &format!("/api/v1/pipelines/{pipeline}/operators/{operator}/plugin"),
        &serde_json::json!({ "sha256": digest }),
    )?;
    if wait {
        deployment = await_verdict(client, pipeline, deployment)?;
    }
    let described = describe_deployment(&deployment, json);
    if deployment["status"] == "rolled_back" {
        bail!("{described}");
    }
    Ok(described)
}

/// Polls the pipeline's deployments until `deployment` (on probation) has
/// its verdict.
fn await_verdict(client: &Client, pipeline: &str, mut deployment: Value) -> Result<Value> {
    let id = deployment["id"].clone();
    while deployment["status"] == "verifying" {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let history = client.get(&format!("/api/v1/pipelines/{pipeline}/deployments"))?;
        deployment = history["deployments"]
            .as_array()
            .and_then(|all| all.iter().find(|d| d["id"] == id))
            .cloned()
            .with_context(|| format!("deployment {id} is gone from the history"))?;
    }
    Ok(deployment)
}

/// `sluice rollback P [--operator O] [--to SHA]`: back to a kept version
/// (by default the one before the current one) of `operator` (by default
/// the operator of the latest deployment).
pub fn rollback(
    client: &Client,
    pipeline: &str,
    operator: Option<&str>,
    to: Option<&str>,
    json: bool,
) -> Result<String> {
    let deployment = client.post_json(
        &format!("/api/v1/pipelines/{pipeline}/rollback"),
        &serde_json::json!({ "operator": operator, "to": to }),
    )?;
    Ok(describe_deployment(&deployment, json))
}

/// `sluice rollback P --operator O --list`: the operator's kept versions,
/// the running one first.
pub fn kept_versions(
    client: &Client,
    pipeline: &str,
    operator: &str,
    json: bool,
) -> Result<String> {
    let answer = client.get(&format!(
        "/api/v1/pipelines/{pipeline}/operators/{operator}/versions"
    ))?;
    if json {
        return Ok(answer.to_string());
    }
    let lines: Vec<String> = answer["versions"]
        .as_array()
        .map(|versions| {
            versions
                .iter()
                .map(|v| {
                    let running = if v["running"] == true {
                        "  (running)"
                    } else {
                        ""
                    };
                    format!("sha256:{}{running}", v["sha256"].as_str().unwrap_or("?"))
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(lines.join("\n"))
}

fn describe_deployment(deployment: &Value, json: bool) -> String {
    if json {
        return deployment.to_string();
    }
    let short = |key: &str| {
        let digest = deployment[key].as_str().unwrap_or("?");
        digest.get(..12).unwrap_or(digest).to_string()
    };
    format!(
        "{} {}: sha256:{} -> sha256:{} at barrier {}, pause {:.1} ms: {} ({})",
        deployment["kind"].as_str().unwrap_or("deploy"),
        deployment["operator"].as_str().unwrap_or("?"),
        short("from"),
        short("to"),
        deployment["barrier"],
        deployment["pause_ms"].as_f64().unwrap_or(0.0),
        deployment["status"]
            .as_str()
            .unwrap_or("?")
            .replace('_', " "),
        deployment["outcome"].as_str().unwrap_or(""),
    )
}

/// `sluice logs P [--since D] [--follow]`: the pipeline's plugin logs,
/// printed as they come with `--follow`.
pub fn logs(
    client: &Client,
    pipeline: &str,
    since: Option<&str>,
    follow: bool,
    json: bool,
) -> Result<()> {
    let since_ms = match since {
        Some(since) => sluice_host::time::now_ms() - parse_age_ms(since)?,
        None => 0,
    };
    let path = format!("/api/v1/pipelines/{pipeline}/logs?since_ms={since_ms}");
    let print = |line: &Value| {
        if json {
            println!("{line}");
        } else {
            println!(
                "{} {:>5} {}: {}",
                line["at_ms"],
                line["level"].as_str().unwrap_or("?"),
                line["operator"].as_str().unwrap_or(""),
                line["message"].as_str().unwrap_or("")
            );
        }
    };
    if follow {
        return client.follow_events(&format!("{path}&follow=true"), |data| {
            if let Ok(line) = serde_json::from_str::<Value>(data) {
                print(&line);
            }
        });
    }
    let answer = client.get(&path)?;
    for line in answer["lines"].as_array().into_iter().flatten() {
        print(line);
    }
    Ok(())
}

/// An age like `90s`, `10m`, `2h` or `1d`, in ms.
fn parse_age_ms(age: &str) -> Result<i64> {
    let digits = age.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let number: i64 = digits
        .parse()
        .with_context(|| format!("`{age}` is not an age like 90s, 10m, 2h or 1d"))?;
    let unit_ms = match &age[digits.len()..] {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        unit => bail!("`{unit}` in `{age}` is not a unit: use ms, s, m, h or d"),
    };
    number
        .checked_mul(unit_ms)
        .with_context(|| format!("`{age}` is too long ago"))
}

#[cfg(test)]
mod tests {
    use super::parse_age_ms;

    #[test]
    fn ages_have_units() {
        assert_eq!(parse_age_ms("90s").unwrap(), 90_000);
        assert_eq!(parse_age_ms("10m").unwrap(), 600_000);
        assert_eq!(parse_age_ms("2h").unwrap(), 7_200_000);
        assert_eq!(parse_age_ms("250ms").unwrap(), 250);
        assert!(parse_age_ms("ten minutes").is_err());
        assert!(parse_age_ms("5y").is_err());
    }
}
