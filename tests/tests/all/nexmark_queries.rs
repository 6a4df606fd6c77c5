//! The Nexmark example pipelines (`examples/nexmark/`) on generated events,
//! each checked against the same query computed here from the events.

use serde_json::Value;
use sluice_tests::{plugin, repo_root, run_pipeline_to_end};
use std::collections::BTreeMap;
use std::time::Duration;

const EVENTS: u64 = 20_000;

/// The example pipeline `query` with a smaller input, plugins as built
/// components, and output to `output`.
fn example(query: &str, output: &std::path::Path) -> String {
    let text = std::fs::read_to_string(repo_root().join(format!("examples/nexmark/{query}.toml")))
        .unwrap();
    let mut text = text
        .replace("count = 100_000", &format!("count = {EVENTS}"))
        .replace(
            &format!("path = \"../../out/nexmark/{query}.jsonl\""),
            &format!("path = {output:?}"),
        );
    for name in ["filter-bids", "hot-items", "highest-bid"] {
        text = text.replace(
            &format!("\"../../plugins/{name}\""),
            &format!("{:?}", plugin(name)),
        );
    }
    text
}

/// The generated events, as the examples see them.
fn events(dir: &std::path::Path) -> Vec<Value> {
    let file = dir.join("events.jsonl");
    run_pipeline_to_end(
        &format!(
            "[pipeline]\nname = \"events\"\n\n[source.generator]\nprofile = \"nexmark\"\ncount = {EVENTS}\nevents_per_second = 1_000\nmax_disorder_ms = 500\n\n[sink.file]\npath = {file:?}\n"
        ),
        Duration::from_secs(120),
    );
    std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Runs the example `query` with `workers` worker threads for its keyed
/// operators.
fn run(query: &str, dir: &std::path::Path, workers: usize) -> Vec<Value> {
    run_with(query, dir, &format!("workers = {workers}"))
}

/// Runs the example `query` with extra `[pipeline]` settings.
fn run_with(query: &str, dir: &std::path::Path, settings: &str) -> Vec<Value> {
    let output = dir.join(format!(
        "{query}-{}.jsonl",
        settings.replace([' ', '\n'], "")
    ));
    let text =
        example(query, &output).replace("[pipeline]\n", &format!("[pipeline]\n{settings}\n"));
    assert!(text.contains(settings));
    let (_, snapshot) = run_pipeline_to_end(&text, Duration::from_secs(120));
    assert_eq!(snapshot.dead_letters, 0, "{query}: {snapshot:?}");
    std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn bids(events: &[Value]) -> impl Iterator<Item = &Value> {
    events.iter().filter(|e| e["event_type"] == "bid")
}

#[test]
fn q5_hot_items_are_the_auctions_with_most_bids_per_sliding_window() {
    let dir = tempfile::tempdir().unwrap();
    let events = events(dir.path());
    // Bids per (window end, auction) over 10 s windows every 2 s.
    let mut counts: BTreeMap<i64, BTreeMap<u64, u64>> = BTreeMap::new();
    for bid in bids(&events) {
        let t = bid["date_time"].as_i64().unwrap();
        let last_end = t - t.rem_euclid(2_000) + 2_000;
        for end in (0..5).map(|i| last_end + i * 2_000) {
            *counts
                .entry(end)
                .or_default()
                .entry(bid["auction"].as_u64().unwrap())
                .or_default() += 1;
        }
    }
    let mut expected: BTreeMap<i64, (u64, Vec<u64>)> = BTreeMap::new();
    for (end, per_auction) in counts {
        let max = per_auction.values().copied().max().unwrap_or(0);
        let leaders = per_auction
            .iter()
            .filter(|(_, c)| **c == max)
            .map(|(a, _)| *a)
            .collect();
        expected.insert(end, (max, leaders));
    }
    // q5 has two keyed stages (per auction, then per window end): with two
    // workers, a key-by exchange runs between them. Without memory for
    // window state, every window lives in RocksDB between batches.
    for settings in [
        "workers = 1",
        "workers = 2",
        "workers = 2\nstate_cache_mb = 0",
    ] {
        let got: BTreeMap<i64, (u64, Vec<u64>)> = run_with("q5", dir.path(), settings)
            .iter()
            .map(|r| {
                let result = &r["result"];
                let auctions = result["auctions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_u64().unwrap())
                    .collect();
                (
                    result["window_end"].as_i64().unwrap(),
                    (result["bids"].as_u64().unwrap(), auctions),
                )
            })
            .collect();
        assert_eq!(got, expected, "{settings}");
    }
}

#[test]
fn q8_new_users_join_persons_with_their_auctions_within_ten_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let events = events(dir.path());
    let persons: Vec<&Value> = events
        .iter()
        .filter(|e| e["event_type"] == "person")
        .collect();
    let mut expected = Vec::new();
    for auction in events.iter().filter(|e| e["event_type"] == "auction") {
        for person in &persons {
            let delay =
                auction["date_time"].as_i64().unwrap() - person["date_time"].as_i64().unwrap();
            if person["id"] == auction["seller"] && (0..=10_000).contains(&delay) {
                expected.push((
                    person["id"].as_u64().unwrap(),
                    auction["id"].as_u64().unwrap(),
                ));
            }
        }
    }
    expected.sort();
    for workers in [1, 2] {
        let mut got: Vec<(u64, u64)> = run("q8", dir.path(), workers)
            .iter()
            .map(|j| {
                (
                    j["left"]["id"].as_u64().unwrap(),
                    j["right"]["id"].as_u64().unwrap(),
                )
            })
            .collect();
        got.sort();
        assert!(!expected.is_empty());
        assert_eq!(got, expected, "{workers} workers");
    }
}

#[test]
fn q11_sessions_count_every_bid_once_and_are_separated_by_the_gap() {
    let dir = tempfile::tempdir().unwrap();
    let events = events(dir.path());
    // Sessions per bidder from the sorted bid times.
    let mut times: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for bid in bids(&events) {
        times
            .entry(bid["bidder"].as_u64().unwrap())
            .or_default()
            .push(bid["date_time"].as_i64().unwrap());
    }
    let mut expected = Vec::new();
    for (bidder, mut ts) in times {
        ts.sort();
        let (mut start, mut last, mut count) = (ts[0], ts[0], 0u64);
        for t in ts {
            // Windows [t, t + gap) that touch merge, as in Flink.
            if t > last + 10_000 {
                expected.push((bidder, start, last + 10_000, count));
                start = t;
                count = 0;
            }
            last = t;
            count += 1;
        }
        expected.push((bidder, start, last + 10_000, count));
    }
    expected.sort();
    for settings in ["workers = 1", "workers = 2", "state_cache_mb = 0"] {
        let mut got: Vec<(u64, i64, i64, u64)> = run_with("q11", dir.path(), settings)
            .iter()
            .map(|r| {
                (
                    // The bidder field is a number: so is the key.
                    r["key"].as_u64().unwrap(),
                    r["window_start"].as_i64().unwrap(),
                    r["window_end"].as_i64().unwrap(),
                    r["result"].as_u64().unwrap(),
                )
            })
            .collect();
        got.sort();
        assert_eq!(got, expected, "{settings}");
    }
}

#[test]
fn q7_example_runs() {
    let dir = tempfile::tempdir().unwrap();
    let results = run("q7", dir.path(), 2);
    assert!(results.len() >= 2, "{results:?}");
    assert!(
        results
            .iter()
            .all(|r| r["result"]["price"].as_u64().is_some())
    );
}
