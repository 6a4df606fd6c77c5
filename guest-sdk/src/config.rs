//! The operator's `config` table, as handed to [`crate::Transform::init`].

use std::collections::BTreeMap;
use std::str::FromStr;

/// Configuration values from the pipeline file (`config = { ... }` of the
/// operator), all as strings.
#[derive(Debug, Clone, Default)]
pub struct Config {
    values: BTreeMap<String, String>,
}

impl Config {
    /// Builds a config from key/value pairs.
    pub fn from_pairs(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        Config {
            values: pairs.into_iter().collect(),
        }
    }

    /// The raw value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// The value of `key`, or an error naming the missing key.
    pub fn require(&self, key: &str) -> Result<&str, String> {
        self.get(key)
            .ok_or_else(|| format!("missing config key `{key}`"))
    }

    /// Parses `key` as `T`, or returns `default` when the key is absent.
    pub fn parse_or<T: FromStr>(&self, key: &str, default: T) -> Result<T, String>
    where
        T::Err: std::fmt::Display,
    {
        match self.get(key) {
            None => Ok(default),
            Some(raw) => raw
                .parse()
                .map_err(|e| format!("config key `{key}`: cannot parse {raw:?}: {e}")),
        }
    }

    /// Splits a comma-separated value of `key` into trimmed, non-empty items.
    pub fn list(&self, key: &str) -> Vec<&str> {
        self.get(key)
            .map(|raw| {
                raw.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// All keys and values, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}
