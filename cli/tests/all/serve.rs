//! `sluice serve` as a process, driven through its CLI client and API:
//! tenants and tokens, deploy with plugins uploaded by digest, tenant
//! isolation (another tenant's pipeline is a 404), paths confined to the
//! pipeline's directory, and a server killed with SIGKILL whose pipeline
//! resumes from its last checkpoint and ends exactly once.

use serde_json::Value;
use sluice_cli::client::{Client, ClientConfig};
use sluice_tests::wait_until;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(180);

/// A running `sluice serve`, killed when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

/// Starts `sluice serve` on `state_dir`; the admin token if it printed one
/// (first start only).
fn start_server(state_dir: &Path, port: u16) -> (Server, Option<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--state-dir"])
        .arg(state_dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sluice serve");
    let stderr = child.stderr.take().expect("stderr");
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("[serve] {line}");
            let _ = lines.send(line);
        }
    });
    let url = format!("http://127.0.0.1:{port}");
    let mut admin = None;
    wait_until("the server to listen", WAIT, || {
        while let Ok(line) = received.try_recv() {
            if let Some(token) = line.split("stored hashed): ").nth(1) {
                admin = Some(token.trim().to_string());
            }
            if line.contains("listening on") {
                return true;
            }
        }
        false
    });
    (Server { child, url }, admin)
}

fn client(server: &Server, token: Option<&str>) -> Client {
    Client::new(ClientConfig {
        server: server.url.clone(),
        token: token.map(str::to_string),
    })
    .expect("client")
}

