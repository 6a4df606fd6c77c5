//! What a tenant's pipeline file must be before `sluice serve` runs it, and
//! how it is made so.
//!
//! * `[pipeline] name` names the pipeline (letters, digits, `-`, `_`);
//!   `tenant` is the caller's (set if absent, refused if another).
//! * Plugins are uploaded components, referenced as `sha256:<hex>`; they
//!   are linked into the pipeline's directory. A tenant cannot name a file
//!   of the host.
//! * Every other path (files, catalogs, warehouses, schemas, checkpoint
//!   storage, state) must be relative and stay inside the pipeline's
//!   directory: no absolute paths, no `..`. Object-store URLs (`s3://`)
//!   are allowed.
//! * Without `[checkpoints]`, one is added (every 10 s, exactly-once), so
//!   that the pipeline survives a restart of the server; without
//!   `state_dir`, state lives in the pipeline's directory; without
//!   `[dead_letter]`, dead letters go to `dead-letters.jsonl` in it (not to
//!   the server's standard error).
//!
//! What the file may reach beyond its directory (Kafka, S3, catalogs,
//! registries, client properties) is [`super::policy`]'s to check.

use std::path::{Component, Path};
use toml_edit::{DocumentMut, Item, Value};

/// Keys whose string values are paths (or URLs) wherever they appear.
const PATH_KEYS: [&str; 8] = [
    "path",
    "sql_file",
    "plugin",
    "catalog",
    "warehouse",
    "avro_schema",
    "storage",
    "state_dir",
];

/// A pipeline file made ready to run for a tenant.
#[derive(Debug)]
pub struct Admitted {
    /// The pipeline's name.
    pub name: String,
    /// The file's text, as it will be stored and run.
    pub text: String,
    /// The digests of the plugins it uses.
    pub plugins: Vec<String>,
}

/// Checks `text` for `tenant` and rewrites it (see the module docs); the
/// error says what is wrong, for a 400 answer.
pub fn admit(text: &str, tenant: &str) -> Result<Admitted, String> {
    let mut document: DocumentMut = text
        .parse()
        .map_err(|e| format!("the pipeline file is not valid TOML: {e}"))?;
    let pipeline = document
        .get_mut("pipeline")
        .and_then(Item::as_table_like_mut)
        .ok_or("the pipeline file has no [pipeline] table")?;
    let name = pipeline
        .get("name")
        .and_then(Item::as_str)
        .ok_or("[pipeline] needs a `name`")?
        .to_string();
    if !valid_name(&name) {
        return Err(format!(
            "pipeline name `{name}`: use 1 to 63 letters, digits, `-` or `_`, starting with a letter or digit"
        ));
    }
    match pipeline.get("tenant").and_then(Item::as_str) {
        Some(other) if other != tenant => {
            return Err(format!(
                "[pipeline] tenant is `{other}`, but the caller is tenant `{tenant}`"
            ));
        }
        _ => {
            pipeline.insert("tenant", toml_edit::value(tenant));
        }
    }
    if pipeline.get("state_dir").is_none() {
        pipeline.insert("state_dir", toml_edit::value("state"));
    }
    if document.get("checkpoints").is_none() {
        let mut checkpoints = toml_edit::Table::new();
        checkpoints.insert("storage", toml_edit::value("checkpoints"));
        checkpoints.insert("interval_ms", toml_edit::value(10_000));
        checkpoints.insert("mode", toml_edit::value("exactly-once"));
        document.insert("checkpoints", Item::Table(checkpoints));
    }
    add_default_dead_letter(&mut document);
    let mut plugins = Vec::new();
    let mut problems = Vec::new();
    rewrite_paths(document.as_item_mut(), "", &mut plugins, &mut problems);
    if let Some(problem) = problems.into_iter().next() {
        return Err(problem);
    }
    Ok(Admitted {
        name,
        text: document.to_string(),
        plugins,
    })
}

