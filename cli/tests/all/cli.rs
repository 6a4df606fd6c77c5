//! The `sluice` binary as a user runs it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn help_lists_the_commands() {
    let (top, _) = text(&sluice().arg("--help").output().unwrap());
    for command in ["run", "plugin"] {
        assert!(
            top.contains(command),
            "sluice --help lacks {command}: {top}"
        );
    }
    let (plugin, _) = text(&sluice().args(["plugin", "--help"]).output().unwrap());
    for command in ["build", "new", "inspect", "test"] {
        assert!(
            plugin.contains(command),
            "sluice plugin --help lacks {command}: {plugin}"
        );
    }
}

#[test]
fn bad_pipeline_file_fails_at_start_up_naming_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        "[pipeline]\nname = \"p\"\n\n[source.generator]\ncount = 10\n\n[[operators]]\nname = \"x\"\nplugin = \"missing.wasm\"\n\n[sink]\nblackhole = {}\n",
    )
    .unwrap();
    let output = sluice().arg("run").arg(&file).output().unwrap();
    assert!(!output.status.success());
    let (_, stderr) = text(&output);
    let expected = format!(
        "{}:9:1: field `operators[0].plugin`: no such plugin file",
        file.display()
    );
    assert!(
        stderr.contains(&expected),
        "expected `{expected}` in: {stderr}"
    );
}

#[test]
fn sigterm_stops_cleanly_flushing_everything_counted() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("endless.toml");
    let out = dir.path().join("out.jsonl");
    std::fs::write(
        &file,
        "[pipeline]\nname = \"endless\"\nbatch_size = 100\n\n[source.generator]\nprofile = \"payload\"\nrate = 20000\n\n[sink.file]\npath = \"out.jsonl\"\n",
    )
    .unwrap();
    let child = sluice()
        .arg("run")
        .arg(&file)
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until records are flowing (the sink has written something).
    sluice_tests::wait_until("records to flow", Duration::from_secs(60), || {
        std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0) >= 100_000
    });
    let stderr = sluice_tests::sigterm_and_wait(child);
    assert!(stderr.contains("stopped in"), "{stderr}");
    let written = std::fs::read_to_string(&out).unwrap().lines().count();
    let reported: usize = stderr
        .split(" out,")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no out count in: {stderr}"));
    assert_eq!(
        written, reported,
        "everything counted as written is in the file"
    );
}

/// `sluice plugin new NAME --lang L --world W`, `build` and `inspect`: the
/// temporary directory and the built component, checked to implement
/// `expected_world`.
fn new_and_build(lang: &str, world: &str, expected_world: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let output = sluice()
        .args([
            "plugin",
            "new",
            "my-plugin",
            "--lang",
            lang,
            "--world",
            world,
            "--dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{lang}: {:?}", text(&output));
    let plugin_dir = dir.path().join("my-plugin");

    // A target dir shared across runs and clones, so std and the SDK
    // compile once, not in every clean clone.
    let target = sluice_tests::shared_cache_dir("scaffold-target");
    let build = |component: &Path| {
        let output = sluice()
            .args(["plugin", "build"])
            .arg(&plugin_dir)
            .arg("--output")
            .arg(component)
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&output);
        assert!(output.status.success(), "{lang}: {stderr}");
        stdout
    };
    let component = dir.path().join("my-plugin.wasm");
    build(&component);

    // Python and JavaScript builds of unchanged inputs are reused (a
    // rebuild would take 10-30 s and give other bytes).
    if lang == "python" || lang == "js" {
        let again = dir.path().join("again.wasm");
        let stdout = build(&again);
        assert!(
            stdout.contains("inputs unchanged: reused"),
            "{lang}: {stdout}"
        );
        assert_eq!(
            std::fs::read(&again).unwrap(),
            std::fs::read(&component).unwrap(),
            "{lang}"
        );
    }

    let (inspected, _) = text(
        &sluice()
            .args(["plugin", "inspect"])
            .arg(&component)
            .output()
            .unwrap(),
    );
    assert!(
        inspected.contains(&format!("world:       {expected_world}")),
        "{lang}: {inspected}"
    );
    assert!(
        inspected.contains("wit version: sluice:plugin@0.1.0"),
        "{lang}: {inspected}"
    );
    (dir, component)
}

/// `sluice plugin test COMPONENT --input INPUT ARGS..`, which must succeed:
/// its output lines as JSON, its stdout and its stderr.
fn plugin_test(
    lang: &str,
    component: &Path,
    input: &Path,
    args: &[&str],
) -> (Vec<serde_json::Value>, String, String) {
    let output = sluice()
        .args(["plugin", "test"])
        .arg(component)
        .arg("--input")
        .arg(input)
        .args(args)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{lang}: {stderr}");
    let lines = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (lines, stdout, stderr)
}

