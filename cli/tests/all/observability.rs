//! `/metrics` scraped while pipelines run, on `sluice serve` and on
//! `sluice run --http`: names and labels as Prometheus expects them
//! (`promtool check metrics` passes), counters that never go back, values
//! equal to what the run wrote, tenants' series kept apart, a deleted
//! pipeline's series gone.

use crate::serve::{WAIT, client, create_tenant, free_port, pipeline_text, sluice, start_server};
use sluice_tests::wait_until;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// One sample: name and labels.
type Series = (String, BTreeMap<String, String>);

/// Parses the Prometheus text format (what the tests need of it).
fn parse(text: &str) -> BTreeMap<Series, f64> {
    let mut samples = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').expect("a sample line");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("value of {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => (name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let mut parsed = BTreeMap::new();
        let mut rest = labels;
        while let Some((key, after)) = rest.split_once("=\"") {
            let mut value = String::new();
            let mut chars = after.char_indices();
            let mut end = after.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            value.push(if escaped == 'n' { '\n' } else { escaped });
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => value.push(c),
                }
            }
            parsed.insert(key.trim_start_matches(',').to_string(), value);
            rest = &after[end..];
        }
        samples.insert((name.to_string(), parsed), value);
    }
    samples
}

fn scrape(url: &str, token: Option<&str>) -> Result<String, String> {
    let client = reqwest::blocking::Client::new();
    let mut request = client.get(format!("{url}/metrics"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().map_err(|e| e.to_string())?;
    let status = response.status();
    let text = response.text().map_err(|e| e.to_string())?;
    if status.is_success() {
        Ok(text)
    } else {
        Err(format!("{status}: {text}"))
    }
}

/// `promtool check metrics` on `text` (Debian's `prometheus` package,
/// which the test command installs).
fn assert_promtool_passes(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (scripts/setup-toolchain.sh installs Debian's prometheus package)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let output = child.wait_with_output().expect("promtool");
    assert!(
        output.status.success(),
        "promtool check metrics failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn value(samples: &BTreeMap<Series, f64>, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|((n, l), _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| *v)
}

fn sum(samples: &BTreeMap<Series, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|((n, l), _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| *v)
        .sum()
}

/// Every counter (and histogram count and bucket) of `later` is at least
/// what it was in `earlier`.
fn assert_monotonic(earlier: &BTreeMap<Series, f64>, later: &BTreeMap<Series, f64>) {
    for ((name, labels), before) in earlier {
        let counter =
            name.ends_with("_total") || name.ends_with("_count") || name.ends_with("_bucket");
        if !counter {
            continue;
        }
        if let Some(after) = later.get(&(name.clone(), labels.clone())) {
            assert!(
                after >= before,
                "{name}{labels:?} went back from {before} to {after}"
            );
        }
    }
}

fn lines(path: &Path) -> f64 {
    std::fs::read_to_string(path)
        .map(|text| text.lines().count() as f64)
        .unwrap_or(0.0)
}

/// The families every pipeline with plugins and checkpoints exposes.
const REQUIRED: &[&str] = &[
    "sluice_build_info",
    "sluice_pipeline_running",
    "sluice_source_records_total",
    "sluice_source_bytes_total",
    "sluice_operator_records_in_total",
    "sluice_operator_records_out_total",
    "sluice_operator_bytes_in_total",
    "sluice_operator_bytes_out_total",
    "sluice_operator_busy_seconds_total",
    "sluice_operator_backpressured_seconds_total",
    "sluice_operator_idle_seconds_total",
    "sluice_operator_state_bytes",
    "sluice_operator_state_disk_bytes",
    "sluice_dead_letters_total",
    "sluice_late_records_total",
    "sluice_sink_records_total",
    "sluice_sink_bytes_total",
    "sluice_plugin_info",
    "sluice_plugin_calls_total",
    "sluice_plugin_call_duration_seconds_bucket",
    "sluice_plugin_faults_total",
    "sluice_plugin_deadline_hits_total",
    "sluice_plugin_memory_bytes",
    "sluice_checkpoints_completed_total",
    "sluice_checkpoints_failed_total",
    "sluice_checkpoint_duration_seconds_bucket",
    "sluice_checkpoint_last_completed_age_seconds",
    "sluice_checkpoint_uploaded_bytes_total",
    "sluice_record_latency_seconds_bucket",
    "sluice_channel_queued_batches",
];

#[test]
fn served_metrics_are_well_formed_match_the_output_and_stay_within_their_tenant() {
    let plugins = sluice_tests::repo_root().join("plugins");
    let state_dir = tempfile::tempdir().expect("state dir");
    let (server, admin) = start_server(state_dir.path(), free_port());
    let admin = admin.expect("admin token");
    let team = create_tenant(&server, &admin, "team");
    let other = create_tenant(&server, &admin, "other");
    let files = tempfile::tempdir().expect("files");
    let file = files.path().join("metered.toml");
    std::fs::write(&file, pipeline_text("metered", &plugins, "out")).expect("write");
    let (ok, _, err) = sluice(&server, &team, &["deploy", &file.display().to_string()]);
    assert!(ok, "deploy failed: {err}");
    let api = client(&server, Some(&team));

    // Scrape while it runs: every scrape well-formed, counters monotonic.
    let mut previous: Option<BTreeMap<Series, f64>> = None;
    let mut scrapes = 0;
    let mut checked_promtool = false;
    wait_until("the pipeline to finish while scraping", WAIT, || {
        let text = scrape(&server.url, Some(&team)).expect("scrape");
        let samples = parse(&text);
        if let Some(previous) = &previous {
            assert_monotonic(previous, &samples);
        }
        if !checked_promtool
            && value(&samples, "sluice_source_records_total", &[]).unwrap_or(0.0) > 0.0
        {
            assert_promtool_passes(&text);
            checked_promtool = true;
        }
        previous = Some(samples);
        scrapes += 1;
        std::thread::sleep(Duration::from_millis(300));
        api.get("/api/v1/pipelines/metered")
            .map(|s| s["state"] == "finished")
            .unwrap_or(false)
    });
    assert!(scrapes >= 3, "only {scrapes} scrapes during the run");
    let text = scrape(&server.url, Some(&team)).expect("scrape");
    assert_promtool_passes(&text);
    let samples = parse(&text);
    for name in REQUIRED {
        assert!(
            samples.keys().any(|(n, _)| n == name),
            "{name} is missing from:\n{text}"
        );
    }
    for (name, labels) in samples.keys() {
        assert!(name.starts_with("sluice_"), "{name}");
        for forbidden in ["key", "offset", "record"] {
            assert!(
                !labels.contains_key(forbidden),
                "{name} has a `{forbidden}` label"
            );
        }
        if name.starts_with("sluice_operator_") || name.starts_with("sluice_plugin_") {
            for label in ["tenant", "pipeline", "operator", "worker"] {
                assert!(
                    labels.contains_key(label),
                    "{name}{labels:?} lacks `{label}`"
                );
            }
        }
    }

    // The values are the run's own counts.
    let out = state_dir.path().join("tenants/team/pipelines/metered/out");
    let labels = [("tenant", "team"), ("pipeline", "metered")];
    assert_eq!(
        value(&samples, "sluice_source_records_total", &labels),
        Some(30_000.0)
    );
    let silver = lines(&out.join("silver.jsonl"));
    let dead = lines(&out.join("dead-letters.jsonl"));
    assert!(
        silver > 0.0 && dead > 0.0,
        "silver {silver}, dead letters {dead}"
    );
    let sink = |name: &str| {
        let mut labels = labels.to_vec();
        labels.push(("sink", name));
        value(&samples, "sluice_sink_records_total", &labels)
    };
    assert_eq!(sink("main"), Some(silver));
    assert_eq!(sink("dead-letter"), Some(dead));
    assert_eq!(
        sum(&samples, "sluice_dead_letters_total", &labels),
        dead,
        "dead letters by class add up to the dead-letter file"
    );
    assert_eq!(
        value(
            &samples,
            "sluice_operator_records_in_total",
            &[("operator", "pii-redact")]
        ),
        value(
            &samples,
            "sluice_operator_records_out_total",
            &[("operator", "validate-dedup")]
        )
    );
    let sha = samples
        .keys()
        .find(|(n, l)| n == "sluice_plugin_info" && l["operator"] == "pii-redact")
        .map(|(_, l)| l["sha256"].clone())
        .expect("plugin info");
    assert_eq!(sha.len(), 64, "{sha}");
    assert!(value(&samples, "sluice_checkpoints_completed_total", &labels).unwrap_or(0.0) >= 1.0);
    assert!(value(&samples, "sluice_record_latency_seconds_count", &labels).unwrap_or(0.0) >= 1.0);

    // Another tenant sees none of it; the admin sees everything.
    let others = parse(&scrape(&server.url, Some(&other)).expect("scrape"));
    assert!(
        !others
            .keys()
            .any(|(_, l)| l.get("tenant").is_some_and(|t| t == "team")),
        "another tenant's scrape shows team's series"
    );
    let all = parse(&scrape(&server.url, Some(&admin)).expect("scrape"));
    assert!(value(&all, "sluice_source_records_total", &labels).is_some());
    assert!(scrape(&server.url, None).is_err_and(|e| e.starts_with("401")));

    // A deleted pipeline's series disappear.
    let (ok, _, err) = sluice(&server, &team, &["pipelines", "rm", "metered"]);
    assert!(ok, "rm failed: {err}");
    wait_until("its series to go", WAIT, || {
        let samples = parse(&scrape(&server.url, Some(&admin)).expect("scrape"));
        !samples
            .keys()
            .any(|(_, l)| l.get("pipeline").is_some_and(|p| p == "metered"))
    });
}

/// A generator -> window pipeline on `sluice run --http`, checkpointing to
/// a local directory.
fn window_pipeline(dir: &Path) -> String {
    format!(
        r#"[pipeline]
name = "windowed"
batch_size = 100
max_out_of_orderness_ms = 100

[checkpoints]
storage = "file://{dir}/checkpoints"
interval_ms = 300

[source.generator]
profile = "nexmark"
count = 40000
rate = 8000
events_per_second = 2000

[[operators]]
name = "bids"
plugin = "{plugins}/filter-bids"
config = {{ modulus = 1 }}

[[operators]]
name = "per-auction"
key_field = "auction"
window = {{ tumbling_ms = 1000 }}
aggregate = {{ function = "count" }}

[sink.blackhole]
"#,
        dir = dir.display(),
        plugins = sluice_tests::repo_root().join("plugins").display()
    )
}

#[test]
fn sluice_run_http_serves_metrics_with_watermarks_and_checkpoints() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("pipeline.toml");
    std::fs::write(&file, window_pipeline(dir.path())).expect("write");
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--quiet", "--http", &format!("127.0.0.1:{port}")])
        .arg(&file)
        .spawn()
        .expect("sluice run");
    let url = format!("http://127.0.0.1:{port}");
    let mut previous: Option<BTreeMap<Series, f64>> = None;
    let mut seen = None;
    wait_until("a checkpoint and a watermark in the metrics", WAIT, || {
        let Ok(text) = scrape(&url, None) else {
            assert!(
                child.try_wait().expect("wait").is_none(),
                "sluice run ended early"
            );
            std::thread::sleep(Duration::from_millis(100));
            return false;
        };
        let samples = parse(&text);
        if let Some(previous) = &previous {
            assert_monotonic(previous, &samples);
        }
        let done = value(&samples, "sluice_checkpoints_completed_total", &[]).unwrap_or(0.0) >= 1.0
            && value(
                &samples,
                "sluice_operator_watermark_seconds",
                &[("operator", "per-auction")],
            )
            .is_some()
            && value(&samples, "sluice_source_split_watermark_seconds", &[]).is_some();
        if done {
            seen = Some(text);
        }
        previous = Some(samples);
        std::thread::sleep(Duration::from_millis(200));
        done
    });
    let text = seen.expect("a scrape");
    assert_promtool_passes(&text);
    let samples = parse(&text);
    assert_eq!(
        value(
            &samples,
            "sluice_pipeline_running",
            &[("pipeline", "windowed")]
        ),
        Some(1.0)
    );
    assert!(
        value(
            &samples,
            "sluice_operator_state_bytes",
            &[("operator", "per-auction")]
        )
        .is_some()
    );
    let status = child.wait().expect("wait");
    assert!(status.success());
}
