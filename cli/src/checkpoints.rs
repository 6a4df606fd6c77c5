//! `sluice checkpoints list|show`: what a pipeline's checkpoint storage
//! holds, read without touching it.

use anyhow::{Context, Result, bail};
use sluice_host::checkpoint::CheckpointMode;
use sluice_host::checkpoint::{CheckpointStore, Manifest, RestoreFrom, open_storage};
use sluice_host::config::{LoadedConfig, SinkConfig, SourceConfig};
use sluice_host::connectors::kafka::Delivery;
use std::fmt::Write as _;
use std::path::Path;

/// The checkpoints of the pipeline in `file`, and whether its Kafka sinks
/// commit transactions (whose outcome decides the restore point).
fn store(file: &Path) -> Result<(CheckpointStore, bool)> {
    let loaded = LoadedConfig::load(file)?;
    let Some(section) = &loaded.config.checkpoints else {
        bail!(
            "{}: the pipeline has no [checkpoints] section",
            file.display()
        );
    };
    let location = sluice_host::pipeline::checkpoint_location(&loaded)?;
    let pipeline = &loaded.config.pipeline;
    let storage = open_storage(&location, &section.s3, &pipeline.tenant, &pipeline.name)?;
    let config = &loaded.config;
    let transactional = section.mode == CheckpointMode::ExactlyOnce
        && std::iter::once(&config.sink)
            .chain(config.side_outputs.values())
            .chain(std::iter::once(&config.dead_letter))
            .any(|sink| {
                matches!(sink, SinkConfig::Kafka(kafka) if kafka.delivery != Some(Delivery::AtLeastOnce))
            });
    Ok((CheckpointStore::new(storage), transactional))
}

/// A checkpoint named on the command line: an id, or a manifest's URI or
/// path (`.../manifests/00000000000000000042.json`).
pub fn parse_checkpoint_ref(text: &str) -> Result<u64> {
    if let Ok(id) = text.parse::<u64>() {
        return Ok(id);
    }
    let name = text.rsplit('/').next().unwrap_or(text);
    name.strip_suffix(".json")
        .and_then(|stem| stem.parse::<u64>().ok())
        .with_context(|| {
            format!(
                "--from-checkpoint {text}: expected an id or a manifest URI ending in <id>.json"
            )
        })
}

/// The table (or JSON lines) `sluice checkpoints list` prints: a scaled-out
/// pipeline's tasks, or a pipeline's checkpoints.
pub fn list(file: &Path, json: bool) -> Result<String> {
    let loaded = LoadedConfig::load(file)?;
    if matches!(&loaded.config.source, SourceConfig::Kafka(kafka) if kafka.scale_out) {
        return list_tasks(&loaded, json);
    }
    let (store, transactional) = store(file)?;
    let completed = store.completed()?;
    let restart = store.choose(&RestoreFrom::Latest, &[])?.map(|m| m.id);
    let storage = store.storage().describe();
    let mut out = String::new();
    if json {
        for manifest in &completed {
            let line = serde_json::json!({
                "id": manifest.id,
                "timestamp_ms": manifest.timestamp_ms,
                "parent": manifest.parent,
                "state_bytes": manifest.stats.state_bytes,
                "uploaded_bytes": manifest.stats.uploaded_bytes,
                "sync_ms": manifest.stats.sync_ms,
                "total_ms": manifest.stats.total_ms,
                "restart": restart == Some(manifest.id),
                "uri": format!("{storage}/manifests/{:020}.json", manifest.id),
            });
            let _ = writeln!(out, "{line}");
        }
        return Ok(out);
    }
    let _ = writeln!(out, "checkpoints in {storage}");
    let _ = writeln!(
        out,
        "{:>8}  {:<24}  {:>8}  {:>14}  {:>14}  {:>9}  {:>9}",
        "id", "time (UTC)", "parent", "state bytes", "uploaded", "sync ms", "total ms"
    );
    for manifest in &completed {
        let _ = writeln!(
            out,
            "{:>8}  {:<24}  {:>8}  {:>14}  {:>14}  {:>9.1}  {:>9.1}{}",
            manifest.id,
            utc(manifest.timestamp_ms),
            manifest.parent.map_or("-".to_string(), |p| p.to_string()),
            manifest.stats.state_bytes,
            manifest.stats.uploaded_bytes,
            manifest.stats.sync_ms,
            manifest.stats.total_ms,
            match (restart == Some(manifest.id), transactional) {
                (true, false) => "  <- a restart restores this one",
                // Reading the progress topic here could block on (or,
                // to unblock it, fence) a running pipeline's transaction.
                (true, true) => {
                    "  <- a restart restores this one, or its parent if its Kafka transaction did not commit"
                }
                (false, _) => "",
            }
        );
    }
    if completed.is_empty() {
        let _ = writeln!(out, "(none: a run starts from the beginning)");
    }
    Ok(out)
}

