//! Data files a crash left behind: written by this sink for an epoch whose
//! checkpoint never completed, so no snapshot will ever reference them.
//!
//! On restore, once the restored checkpoint is committed, every data file
//! of this sink (its names carry the sink's tag, so other writers' files
//! are never touched) that no snapshot of the table references is deleted,
//! and each one is logged. Files are found by listing the table's `data/`
//! directory: a directory walk for a local warehouse, a `ListObjectsV2` for
//! S3 (iceberg's `FileIO` has no listing).

use crate::checkpoint::CheckpointStorage as _;
use crate::checkpoint::s3::{S3Options, S3Storage};
use iceberg::io::FileIO;
use iceberg::spec::ManifestList;
use iceberg::table::Table;
use std::collections::HashSet;

/// Every data file path the table's snapshots reference (all of them, not
/// only the current one: time travel must keep working).
pub(super) async fn referenced_files(table: &Table) -> iceberg::Result<HashSet<String>> {
    let metadata = table.metadata();
    let file_io = table.file_io();
    let mut manifests = HashSet::new();
    let mut files = HashSet::new();
    for snapshot in metadata.snapshots() {
        let list = read(file_io, snapshot.manifest_list()).await?;
        let list = ManifestList::parse_with_version(&list, metadata.format_version())?;
        for manifest_file in list.entries() {
            if !manifests.insert(manifest_file.manifest_path.clone()) {
                continue;
            }
            let manifest = manifest_file.load_manifest(file_io).await?;
            for entry in manifest.entries() {
                files.insert(normalize(entry.data_file().file_path()));
            }
        }
    }
    Ok(files)
}

async fn read(file_io: &FileIO, path: &str) -> iceberg::Result<bytes::Bytes> {
    file_io.new_input(path)?.read().await
}

/// The files under `location` (a table's `data` directory: `file://`, a
/// plain path or `s3://`) whose names start with `name_prefix`, as
/// normalized paths.
pub(super) fn list_files(
    location: &str,
    name_prefix: &str,
    s3: &S3Options,
) -> Result<Vec<String>, String> {
    let has_prefix = |path: &str| {
        path.rsplit('/')
            .next()
            .is_some_and(|name| name.starts_with(name_prefix))
    };
    if let Some(rest) = location.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let storage = S3Storage::connect(bucket, prefix.trim_end_matches('/'), s3)
            .map_err(|e| e.to_string())?;
        let keys = storage.list("").map_err(|e| e.to_string())?;
        return Ok(keys
            .into_iter()
            .filter(|key| has_prefix(key))
            .map(|key| {
                normalize(&format!(
                    "s3://{bucket}/{}/{key}",
                    prefix.trim_end_matches('/')
                ))
            })
            .collect());
    }
    let root = std::path::PathBuf::from(normalize(location));
    let mut found = Vec::new();
    let mut pending = vec![root];
    while let Some(dir) = pending.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            // Nothing written yet.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(format!("cannot list {}: {error}", dir.display())),
        };
        for entry in entries {
            let path = entry
                .map_err(|error| format!("cannot list {}: {error}", dir.display()))?
                .path();
            if path.is_dir() {
                pending.push(path);
            } else if let Some(text) = path.to_str()
                && has_prefix(text)
            {
                found.push(text.to_string());
            }
        }
    }
    found.sort();
    Ok(found)
}

/// A path as comparable text: `file:` schemes dropped (iceberg writes
/// `file:///a`, `file:/a` or `/a` depending on the writer).
pub(super) fn normalize(path: &str) -> String {
    if let Some(rest) = path.strip_prefix("file://") {
        return rest.to_string();
    }
    if let Some(rest) = path.strip_prefix("file:") {
        return rest.to_string();
    }
    path.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_compare_without_their_file_scheme() {
        assert_eq!(normalize("file:///tmp/a.parquet"), "/tmp/a.parquet");
        assert_eq!(normalize("file:/tmp/a.parquet"), "/tmp/a.parquet");
        assert_eq!(normalize("/tmp/a.parquet"), "/tmp/a.parquet");
        assert_eq!(normalize("s3://b/k.parquet"), "s3://b/k.parquet");
    }

    #[test]
    fn only_files_with_the_prefix_are_listed_in_every_directory() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("data/day=2024-01-01");
        std::fs::create_dir_all(&nested).unwrap();
        std::fs::write(nested.join("sluice-abc-1.parquet"), b"x").unwrap();
        std::fs::write(nested.join("other-1.parquet"), b"x").unwrap();
        std::fs::write(dir.path().join("data/sluice-abc-2.parquet"), b"x").unwrap();
        let location = format!("file://{}/data", dir.path().display());
        let found = list_files(&location, "sluice-abc-", &S3Options::default()).unwrap();
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found.iter().all(|f| f.contains("sluice-abc-")));
        let missing = format!("file://{}/none", dir.path().display());
        assert!(
            list_files(&missing, "sluice-", &S3Options::default())
                .unwrap()
                .is_empty()
        );
    }
}
