//! What a tenant's pipelines may reach outside the server, as the admin
//! grants it with the tenant (`POST /api/v1/tenants`, `PATCH
//! /api/v1/tenants/{name}`, `sluice tenants create|update`): S3 prefixes,
//! Kafka clusters with topic and group prefixes, Iceberg REST catalogs and
//! schema registries. [`super::policy`] holds each pipeline file to it.
//!
//! Credentials that come with a grant (a tenant's own S3 key, a cluster's
//! SASL settings, a catalog's token) are [`Sealed`]: AES-256-GCM under the
//! key in `SLUICE_SECRET_KEY` when stored in `auth.json`, plain only in
//! memory, never in an API answer (answers show [`TenantReach::shown`]).

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};
use sluice_host::connectors::{Secret, SecretMap};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The environment variable holding the key that seals stored credentials:
/// 64 hex digits (32 bytes).
pub const SECRET_KEY_VARIABLE: &str = "SLUICE_SECRET_KEY";

/// Everything a tenant's pipelines may reach. Absent parts give nothing,
/// except S3 when the server has a bucket for tenants (`--s3-bucket`):
/// then `s3://<bucket>/tenants/<tenant>/`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TenantReach {
    /// S3 locations (checkpoint storage, Iceberg warehouses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Grant>,
    /// Kafka clusters, topics and consumer groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaGrant>,
    /// Iceberg REST catalogs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub iceberg_catalogs: Vec<CatalogGrant>,
    /// Confluent-compatible schema registries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schema_registries: Vec<RegistryGrant>,
    /// PostgreSQL databases (upsert sinks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub postgres_databases: Vec<DatabaseGrant>,
}

/// S3 a tenant may use.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct S3Grant {
    /// `s3://bucket/prefix/` locations; anything under one is allowed.
    pub prefixes: Vec<String>,
    /// The S3-compatible server these are on (none: AWS, or the server's
    /// own `--s3-endpoint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The tenant's own credentials (none: the server's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<GrantedS3Credentials>,
}

/// A tenant's own S3 access key.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GrantedS3Credentials {
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: Sealed,
    /// A session token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_token: Option<Sealed>,
}

/// Kafka a tenant may use.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KafkaGrant {
    /// The clusters, each with the connection settings the server uses
    /// for it.
    pub clusters: Vec<KafkaClusterGrant>,
    /// Topics the tenant may read and write start with one of these
    /// (default `<tenant>.`); the first is the tenant's home prefix, under
    /// which its progress topics and transactional ids are put.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topic_prefixes: Vec<String>,
    /// Topics the tenant may only read start with one of these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_topic_prefixes: Vec<String>,
    /// Consumer groups start with one of these (default: the topic
    /// prefixes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group_prefixes: Vec<String>,
}

/// A Kafka cluster and how the server connects to it for this tenant.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KafkaClusterGrant {
    /// Its brokers (`host:port` list); a pipeline may name any of them.
    pub bootstrap_servers: String,
    /// librdkafka properties the server adds (`security.protocol`,
    /// `sasl.*`, `ssl.*`): the admin's, any property allowed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, Sealed>,
}

/// An Iceberg REST catalog a tenant may use.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CatalogGrant {
    /// Its base URI, as pipelines name it (`rest.uri`).
    pub uri: String,
    /// Warehouses a pipeline may name (none: only the catalog's default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warehouses: Vec<String>,
    /// Namespaces a pipeline may write: one of these or below it (default:
    /// the tenant's name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Catalog properties the server adds (`token`, `credential`,
    /// `oauth2-server-uri`, `scope`, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, Sealed>,
}

/// A schema registry a tenant may use.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RegistryGrant {
    /// Its base URL, as pipelines name it.
    pub url: String,
    /// A bearer token the server sends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Sealed>,
}

/// A PostgreSQL database a tenant's sinks may write.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DatabaseGrant {
    /// The name pipelines give it (`[sink.postgres] database = "..."`).
    pub name: String,
    /// The URL the server connects with, credentials included.
    pub url: Sealed,
    /// Schemas whose tables a pipeline may write (default: the schema
    /// named after the tenant): `table = "<schema>.<name>"`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schemas: Vec<String>,
}

