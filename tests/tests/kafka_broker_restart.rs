//! A broker restart mid-stream is survived without loss. In its own test
//! binary: restarting the shared broker would disturb concurrent tests.

use sluice_tests::kafka::{IdentityPipeline, create_topic, produce_keys, read, unique_topic};
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(120);

#[test]
fn broker_restart_mid_stream_loses_nothing() {
    let (input, output, group) = (
        unique_topic("restart-in"),
        unique_topic("restart-out"),
        unique_topic("restart-group"),
    );
    create_topic(&input, 2);
    create_topic(&output, 1);
    produce_keys(&input, 0..5_000);
    let pipeline = IdentityPipeline {
        name: "broker-restart",
        input: &input,
        group: &group,
        output: &output,
        dead_letter: None,
        batch_size: 100,
        checkpoint_interval_ms: 100,
        source_settings: "properties = { \"session.timeout.ms\" = \"30000\" }",
    }
    .toml();
    let restarted = std::sync::atomic::AtomicBool::new(false);
    let script = sluice_tests::repo_root().join("scripts/dev-services.sh");
    let (_, snapshot) = sluice_tests::run_pipeline_until(&pipeline, WAIT, |s| {
        if s.records_out >= 5_000 && !restarted.swap(true, std::sync::atomic::Ordering::Relaxed) {
            // Mid-stream: restart the broker, then write the second half.
            let status = Command::new(&script).arg("restart").status().unwrap();
            assert!(status.success(), "broker restart failed");
            produce_keys(&input, 5_000..10_000);
        }
        s.records_out >= 10_000
    });
    assert!(snapshot.records_in >= 10_000);
    let records = read(&output, 1, snapshot.records_out as usize, WAIT);
    let keys: BTreeSet<Vec<u8>> = records.into_iter().filter_map(|r| r.key).collect();
    assert_eq!(
        keys.len(),
        10_000,
        "every key before and after the restart reached the output"
    );
}