/// `sluice <args>` against `server` with `token`; (success, stdout, stderr).
fn sluice(server: &Server, token: &str, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .args(["--server", &server.url])
        .env("SLUICE_TOKEN", token)
        .output()
        .expect("run sluice");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The quickstart's Bronze -> Silver pipeline, paced so that a kill lands
/// mid-stream, with local plugin crates (deploy builds and uploads them).
fn pipeline_text(name: &str, plugins: &Path, out: &str) -> String {
    format!(
        r#"[pipeline]
name = "{name}"
batch_size = 64

[checkpoints]
storage = "checkpoints"
interval_ms = 200

[source.generator]
profile = "bronze"
count = 30000
rate = 6000
seed = 42

[[operators]]
name = "validate-dedup"
plugin = "{plugins}/validate-dedup"
config = {{ required = "event_id:string,user_id:integer,email:string,card_number:string,amount:number,currency:string,ts:integer", id_field = "event_id" }}

[[operators]]
name = "pii-redact"
plugin = "{plugins}/pii-redact"

[sink.file]
path = "{out}/silver.jsonl"

[dead_letter.file]
path = "{out}/dead-letters.jsonl"
"#,
        plugins = plugins.display()
    )
}

/// The file's lines, sorted, without what differs between any two runs
/// (when and by which build of a plugin a record was dead-lettered).
fn sorted_lines(path: &Path) -> Vec<String> {
    let mut lines: Vec<String> = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(sluice_tests::comparable_record_line)
        .collect();
    lines.sort();
    lines
}

/// Runs the pipeline file `text` once with `sluice run`, in a directory of
/// its own (returned), as the reference a served run must equal.
fn uninterrupted_run(text: &str) -> tempfile::TempDir {
    let reference = tempfile::tempdir().expect("reference");
    let file = reference.path().join("pipeline.toml");
    std::fs::write(&file, text).expect("write");
    let status = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--quiet"])
        .arg(&file)
        .status()
        .expect("sluice run");
    assert!(status.success());
    reference
}

/// Creates `tenant` with the admin token; its token.
fn create_tenant(server: &Server, admin: &str, tenant: &str) -> String {
    let (ok, out, err) = sluice(server, admin, &["tenants", "create", tenant, "--json"]);
    assert!(ok, "{err}");
    serde_json::from_str::<Value>(&out).expect("JSON")["token"]
        .as_str()
        .expect("token")
        .to_string()
}

fn state(client: &Client, name: &str) -> Value {
    client
        .get(&format!("/api/v1/pipelines/{name}"))
        .unwrap_or_else(|e| panic!("{e:#}"))
}

#[test]
fn tenants_are_isolated_and_a_killed_server_resumes_its_pipelines_exactly_once() {
    let root = sluice_tests::repo_root();
    let plugins = root.join("plugins");
    let state_dir = tempfile::tempdir().expect("state dir");
    let port = free_port();
    let (server, admin) = start_server(state_dir.path(), port);
    let admin = admin.expect("the first start prints the admin token");

    // Tenants, by the admin.
    let team_a = create_tenant(&server, &admin, "team-a");
    let team_b = create_tenant(&server, &admin, "team-b");

    // No token, a wrong token: 401; the admin cannot run pipelines.
    let anonymous = client(&server, None).get("/api/v1/pipelines").unwrap_err();
    assert!(format!("{anonymous:#}").contains("401"), "{anonymous:#}");
    let wrong = client(&server, Some("sluice_x_00"))
        .get("/api/v1/pipelines")
        .unwrap_err();
    assert!(format!("{wrong:#}").contains("401"), "{wrong:#}");
    assert!(
        format!(
            "{:#}",
            client(&server, Some(&admin))
                .get("/api/v1/pipelines")
                .unwrap_err()
        )
        .contains("403")
    );

    // A path outside the pipeline's directory is refused before anything runs.
    let files = tempfile::tempdir().expect("files");
    let escaping = files.path().join("escaping.toml");
    std::fs::write(&escaping, pipeline_text("escaping", &plugins, "/tmp")).expect("write");
    let (ok, _, err) = sluice(
        &server,
        &team_a,
        &["deploy", &escaping.display().to_string()],
    );
    assert!(!ok, "a pipeline writing to /tmp was accepted");
    assert!(
        err.contains("400") && err.contains("sink.file.path"),
        "{err}"
    );

    // Deploy: plugins built, uploaded and named by digest.
    let file = files.path().join("silver.toml");
    std::fs::write(&file, pipeline_text("silver", &plugins, "out")).expect("write");
    let (ok, out, err) = sluice(&server, &team_a, &["deploy", &file.display().to_string()]);
    assert!(ok, "deploy failed: {err}");
    assert!(out.contains("deployed pipeline `silver`"), "{out}");
    let a = client(&server, Some(&team_a));
    let b = client(&server, Some(&team_b));

    // Team B sees nothing of team A's: every endpoint answers 404.
    let listed = b.get("/api/v1/pipelines").expect("list");
    assert_eq!(
        listed["pipelines"].as_array().map(Vec::len),
        Some(0),
        "{listed}"
    );
    for (method, path) in [
        ("GET", "/api/v1/pipelines/silver"),
        ("GET", "/api/v1/pipelines/silver/checkpoints"),
        ("POST", "/api/v1/pipelines/silver/stop"),
        ("POST", "/api/v1/pipelines/silver/start"),
        ("DELETE", "/api/v1/pipelines/silver"),
    ] {
        let method: reqwest::Method = method.parse().expect("method");
        let error = b.operation(method, path, None).unwrap_err();
        assert!(format!("{error:#}").contains("404"), "{path}: {error:#}");
    }
    let (ok, _, err) = sluice(&server, &team_b, &["pipelines", "show", "silver"]);
    assert!(!ok && err.contains("404"), "{err}");

    // Killed mid-stream after a few checkpoints, then restarted.
    wait_until("two checkpoints of the deployed pipeline", WAIT, || {
        state(&a, "silver")["metrics"]["checkpoints"]["completed"]
            .as_u64()
            .unwrap_or(0)
            >= 2
    });
    let (ok, out, _) = sluice(&server, &team_a, &["pipelines", "ls"]);
    assert!(ok && out.contains("silver"), "{out}");
    let mut server = server;
    server.child.kill().expect("SIGKILL the server");
    server.child.wait().expect("wait");
    let (server, admin_again) = start_server(state_dir.path(), port);
    assert!(admin_again.is_none(), "the admin token is printed once");
    let a = client(&server, Some(&team_a));
    wait_until("the resumed pipeline to finish", WAIT, || {
        state(&a, "silver")["state"] == "finished"
    });
    let checkpoints = a
        .get("/api/v1/pipelines/silver/checkpoints")
        .expect("checkpoints");
    assert!(checkpoints.to_string().contains("\"id\""), "{checkpoints}");

    // The same pipeline run once without interruption, as `sluice run`.
    let reference = uninterrupted_run(&pipeline_text("silver", &plugins, "out"));
    let served: PathBuf = state_dir.path().join("tenants/team-a/pipelines/silver/out");
    for output in ["silver.jsonl", "dead-letters.jsonl"] {
        let expected = sorted_lines(&reference.path().join("out").join(output));
        assert!(!expected.is_empty());
        assert!(
            sorted_lines(&served.join(output)) == expected,
            "{output}: the served pipeline's output differs from an uninterrupted run"
        );
    }

    // Stop, start and delete through the CLI.
    let (ok, _, err) = sluice(&server, &team_a, &["pipelines", "rm", "silver"]);
    assert!(ok, "{err}");
    assert!(
        !state_dir
            .path()
            .join("tenants/team-a/pipelines/silver")
            .exists()
    );
}

#[test]
fn a_non_loopback_address_needs_tls() {
    let state_dir = tempfile::tempdir().expect("state dir");
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--state-dir"])
        .arg(state_dir.path())
        .args(["--listen", "0.0.0.0:0"])
        .output()
        .expect("sluice serve");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("without TLS"), "{stderr}");
}

