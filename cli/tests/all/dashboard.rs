//! The dashboard in a real browser: Debian's chromium, driven by
//! playwright-core (`tests/browser/dashboard.mjs`), against `sluice run
//! --http` and `sluice serve`. The Rust side sets the scene (a slowed
//! operator, a stalled Kafka partition, checkpoints, two tenants, 100
//! pipelines); the script checks what the page shows and saves
//! screenshots under `target/test-artifacts/dashboard/`.

use crate::serve::{WAIT, create_tenant, create_tenant_with, free_port, sluice, start_server};
use serde_json::json;
use sluice_tests::kafka;
use sluice_tests::{KillOnDrop, wait_until};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Where the screenshots of `scenario` go.
pub(crate) fn screenshots(scenario: &str) -> PathBuf {
    let dir = sluice_tests::repo_root()
        .join("target/test-artifacts/dashboard")
        .join(scenario);
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    dir
}

/// Runs the browser script on `scenario`; fails the test with its output
/// if a check fails.
pub(crate) fn run_browser(scenario: serde_json::Value) {
    let modules = std::env::var("HOME")
        .map(|home| PathBuf::from(home).join(".cache/sluice/browser-test/node_modules"))
        .expect("HOME");
    let output = Command::new("node")
        .arg(sluice_tests::repo_root().join("tests/browser/dashboard.mjs"))
        .env("SLUICE_NODE_MODULES", &modules)
        .env("SLUICE_DASHBOARD", scenario.to_string())
        .current_dir(modules.parent().expect("the browser test directory"))
        .output()
        .expect("node (scripts/setup-toolchain.sh installs playwright-core)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stdout}{stderr}");
    assert!(
        output.status.success(),
        "the dashboard check failed:\n{stdout}{stderr}"
    );
}

/// Produces to partition 0 of `topic` until `stop` (a record every
/// millisecond or so, timestamped now): partition 1 gets nothing after the
/// first few records, so it holds the watermark back.
fn produce_to_partition_zero(topic: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    use rdkafka::ClientConfig;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    std::thread::spawn(move || {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", kafka::bootstrap())
            .set("linger.ms", "5")
            .create()
            .expect("producer");
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..20 {
                let value = format!("{{\"n\":{i}}}");
                kafka::send(
                    &producer,
                    BaseRecord::<(), String>::to(&topic)
                        .payload(&value)
                        .partition(0),
                );
                i += 1;
            }
            producer.poll(std::time::Duration::from_millis(10));
        }
        let _ = producer.flush(std::time::Duration::from_secs(5));
    })
}

/// `sluice run --http`: Kafka (one partition stalled) -> a plugin that
/// spins on every record -> a SQL filter -> blackhole, checkpointing every
/// second.
///
/// The plugin spins ~1 ms per record (~1,000 records/s measured), half the
/// producer's ~2,000 records/s or less, so that the source is backpressured
/// whatever the machine's speed. At 300 thousand spins (2,000-4,000
/// records/s) it kept up with the producer on a fast phase of the machine;
/// at 1,500 thousand (~0.5 ms a record when measured) it did once the test
/// process and the host's allocator were optimised in dev (2026-12-07). A
/// batch of 8 (~14 ms) stays well within the plugin's 100 ms CPU deadline.
#[test]
fn the_dashboard_of_sluice_run_shows_rates_backpressure_a_stalled_partition_and_checkpoints() {
    let topic = kafka::unique_topic("dashboard");
    kafka::create_topic(&topic, 2);
    // Both partitions start with a few records; then only 0 gets more.
    let first: Vec<String> = (0..10).map(|i| format!("{{\"n\":{i}}}")).collect();
    let records: Vec<kafka::Outgoing<'_>> = first
        .iter()
        .map(|v| kafka::Outgoing {
            key: Some(v.as_bytes()),
            value: v.as_bytes(),
            ..kafka::Outgoing::default()
        })
        .collect();
    kafka::produce(&topic, &records);
    let stop = Arc::new(AtomicBool::new(false));
    let producer = produce_to_partition_zero(topic.clone(), stop.clone());

    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("pipeline.toml");
    let slow = sluice_tests::plugin("hostile-loop");
    std::fs::write(
        &file,
        format!(
            r#"[pipeline]
name = "watched"
batch_size = 8
channel_capacity = 4

[checkpoints]
storage = "file://{dir}/checkpoints"
interval_ms = 1000

[source.kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
group_id = "{topic}"
start = "earliest"

[[operators]]
name = "slow"
plugin = "{slow}"
config = {{ record_spin_thousands = "5000" }}

[[operators]]
name = "evens"
sql = "SELECT n FROM input WHERE n % 2 = 0"

[sink.blackhole]
"#,
            dir = dir.path().display(),
            bootstrap = kafka::bootstrap(),
            slow = slow.display(),
        ),
    )
    .expect("write");
    let port = free_port();
    let mut child = KillOnDrop::new(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["run", "--quiet", "--http", &format!("127.0.0.1:{port}")])
            .arg(&file)
            .spawn()
            .expect("sluice run"),
    );
    let url = format!("http://127.0.0.1:{port}");
    wait_until("the dashboard to answer", WAIT, || {
        assert!(
            child.child().try_wait().expect("wait").is_none(),
            "sluice run ended"
        );
        reqwest::blocking::get(format!("{url}/api/v1/status")).is_ok()
    });
    run_browser(json!({
        "url": url,
        "pipeline": "watched",
        "operators": ["source", "slow", "evens", "sinks"],
        "sql_operator": { "name": "evens", "contains": "WHERE n % 2 = 0" },
        "slow_operator": "slow",
        "upstream_of_slow": "source",
        "stalled_partition": 1,
        "screenshots": screenshots("run"),
    }));
    stop.store(true, Ordering::Relaxed);
    let _ = producer.join();
    sluice_tests::sigterm_and_wait(child.into_inner());
}

