//! Rows per second from Kafka into an Iceberg table, exactly-once, with 1 s
//! and 10 s checkpoints, beside the exactly-once Kafka sink on the same
//! input; per checkpoint the data files and their sizes, and the commit
//! latency (publication to commit done) p50 / p99.
//!
//! ```text
//! scripts/dev-services.sh up
//! cargo bench -p sluice-benches --bench iceberg_sink
//! ```
//!
//! Input: 1,000,000 JSON orders of ~90 bytes in 4 partitions. Table:
//! `id long, customer string, amount decimal(10,2), at timestamptz`,
//! partitioned by `day(at)` (the orders span 12 days), SQL catalog on
//! SQLite, warehouse on the local disk.

use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use sluice_benches::cpu_seconds;
use sluice_tests::kafka::{bootstrap, create_topic, send, unique_topic};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RECORDS: u64 = 1_000_000;
const PARTITIONS: i32 = 4;

fn fill(topic: &str) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("linger.ms", "20")
        .create()
        .expect("producer");
    for id in 0..RECORDS {
        let value = format!(
            r#"{{"id":{id},"customer":"customer-{}","amount":"{}.{:02}","at":{}}}"#,
            id % 10_000,
            id % 1000,
            id % 100,
            1_700_000_000_000 + id as i64 * 1000
        );
        let key = id.to_string();
        send(&producer, BaseRecord::to(topic).key(&key).payload(&value));
    }
    producer.flush(Duration::from_secs(120)).expect("flush");
}

const ICEBERG_SINK: &str = r#"
[sink.iceberg]
catalog = "{dir}/catalog.db"
warehouse = "{dir}/warehouse"
namespace = "bench"
table = "orders"
partition = ["day(at)"]
columns = [
  { name = "id", type = "long", required = true },
  { name = "customer", type = "string" },
  { name = "amount", type = "decimal(10, 2)" },
  { name = "at", type = "timestamptz", required = true },
]
"#;

/// One run: rows/s, CPU µs per row, and the commit latencies (ms).
struct Run {
    wall: Duration,
    cpu: f64,
    commits_ms: Vec<f64>,
}

fn run(input: &str, sink: &str, interval_ms: u64, dir: &std::path::Path) -> Run {
    let text = format!(
        r#"
[pipeline]
name = "{name}"
batch_size = 1024

[checkpoints]
storage = "{dir}/checkpoints"
interval_ms = {interval_ms}
mode = "exactly-once"

[source.kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{input}"]
group_id = "{group}"
start = "earliest"
value_format = "json"
poll_timeout_ms = 20
{sink}
[dead_letter]
blackhole = {{}}
"#,
        name = unique_topic("bench-iceberg"),
        dir = dir.display(),
        bootstrap = bootstrap(),
        group = unique_topic("bench-iceberg"),
    );
    let commits = std::cell::RefCell::new(BTreeMap::new());
    let started = std::cell::Cell::new(None);
    let out_at_checkpoint = std::cell::Cell::new(None);
    let cpu = std::cell::Cell::new(0.0);
    let finished = std::cell::Cell::new(None);
    sluice_tests::run_pipeline_until(&text, Duration::from_secs(900), |s| {
        if s.records_in > 0 && started.get().is_none() {
            started.set(Some(Instant::now()));
            cpu.set(cpu_seconds());
        }
        for record in &s.checkpoints.history {
            commits
                .borrow_mut()
                .insert(record.id, record.stats.commit_ms);
        }
        if s.records_out >= RECORDS && out_at_checkpoint.get().is_none() {
            out_at_checkpoint.set(Some(s.checkpoints.completed));
        }
        let done = out_at_checkpoint
            .get()
            .is_some_and(|at| s.checkpoints.completed > at);
        if done && finished.get().is_none() {
            finished.set(Some((Instant::now(), cpu_seconds())));
        }
        done
    });
    let (Some(start), Some((end, cpu_end))) = (started.get(), finished.get()) else {
        panic!("the run did not finish");
    };
    Run {
        wall: end - start,
        cpu: cpu_end - cpu.get(),
        commits_ms: commits.into_inner().into_values().collect(),
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let input = unique_topic("bench-iceberg-in");
    create_topic(&input, PARTITIONS);
    fill(&input);
    println!(
        "| sink | checkpoint interval | rows/s | CPU µs/row | checkpoints | data files per checkpoint | MB per checkpoint | commit ms p50 | p99 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for interval_ms in [1_000, 10_000] {
        let dir = tempfile::tempdir().expect("temporary directory");
        let sink = ICEBERG_SINK.replace("{dir}", &dir.path().display().to_string());
        let result = run(&input, &sink, interval_ms, dir.path());
        let table = sluice_tests::read_iceberg_table(
            &dir.path().join("catalog.db"),
            &dir.path().join("warehouse"),
            "bench.orders",
        );
        let snapshots = table["snapshots"].as_array().cloned().unwrap_or_default();
        let summary_sum = |field: &str| -> f64 {
            snapshots
                .iter()
                .filter_map(|s| s["summary"][field].as_str()?.parse::<f64>().ok())
                .sum()
        };
        let count = snapshots.len().max(1) as f64;
        let rows = summary_sum("added-records");
        assert_eq!(rows as u64, RECORDS, "every row committed once");
        let mut commits = result.commits_ms.clone();
        commits.sort_by(f64::total_cmp);
        println!(
            "| Iceberg | {} s | {:.0} | {:.2} | {} | {:.1} | {:.2} | {:.1} | {:.1} |",
            interval_ms / 1000,
            RECORDS as f64 / result.wall.as_secs_f64(),
            result.cpu * 1e6 / RECORDS as f64,
            snapshots.len(),
            summary_sum("added-data-files") / count,
            summary_sum("added-files-size") / count / 1e6,
            percentile(&commits, 0.5),
            percentile(&commits, 0.99),
        );
        let output = unique_topic("bench-iceberg-out");
        create_topic(&output, PARTITIONS);
        let kafka = format!(
            "\n[sink.kafka]\nbootstrap_servers = \"{}\"\ntopic = \"{output}\"\n",
            bootstrap()
        );
        let kafka_dir = tempfile::tempdir().expect("temporary directory");
        let result = run(&input, &kafka, interval_ms, kafka_dir.path());
        let mut commits = result.commits_ms.clone();
        commits.sort_by(f64::total_cmp);
        println!(
            "| Kafka (transactions) | {} s | {:.0} | {:.2} | {} | - | - | {:.1} | {:.1} |",
            interval_ms / 1000,
            RECORDS as f64 / result.wall.as_secs_f64(),
            result.cpu * 1e6 / RECORDS as f64,
            result.commits_ms.len(),
            percentile(&commits, 0.5),
            percentile(&commits, 0.99),
        );
    }
}