/// `sluice plugin new --lang L`, `build`, `inspect` and `test`, for every
/// language: the scaffolded validator forwards a record with `id`,
/// dead-letters one without, and dead-letters malformed JSON.
fn plugin_dev_loop(lang: &str, expected_world: &str) {
    let (dir, component) = new_and_build(lang, "transform", expected_world);
    // A raw-lines input, so the malformed line reaches the plugin.
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "{\"id\":1}\n{\"name\":\"no id\"}\nnot json\n").unwrap();
    let (lines, stdout, stderr) = plugin_test(lang, &component, &input, &["--raw"]);
    assert_eq!(lines.len(), 3, "{lang}: {stdout}");
    assert_eq!(lines[0]["route"], "main", "{lang}: {stdout}");
    assert_eq!(lines[0]["record"]["value"]["id"], 1, "{lang}");
    let reasons: Vec<&str> = lines[1..]
        .iter()
        .map(|l| l["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons[0], "missing field `id`", "{lang}: {reasons:?}");
    assert!(
        reasons[1].starts_with("invalid JSON value"),
        "{lang}: {reasons:?}"
    );
    assert!(
        stderr.contains("3 records in: 1 main, 0 side, 2 dead-letter"),
        "{lang}: {stderr}"
    );
}

/// `sluice plugin build` compiles the component to this host's native
/// code, into the cache `sluice run` reads (issue 45: a Python plugin's
/// first run compiled 18 MB before its first record). With an empty
/// compiled-component cache: the build compiles, a second build finds it
/// cached, and loading it as `sluice run` does (`plugin inspect`) is a hit.
#[test]
fn a_built_plugin_is_compiled_for_this_host_before_its_first_run() {
    let dir = tempfile::tempdir().unwrap();
    let compiled_cache = dir.path().join("compiled");
    let output = sluice()
        .args(["plugin", "new", "precompiled", "--lang", "rust", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{:?}", text(&output));
    let target = sluice_tests::shared_cache_dir("scaffold-target");
    let component = dir.path().join("precompiled.wasm");
    let sluice_with_cache = |args: &[&str]| {
        let output = sluice()
            .args(args)
            .env("SLUICE_CACHE_DIR", &compiled_cache)
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&output);
        assert!(output.status.success(), "{args:?}: {stderr}");
        stdout
    };
    let plugin = dir.path().join("precompiled");
    let build = [
        "plugin",
        "build",
        plugin.to_str().unwrap(),
        "--output",
        component.to_str().unwrap(),
    ];
    let first = sluice_with_cache(&build);
    assert!(first.contains("native code compiled in"), "{first}");
    let second = sluice_with_cache(&build);
    assert!(second.contains("native code cached"), "{second}");
    let inspected = sluice_with_cache(&["plugin", "inspect", component.to_str().unwrap()]);
    assert!(inspected.contains("compiled:    Hit"), "{inspected}");
}

#[test]
fn rust_plugin_new_build_test_and_inspect_is_a_working_dev_loop() {
    plugin_dev_loop("rust", "sluice:plugin/fast-projected-transform");
}

#[test]
fn python_plugin_new_build_test_and_inspect_is_a_working_dev_loop() {
    plugin_dev_loop("python", "sluice:plugin/projected-transform");
}

#[test]
fn js_plugin_new_build_test_and_inspect_is_a_working_dev_loop() {
    plugin_dev_loop("js", "sluice:plugin/projected-transform");
}

#[test]
fn c_plugin_new_build_test_and_inspect_is_a_working_dev_loop() {
    plugin_dev_loop("c", "sluice:plugin/fast-projected-transform");
}

/// `sluice plugin new --world aggregate --lang L`, `build`, `inspect` and
/// `test`: the scaffolded count-and-sum runs per key and tumbling window as
/// a window operator would, and dead-letters a record it cannot add.
fn aggregate_dev_loop(lang: &str, expected_world: &str) {
    let (dir, component) = new_and_build(lang, "aggregate", expected_world);
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        concat!(
            "{\"user\":\"a\",\"ts\":100,\"amount\":2}\n",
            "{\"user\":\"a\",\"ts\":900,\"amount\":5}\n",
            "{\"user\":\"b\",\"ts\":200,\"amount\":1}\n",
            "{\"user\":\"a\",\"ts\":1500,\"amount\":7}\n",
            "{\"user\":\"b\",\"ts\":300,\"amount\":\"x\"}\n",
        ),
    )
    .unwrap();
    let (lines, stdout, stderr) = plugin_test(
        lang,
        &component,
        &input,
        &[
            "--key-field",
            "user",
            "--timestamp-field",
            "ts",
            "--tumbling-ms",
            "1000",
        ],
    );
    let mut results: Vec<(String, i64, u64, i64)> = lines
        .iter()
        .filter(|l| l["route"] == "main")
        .map(|l| window_totals(&l["record"]["value"]))
        .collect();
    results.sort();
    assert_eq!(
        results,
        vec![
            ("a".to_string(), 0, 2, 7),
            ("a".to_string(), 1000, 1, 7),
            ("b".to_string(), 0, 1, 1),
        ],
        "{lang}: {stdout}"
    );
    let reasons: Vec<&str> = lines
        .iter()
        .filter(|l| l["route"] == "dead-letter")
        .filter_map(|l| l["reason"].as_str())
        .collect();
    assert_eq!(reasons.len(), 1, "{lang}: {stdout}");
    assert!(
        reasons[0].contains("field `amount` must be an integer"),
        "{lang}: {reasons:?}"
    );
    assert!(
        stderr.contains("5 records in: 3 main, 0 side, 1 dead-letter"),
        "{lang}: {stderr}"
    );
    run_after_the_file_source(lang, expected_world, &dir, &component, &input, &results);
}

/// A count-and-sum window result as (key, window start, count, sum).
fn window_totals(window: &serde_json::Value) -> (String, i64, u64, i64) {
    (
        window["key"].as_str().unwrap_or_default().to_string(),
        window["window_start"].as_i64().unwrap_or(-1),
        window["result"]["count"].as_u64().unwrap_or_default(),
        window["result"]["sum"].as_i64().unwrap_or_default(),
    )
}

/// The same aggregate in a pipeline, right after a file source: the same
/// results; and a plugin built for the projected world has its field
/// (`amount`) found by the source in the pass that reads each line's
/// timestamp (`records_projected_ahead`, one per record in the run
/// summary) and its `add-projected` is what ran (no call faulted into a
/// fallback). Other worlds never count any.
fn run_after_the_file_source(
    lang: &str,
    world: &str,
    dir: &tempfile::TempDir,
    component: &Path,
    input: &Path,
    expected: &[(String, i64, u64, i64)],
) {
    let pipeline = dir.path().join("windows.toml");
    let out = dir.path().join("windows.jsonl");
    std::fs::write(
        &pipeline,
        format!(
            "[pipeline]\nname = \"windows\"\n\n\
             [source.file]\npath = {input:?}\ntimestamp_field = \"ts\"\n\n\
             [[operators]]\nname = \"totals\"\nplugin = {component:?}\n\
             window = {{ tumbling_ms = 1000 }}\nkey_field = \"user\"\n\n\
             [sink.file]\npath = {out:?}\n"
        ),
    )
    .unwrap();
    let output = sluice().arg("run").arg(&pipeline).output().unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{lang}: {stdout} {stderr}");
    let mut results: Vec<(String, i64, u64, i64)> = std::fs::read_to_string(&out)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .map(|window| window_totals(&window))
        .collect();
    results.sort();
    assert_eq!(results, expected, "{lang}: {stderr}");
    let projected_ahead = stderr
        .lines()
        .find_map(|line| line.trim().strip_prefix("records_projected_ahead = "))
        .map(str::to_string);
    let expected_ahead = matches!(
        world,
        "sluice:plugin/fast-projected-aggregate" | "sluice:plugin/text-projected-aggregate"
    )
    .then(|| "5".to_string());
    assert_eq!(projected_ahead, expected_ahead, "{lang}: {stderr}");
    // Not a fallback after a faulting call: no call faulted.
    assert!(stderr.contains("traps 0 restarts 0"), "{lang}: {stderr}");
}

#[test]
fn rust_aggregate_plugin_new_build_and_test_group_by_key_and_window() {
    aggregate_dev_loop("rust", "sluice:plugin/fast-projected-aggregate");
}

#[test]
fn python_aggregate_plugin_new_build_and_test_group_by_key_and_window() {
    aggregate_dev_loop("python", "sluice:plugin/text-projected-aggregate");
}

#[test]
fn js_aggregate_plugin_new_build_and_test_group_by_key_and_window() {
    aggregate_dev_loop("js", "sluice:plugin/text-projected-aggregate");
}

#[test]
fn c_aggregate_plugin_new_build_and_test_group_by_key_and_window() {
    aggregate_dev_loop("c", "sluice:plugin/fast-projected-aggregate");
}