impl TenantReach {
    /// What an API answer may show: every location, every property's
    /// name, no credential.
    pub fn shown(&self) -> Value {
        fn names(properties: &BTreeMap<String, Sealed>) -> Vec<&String> {
            properties.keys().collect()
        }
        let mut shown = serde_json::Map::new();
        if let Some(s3) = &self.s3 {
            shown.insert(
                "s3".into(),
                json!({
                    "prefixes": s3.prefixes,
                    "endpoint": s3.endpoint,
                    "region": s3.region,
                    "credentials": s3.credentials.as_ref().map(|c| json!({ "access_key_id": c.access_key_id })),
                }),
            );
        }
        if let Some(kafka) = &self.kafka {
            let clusters: Vec<Value> = kafka
                .clusters
                .iter()
                .map(|c| json!({ "bootstrap_servers": c.bootstrap_servers, "properties": names(&c.properties) }))
                .collect();
            shown.insert(
                "kafka".into(),
                json!({
                    "clusters": clusters,
                    "topic_prefixes": kafka.topic_prefixes,
                    "read_topic_prefixes": kafka.read_topic_prefixes,
                    "group_prefixes": kafka.group_prefixes,
                }),
            );
        }
        let catalogs: Vec<Value> = self
            .iceberg_catalogs
            .iter()
            .map(|c| json!({ "uri": c.uri, "warehouses": c.warehouses, "namespaces": c.namespaces, "properties": names(&c.properties) }))
            .collect();
        shown.insert("iceberg_catalogs".into(), Value::Array(catalogs));
        let registries: Vec<Value> = self
            .schema_registries
            .iter()
            .map(|r| json!({ "url": r.url, "token": r.token.is_some() }))
            .collect();
        shown.insert("schema_registries".into(), Value::Array(registries));
        let databases: Vec<Value> = self
            .postgres_databases
            .iter()
            .map(|d| json!({ "name": d.name, "schemas": d.schemas }))
            .collect();
        shown.insert("postgres_databases".into(), Value::Array(databases));
        Value::Object(shown)
    }

    /// Whether any credential is granted (storing one needs the key).
    pub fn has_credentials(&self) -> bool {
        self.s3.as_ref().is_some_and(|s3| s3.credentials.is_some())
            || self
                .kafka
                .as_ref()
                .is_some_and(|kafka| kafka.clusters.iter().any(|c| !c.properties.is_empty()))
            || self
                .iceberg_catalogs
                .iter()
                .any(|c| !c.properties.is_empty())
            || self.schema_registries.iter().any(|r| r.token.is_some())
            || !self.postgres_databases.is_empty()
    }
}

/// `properties` as the secrets a client is given.
pub fn secret_map(properties: &BTreeMap<String, Sealed>) -> SecretMap {
    let mut map = SecretMap::default();
    for (name, value) in properties {
        map.insert(name.clone(), value.0.clone());
    }
    map
}

/// A credential: plain in memory, sealed when serialized. An API request
/// gives it as a plain string; `auth.json` holds `{"sealed": "<hex>"}`
/// (nonce and AES-256-GCM ciphertext under [`SECRET_KEY_VARIABLE`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed(pub Secret);

impl Sealed {
    /// The plain value.
    pub fn secret(&self) -> &Secret {
        &self.0
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SealedForm {
    sealed: String,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum SealedInput {
    Plain(String),
    Sealed(SealedForm),
}

impl Serialize for Sealed {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let sealed = seal(self.0.expose()).map_err(serde::ser::Error::custom)?;
        SealedForm { sealed }.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Sealed {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match SealedInput::deserialize(deserializer)? {
            SealedInput::Plain(text) => Ok(Sealed(Secret::new(text))),
            SealedInput::Sealed(form) => unseal(&form.sealed)
                .map(|text| Sealed(Secret::new(text)))
                .map_err(serde::de::Error::custom),
        }
    }
}

/// Why a credential cannot be sealed or unsealed.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// No key in the environment.
    #[error(
        "credentials are stored encrypted: start the server with {SECRET_KEY_VARIABLE} set to 64 hex digits (e.g. `openssl rand -hex 32`)"
    )]
    NoKey,
    /// The key is not 32 bytes of hex.
    #[error("{SECRET_KEY_VARIABLE} must be 64 hex digits")]
    BadKey,
    /// The stored value does not open with this key.
    #[error("a stored credential does not open with this {SECRET_KEY_VARIABLE} (another key?)")]
    Unreadable,
    /// No randomness for a nonce.
    #[error("no randomness for a nonce")]
    NoRandomness,
}

