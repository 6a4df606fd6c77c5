//! Benchmarks for Sluice. See `benches/plugin_call.rs` (criterion) and
//! `benches/pipeline.sh` (end-to-end runs); results in `docs/benchmarks.md`.

/// CPU time (user + system) this process has used so far, seconds: the
/// benches report CPU µs per record beside records/s (the machine is
/// shared, wall-clock rates move with its load).
pub fn cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes into the struct we own.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// An idempotent producer to the benchmark broker (`scripts/dev-services.sh
/// up`, or `$SLUICE_KAFKA_BOOTSTRAP`), batching for 5 ms: what the Kafka
/// benches fill their topics with.
pub fn kafka_producer() -> rdkafka::producer::BaseProducer {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", sluice_tests::kafka::bootstrap())
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("Kafka producer")
}
