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
//! 3. Runs Sluice again while a producer writes at half of (b)'s rate, each
//!    value carrying its send time; a `read_committed` reader of the output
//!    measures produce-to-visible latency; prints p50 / p99 / max.

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use sluice_tests::kafka::{IdentityPipeline, bootstrap, create_topic, unique_topic};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RECORDS: usize = 1_000_000;
const VALUE_BYTES: usize = 100;
const PARTITIONS: i32 = 4;

fn producer() -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("producer")
}

fn send(producer: &BaseProducer, topic: &str, key: &[u8], value: &[u8]) {
    let mut record = BaseRecord::to(topic).key(key).payload(value);
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((_, unsent)) => {
                record = unsent;
                producer.poll(Duration::from_millis(5));
            }
        }
    }
}

fn fill(topic: &str) {
    let producer = producer();
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
    let producer = producer();
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

fn sluice_pipeline(input: &str, output: &str, group: &str) -> String {
    IdentityPipeline {
        name: "bench-kafka",
        input,
        group,
        output,
        dead_letter: None,
        batch_size: 1024,
        checkpoint_interval_ms: 1000,
        source_settings: "start = \"earliest\"\npoll_timeout_ms = 20",
    }
    .toml()
}

/// (b): the Sluice pipeline until the sink has delivered every record.
fn sluice(input: &str, output: &str) -> Duration {
    let started = std::cell::Cell::new(None);
    let finished = std::cell::Cell::new(None);
    sluice_tests::run_pipeline_until(
        &sluice_pipeline(input, output, &unique_topic("bench-sluice")),
        Duration::from_secs(600),
        |s| {
            // Timed from the first record read, like the plain loop.
            if s.records_in > 0 && started.get().is_none() {
                started.set(Some(Instant::now()));
            }
            let done = s
                .sink_partitions
                .iter()
                .map(|(_, _, p)| p.records)
                .sum::<u64>() as usize
                >= RECORDS;
            if done {
                finished.set(Some(Instant::now()));
            }
            done
        },
    );
    match (started.get(), finished.get()) {
        (Some(start), Some(end)) => end - start,
        _ => Duration::ZERO,
    }
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Produce-to-visible latency through Sluice at `rate` records/s.
fn latency(rate: f64, seconds: u64) -> Vec<u64> {
    let (input, output) = (unique_topic("lat-in"), unique_topic("lat-out"));
    create_topic(&input, PARTITIONS);
    create_topic(&output, PARTITIONS);
    let stop = Arc::new(AtomicBool::new(false));
    let pipeline_stop = stop.clone();
    let pipeline_text = sluice_pipeline(&input, &output, &unique_topic("lat-group"));
    let pipeline = std::thread::spawn(move || {
        sluice_tests::run_pipeline_until(&pipeline_text, Duration::from_secs(seconds + 120), |_| {
            pipeline_stop.load(Ordering::Relaxed)
        })
    });
    let reader_output = output.clone();
    let reader_stop = stop.clone();
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
                {
                    latencies.push(now_micros().saturating_sub(sent));
                }
            }
        }
        latencies
    });
    // Let the group form before measuring.
    std::thread::sleep(Duration::from_secs(8));
    let producer = producer();
    let started = Instant::now();
    let total = (rate * seconds as f64) as u64;
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
    let sluice_out = unique_topic("bench-sluice-out");
    create_topic(&sluice_out, PARTITIONS);
    let through_sluice = sluice(&input, &sluice_out);
    assert!(end_offsets(&sluice_out) >= RECORDS);

    let plain_rate = RECORDS as f64 / plain.as_secs_f64();
    let sluice_rate = RECORDS as f64 / through_sluice.as_secs_f64();
    println!("| run | records | seconds | records/s |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| (a) plain rdkafka consume -> produce | {RECORDS} | {:.2} | {:.0} |",
        plain.as_secs_f64(),
        plain_rate
    );
    println!(
        "| (b) Sluice Kafka -> identity -> Kafka | {RECORDS} | {:.2} | {:.0} |",
        through_sluice.as_secs_f64(),
        sluice_rate
    );
    println!("\nratio (b) / (a) = {:.2}\n", sluice_rate / plain_rate);

    let rate = sluice_rate / 2.0;
    let latencies = latency(rate, 20);
    println!(
        "| latency at {:.0} records/s (half of (b)) | samples | p50 ms | p90 ms | p99 ms | max ms |",
        rate
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    println!(
        "| produce -> visible to read_committed reader | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
        latencies.len(),
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.90),
        percentile(&latencies, 0.99),
        percentile(&latencies, 1.0)
    );
}