/// The sealing key, read once from the environment.
fn key() -> Result<&'static Aes256Gcm, SealError> {
    static KEY: OnceLock<Result<Aes256Gcm, SealError>> = OnceLock::new();
    KEY.get_or_init(|| {
        let text = std::env::var(SECRET_KEY_VARIABLE).map_err(|_| SealError::NoKey)?;
        let bytes = hex::decode(text.trim()).map_err(|_| SealError::BadKey)?;
        Aes256Gcm::new_from_slice(&bytes).map_err(|_| SealError::BadKey)
    })
    .as_ref()
    .map_err(|error| match error {
        SealError::NoKey => SealError::NoKey,
        _ => SealError::BadKey,
    })
}

/// Checks that the environment's key, if any, is well formed (at start-up).
pub fn check_key() -> Result<(), SealError> {
    match key() {
        Ok(_) | Err(SealError::NoKey) => Ok(()),
        Err(error) => Err(error),
    }
}

fn seal(plain: &str) -> Result<String, SealError> {
    let cipher = key()?;
    let mut nonce = [0u8; 12];
    getrandom::fill(&mut nonce).map_err(|_| SealError::NoRandomness)?;
    let sealed = cipher
        .encrypt(Nonce::from_slice(&nonce), plain.as_bytes())
        .map_err(|_| SealError::Unreadable)?;
    Ok(format!("{}{}", hex::encode(nonce), hex::encode(sealed)))
}

fn unseal(text: &str) -> Result<String, SealError> {
    let cipher = key()?;
    let bytes = hex::decode(text).map_err(|_| SealError::Unreadable)?;
    if bytes.len() < 12 {
        return Err(SealError::Unreadable);
    }
    let (nonce, sealed) = bytes.split_at(12);
    let plain = cipher
        .decrypt(Nonce::from_slice(nonce), sealed)
        .map_err(|_| SealError::Unreadable)?;
    String::from_utf8(plain).map_err(|_| SealError::Unreadable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_sealed_when_stored_and_never_shown() {
        // The key is the process's; every test of this binary that seals
        // sets the same one.
        // SAFETY: set before any thread of this test reads it; other tests
        // set the same value.
        unsafe { std::env::set_var(SECRET_KEY_VARIABLE, "11".repeat(32)) };
        let reach: TenantReach = serde_json::from_value(json!({
            "s3": { "prefixes": ["s3://b/t/"], "credentials": { "access_key_id": "AKIA1", "secret_access_key": "s3-secret-xyz" } },
            "kafka": { "clusters": [{ "bootstrap_servers": "k:9092", "properties": { "sasl.password": "kafka-secret-xyz" } }] },
            "schema_registries": [{ "url": "http://r", "token": "registry-secret-xyz" }]
        }))
        .unwrap();
        let stored = serde_json::to_string(&reach).unwrap();
        let shown = reach.shown().to_string();
        for secret in ["s3-secret-xyz", "kafka-secret-xyz", "registry-secret-xyz"] {
            assert!(
                !stored.contains(secret),
                "{secret} stored in clear: {stored}"
            );
            assert!(!shown.contains(secret), "{secret} shown: {shown}");
            assert!(!format!("{reach:?}").contains(secret), "{secret} in Debug");
        }
        assert!(
            shown.contains("sasl.password") && shown.contains("AKIA1"),
            "{shown}"
        );
        let again: TenantReach = serde_json::from_str(&stored).unwrap();
        assert_eq!(again, reach, "sealed values open again");
        let tampered = stored.replacen("\"sealed\":\"", "\"sealed\":\"00", 1);
        assert!(serde_json::from_str::<TenantReach>(&tampered).is_err());
    }
}
