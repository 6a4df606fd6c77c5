//! The PostgreSQL upsert sink against the real server `scripts/dev-services.sh
//! up` starts, read back with `psql`: window results upserted exactly once
//! through SIGKILLs (no row ever moves backwards, as a trigger records),
//! refused rows dead-lettered with the database's reason while the rest of
//! their batch is written, a database that goes away mid-run (retried,
//! shown in the metrics and on the dashboard in a browser, nothing lost),
//! deletes and expiry, dead-letter tables, and start-up errors that name
//! the column.

use crate::serve::free_port;
use sluice_tests::postgres::{psql, rows, unique_table, url};
use sluice_tests::wait_until;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(120);

/// One test at a time against the server: one of them stops it.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static SERVER: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERVER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The window results' columns, as the sink declares them.
const COLUMNS: &str = r#"{ key = "bigint", window_start = "bigint", window_end = "bigint", result = "bigint", seq = "bigint" }"#;

/// A pipeline directory: Nexmark events counted per auction in tumbling
/// windows, the results upserted into `table` (or written to a file, for
/// the reference).
struct Job {
    dir: tempfile::TempDir,
    table: String,
}

impl Job {
    fn new(records: u64, rate: u64, table: &str, sink: &str) -> Job {
        let dir = tempfile::tempdir().expect("temporary directory");
        let text = format!(
            r#"[pipeline]
name = "postgres-{table}"
state_dir = "state"
batch_size = 256
max_out_of_orderness_ms = 100

[checkpoints]
storage = "checkpoints"
interval_ms = 200
mode = "exactly-once"

[source.generator]
profile = "nexmark"
count = {records}
rate = {rate}
max_disorder_ms = 50

[[operators]]
name = "per-auction"
window = {{ tumbling_ms = 1000 }}
key_field = "auction"
aggregate = {{ function = "count" }}

{sink}
[dead_letter.file]
path = "out/dead-letters.jsonl"
"#
        );
        std::fs::write(dir.path().join("pipeline.toml"), text).expect("write pipeline");
        Job {
            dir,
            table: table.to_string(),
        }
    }

    /// A pipeline reading `lines` from a file into `sinks` (TOML: the
    /// main sink and the dead-letter output), with exactly-once
    /// checkpoints unless `checkpoints` is false; `batch` records a batch.
    fn from_lines(
        table: &str,
        lines: &[String],
        checkpoints: bool,
        batch: usize,
        sinks: &str,
    ) -> Job {
        let dir = tempfile::tempdir().expect("temporary directory");
        std::fs::write(dir.path().join("in.jsonl"), lines.join("\n")).expect("input");
        let checkpoints = match checkpoints {
            true => {
                "[checkpoints]\nstorage = \"checkpoints\"\ninterval_ms = 200\nmode = \"exactly-once\"\n"
            }
            false => "",
        };
        let text = format!(
            "[pipeline]\nname = \"lines-{table}\"\nstate_dir = \"state\"\nbatch_size = {batch}\n\n\
             {checkpoints}\n[source.file]\npath = \"in.jsonl\"\n\n{sinks}"
        );
        std::fs::write(dir.path().join("pipeline.toml"), text).expect("write pipeline");
        Job {
            dir,
            table: table.to_string(),
        }
    }

    /// Into the table `table` (created by the test, with its trigger).
    fn into_table(records: u64, rate: u64, table: &str) -> Job {
        let sink = format!(
            "[sink.postgres]\nurl = \"{}\"\ntable = \"{table}\"\nkey = [\"key\", \"window_start\"]\ncolumns = {COLUMNS}\n",
            url()
        );
        Job::new(records, rate, table, &sink)
    }

    fn pipeline(&self) -> PathBuf {
        self.dir.path().join("pipeline.toml")
    }

    fn spawn(&self) -> Child {
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("run")
            .arg(self.pipeline())
            .arg("--quiet")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sluice")
    }

