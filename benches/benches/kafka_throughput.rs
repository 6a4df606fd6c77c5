//! Kafka throughput and latency against the real broker.
//!
//! ```text
//! scripts/dev-services.sh up
//! cargo bench -p sluice-benches --bench kafka_throughput
//! ```
//!
//! 1. Fills a topic with 1,000,000 records of 100 bytes.
//! 2. (a) A plain rdkafka consume -> produce loop (the ceiling), then
//!    (b) Sluice: Kafka source -> identity plugin -> Kafka sink, both until
//!    every record is delivered; prints records/s and the ratio b / a.
//!    (c) Sluice again with `[checkpoints] mode = "exactly-once"` (1 s
//!    interval, local checkpoint storage), until the checkpoint covering
//!    every record has committed; prints (c) / (b).
//! 3. Measures produce-to-visible latency at half of (b)'s rate, each value
//!    carrying its send time, read by a `read_committed` reader: for the
//!    plain loop (the environment's share), for Sluice at-least-once and
//!    exactly-once; prints p50 / p90 / p99 / max.

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use sluice_benches::cpu_seconds;
use sluice_tests::kafka::{IdentityPipeline, bootstrap, create_topic, unique_topic};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RECORDS: usize = 1_000_000;
const VALUE_BYTES: usize = 100;
const PARTITIONS: i32 = 4;
/// Latency runs produce this long before measuring.
const WARM_UP: Duration = Duration::from_secs(2);

fn send(producer: &BaseProducer, topic: &str, key: &[u8], value: &[u8]) {
    sluice_tests::kafka::send(producer, BaseRecord::to(topic).key(key).payload(value));
}

fn fill(topic: &str) {
    let producer = sluice_benches::kafka_producer();
    let value = vec![b'v'; VALUE_BYTES];
    for i in 0..RECORDS {
        send(&producer, topic, format!("{i}").as_bytes(), &value);
    }
    producer.flush(Duration::from_secs(120)).expect("flush");
}

fn end_offsets(topic: &str) -> usize {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .expect("consumer");
    (0..PARTITIONS)
        .map(|p| {
            consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .map(|(_, high)| high)
                .unwrap_or(0) as usize
        })
        .sum()
}

/// (a): consume every record and produce it to `output`, as fast as possible.
fn plain_loop(input: &str, output: &str) -> Duration {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", unique_topic("bench-plain"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    consumer.subscribe(&[input]).expect("subscribe");
    let producer = sluice_benches::kafka_producer();
    let mut started = None;
    let mut copied = 0;
    while copied < RECORDS {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
            // Timed from the first record: group join is not throughput.
            started.get_or_insert_with(Instant::now);
            send(
                &producer,
                output,
                message.key().unwrap_or_default(),
                message.payload().unwrap_or_default(),
            );
            copied += 1;
        }
    }
    producer.flush(Duration::from_secs(120)).expect("flush");
    started.map(|t| t.elapsed()).unwrap_or_default()
}

/// How the Sluice pipeline delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivery {
    /// No `[checkpoints]`: barriers flush the sink, offsets are committed.
    AtLeastOnce,
    /// `[checkpoints] mode = "exactly-once"`: one transaction per second.
    ExactlyOnce,
}