/// A paced pipeline whose one operator redacts PII with `plugin`.
fn redact_pipeline(name: &str, plugin: &Path) -> String {
    format!(
        r#"[pipeline]
name = "{name}"
batch_size = 64
checkpoint_interval_ms = 100

[checkpoints]
storage = "checkpoints"
interval_ms = 100

[source.generator]
profile = "bronze"
count = 60000
rate = 6000
seed = 11
invalid_ratio = 0.0

[[operators]]
name = "pii-redact"
plugin = "{plugin}"

[sink.file]
path = "out/silver.jsonl"
"#,
        plugin = plugin.display()
    )
}

/// `sluice plugin push` swaps a running pipeline's plugin (Rust to C) at a
/// barrier, a plugin of another world is refused with nothing changed,
/// `sluice rollback` goes back; every deployment is recorded, and the
/// output equals a run that never swapped (both versions write the same
/// bytes).
#[test]
fn a_pushed_plugin_swaps_at_a_barrier_and_rolls_back() {
    let rust = sluice_tests::plugin("pii-redact");
    let c = sluice_tests::plugin("c/pii-redact");
    let aggregate = sluice_tests::plugin("hot-items");
    let state_dir = tempfile::tempdir().expect("state dir");
    let (server, admin) = start_server(state_dir.path(), free_port());
    let admin = admin.expect("admin token");
    let token = create_tenant(&server, &admin, "team");
    let files = tempfile::tempdir().expect("files");
    let file = files.path().join("redact.toml");
    std::fs::write(&file, redact_pipeline("redact", &rust)).expect("write");
    let (ok, _, err) = sluice(&server, &token, &["deploy", &file.display().to_string()]);
    assert!(ok, "deploy failed: {err}");
    let api = client(&server, Some(&token));
    wait_until("records flowing", WAIT, || {
        state(&api, "redact")["metrics"]["records_out"]
            .as_u64()
            .unwrap_or(0)
            > 5_000
    });

    let push = |path: &Path| {
        sluice(
            &server,
            &token,
            &[
                "plugin",
                "push",
                &path.display().to_string(),
                "--pipeline",
                "redact",
                "--operator",
                "pii-redact",
                "--json",
            ],
        )
    };
    let (ok, out, err) = push(&c);
    assert!(ok, "push failed: {err}");
    let deployed: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(deployed["outcome"], "swapped", "{deployed}");
    assert!(deployed["barrier"].as_u64().unwrap_or(0) > 0, "{deployed}");
    eprintln!("deploy pause: {} ms", deployed["pause_ms"]);

    // Another world: refused (409) before anything changes.
    let (ok, _, err) = push(&aggregate);
    assert!(!ok, "an aggregate plugin replaced a transform");
    assert!(
        err.contains("409") && err.contains("aggregate world"),
        "{err}"
    );

    let (ok, out, err) = sluice(
        &server,
        &token,
        &["rollback", "redact", "--operator", "pii-redact", "--json"],
    );
    assert!(ok, "rollback failed: {err}");
    let rolled: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(rolled["kind"], "rollback");
    assert_eq!(rolled["from"], deployed["to"]);
    assert_eq!(rolled["to"], deployed["from"]);

    let history = api
        .get("/api/v1/pipelines/redact/deployments")
        .expect("deployments");
    let kinds: Vec<&str> = history["deployments"]
        .as_array()
        .expect("deployments")
        .iter()
        .filter_map(|d| d["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["deploy", "rollback"], "{history}");
    wait_until("the pipeline to finish", WAIT, || {
        state(&api, "redact")["state"] == "finished"
    });

    let reference = uninterrupted_run(&redact_pipeline("redact", &rust));
    let served = state_dir
        .path()
        .join("tenants/team/pipelines/redact/out/silver.jsonl");
    let expected =
        std::fs::read_to_string(reference.path().join("out/silver.jsonl")).expect("read");
    let got = std::fs::read_to_string(&served).expect("read");
    assert_eq!(got.lines().count(), 60_000);
    assert!(got == expected, "the swapped pipeline's output differs");
}