    fn run_to_end(&self) -> String {
        let output = self.spawn().wait_with_output().expect("wait for sluice");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "sluice run failed:\n{stderr}");
        stderr
    }

    /// Rows in the table now.
    fn rows(&self) -> usize {
        psql(&format!("SELECT count(*) FROM \"{}\"", self.table))
            .trim()
            .parse()
            .unwrap_or(0)
    }

    /// The table: (key, window_start) → (window_end, result, seq).
    fn table(&self) -> BTreeMap<(i64, i64), (i64, i64, i64)> {
        let text = psql(&format!(
            "SELECT key, window_start, window_end, result, seq FROM \"{}\"",
            self.table
        ));
        text.lines()
            .map(|line| {
                let n: Vec<i64> = line
                    .split('|')
                    .map(|v| v.parse().unwrap_or_else(|e| panic!("{line}: {e}")))
                    .collect();
                ((n[0], n[1]), (n[2], n[3], n[4]))
            })
            .collect()
    }
}

/// What an uninterrupted run's window results leave in an upserted table:
/// per (key, window_start) the result of the highest `seq`.
fn model(records: u64) -> BTreeMap<(i64, i64), (i64, i64, i64)> {
    let job = Job::new(
        records,
        1_000_000,
        "reference",
        "[sink.file]\npath = \"out/windows.jsonl\"\n",
    );
    job.run_to_end();
    let text = std::fs::read_to_string(job.dir.path().join("out/windows.jsonl")).expect("results");
    let mut model = BTreeMap::new();
    for line in text.lines() {
        let value: serde_json::Value = serde_json::from_str(line).expect("JSON");
        let field = |name: &str| {
            value[name]
                .as_i64()
                .unwrap_or_else(|| panic!("{name}: {line}"))
        };
        let entry = (field("window_end"), field("result"), field("seq"));
        let slot = model
            .entry((field("key"), field("window_start")))
            .or_insert(entry);
        if entry.2 >= slot.2 {
            *slot = entry;
        }
    }
    model
}

/// Creates the window results table and a history of every update to it
/// (version and seq before and after), filled by a trigger.
fn create_table_with_history(table: &str) {
    psql(&format!(
        r#"CREATE TABLE "{table}" (key bigint, window_start bigint, window_end bigint,
             result bigint, seq bigint, sluice_version bigint NOT NULL, PRIMARY KEY (key, window_start));
           CREATE TABLE "{table}_history" (key bigint, window_start bigint, old_version bigint,
             new_version bigint, old_seq bigint, new_seq bigint);
           CREATE FUNCTION "{table}_record"() RETURNS trigger AS $$ BEGIN
             INSERT INTO "{table}_history" VALUES (NEW.key, NEW.window_start, OLD.sluice_version,
               NEW.sluice_version, OLD.seq, NEW.seq);
             RETURN NEW; END $$ LANGUAGE plpgsql;
           CREATE TRIGGER "{table}_history" AFTER UPDATE ON "{table}"
             FOR EACH ROW EXECUTE FUNCTION "{table}_record"();"#
    ));
}

#[test]
fn window_results_are_upserted_exactly_once_through_20_sigkills_and_never_move_backwards() {
    let _alone = alone();
    const RECORDS: u64 = 60_000;
    let expected = model(RECORDS);
    let table = unique_table("windows");
    create_table_with_history(&table);
    let job = Job::into_table(RECORDS, 15_000, &table);
    let mid_stream =
        sluice_tests::sigkill_at_random_moments(20, || job.spawn(), || job.rows() as u64, WAIT);
    assert!(
        mid_stream >= 10,
        "only {mid_stream} of 20 kills landed mid-stream"
    );
    let last = job.run_to_end();
    assert!(last.contains("restored checkpoint"), "{last}");
    let table_now = job.table();
    assert_eq!(table_now.len(), expected.len(), "rows in the table");
    assert!(
        table_now == expected,
        "the table differs from an uninterrupted run's results"
    );
    let backwards = psql(&format!(
        "SELECT count(*) FROM \"{table}_history\" WHERE new_version < old_version OR new_seq < old_seq"
    ));
    assert_eq!(backwards.trim(), "0", "updates that moved a row backwards");
    let staged = psql(&format!("SELECT count(*) FROM \"{table}_sluice_staging\""));
    assert_eq!(staged.trim(), "0", "rows left in staging");
}