fn sluice_pipeline(input: &str, output: &str, group: &str, delivery: Delivery) -> String {
    let mut text = IdentityPipeline {
        name: &unique_topic("bench-kafka"),
        input,
        group,
        output,
        dead_letter: None,
        batch_size: 1024,
        checkpoint_interval_ms: std::env::var("SLUICE_BENCH_INTERVAL_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000),
        source_settings: "start = \"earliest\"\npoll_timeout_ms = 20",
    }
    .toml();
    if delivery == Delivery::ExactlyOnce {
        let storage = std::env::temp_dir().join(unique_topic("bench-checkpoints"));
        text.push_str(&format!(
            "\n[checkpoints]\nstorage = \"{}\"\ninterval_ms = 1000\nmode = \"exactly-once\"\n",
            storage.display()
        ));
    }
    text
}

/// (b), (c): the Sluice pipeline until every record is delivered (and,
/// exactly-once, committed: a checkpoint completed after the last
/// delivery). Returns the time to the last delivery and to the commit.
fn sluice(input: &str, output: &str, delivery: Delivery) -> (Duration, Duration) {
    let started = std::cell::Cell::new(None);
    let delivered_at = std::cell::Cell::new(None);
    let committed_at = std::cell::Cell::new(None);
    let delivered_at_checkpoint = std::cell::Cell::new(None);
    sluice_tests::run_pipeline_until(
        &sluice_pipeline(input, output, &unique_topic("bench-sluice"), delivery),
        Duration::from_secs(600),
        |s| {
            // Timed from the first record read, like the plain loop.
            if s.records_in > 0 && started.get().is_none() {
                started.set(Some(Instant::now()));
            }
            let delivered = s
                .sink_partitions
                .iter()
                .filter(|(topic, _, _)| topic == output)
                .map(|(_, _, p)| p.records)
                .sum::<u64>() as usize
                >= RECORDS;
            if delivered && delivered_at.get().is_none() {
                delivered_at.set(Some(Instant::now()));
                delivered_at_checkpoint.set(Some(s.checkpoints.completed));
            }
            let done = match delivery {
                Delivery::AtLeastOnce => delivered,
                Delivery::ExactlyOnce => delivered_at_checkpoint
                    .get()
                    .is_some_and(|at| s.checkpoints.completed > at),
            };
            if done {
                committed_at.set(Some(Instant::now()));
            }
            done
        },
    );
    match (started.get(), delivered_at.get(), committed_at.get()) {
        (Some(start), Some(delivered), Some(committed)) => (delivered - start, committed - start),
        _ => (Duration::ZERO, Duration::ZERO),
    }
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// What is measured for latency.
#[derive(Debug, Clone, Copy)]
enum Copier {
    /// The plain rdkafka loop.
    Plain,
    /// A Sluice pipeline.
    Sluice(Delivery),
}

/// The plain loop copying from `input` to `output` until `stop`.
fn plain_copier(input: &str, output: &str, stop: &AtomicBool) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", unique_topic("lat-plain"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "100")
        .create()
        .expect("consumer");
    consumer.subscribe(&[input]).expect("subscribe");
    let producer = sluice_benches::kafka_producer();
    while !stop.load(Ordering::Relaxed) {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(20)) {
            send(
                &producer,
                output,
                message.key().unwrap_or_default(),
                message.payload().unwrap_or_default(),
            );
        }
        producer.poll(Duration::ZERO);
    }
    let _ = producer.flush(Duration::from_secs(10));
}