/// Without `[dead_letter]`, dead letters go to `dead-letters.jsonl` in
/// the pipeline's directory (the default, the server's standard error, is
/// not a tenant's); whether it was added.
fn add_default_dead_letter(document: &mut DocumentMut) -> bool {
    if document.get("dead_letter").is_some() {
        return false;
    }
    let mut file = toml_edit::Table::new();
    file.insert("path", toml_edit::value("dead-letters.jsonl"));
    file.insert("format", toml_edit::value("record"));
    let mut dead_letter = toml_edit::Table::new();
    dead_letter.set_implicit(true);
    dead_letter.insert("file", Item::Table(file));
    document.insert("dead_letter", Item::Table(dead_letter));
    true
}

/// A stored pipeline file brought up to what admission does now (a file
/// admitted before dead letters had a default of their own); `None` if it
/// needs nothing, or is not TOML (its start will say why).
pub fn upgrade(text: &str) -> Option<String> {
    let mut document: DocumentMut = text.parse().ok()?;
    add_default_dead_letter(&mut document).then(|| document.to_string())
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
}

/// Walks `item`, checking every path value and turning `plugin =
/// "sha256:<hex>"` into `plugins/<hex>.wasm`.
fn rewrite_paths(item: &mut Item, at: &str, plugins: &mut Vec<String>, problems: &mut Vec<String>) {
    match item {
        Item::Table(table) => {
            for (key, child) in table.iter_mut() {
                let here = join(at, &key);
                check_value_item(&key, child, &here, plugins, problems);
            }
        }
        Item::ArrayOfTables(array) => {
            for (index, table) in array.iter_mut().enumerate() {
                let here = format!("{at}[{index}]");
                for (key, child) in table.iter_mut() {
                    let inner = join(&here, &key);
                    check_value_item(&key, child, &inner, plugins, problems);
                }
            }
        }
        Item::Value(value) => rewrite_value(value, at, plugins, problems),
        Item::None => {}
    }
}

fn check_value_item(
    key: &str,
    item: &mut Item,
    at: &str,
    plugins: &mut Vec<String>,
    problems: &mut Vec<String>,
) {
    match item.as_value_mut() {
        Some(value) => check_value(key, value, at, plugins, problems),
        None => rewrite_paths(item, at, plugins, problems),
    }
}

/// Checks `value` (of `key`, at `at`): a path value is checked (and a
/// plugin digest rewritten and recorded); inline tables and arrays are
/// walked.
fn check_value(
    key: &str,
    value: &mut Value,
    at: &str,
    plugins: &mut Vec<String>,
    problems: &mut Vec<String>,
) {
    if PATH_KEYS.contains(&key)
        && let Some(text) = value.as_str()
    {
        match check_path(key, text) {
            Ok(Some(rewritten)) => {
                if let Some(digest) = text.strip_prefix("sha256:") {
                    plugins.push(digest.to_string());
                }
                *value = Value::from(rewritten);
            }
            Ok(None) => {}
            Err(why) => problems.push(format!("field `{at}`: {why}")),
        }
        return;
    }
    rewrite_value(value, at, plugins, problems);
}

fn rewrite_value(
    value: &mut Value,
    at: &str,
    plugins: &mut Vec<String>,
    problems: &mut Vec<String>,
) {
    match value {
        Value::InlineTable(table) => {
            for (key, child) in table.iter_mut() {
                let here = join(at, &key);
                check_value(&key, child, &here, plugins, problems);
            }
        }
        Value::Array(array) => {
            for (index, child) in array.iter_mut().enumerate() {
                rewrite_value(child, &format!("{at}[{index}]"), plugins, problems);
            }
        }
        _ => {}
    }
}

fn join(at: &str, key: &str) -> String {
    match at.is_empty() {
        true => key.to_string(),
        false => format!("{at}.{key}"),
    }
}