/// A pipeline of `sluice serve` that produces one record a second, without
/// plugins (the list test needs many of them, cheaply).
fn idle_pipeline(name: &str) -> String {
    format!(
        r#"[pipeline]
name = "{name}"

[source.generator]
profile = "bronze"
count = 1000000
rate = 1

[sink.blackhole]
"#
    )
}

/// `sluice serve`: a tenant's token sees its 100 pipelines listed within a
/// second, a pipeline's page with its checkpoints, deploy history and a
/// working rollback button, and never another tenant's pipeline.
#[test]
fn the_dashboard_of_sluice_serve_lists_100_pipelines_and_keeps_tenants_apart() {
    let state_dir = tempfile::tempdir().expect("state dir");
    let (server, admin) = start_server(state_dir.path(), free_port());
    let admin = admin.expect("admin token");
    let team = create_tenant_with(&server, &admin, "team", &["--max-pipelines", "120"]);
    let other = create_tenant(&server, &admin, "other");
    let files = tempfile::tempdir().expect("files");
    for i in 0..99 {
        let name = format!("idle-{i:03}");
        let file = files.path().join(format!("{name}.toml"));
        std::fs::write(&file, idle_pipeline(&name)).expect("write");
        let (ok, _, err) = sluice(&server, &team, &["deploy", &file.display().to_string()]);
        assert!(ok, "deploy {name} failed: {err}");
    }
    // The 100th: a plugin, paced, with a version pushed over it.
    let rust = sluice_tests::plugin("pii-redact");
    let c = sluice_tests::plugin("c/pii-redact");
    let file = files.path().join("redact.toml");
    std::fs::write(
        &file,
        format!(
            r#"[pipeline]
name = "redact"
batch_size = 64

[checkpoints]
storage = "checkpoints"
interval_ms = 500

[deploy]
verify_window_ms = 500

[source.generator]
profile = "bronze"
count = 100000000
rate = 2000

[[operators]]
name = "pii-redact"
plugin = "{rust}"

[sink.blackhole]
"#,
            rust = rust.display()
        ),
    )
    .expect("write");
    let (ok, _, err) = sluice(&server, &team, &["deploy", &file.display().to_string()]);
    assert!(ok, "deploy failed: {err}");
    let (ok, _, err) = sluice(
        &server,
        &team,
        &[
            "plugin",
            "push",
            &c.display().to_string(),
            "--pipeline",
            "redact",
            "--operator",
            "pii-redact",
        ],
    );
    assert!(ok, "push failed: {err}");
    let secret = files.path().join("secret.toml");
    std::fs::write(&secret, idle_pipeline("secret-of-other")).expect("write");
    let (ok, _, err) = sluice(&server, &other, &["deploy", &secret.display().to_string()]);
    assert!(ok, "deploy failed: {err}");

    run_browser(json!({
        "url": server.url,
        "token": team,
        "pipeline": "redact",
        "operators": ["source", "pii-redact", "sinks"],
        "min_rows": 100,
        "max_list_ms": 1000,
        "forbidden_pipeline": "secret-of-other",
        "rollback": true,
        "screenshots": screenshots("serve"),
    }));
}