/// Produce-to-visible latency through `copier` at `rate` records/s.
fn latency(copier: Copier, rate: f64, seconds: u64) -> Vec<u64> {
    let (input, output) = (unique_topic("lat-in"), unique_topic("lat-out"));
    create_topic(&input, PARTITIONS);
    create_topic(&output, PARTITIONS);
    let stop = Arc::new(AtomicBool::new(false));
    let pipeline_stop = stop.clone();
    let (copy_input, copy_output) = (input.clone(), output.clone());
    let pipeline = std::thread::spawn(move || match copier {
        Copier::Plain => plain_copier(&copy_input, &copy_output, &pipeline_stop),
        Copier::Sluice(delivery) => {
            let text = sluice_pipeline(
                &copy_input,
                &copy_output,
                &unique_topic("lat-group"),
                delivery,
            );
            sluice_tests::run_pipeline_until(&text, Duration::from_secs(seconds + 120), |_| {
                pipeline_stop.load(Ordering::Relaxed)
            });
        }
    });
    let reader_output = output.clone();
    let reader_stop = stop.clone();
    // Records sent in the first seconds are not measured: the producer's
    // first batch waits for its connection and metadata, which is not the
    // pipeline's latency.
    let measure_from = now_micros() + (WARM_UP + Duration::from_secs(8)).as_micros() as u64;
    let reader = std::thread::spawn(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap())
            .set("group.id", unique_topic("lat-reader"))
            .set("isolation.level", "read_committed")
            .set("auto.offset.reset", "earliest")
            .set("fetch.wait.max.ms", "5")
            .create()
            .expect("consumer");
        consumer.subscribe(&[&reader_output]).expect("subscribe");
        let mut latencies = Vec::new();
        while !reader_stop.load(Ordering::Relaxed) {
            if let Some(Ok(message)) = consumer.poll(Duration::from_millis(50)) {
                let payload = message.payload().unwrap_or_default();
                if let Some(sent) = payload
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_be_bytes)
                    .filter(|sent| *sent >= measure_from)
                {
                    latencies.push(now_micros().saturating_sub(sent));
                }
            }
        }
        latencies
    });
    // Let the group form before measuring.
    std::thread::sleep(Duration::from_secs(8));
    let producer = sluice_benches::kafka_producer();
    let started = Instant::now();
    let total = (rate * (seconds as f64 + WARM_UP.as_secs_f64())) as u64;
    for i in 0..total {
        let due = started + Duration::from_secs_f64(i as f64 / rate);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let mut value = vec![b'v'; VALUE_BYTES];
        value[..8].copy_from_slice(&now_micros().to_be_bytes());
        send(&producer, &input, format!("{i}").as_bytes(), &value);
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let mut latencies = reader.join().expect("reader");
    pipeline.join().expect("pipeline");
    latencies.sort_unstable();
    latencies
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index] as f64 / 1000.0
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing and
    // must not run this (it needs the broker and minutes).
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    // SLUICE_BENCH_LATENCY_ONLY=<records/s>: only the at-least-once latency
    // run (to investigate it).
    if let Some(rate) = std::env::var("SLUICE_BENCH_LATENCY_ONLY")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
    {
        let latencies = latency(Copier::Sluice(Delivery::AtLeastOnce), rate, 20);
        println!(
            "at-least-once at {rate:.0}/s: p50 {:.1} p90 {:.1} p99 {:.1} max {:.1} ms",
            percentile(&latencies, 0.50),
            percentile(&latencies, 0.90),
            percentile(&latencies, 0.99),
            percentile(&latencies, 1.0)
        );
        return;
    }
    let input = unique_topic("bench-in");
    create_topic(&input, PARTITIONS);
    let filling = Instant::now();
    fill(&input);
    eprintln!(
        "filled {} with {RECORDS} records in {:.1} s",
        input,
        filling.elapsed().as_secs_f64()
    );
    assert_eq!(end_offsets(&input), RECORDS);

    let plain_out = unique_topic("bench-plain-out");
    create_topic(&plain_out, PARTITIONS);
    let plain = plain_loop(&input, &plain_out);
    let timed = |delivery: Delivery| {
        let output = unique_topic("bench-sluice-out");
        create_topic(&output, PARTITIONS);
        let cpu = cpu_seconds();
        let (delivered, committed) = sluice(&input, &output, delivery);
        assert!(end_offsets(&output) >= RECORDS);
        (delivered, committed, cpu_seconds() - cpu)
    };
    let (at_least_once, _, alo_cpu) = timed(Delivery::AtLeastOnce);
    let (exactly_once, eo_committed, eo_cpu) = timed(Delivery::ExactlyOnce);

    let rate = |elapsed: Duration| RECORDS as f64 / elapsed.as_secs_f64();
    println!(
        "| run | records | seconds to the last delivery | records/s | seconds to visible | CPU µs/record (process) |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    println!(
        "| (a) plain rdkafka consume -> produce | {RECORDS} | {:.2} | {:.0} | {:.2} | |",
        plain.as_secs_f64(),
        rate(plain),
        plain.as_secs_f64()
    );
    for (name, elapsed, visible, cpu) in [
        (
            "(b) Sluice Kafka -> identity -> Kafka, at-least-once",
            at_least_once,
            at_least_once,
            alo_cpu,
        ),
        (
            "(c) the same, exactly-once (1 s checkpoints)",
            exactly_once,
            eo_committed,
            eo_cpu,
        ),
    ] {
        println!(
            "| {name} | {RECORDS} | {:.2} | {:.0} | {:.2} | {:.2} |",
            elapsed.as_secs_f64(),
            rate(elapsed),
            visible.as_secs_f64(),
            cpu * 1e6 / RECORDS as f64
        );
    }
    println!(
        "\nratio (b) / (a) = {:.2}; (c) / (b) = {:.2}\n",
        rate(at_least_once) / rate(plain),
        rate(exactly_once) / rate(at_least_once)
    );

    let half = rate(at_least_once) / 2.0;
    println!(
        "| latency at {half:.0} records/s (half of (b)), read_committed | samples | p50 ms | p90 ms | p99 ms | max ms |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for (name, copier) in [
        ("plain rdkafka loop", Copier::Plain),
        (
            "Sluice at-least-once",
            Copier::Sluice(Delivery::AtLeastOnce),
        ),
        ("Sluice exactly-once", Copier::Sluice(Delivery::ExactlyOnce)),
    ] {
        let latencies = latency(copier, half, 20);
        println!(
            "| {name} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
            latencies.len(),
            percentile(&latencies, 0.50),
            percentile(&latencies, 0.90),
            percentile(&latencies, 0.99),
            percentile(&latencies, 1.0)
        );
    }
}
