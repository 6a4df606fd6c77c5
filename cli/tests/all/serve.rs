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

pub(crate) const WAIT: Duration = Duration::from_secs(180);

/// An environment variable of the server that plugins must not see.
const SECRET_VARIABLE: &str = "SLUICE_TEST_SECRET";

/// A running `sluice serve`, killed when dropped.
pub(crate) struct Server {
    child: Child,
    pub(crate) url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free loopback port.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

/// Starts `sluice serve` on `state_dir`; the admin token if it printed one
/// (first start only).
pub(crate) fn start_server(state_dir: &Path, port: u16) -> (Server, Option<String>) {
    start_server_with(state_dir, port, &[], &[])
}

/// [`start_server`] with more arguments and environment variables.
pub(crate) fn start_server_with(
    state_dir: &Path,
    port: u16,
    args: &[&str],
    environment: &[(&str, &str)],
) -> (Server, Option<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--state-dir"])
        .arg(state_dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(args)
        .envs(environment.iter().copied())
        // A secret a plugin must not see (see `plugins_see_no_host_file_environment_clock_or_network`).
        .env(SECRET_VARIABLE, "hunter2")
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

pub(crate) fn client(server: &Server, token: Option<&str>) -> Client {
    Client::new(ClientConfig {
        server: server.url.clone(),
        token: token.map(str::to_string),
    })
    .expect("client")
}

/// `sluice <args>` against `server` with `token`; (success, stdout, stderr).
pub(crate) fn sluice(server: &Server, token: &str, args: &[&str]) -> (bool, String, String) {
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
pub(crate) fn pipeline_text(name: &str, plugins: &Path, out: &str) -> String {
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
pub(crate) fn create_tenant(server: &Server, admin: &str, tenant: &str) -> String {
    create_tenant_with(server, admin, tenant, &[])
}

/// Creates `tenant` with quota flags (`["--cpu-cores", "0.25"]`); its token.
pub(crate) fn create_tenant_with(
    server: &Server,
    admin: &str,
    tenant: &str,
    limits: &[&str],
) -> String {
    let mut args = vec!["tenants", "create", tenant, "--json"];
    args.extend_from_slice(limits);
    let (ok, out, err) = sluice(server, admin, &args);
    assert!(ok, "{err}");
    serde_json::from_str::<Value>(&out).expect("JSON")["token"]
        .as_str()
        .expect("token")
        .to_string()
}

/// Creates `tenant` with the test broker granted and topics and groups
/// starting with `topic_prefix` (`extra`: more flags); its token.
pub(crate) fn create_kafka_tenant(
    server: &Server,
    admin: &str,
    tenant: &str,
    topic_prefix: &str,
    extra: &[&str],
) -> String {
    let bootstrap = sluice_tests::kafka::bootstrap();
    let mut flags = vec!["--kafka", &bootstrap, "--topic-prefix", topic_prefix];
    flags.extend_from_slice(extra);
    create_tenant_with(server, admin, tenant, &flags)
}

/// Asserts that the tenant of `token` has no pipeline (a refused create
/// left nothing behind).
pub(crate) fn assert_no_pipelines(server: &Server, token: &str) {
    let listed = client(server, Some(token))
        .get("/api/v1/pipelines")
        .expect("list");
    assert_eq!(
        listed["pipelines"],
        serde_json::json!([]),
        "nothing was created"
    );
}

pub(crate) fn state(client: &Client, name: &str) -> Value {
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

[deploy]
verify_window_ms = 1000

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
    // Long enough for a deploy and two rollbacks while it runs.
    let text = redact_pipeline("redact", &rust).replace("count = 60000", "count = 90000");
    std::fs::write(&file, &text).expect("write");
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
    // `plugin push` waits for the verify window's verdict.
    assert_eq!(deployed["status"], "kept", "{deployed}");
    assert!(deployed["barrier"].as_u64().unwrap_or(0) > 0, "{deployed}");
    eprintln!("deploy pause: {} ms", deployed["pause_ms"]);

    // Another world: refused (409) before anything changes.
    let (ok, _, err) = push(&aggregate);
    assert!(!ok, "an aggregate plugin replaced a transform");
    assert!(
        err.contains("409") && err.contains("aggregate world"),
        "{err}"
    );

    // Both versions are kept; back to the first by a prefix of its digest.
    let (ok, out, err) = sluice(
        &server,
        &token,
        &[
            "rollback",
            "redact",
            "--operator",
            "pii-redact",
            "--list",
            "--json",
        ],
    );
    assert!(ok, "listing versions failed: {err}");
    let kept: Value = serde_json::from_str(&out).expect("JSON");
    let digests: Vec<&str> = kept["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .filter_map(|v| v["sha256"].as_str())
        .collect();
    assert_eq!(digests, [&deployed["to"], &deployed["from"]], "{kept}");
    assert_eq!(kept["versions"][0]["running"], true, "{kept}");
    let first = deployed["from"].as_str().expect("digest");
    let (ok, _, err) = sluice(
        &server,
        &token,
        &["rollback", "redact", "--to", "sha256:0123456789ab"],
    );
    assert!(!ok, "a version never deployed was rolled back to");
    assert!(
        err.contains("409") && err.contains("not a kept version"),
        "{err}"
    );
    let (ok, out, err) = sluice(
        &server,
        &token,
        &[
            "rollback",
            "redact",
            "--operator",
            "pii-redact",
            "--to",
            &first[..10],
            "--json",
        ],
    );
    assert!(ok, "rollback failed: {err}");
    let rolled: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(rolled["kind"], "rollback");
    assert_eq!(rolled["status"], "swapped", "{rolled}");
    assert_eq!(rolled["from"], deployed["to"]);
    assert_eq!(rolled["to"], deployed["from"]);
    // Without an operator or a version: the latest deployment's operator
    // goes back to the version before the current one (C again).
    let (ok, out, err) = sluice(&server, &token, &["rollback", "redact", "--json"]);
    assert!(ok, "rollback failed: {err}");
    let again: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(again["operator"], "pii-redact", "{again}");
    assert_eq!(again["to"], deployed["to"], "{again}");

    let history = api
        .get("/api/v1/pipelines/redact/deployments")
        .expect("deployments");
    let kinds: Vec<&str> = history["deployments"]
        .as_array()
        .expect("deployments")
        .iter()
        .filter_map(|d| d["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["deploy", "rollback", "rollback"], "{history}");
    wait_until("the pipeline to finish", WAIT, || {
        state(&api, "redact")["state"] == "finished"
    });

    let reference = uninterrupted_run(&text);
    let served = state_dir
        .path()
        .join("tenants/team/pipelines/redact/out/silver.jsonl");
    let expected =
        std::fs::read_to_string(reference.path().join("out/silver.jsonl")).expect("read");
    let got = std::fs::read_to_string(&served).expect("read");
    assert_eq!(got.lines().count(), 90_000);
    assert!(got == expected, "the swapped pipeline's output differs");
}

/// A Kafka -> plugin -> file pipeline (exactly-once file sinks for the
/// output and the dead letters), verifying new plugin versions for 5 s.
fn probation_pipeline(name: &str, input: &str, plugin: &Path) -> String {
    format!(
        r#"[pipeline]
name = "{name}"
batch_size = 50

[checkpoints]
storage = "checkpoints"
interval_ms = 100

[deploy]
verify_window_ms = 5000
max_fault_rate = 0.001

[source.kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{input}"]
group_id = "{input}-group"

[[operators]]
name = "check"
plugin = "{plugin}"

[sink.file]
path = "out/records.jsonl"

[dead_letter.file]
path = "out/dead-letters.jsonl"
"#,
        bootstrap = sluice_tests::kafka::bootstrap(),
        plugin = plugin.display()
    )
}

/// Produces records `r<i>` for `range`; every 100th (1 %) says `trap`.
fn produce_with_traps(topic: &str, range: std::ops::Range<usize>) {
    use sluice_tests::kafka::{Outgoing, produce};
    let values: Vec<String> = range
        .map(|i| match i % 100 {
            99 => format!("r{i:06}-trap"),
            _ => format!("r{i:06}"),
        })
        .collect();
    let records: Vec<Outgoing<'_>> = values
        .iter()
        .map(|value| Outgoing {
            value: value.as_bytes(),
            ..Outgoing::default()
        })
        .collect();
    produce(topic, &records);
}

/// A new version that faults on 1 % of the records is rolled back within
/// its verify window: the run is restored from the swap barrier's
/// checkpoint with the previous version, so the output is v1's — every
/// record exactly once, none dead-lettered — as if v3 never ran.
#[test]
fn a_version_faulting_on_one_percent_is_rolled_back_and_the_output_is_the_old_versions() {
    const BEFORE: usize = 5_000;
    const DURING: usize = 5_000;
    let identity = sluice_tests::plugin("identity");
    let trapping = sluice_tests::plugin("hostile-trap");
    let input = sluice_tests::kafka::unique_topic("probation-in");
    sluice_tests::kafka::create_topic(&input, 2);
    produce_with_traps(&input, 0..BEFORE);

    let state_dir = tempfile::tempdir().expect("state dir");
    let (server, admin) = start_server(state_dir.path(), free_port());
    let token = create_kafka_tenant(
        &server,
        &admin.expect("admin token"),
        "team",
        "probation-in",
        &[],
    );
    let files = tempfile::tempdir().expect("files");
    let file = files.path().join("probation.toml");
    std::fs::write(&file, probation_pipeline("probation", &input, &identity)).expect("write");
    let (ok, _, err) = sluice(&server, &token, &["deploy", &file.display().to_string()]);
    assert!(ok, "deploy failed: {err}");
    let api = client(&server, Some(&token));
    let records_out = |api: &Client| {
        state(api, "probation")["metrics"]["operators"]
            .as_array()
            .and_then(|ops| ops.iter().find(|o| o["name"] == "check"))
            .and_then(|o| o["records_out"].as_u64())
            .unwrap_or(0)
    };
    wait_until("v1 to process the first records", WAIT, || {
        records_out(&api) as usize >= BEFORE
    });

    let (ok, out, err) = sluice(
        &server,
        &token,
        &[
            "plugin",
            "push",
            &trapping.display().to_string(),
            "--pipeline",
            "probation",
            "--operator",
            "check",
            "--no-wait",
            "--json",
        ],
    );
    assert!(ok, "push failed: {err}");
    let deployed: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(deployed["status"], "verifying", "{deployed}");
    produce_with_traps(&input, BEFORE..BEFORE + DURING);

    let mut verdict = Value::Null;
    wait_until("the verdict", WAIT, || {
        let history = api
            .get("/api/v1/pipelines/probation/deployments")
            .expect("deployments");
        verdict = history["deployments"][0].clone();
        verdict["status"] != "verifying"
    });
    assert_eq!(verdict["status"], "rolled_back", "{verdict}");
    assert!(
        verdict["outcome"]
            .as_str()
            .is_some_and(|o| o.contains("faulted on")),
        "{verdict}"
    );
    // The file still names v1; the pipeline runs again and catches up.
    let pipeline_file = state_dir
        .path()
        .join("tenants/team/pipelines/probation/pipeline.toml");
    let text = std::fs::read_to_string(&pipeline_file).expect("pipeline file");
    assert!(
        text.contains(deployed["from"].as_str().expect("from")),
        "{text}"
    );
    let out = state_dir
        .path()
        .join("tenants/team/pipelines/probation/out");
    wait_until("v1's output to hold every record", WAIT, || {
        std::fs::read_to_string(out.join("records.jsonl"))
            .is_ok_and(|text| text.lines().count() >= BEFORE + DURING)
    });
    let (ok, _, err) = sluice(&server, &token, &["pipelines", "stop", "probation"]);
    assert!(ok, "stop failed: {err}");
    wait_until("the pipeline to stop", WAIT, || {
        state(&api, "probation")["state"] == "stopped"
    });

    let written = std::fs::read_to_string(out.join("records.jsonl")).expect("output");
    let mut values: Vec<String> = written
        .lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line).expect("JSON line");
            value.as_str().unwrap_or_default().to_string()
        })
        .collect();
    values.sort();
    let mut expected: Vec<String> = (0..BEFORE + DURING)
        .map(|i| match i % 100 {
            99 => format!("r{i:06}-trap"),
            _ => format!("r{i:06}"),
        })
        .collect();
    expected.sort();
    assert_eq!(values.len(), expected.len(), "records in the output");
    assert!(values == expected, "the output is not v1's");
    let dead = std::fs::read_to_string(out.join("dead-letters.jsonl")).unwrap_or_default();
    assert_eq!(
        dead.lines().count(),
        0,
        "v3's dead letters were kept: {dead}"
    );
}

/// A plugin run by `sluice serve` sees none of the host: reading a file the
/// server can read (and `/etc/passwd`), listing `/`, the server's
/// environment, the clock and the network all fail or come back empty.
#[test]
fn plugins_see_no_host_file_environment_clock_or_network() {
    let snoop = sluice_tests::plugin("hostile-snoop");
    let state_dir = tempfile::tempdir().expect("state dir");
    let secret = state_dir.path().join("secret.txt");
    std::fs::write(&secret, "the host's secret").expect("write");
    let (server, admin) = start_server(state_dir.path(), free_port());
    let token = create_tenant(&server, &admin.expect("admin token"), "team");
    let files = tempfile::tempdir().expect("files");
    let file = files.path().join("snoop.toml");
    let text = format!(
        r#"[pipeline]
name = "snoop"

[source.generator]
profile = "bronze"
count = 3

[[operators]]
name = "snoop"
plugin = "{plugin}"
config = {{ file = "{secret}", connect = "{broker}" }}

[sink.file]
path = "out/snoop.jsonl"
"#,
        plugin = snoop.display(),
        secret = secret.display(),
        broker = sluice_tests::kafka::bootstrap(),
    );
    std::fs::write(&file, text).expect("write");
    let (ok, _, err) = sluice(&server, &token, &["deploy", &file.display().to_string()]);
    assert!(ok, "deploy failed: {err}");
    let api = client(&server, Some(&token));
    wait_until("the pipeline to finish", WAIT, || {
        state(&api, "snoop")["state"] == "finished"
    });
    let output = std::fs::read_to_string(
        state_dir
            .path()
            .join("tenants/team/pipelines/snoop/out/snoop.jsonl"),
    )
    .expect("output");
    assert_eq!(output.lines().count(), 3, "{output}");
    for line in output.lines() {
        let report: Value = serde_json::from_str(line).expect("JSON");
        for attempt in ["file", "passwd", "directory", "connect"] {
            assert!(
                report[attempt]["error"].is_string(),
                "{attempt} should fail: {report}"
            );
        }
        assert_eq!(report["environment"], serde_json::json!([]), "{report}");
        assert_eq!(report["clock_secs"]["ok"], "0", "a frozen clock: {report}");
        assert!(!line.contains("hunter2") && !line.contains("the host's secret"));
    }
}

/// What a pipeline's plugin prints reaches `sluice logs` (and `--follow`
/// streams it), its faults are its recent errors, its dead letters are
/// sampled with their reasons — and another tenant sees none of it (404).
#[test]
fn logs_errors_and_dead_letters_are_shown_to_their_tenant_only() {
    let trapping = sluice_tests::plugin("hostile-trap");
    let input = sluice_tests::kafka::unique_topic("diagnostics-in");
    sluice_tests::kafka::create_topic(&input, 1);
    produce_with_traps(&input, 0..1_000);
    let state_dir = tempfile::tempdir().expect("state dir");
    let (server, admin) = start_server(state_dir.path(), free_port());
    let admin = admin.expect("admin token");
    let token = create_kafka_tenant(&server, &admin, "team", "diagnostics-in", &[]);
    let other = create_tenant(&server, &admin, "other");
    let files = tempfile::tempdir().expect("files");
    let file = files.path().join("diagnostics.toml");
    std::fs::write(&file, probation_pipeline("diagnostics", &input, &trapping)).expect("write");
    let (ok, _, err) = sluice(&server, &token, &["deploy", &file.display().to_string()]);
    assert!(ok, "deploy failed: {err}");
    let api = client(&server, Some(&token));
    wait_until("the ten trapping records to be dead-lettered", WAIT, || {
        state(&api, "diagnostics")["metrics"]["dead_letters"]
            .as_u64()
            .unwrap_or(0)
            >= 10
    });

    let errors = api
        .get("/api/v1/pipelines/diagnostics/errors")
        .expect("errors");
    let faults = errors["faults"].as_array().expect("faults");
    assert!(!faults.is_empty(), "{errors}");
    assert!(
        faults
            .iter()
            .all(|f| f["kind"] == "Trap" && f["operator"] == "check"),
        "{errors}"
    );
    let samples = api
        .get("/api/v1/pipelines/diagnostics/dead-letters")
        .expect("dead letters");
    let samples = samples["samples"].as_array().expect("samples").clone();
    assert!(!samples.is_empty());
    for sample in &samples {
        assert!(
            sample["value"]
                .as_str()
                .is_some_and(|v| v.ends_with("-trap")),
            "{sample}"
        );
        assert!(
            sample["reason"]
                .as_str()
                .is_some_and(|r| r.contains("refusing this record")),
            "{sample}"
        );
    }

    let (ok, out, err) = sluice(&server, &token, &["logs", "diagnostics", "--json"]);
    assert!(ok, "logs failed: {err}");
    assert!(
        out.lines()
            .any(|line| line.contains("refusing this record")),
        "the plugin's panic messages are its logs: {out}"
    );
    // --follow: the lines so far, then new ones as they come.
    let mut follow = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["logs", "diagnostics", "--follow", "--json", "--since", "1h"])
        .args(["--server", &server.url])
        .env("SLUICE_TOKEN", &token)
        .stdout(Stdio::piped())
        .spawn()
        .expect("sluice logs --follow");
    let mut first = String::new();
    BufReader::new(follow.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("a followed line");
    let _ = follow.kill();
    let _ = follow.wait();
    let line: Value = serde_json::from_str(&first).expect("a JSON line");
    assert_eq!(line["operator"], "check", "{line}");

    // Another tenant: the pipeline does not exist.
    let (ok, _, err) = sluice(&server, &other, &["logs", "diagnostics"]);
    assert!(!ok && err.contains("404"), "{err}");
    let stranger = client(&server, Some(&other));
    for path in ["errors", "dead-letters", "logs?follow=true"] {
        let answer = stranger.get(&format!("/api/v1/pipelines/diagnostics/{path}"));
        assert!(
            answer
                .as_ref()
                .is_err_and(|e| e.to_string().contains("404")),
            "{path}: {answer:?}"
        );
    }
}

/// Produces `count` records whose values are `value`.
fn produce_values(topic: &str, value: &str, count: usize) {
    use sluice_tests::kafka::{Outgoing, produce};
    let records: Vec<Outgoing<'_>> = (0..count)
        .map(|_| Outgoing {
            value: value.as_bytes(),
            ..Outgoing::default()
        })
        .collect();
    produce(topic, &records);
}

/// A Kafka -> `plugin` -> file pipeline of tenant A (hostile input).
fn hostile_pipeline(name: &str, input: &str, plugin: &Path) -> String {
    format!(
        r#"[pipeline]
name = "{name}"
batch_size = 16

[source.kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{input}"]
group_id = "{input}-group"

[[operators]]
name = "hostile"
plugin = "{plugin}"
deadline_ms = 50
memory_limit_mb = 16

[sink.file]
path = "out/records.jsonl"

[dead_letter.file]
path = "out/dead-letters.jsonl"
"#,
        bootstrap = sluice_tests::kafka::bootstrap(),
        plugin = plugin.display()
    )
}

/// Noisy neighbour: tenant A's busy-looping and memory-bombing plugins run
/// beside tenant B's pipeline. A's plugins are stopped at their deadline
/// and memory limit and held to A's CPU share (its calls wait: throttled
/// time); A's faults are A's recent errors, not B's, and B cannot see A's
/// pipelines; B runs to the end with the output of an uninterrupted run.
#[test]
fn a_noisy_neighbours_hostile_plugins_do_not_reach_another_tenant() {
    let looping = sluice_tests::plugin("hostile-loop");
    let bomb = sluice_tests::plugin("hostile-alloc");
    let rust = sluice_tests::plugin("pii-redact");
    let (loop_in, alloc_in) = (
        sluice_tests::kafka::unique_topic("neighbour-loop"),
        sluice_tests::kafka::unique_topic("neighbour-alloc"),
    );
    for topic in [&loop_in, &alloc_in] {
        sluice_tests::kafka::create_topic(topic, 1);
    }
    produce_values(&loop_in, "loop", 400);
    produce_values(&alloc_in, "alloc", 400);

    let state_dir = tempfile::tempdir().expect("state dir");
    let (server, admin) = start_server(state_dir.path(), free_port());
    let admin = admin.expect("admin token");
    let noisy = create_kafka_tenant(
        &server,
        &admin,
        "noisy",
        "neighbour-",
        &["--cpu-cores", "0.25"],
    );
    let quiet = create_tenant(&server, &admin, "quiet");
    let files = tempfile::tempdir().expect("files");
    for (name, input, plugin) in [("spin", &loop_in, &looping), ("bomb", &alloc_in, &bomb)] {
        let file = files.path().join(format!("{name}.toml"));
        std::fs::write(&file, hostile_pipeline(name, input, plugin)).expect("write");
        let (ok, _, err) = sluice(&server, &noisy, &["deploy", &file.display().to_string()]);
        assert!(ok, "deploy {name} failed: {err}");
    }
    let file = files.path().join("redact.toml");
    std::fs::write(&file, redact_pipeline("redact", &rust)).expect("write");
    let (ok, _, err) = sluice(&server, &quiet, &["deploy", &file.display().to_string()]);
    assert!(ok, "deploy failed: {err}");

    let (noisy_api, quiet_api) = (client(&server, Some(&noisy)), client(&server, Some(&quiet)));
    wait_until("the quiet tenant's pipeline to finish", WAIT, || {
        state(&quiet_api, "redact")["state"] == "finished"
    });
    let kinds = |pipeline: &str| -> Vec<String> {
        let errors = noisy_api
            .get(&format!("/api/v1/pipelines/{pipeline}/errors"))
            .expect("errors");
        errors["faults"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| f["kind"].as_str().map(str::to_string))
            .collect()
    };
    wait_until("both hostile plugins to have faulted", WAIT, || {
        kinds("spin").iter().any(|k| k == "Deadline")
            && kinds("bomb").iter().any(|k| k == "MemoryLimit")
    });
    for name in ["spin", "bomb"] {
        assert_eq!(state(&noisy_api, name)["state"], "running", "{name}");
    }
    let throttled: u64 = state(&noisy_api, "spin")["metrics"]["operators"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["cpu_throttled_ns"].as_u64())
        .sum();
    assert!(
        throttled > 0,
        "the busy loop never waited for its CPU share"
    );
    // B: no faults, no sight of A's pipelines, output as if A were absent.
    let quiet_errors = quiet_api
        .get("/api/v1/pipelines/redact/errors")
        .expect("errors");
    assert_eq!(
        quiet_errors["faults"],
        serde_json::json!([]),
        "{quiet_errors}"
    );
    assert!(
        quiet_api
            .get("/api/v1/pipelines/spin/errors")
            .is_err_and(|e| e.to_string().contains("404"))
    );
    let reference = uninterrupted_run(&redact_pipeline("redact", &rust));
    let expected =
        std::fs::read_to_string(reference.path().join("out/silver.jsonl")).expect("read");
    let got = std::fs::read_to_string(
        state_dir
            .path()
            .join("tenants/quiet/pipelines/redact/out/silver.jsonl"),
    )
    .expect("read");
    assert!(got == expected, "the quiet tenant's output differs");
}

/// Quotas: a pipeline that would take a tenant over its plugin instances
/// (with room to swap) is refused with 429 naming the resource.
#[test]
fn a_pipeline_over_the_tenants_plugin_quota_is_refused_naming_it() {
    let rust = sluice_tests::plugin("pii-redact");
    let state_dir = tempfile::tempdir().expect("state dir");
    let (server, admin) = start_server(state_dir.path(), free_port());
    let admin = admin.expect("admin token");
    let token = create_tenant_with(&server, &admin, "small", &["--max-plugin-instances", "2"]);
    let files = tempfile::tempdir().expect("files");
    // One instance plus one to swap: fits; a second pipeline needs two
    // plus one: refused.
    for (name, fits) in [("first", true), ("second", false)] {
        let file = files.path().join(format!("{name}.toml"));
        std::fs::write(&file, redact_pipeline(name, &rust)).expect("write");
        let (ok, _, err) = sluice(&server, &token, &["deploy", &file.display().to_string()]);
        match fits {
            true => assert!(ok, "{name}: {err}"),
            false => assert!(
                !ok && err.contains("429") && err.contains("plugin instances"),
                "{name}: {err}"
            ),
        }
    }
    let list = client(&server, Some(&token))
        .get("/api/v1/pipelines")
        .expect("list");
    assert_eq!(
        list["pipelines"].as_array().map(Vec::len),
        Some(1),
        "{list}"
    );
}