#[test]
fn a_database_that_goes_away_is_retried_shows_in_the_metrics_and_loses_nothing() {
    let _alone = alone();
    const RECORDS: u64 = 60_000;
    let expected = model(RECORDS);
    let table = unique_table("away");
    create_table_with_history(&table);
    let job = Job::into_table(RECORDS, 10_000, &table);
    let port = free_port();
    let log = job.dir.path().join("run.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--quiet", "--http", &format!("127.0.0.1:{port}")])
        .arg(job.pipeline())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("spawn sluice");
    wait_until("rows to be committed", WAIT, || job.rows() > 0);
    sluice_tests::postgres::stop();
    let url = format!("http://127.0.0.1:{port}");
    let get = |path: &str| {
        reqwest::blocking::get(format!("{url}{path}"))
            .and_then(|response| response.text())
            .unwrap_or_default()
    };
    wait_until(
        "the metrics to show the database not answering",
        WAIT,
        || {
            get("/metrics")
                .lines()
                .any(|line| line.starts_with("sluice_sink_unavailable{") && line.ends_with(" 1"))
        },
    );
    let status: serde_json::Value =
        serde_json::from_str(&get("/api/v1/status")).expect("status JSON");
    let pipeline = &status["pipelines"][0];
    assert!(
        pipeline["sink_unavailable_ms"].as_i64().is_some()
            && pipeline["sink_retries"].as_u64().unwrap_or(0) > 0,
        "the status the dashboard shows: {pipeline}"
    );
    crate::dashboard::run_browser(serde_json::json!({
        "url": url,
        "pipeline": format!("postgres-{table}"),
        "operators": ["source", "per-auction", "sinks"],
        "sink_unavailable": true,
        "screenshots": crate::dashboard::screenshots("postgres-away"),
    }));
    sluice_tests::postgres::start();
    let status = child.wait().expect("wait for sluice");
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "the run failed: {stderr}");
    assert!(stderr.contains("PostgreSQL did not answer"), "{stderr}");
    assert!(job.table() == expected, "the table differs: {stderr}");
}

/// Orders with an amount that must not be negative: one is refused.
fn refused_row_job(mode: &str, table: &str) -> Job {
    psql(&format!(
        "CREATE TABLE \"{table}\" (id bigint PRIMARY KEY, amount bigint CHECK (amount >= 0), \
         note text, sluice_version bigint NOT NULL)"
    ));
    let lines: Vec<String> = (0..100)
        .map(|id| {
            let amount = if id == 42 { -5 } else { id * 10 };
            format!(r#"{{"id": {id}, "amount": {amount}, "note": "order {id}"}}"#)
        })
        .collect();
    let sinks = format!(
        r#"[sink.postgres]
url = "{}"
table = "{table}"
key = ["id"]
columns = ["id", "amount", "note"]
mode = "{mode}"

[dead_letter.file]
path = "out/dead-letters.jsonl"
"#,
        url()
    );
    Job::from_lines(table, &lines, true, 256, &sinks)
}

#[test]
fn a_row_the_database_refuses_is_dead_lettered_and_the_rest_of_its_batch_written() {
    let _alone = alone();
    for mode in ["on-checkpoint", "at-least-once"] {
        let table = unique_table("refused");
        let job = refused_row_job(mode, &table);
        job.run_to_end();
        let ids: Vec<i64> = rows(&format!("SELECT id FROM \"{table}\" ORDER BY id"))
            .iter()
            .map(|l| l.parse().expect("id"))
            .collect();
        let expected: Vec<i64> = (0..100).filter(|id| *id != 42).collect();
        assert_eq!(ids, expected, "{mode}: every row but the refused one");
        let dead = std::fs::read_to_string(job.dir.path().join("out/dead-letters.jsonl"))
            .expect("dead letters");
        let dead: Vec<&str> = dead.lines().collect();
        assert_eq!(dead.len(), 1, "{mode}: {dead:?}");
        assert!(
            dead[0].contains("\"id\": 42") || dead[0].contains("\\\"id\\\": 42"),
            "{mode}: the refused record: {}",
            dead[0]
        );
        assert!(
            dead[0].contains("violates check constraint"),
            "{mode}: the database's reason: {}",
            dead[0]
        );
    }
}

#[test]
fn a_column_whose_type_differs_from_the_table_stops_the_run_at_start_up_naming_it() {
    let _alone = alone();
    let table = unique_table("typed");
    psql(&format!(
        "CREATE TABLE \"{table}\" (key bigint, window_start bigint, window_end bigint, \
         result integer, seq bigint, sluice_version bigint NOT NULL, PRIMARY KEY (key, window_start))"
    ));
    let job = Job::into_table(100, 1_000_000, &table);
    let output = job.spawn().wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("sink.postgres.columns.result")
            && stderr.contains("is integer, not bigint")
            && stderr.contains("pipeline.toml"),
        "{stderr}"
    );
    // A type outside the list is refused before anything reaches the
    // database.
    let text = std::fs::read_to_string(job.pipeline()).expect("read");
    std::fs::write(
        job.pipeline(),
        text.replace(
            "result = \"bigint\"",
            "result = \"bigint); DROP TABLE x; --\"",
        ),
    )
    .expect("write");
    let output = job.spawn().wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("is not a type a Postgres sink writes"),
        "{stderr}"
    );
}