/// `Ok(None)`: allowed as it is; `Ok(Some(new))`: allowed as `new`.
fn check_path(key: &str, text: &str) -> Result<Option<String>, String> {
    if key == "plugin" {
        let digest = text.strip_prefix("sha256:").ok_or(
            "plugins must be uploaded components named `sha256:<hex>` (`sluice deploy` uploads them)",
        )?;
        if digest.len() != 64 || !digest.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(format!("`{text}` is not a sha256 digest"));
        }
        return Ok(Some(format!("plugins/{digest}.wasm")));
    }
    if text.starts_with("s3://") {
        return Ok(None);
    }
    if text.contains("://") {
        return Err(format!(
            "`{text}`: only relative paths and s3:// URLs are allowed here"
        ));
    }
    let path = Path::new(text);
    if path
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "`{text}`: paths must be relative and stay inside the pipeline's directory"
        ));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_pipeline_is_scoped_to_its_tenant_and_its_directory() {
        let text = format!(
            "[pipeline]\nname = \"orders\"\n[source.file]\npath = \"in.jsonl\"\n[[operators]]\nname = \"a\"\nplugin = \"sha256:{DIGEST}\"\n[sink.file]\npath = \"out/x.jsonl\"\n"
        );
        let admitted = admit(&text, "team-a").unwrap();
        assert_eq!(admitted.name, "orders");
        assert_eq!(admitted.plugins, vec![DIGEST.to_string()]);
        let parsed: toml::Value = toml::from_str(&admitted.text).unwrap();
        assert_eq!(parsed["pipeline"]["tenant"].as_str(), Some("team-a"));
        assert_eq!(parsed["pipeline"]["state_dir"].as_str(), Some("state"));
        assert_eq!(
            parsed["operators"][0]["plugin"].as_str(),
            Some(format!("plugins/{DIGEST}.wasm").as_str())
        );
        assert_eq!(parsed["checkpoints"]["mode"].as_str(), Some("exactly-once"));
        assert_eq!(
            parsed["dead_letter"]["file"]["path"].as_str(),
            Some("dead-letters.jsonl")
        );
    }

    #[test]
    fn host_paths_other_tenants_and_local_plugins_are_refused() {
        let base = "[pipeline]\nname = \"p\"\n[source.file]\npath = \"in.jsonl\"\n";
        for (extra, expected) in [
            ("[sink.file]\npath = \"/etc/passwd\"\n", "sink.file.path"),
            ("[sink.file]\npath = \"../../other/out\"\n", "stay inside"),
            (
                "[[operators]]\nname = \"a\"\nplugin = \"../plugins/x\"\n",
                "uploaded components",
            ),
            (
                "[sink.iceberg]\ncatalog = \"/tmp/c.db\"\nwarehouse = \"w\"\nnamespace = \"n\"\ntable = \"t\"\n",
                "sink.iceberg.catalog",
            ),
            (
                "[checkpoints]\nstorage = \"file:///var/lib\"\n[sink.stdout]\n",
                "only relative paths",
            ),
        ] {
            let error = admit(&format!("{base}{extra}"), "a").unwrap_err();
            assert!(error.contains(expected), "{extra}: {error}");
        }
        let other = admit("[pipeline]\nname = \"p\"\ntenant = \"b\"\n", "a").unwrap_err();
        assert!(other.contains("caller is tenant `a`"), "{other}");
        assert!(admit("[pipeline]\nname = \"../x\"\n", "a").is_err());
    }

    #[test]
    fn a_stored_file_without_dead_letters_is_upgraded_once() {
        let stored = "[pipeline]\nname = \"p\"\n[source.file]\npath = \"in.jsonl\"\n";
        let upgraded = upgrade(stored).expect("a file without dead letters is upgraded");
        let parsed: toml::Value = toml::from_str(&upgraded).unwrap();
        assert_eq!(
            parsed["dead_letter"]["file"]["path"].as_str(),
            Some("dead-letters.jsonl")
        );
        assert_eq!(upgrade(&upgraded), None, "once");
    }
}
