//! Values a pipeline must use but nobody may read back: credentials that
//! `sluice serve` grants a tenant's pipeline in memory (never from its
//! file). `Debug` prints no secret, so neither a log line nor an error
//! message built from a configuration can carry one.

use std::collections::BTreeMap;

/// A secret string (a token, a password, a secret key).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<secret>")
    }
}

/// Client properties whose values are secrets (a Kafka cluster's SASL
/// settings, a catalog's token): names are shown, values are not.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretMap(BTreeMap<String, Secret>);

impl SecretMap {
    /// Adds (or replaces) `name`.
    pub fn insert(&mut self, name: impl Into<String>, value: Secret) {
        self.0.insert(name.into(), value);
    }

    /// Whether there is nothing in it.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The names and values, for the client that must use them.
    pub fn exposed(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.0
            .iter()
            .map(|(name, value)| (name.clone(), value.expose().to_string()))
    }

    /// `properties` with these added over them (what a client is given).
    pub fn over(&self, properties: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        let mut merged = properties.clone();
        merged.extend(self.exposed());
        merged
    }
}

impl std::fmt::Debug for SecretMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|name| (name, "<secret>")))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_names_but_never_values() {
        let mut map = SecretMap::default();
        map.insert("sasl.password", Secret::new("hunter2"));
        let shown = format!("{map:?} {:?}", Secret::new("hunter2"));
        assert!(shown.contains("sasl.password"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
        let merged = map.over(&BTreeMap::from([("linger.ms".into(), "5".into())]));
        assert_eq!(merged["sasl.password"], "hunter2");
        assert_eq!(merged["linger.ms"], "5");
    }
}