#[test]
fn a_record_marked_deleted_removes_its_keys_row_unless_the_row_is_newer() {
    let _alone = alone();
    let lines = [
        r#"{"id": 1, "amount": 10, "v": 1}"#,
        r#"{"id": 2, "amount": 20, "v": 1}"#,
        r#"{"id": 1, "deleted": true, "v": 2}"#,
        r#"{"id": 3, "amount": 30, "v": 5}"#,
        r#"{"id": 3, "deleted": true, "v": 4}"#,
        r#"{"id": 4, "amount": 40, "v": 2}"#,
        r#"{"id": 4, "amount": 41, "v": 1}"#,
    ]
    .map(String::from);
    // One statement for all of them, and one per two records (each
    // decision then made by the table's versions).
    for (mode, batch) in [
        ("on-checkpoint", 1000),
        ("on-checkpoint", 2),
        ("at-least-once", 1000),
        ("at-least-once", 2),
    ] {
        let table = unique_table("deletes");
        psql(&format!(
            "CREATE TABLE \"{table}\" (id bigint PRIMARY KEY, amount bigint, v bigint, sluice_version bigint NOT NULL)"
        ));
        let sinks = format!(
            r#"[sink.postgres]
url = "{}"
table = "{table}"
key = ["id"]
columns = ["id", "amount", "v"]
version_field = "v"
delete_field = "deleted"
mode = "{mode}"

[dead_letter.file]
path = "out/dead-letters.jsonl"
"#,
            url()
        );
        let job = Job::from_lines(&table, &lines, true, batch, &sinks);
        job.run_to_end();
        assert_eq!(
            rows(&format!(
                "SELECT id, amount, v FROM \"{table}\" ORDER BY id"
            )),
            ["2|20|1", "3|30|5", "4|40|2"],
            "{mode}, batches of {batch}"
        );
    }
}

