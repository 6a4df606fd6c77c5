//! The tenant boundary of `sluice serve` beyond the API: a tenant's
//! pipeline file cannot make the server load native code, and reaches only
//! the Kafka topics and groups and the S3 prefixes the admin granted it.

use crate::serve::{
    WAIT, assert_no_pipelines, client, create_kafka_tenant, free_port, sluice, start_server,
    start_server_with, state,
};
use serde_json::Value;
use sluice_tests::{KillOnDrop, wait_until};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Builds a shared library whose constructor writes its process id to
/// `marker` the moment anything loads it.
fn marking_library(dir: &Path, name: &str, marker: &Path) -> PathBuf {
    let source = dir.join(format!("{name}.c"));
    std::fs::write(
        &source,
        "#include <stdio.h>\n#include <unistd.h>\n\
         __attribute__((constructor)) static void mark(void) {\n\
           FILE *f = fopen(MARKER, \"w\");\n\
           if (f) { fprintf(f, \"%d\", getpid()); fclose(f); }\n\
         }\n",
    )
    .expect("write the library's source");
    let library = dir.join(format!("{name}.so"));
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(format!("-DMARKER=\"{}\"", marker.display()))
        .arg(&source)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed");
    library
}

/// A Kafka source naming `library` in its client properties.
fn loading_pipeline(name: &str, topic: &str, group: &str, property: &str, value: &str) -> String {
    format!(
        r#"[pipeline]
name = "{name}"

[source.kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
group_id = "{group}"
properties = {{ "{property}" = "{value}" }}

[sink.file]
path = "out/records.jsonl"
"#,
        bootstrap = sluice_tests::kafka::bootstrap(),
    )
}

/// `sluice deploy` of `text` as the tenant `token`: (accepted, stderr).
fn deploy(server: &crate::serve::Server, token: &str, dir: &Path, text: &str) -> (bool, String) {
    let file = dir.join("pipeline.toml");
    std::fs::write(&file, text).expect("write the pipeline file");
    let (ok, _, err) = sluice(server, token, &["deploy", &file.display().to_string()]);
    (ok, err)
}

/// The attack of issue 37, end to end: a library a tenant put on the
/// server's disk, named in its pipeline's librdkafka properties. `sluice
/// run` (the file's author owns the machine) loads it, which shows the
/// library and the property work; `sluice serve` refuses the file with a
/// 400 naming the property, and the library's constructor never runs.
///
/// The tenant's file sink writes values as JSON lines (binary values as
/// base64), so it cannot write an ELF file itself; the test puts the
/// library where a tenant's sinks write, its pipeline directory.
#[test]
fn a_tenants_pipeline_cannot_make_the_server_load_a_library() {
    let work = tempfile::tempdir().expect("work dir");
    let topic = sluice_tests::kafka::unique_topic("mallory.lib");
    sluice_tests::kafka::create_topic(&topic, 1);

    // `sluice run`: full pass-through, so the library is loaded.
    let run_marker = work.path().join("loaded-by-sluice-run");
    let run_library = marking_library(work.path(), "run", &run_marker);
    let run_dir = work.path().join("run");
    std::fs::create_dir_all(&run_dir).expect("dir");
    let run_file = run_dir.join("pipeline.toml");
    std::fs::write(
        &run_file,
        loading_pipeline(
            "local",
            &topic,
            &format!("{topic}-run"),
            "plugin.library.paths",
            &run_library.display().to_string(),
        ),
    )
    .expect("write");
    let run = KillOnDrop::new(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["run", "--quiet"])
            .arg(&run_file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start sluice run"),
    );
    wait_until("sluice run to load the library", WAIT, || {
        run_marker.exists()
    });
    drop(run);

    // `sluice serve`: the same file from a tenant is refused.
    let state_dir = tempfile::tempdir().expect("state dir");
    let (server, admin) = start_server(state_dir.path(), free_port());
    let admin = admin.expect("admin token");
    let token = create_kafka_tenant(&server, &admin, "mallory", "mallory.", &[]);
    let serve_marker = work.path().join("loaded-by-sluice-serve");
    let planted = marking_library(work.path(), "serve", &serve_marker);
    let tenant_dir = state_dir
        .path()
        .join("tenants/mallory/pipelines/attack/out");
    std::fs::create_dir_all(&tenant_dir).expect("dir");
    let library = tenant_dir.join("evil.so");
    std::fs::copy(&planted, &library).expect("plant the library");
    let library = library.display().to_string();
    let shell = format!("touch {}", serve_marker.display());
    for (property, value) in [
        ("plugin.library.paths", library.as_str()),
        ("sasl.kerberos.kinit.cmd", shell.as_str()),
        ("ssl.engine.location", library.as_str()),
        ("ssl.key.location", "/etc/shadow"),
        ("debug", "all"),
    ] {
        let text = loading_pipeline("attack", &topic, "mallory.group", property, value);
        let (ok, err) = deploy(&server, &token, work.path(), &text);
        assert!(!ok, "{property} was accepted");
        assert!(
            err.contains("400") && err.contains(&format!("source.kafka.properties.\"{property}\"")),
            "the refusal names {property}: {err}"
        );
    }
    let sink = format!(
        "[pipeline]\nname = \"attack\"\n[source.generator]\ncount = 1\n[sink.kafka]\nbootstrap_servers = \"{}\"\ntopic = \"mallory.out\"\ndelivery = \"at-least-once\"\nproperties = {{ \"plugin.library.paths\" = \"{library}\" }}\n",
        sluice_tests::kafka::bootstrap()
    );
    let (ok, err) = deploy(&server, &token, work.path(), &sink);
    assert!(!ok && err.contains("sink.kafka.properties"), "{err}");
    assert_no_pipelines(&server, &token);
    assert!(
        !serve_marker.exists(),
        "the library's constructor ran in the server"
    );
}

/// Tenant B names tenant A's S3 prefix, topic, consumer group and progress
/// topic: each is a 400 naming the field. B's own prefixes work end to end
/// (exactly-once Kafka out, checkpoints on S3 under B's prefix, progress
/// topic under B's prefix). Narrowing B's reach stops B's running pipeline
/// that no longer fits, with the field in the reason.
#[test]
fn a_tenant_reaches_only_its_own_topics_groups_and_s3_prefix() {
    let namespace = sluice_tests::kafka::unique_topic("reach");
    let (prefix_a, prefix_b) = (format!("{namespace}.a."), format!("{namespace}.b."));
    let bucket = namespace.replace('_', "-").to_lowercase();
    sluice_tests::s3::create_bucket(&bucket);
    let input = format!("{prefix_b}in");
    let output = format!("{prefix_b}out");
    for topic in [&input, &output] {
        sluice_tests::kafka::create_topic(topic, 1);
    }
    sluice_tests::kafka::produce_keys(&input, 0..100);

    let endpoint = sluice_tests::s3::endpoint();
    let state_dir = tempfile::tempdir().expect("state dir");
    let (server, admin) = start_server_with(
        state_dir.path(),
        free_port(),
        &["--s3-bucket", &bucket, "--s3-endpoint", &endpoint],
        &sluice_tests::s3::environment(),
    );
    let admin = admin.expect("admin token");
    create_kafka_tenant(&server, &admin, "team-a", &prefix_a, &[]);
    let team_b = create_kafka_tenant(&server, &admin, "team-b", &prefix_b, &[]);
    let work = tempfile::tempdir().expect("work dir");
    let bootstrap = sluice_tests::kafka::bootstrap();
    let pipeline = |name: &str, topic: &str, group: &str, out: &str, extra: &str, storage: &str| {
        format!(
            r#"[pipeline]
name = "{name}"

[checkpoints]
storage = "{storage}"
interval_ms = 200
mode = "exactly-once"

[source.kafka]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
group_id = "{group}"
start = "earliest"
bounded = true

[sink.kafka]
bootstrap_servers = "{bootstrap}"
topic = "{out}"
{extra}
"#
        )
    };
    let own_storage = format!("s3://{bucket}/tenants/team-b/cp");
    let group_b = format!("{prefix_b}group");
    for (text, field) in [
        (
            pipeline(
                "p",
                &format!("{prefix_a}orders"),
                &group_b,
                &output,
                "",
                &own_storage,
            ),
            "source.kafka.topics[0]",
        ),
        (
            pipeline(
                "p",
                &input,
                &format!("{prefix_a}group"),
                &output,
                "",
                &own_storage,
            ),
            "source.kafka.group_id",
        ),
        (
            pipeline(
                "p",
                &input,
                &group_b,
                &format!("{prefix_a}out"),
                "",
                &own_storage,
            ),
            "sink.kafka.topic",
        ),
        (
            pipeline(
                "p",
                &input,
                &group_b,
                &output,
                &format!("progress_topic = \"{prefix_a}sluice-progress\""),
                &own_storage,
            ),
            "sink.kafka.progress_topic",
        ),
        (
            pipeline(
                "p",
                &input,
                &group_b,
                &output,
                "",
                &format!("s3://{bucket}/tenants/team-a/cp"),
            ),
            "checkpoints.storage",
        ),
    ] {
        let (ok, err) = deploy(&server, &team_b, work.path(), &text);
        assert!(!ok, "{field} outside B's reach was accepted");
        assert!(err.contains("400") && err.contains(field), "{field}: {err}");
    }

    let (ok, err) = deploy(
        &server,
        &team_b,
        work.path(),
        &pipeline("own", &input, &group_b, &output, "", &own_storage),
    );
    assert!(ok, "B's own prefixes: {err}");
    let api = client(&server, Some(&team_b));
    wait_until("B's pipeline to finish", WAIT, || {
        let status = state(&api, "own");
        assert_ne!(status["state"], "failed", "{status}");
        status["state"] == "finished"
    });
    let (records, _) = sluice_tests::kafka::read_to_end(&output, 1, true);
    assert_eq!(records.len(), 100, "every record once, committed");
    let (progress, _) =
        sluice_tests::kafka::read_to_end(&format!("{prefix_b}sluice-progress"), 1, true);
    assert!(!progress.is_empty(), "progress records under B's prefix");
    let stored = sluice_tests::s3::keys(&sluice_tests::s3::storage(&bucket, "tenants/team-b/cp"));
    assert!(
        stored.iter().any(|key| key.contains("manifest")),
        "checkpoints under B's prefix: {stored:?}"
    );
    let elsewhere = sluice_tests::s3::keys(&sluice_tests::s3::storage(&bucket, ""));
    assert!(
        elsewhere
            .iter()
            .all(|key| key.starts_with("tenants/team-b/")),
        "nothing outside B's prefix: {elsewhere:?}"
    );

    // A running pipeline outside a narrowed reach is stopped.
    let (ok, err) = deploy(
        &server,
        &team_b,
        work.path(),
        &pipeline(
            "live",
            &input,
            &format!("{prefix_b}live"),
            &output,
            "",
            &own_storage,
        )
        .replace("bounded = true", "bounded = false"),
    );
    assert!(ok, "{err}");
    wait_until("B's live pipeline to run", WAIT, || {
        state(&api, "live")["state"] == "running"
    });
    let admin_api = client(&server, Some(&admin));
    let answer: Value = admin_api
        .patch_json(
            "/api/v1/tenants/team-b",
            &serde_json::json!({ "reach": { "s3": { "prefixes": [format!("s3://{bucket}/tenants/team-b/")] } } }),
        )
        .expect("narrow B's reach");
    let stopped = answer["stopped"].to_string();
    assert!(
        stopped.contains("live") && stopped.contains("source.kafka.bootstrap_servers"),
        "{answer}"
    );
    wait_until("the live pipeline to be stopped", WAIT, || {
        state(&api, "live")["state"] == "failed"
    });
    assert!(
        state(&api, "live")["detail"]
            .as_str()
            .is_some_and(|d| d.contains("bootstrap_servers"))
    );
}