/// The tasks of a scaled-out pipeline (ADR 0020), each with its latest
/// checkpoint and the process open that wrote it (the task's owner then).
fn list_tasks(loaded: &LoadedConfig, json: bool) -> Result<String> {
    let Some(section) = &loaded.config.checkpoints else {
        bail!("the pipeline has no [checkpoints] section");
    };
    let location = sluice_host::pipeline::checkpoint_location(loaded)?;
    let pipeline = &loaded.config.pipeline;
    let root = open_storage(&location, &section.s3, &pipeline.tenant, &pipeline.name)?;
    let mut tasks: Vec<String> = root
        .list("tasks/")?
        .iter()
        .filter_map(|key| {
            let rest = key.strip_prefix("tasks/")?;
            let (task, tail) = rest.split_once('/')?;
            tail.starts_with("manifests/").then(|| task.to_string())
        })
        .collect();
    tasks.sort_by_key(|task| {
        let (stage, index) = task.split_once('-').unwrap_or((task, "0"));
        (
            stage.parse::<u32>().unwrap_or(0),
            index.parse::<i32>().unwrap_or(0),
        )
    });
    tasks.dedup();
    let now = sluice_host::time::now_ms();
    let mut out = String::new();
    if !json {
        let _ = writeln!(out, "tasks of {}", root.describe());
        let _ = writeln!(
            out,
            "{:>6}  {:>8}  {:<24}  {:>8}  {:>14}  {:<34}",
            "task", "latest", "time (UTC)", "age s", "state bytes", "written by (process open)"
        );
    }
    for task in &tasks {
        let storage = open_storage(
            &location,
            &section.s3,
            &pipeline.tenant,
            &format!("{}/tasks/{task}", pipeline.name),
        )?;
        let completed = CheckpointStore::new(storage).completed()?;
        let Some(latest) = completed.last() else {
            continue;
        };
        let age = (now - latest.timestamp_ms) as f64 / 1000.0;
        if json {
            let line = serde_json::json!({
                "task": task,
                "latest": latest.id,
                "timestamp_ms": latest.timestamp_ms,
                "state_bytes": latest.stats.state_bytes,
                "open_id": latest.open_id,
                "retained": completed.len(),
            });
            let _ = writeln!(out, "{line}");
        } else {
            let _ = writeln!(
                out,
                "{:>6}  {:>8}  {:<24}  {:>8.1}  {:>14}  {:<34}",
                task,
                latest.id,
                utc(latest.timestamp_ms),
                age,
                latest.stats.state_bytes,
                latest.open_id
            );
        }
    }
    if tasks.is_empty() && !json {
        let _ = writeln!(out, "(none: every task starts from the beginning)");
    }
    Ok(out)
}

/// One manifest, as JSON.
pub fn show(file: &Path, id: Option<u64>) -> Result<String> {
    let (store, _) = store(file)?;
    let manifest: Manifest = match id {
        Some(id) => store.read(id)?,
        None => store
            .completed()?
            .pop()
            .context("the pipeline has no completed checkpoint")?,
    };
    Ok(format!(
        "{}\n",
        String::from_utf8_lossy(&manifest.to_bytes())
    ))
}

/// `ms` since the epoch as `YYYY-MM-DD HH:MM:SS.mmm` (UTC).
fn utc(ms: i64) -> String {
    let seconds = ms.div_euclid(1000);
    let days = seconds.div_euclid(86_400);
    let in_day = seconds.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03}",
        in_day / 3600,
        in_day % 3600 / 60,
        in_day % 60,
        ms.rem_euclid(1000)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_references_and_times() {
        assert_eq!(parse_checkpoint_ref("42").unwrap(), 42);
        assert_eq!(
            parse_checkpoint_ref("s3://b/p/t/pipe/manifests/00000000000000000007.json").unwrap(),
            7
        );
        assert!(parse_checkpoint_ref("latest").is_err());
        assert_eq!(utc(0), "1970-01-01 00:00:00.000");
        assert_eq!(utc(1_700_000_000_123), "2023-11-14 22:13:20.123");
    }
}