#[test]
fn dead_letters_become_rows_of_a_table_once_each_however_often_they_are_replayed() {
    let _alone = alone();
    let table = unique_table("orders");
    let dead_letters = format!("{table}_dlq");
    psql(&format!(
        "CREATE TABLE \"{table}\" (id bigint PRIMARY KEY, amount bigint, sluice_version bigint NOT NULL)"
    ));
    let lines = [
        r#"{"id": 1, "amount": 10}"#,
        "not json at all",
        r#"{"id": 2, "amount": "twenty"}"#,
        r#"{"id": 3, "amount": 30}"#,
    ]
    .map(String::from);
    // Without checkpoints every run reads the file again: the dead
    // letters come again, and must not be rows twice.
    let sinks = format!(
        r#"[sink.postgres]
url = "{url}"
table = "{table}"
key = ["id"]
columns = ["id", "amount"]

[dead_letter.postgres]
url = "{url}"
table = "{dead_letters}"
rows = "dead-letter"
create = true
"#,
        url = url()
    );
    let job = Job::from_lines(&table, &lines, false, 256, &sinks);
    job.run_to_end();
    job.run_to_end();
    assert_eq!(
        rows(&format!("SELECT id, amount FROM \"{table}\" ORDER BY id")),
        ["1|10", "3|30"]
    );
    let dead = rows(&format!(
        "SELECT payload, payload_encoding, source_offset, operator, reason, late_arrival \
         FROM \"{dead_letters}\" ORDER BY source_offset"
    ));
    let rows: Vec<Vec<&str>> = dead.iter().map(|line| line.split('|').collect()).collect();
    assert_eq!(rows.len(), 2, "one row per dead letter: {rows:?}");
    assert_eq!(rows[0][..3], ["not json at all", "utf8", "1"], "{rows:?}");
    assert_eq!(rows[1][..3], [lines[2].as_str(), "utf8", "2"], "{rows:?}");
    assert!(
        rows[0][4].to_lowercase().contains("json"),
        "the reason: {rows:?}"
    );
    assert!(
        rows[1][4].contains("invalid input syntax for type bigint"),
        "the database's reason: {rows:?}"
    );
    assert!(!rows[0][3].is_empty(), "who dead-lettered it: {rows:?}");
    assert_eq!(rows[1][3], "sink", "the sink refused it: {rows:?}");
    assert!(rows.iter().all(|row| row[5] == "f"), "not late: {rows:?}");
}

#[test]
fn rows_whose_time_is_older_than_expire_are_deleted_by_the_databases_clock() {
    let _alone = alone();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    const DAY: i64 = 86_400_000;
    let lines: Vec<String> = [
        (1, now - 3 * DAY),
        (2, now - DAY / 2),
        (3, now - 2 * DAY),
        (4, now),
    ]
    .iter()
    .map(|(id, ends)| format!(r#"{{"id": {id}, "ends": {ends}, "ends_ms": {ends}}}"#))
    .collect();
    for (mode, column) in [
        ("on-checkpoint", "ends"),
        ("at-least-once", "ends"),
        ("at-least-once", "ends_ms"),
    ] {
        let table = unique_table("expire");
        psql(&format!(
            "CREATE TABLE \"{table}\" (id bigint PRIMARY KEY, ends timestamptz, ends_ms bigint, sluice_version bigint NOT NULL); \
             INSERT INTO \"{table}\" VALUES (9, now() - interval '5 days', 0, 0), (10, now(), {now}, 0)"
        ));
        let sinks = format!(
            r#"[sink.postgres]
url = "{}"
table = "{table}"
key = ["id"]
columns = ["id", "ends", "ends_ms"]
mode = "{mode}"
expire = {{ column = "{column}", after_ms = {DAY}, check_every_ms = 0 }}

[dead_letter.file]
path = "out/dead-letters.jsonl"
"#,
            url()
        );
        let job = Job::from_lines(&table, &lines, true, 256, &sinks);
        job.run_to_end();
        assert_eq!(
            rows(&format!("SELECT id FROM \"{table}\" ORDER BY id")),
            ["2", "4", "10"],
            "{mode}, by {column}: rows more than a day old are gone, written or found"
        );
    }
}

#[test]
fn expire_names_a_column_that_holds_no_time_at_start_up() {
    let _alone = alone();
    let table = unique_table("expire_text");
    psql(&format!(
        "CREATE TABLE \"{table}\" (id bigint PRIMARY KEY, note text, sluice_version bigint NOT NULL)"
    ));
    let sinks = format!(
        r#"[sink.postgres]
url = "{}"
table = "{table}"
key = ["id"]
columns = ["id", "note"]
expire = {{ column = "note", after_ms = 1000 }}

[dead_letter.file]
path = "out/dead-letters.jsonl"
"#,
        url()
    );
    let job = Job::from_lines(&table, &[r#"{"id": 1}"#.to_string()], false, 256, &sinks);
    let output = job.spawn().wait_with_output().expect("wait for sluice");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("sink.postgres.expire.column") && stderr.contains("column `note` is text"),
        "{stderr}"
    );
}
