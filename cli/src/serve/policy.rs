//! What a tenant's pipeline file may name, beyond its paths
//! ([`super::admission`]): every field that reaches native code, the
//! network or credentials is held to the tenant's [`TenantReach`], and
//! what the admin granted (connection settings, credentials) is filled in
//! here, in memory, never in the stored file.
//!
//! * Kafka client properties: only [`TENANT_KAFKA_PROPERTIES`] (tuning,
//!   within bounds). Anything else, `plugin.library.paths` (which makes
//!   librdkafka `dlopen` a library in the server), `sasl.kerberos.kinit.cmd`
//!   (a shell command), `ssl.*.location` (server files), `debug`, ... is
//!   refused, naming the property. `sluice run` passes properties through
//!   untouched: there the file's author owns the machine.
//! * Kafka clusters, topics (read and write), consumer groups, progress
//!   topics and transactional ids: within the tenant's grant; the progress
//!   topic and transactional ids default to its home prefix.
//! * S3 (checkpoint storage, Iceberg warehouses): within the tenant's
//!   prefixes, on the granted endpoint, with the granted credentials.
//! * Iceberg REST catalogs and schema registries: granted URLs only; no
//!   free-form catalog property; no `*_env` field (those read the server's
//!   environment).
//! * PostgreSQL: a granted database by name (never a URL), tables in the
//!   grant's schemas (default: the one named after the tenant).
//! * The server's standard output and error are not a tenant's sink.
//!
//! The same check runs when a pipeline is created, when a plugin is
//! swapped, and each time the pipeline starts (so a narrowed grant stops
//! a pipeline that no longer fits).

use super::reach::{TenantReach, secret_map};
use sluice_host::checkpoint::{S3Credentials, S3Options};
use sluice_host::config::{ConfigError, LoadedConfig, PipelineConfig, SinkConfig, SourceConfig};
use sluice_host::connectors::iceberg::IcebergSinkConfig;
use sluice_host::connectors::postgres::PostgresSinkConfig;
use sluice_host::connectors::schema_registry::SchemaRegistryConfig;
use std::collections::BTreeMap;

/// Server-wide settings the policy needs.
#[derive(Debug, Clone, Default)]
pub struct ServerReach {
    /// A bucket for tenants: each gets `s3://<bucket>/tenants/<tenant>/`
    /// unless the admin grants other S3.
    pub s3_bucket: Option<String>,
    /// The S3 endpoint of that bucket (none: AWS).
    pub s3_endpoint: Option<String>,
}

/// The values a tenant's Kafka client property may take.
#[derive(Debug, Clone, Copy)]
pub enum Allowed {
    /// An integer in this range.
    Integer(i64, i64),
    /// One of these words.
    OneOf(&'static [&'static str]),
}

const SECOND: i64 = 1_000;
const MIB: i64 = 1 << 20;

/// The librdkafka properties a tenant may set: tuning only, bounded so
/// that one tenant's clients cannot take the server's memory.
pub const TENANT_KAFKA_PROPERTIES: &[(&str, Allowed)] = &[
    // Consumer fetching.
    ("fetch.min.bytes", Allowed::Integer(1, 64 * MIB)),
    ("fetch.max.bytes", Allowed::Integer(1, 256 * MIB)),
    ("fetch.wait.max.ms", Allowed::Integer(0, 60 * SECOND)),
    ("max.partition.fetch.bytes", Allowed::Integer(1, 64 * MIB)),
    ("fetch.message.max.bytes", Allowed::Integer(1, 64 * MIB)),
    ("queued.min.messages", Allowed::Integer(1, 1_000_000)),
    (
        "queued.max.messages.kbytes",
        Allowed::Integer(1, 256 * 1024),
    ),
    ("session.timeout.ms", Allowed::Integer(SECOND, 300 * SECOND)),
    ("heartbeat.interval.ms", Allowed::Integer(100, 60 * SECOND)),
    (
        "max.poll.interval.ms",
        Allowed::Integer(SECOND, 3_600 * SECOND),
    ),
    (
        "partition.assignment.strategy",
        Allowed::OneOf(&["range", "roundrobin", "cooperative-sticky"]),
    ),
    ("check.crcs", Allowed::OneOf(&["true", "false"])),
    // Producer batching and compression.
    ("linger.ms", Allowed::Integer(0, 60 * SECOND)),
    ("queue.buffering.max.ms", Allowed::Integer(0, 60 * SECOND)),
    ("batch.size", Allowed::Integer(1, 64 * MIB)),
    ("batch.num.messages", Allowed::Integer(1, 1_000_000)),
    (
        "queue.buffering.max.messages",
        Allowed::Integer(1, 2_000_000),
    ),
    (
        "queue.buffering.max.kbytes",
        Allowed::Integer(1, 256 * 1024),
    ),
    (
        "compression.type",
        Allowed::OneOf(&["none", "gzip", "snappy", "lz4", "zstd"]),
    ),
    (
        "compression.codec",
        Allowed::OneOf(&["none", "gzip", "snappy", "lz4", "zstd"]),
    ),
    ("compression.level", Allowed::Integer(-1, 12)),
    ("message.max.bytes", Allowed::Integer(1_000, 64 * MIB)),
    (
        "sticky.partitioning.linger.ms",
        Allowed::Integer(0, 60 * SECOND),
    ),
    (
        "partitioner",
        Allowed::OneOf(&[
            "random",
            "consistent",
            "consistent_random",
            "murmur2",
            "murmur2_random",
            "fnv1a",
            "fnv1a_random",
        ]),
    ),
    // Timeouts and retries.
    ("request.timeout.ms", Allowed::Integer(SECOND, 900 * SECOND)),
    ("message.timeout.ms", Allowed::Integer(0, 900 * SECOND)),
    ("delivery.timeout.ms", Allowed::Integer(0, 900 * SECOND)),
    ("socket.timeout.ms", Allowed::Integer(SECOND, 300 * SECOND)),
    ("retries", Allowed::Integer(0, 1_000_000)),
    ("retry.backoff.ms", Allowed::Integer(1, 60 * SECOND)),
    ("retry.backoff.max.ms", Allowed::Integer(1, 300 * SECOND)),
    ("reconnect.backoff.ms", Allowed::Integer(0, 60 * SECOND)),
    (
        "reconnect.backoff.max.ms",
        Allowed::Integer(SECOND, 300 * SECOND),
    ),
    (
        "metadata.max.age.ms",
        Allowed::Integer(SECOND, 3_600 * SECOND),
    ),
    (
        "topic.metadata.refresh.interval.ms",
        Allowed::Integer(-1, 3_600 * SECOND),
    ),
];

/// A refusal: the field (dotted path) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The field, e.g. `source.kafka.properties."plugin.library.paths"`.
    pub field: String,
    /// Why.
    pub message: String,
}

fn refuse<T>(field: impl Into<String>, message: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal {
        field: field.into(),
        message: message.into(),
    })
}

/// Holds `loaded` to `tenant`'s reach and fills in what the admin granted
/// (cluster properties, credentials, tokens, the default progress topic
/// and transactional id prefix); the error is located in the file.
pub fn apply(
    loaded: &mut LoadedConfig,
    tenant: &str,
    reach: &TenantReach,
    server: &ServerReach,
) -> Result<(), ConfigError> {
    let grants = Grants::of(tenant, reach, server);
    let outcome = grants.apply(&mut loaded.config);
    outcome.map_err(|refusal| {
        loaded.error_at(
            &refusal.field,
            format!("{} (sluice serve, tenant `{tenant}`)", refusal.message),
        )
    })
}

/// A tenant's reach with its defaults filled in.
struct Grants<'a> {
    tenant: &'a str,
    reach: &'a TenantReach,
    s3_prefixes: Vec<String>,
    s3_endpoint: Option<String>,
    s3_region: Option<String>,
    s3_credentials: Option<S3Credentials>,
    topic_prefixes: Vec<String>,
    group_prefixes: Vec<String>,
}

impl<'a> Grants<'a> {
    fn of(tenant: &'a str, reach: &'a TenantReach, server: &ServerReach) -> Self {
        let (s3_prefixes, s3_endpoint, s3_region, s3_credentials) =
            match (&reach.s3, &server.s3_bucket) {
                (Some(s3), _) => (
                    s3.prefixes.iter().map(|p| with_slash(p)).collect(),
                    s3.endpoint.clone().or_else(|| server.s3_endpoint.clone()),
                    s3.region.clone(),
                    s3.credentials.as_ref().map(|c| S3Credentials {
                        access_key_id: c.access_key_id.clone(),
                        secret_access_key: c.secret_access_key.secret().expose().to_string(),
                        session_token: c
                            .session_token
                            .as_ref()
                            .map(|t| t.secret().expose().to_string()),
                    }),
                ),
                (None, Some(bucket)) => (
                    vec![format!("s3://{bucket}/tenants/{tenant}/")],
                    server.s3_endpoint.clone(),
                    None,
                    None,
                ),
                (None, None) => (Vec::new(), None, None, None),
            };
        let kafka = reach.kafka.as_ref();
        let topic_prefixes = match kafka.map(|k| k.topic_prefixes.clone()) {
            Some(prefixes) if !prefixes.is_empty() => prefixes,
            _ => vec![format!("{tenant}.")],
        };
        let group_prefixes = match kafka.map(|k| k.group_prefixes.clone()) {
            Some(prefixes) if !prefixes.is_empty() => prefixes,
            _ => topic_prefixes.clone(),
        };
        Grants {
            tenant,
            reach,
            s3_prefixes,
            s3_endpoint,
            s3_region,
            s3_credentials,
            topic_prefixes,
            group_prefixes,
        }
    }

    fn apply(&self, config: &mut PipelineConfig) -> Result<(), Refusal> {
        if let SourceConfig::Kafka(kafka) = &mut config.source {
            let cluster =
                self.kafka_cluster("source.kafka.bootstrap_servers", &kafka.bootstrap_servers)?;
            for (index, topic) in kafka.topics.iter().enumerate() {
                self.readable(&format!("source.kafka.topics[{index}]"), topic)?;
            }
            self.prefixed(
                "source.kafka.group_id",
                &kafka.group_id,
                &self.group_prefixes,
                "consumer groups",
            )?;
            check_kafka_properties("source.kafka.properties", &kafka.properties)?;
            if kafka.scale_out {
                // Repartition topics and per-task checkpoints would reach
                // past the tenant's prefixes; ADR 0020 says how serve will
                // run tasks.
                return refuse(
                    "source.kafka.scale_out",
                    "scaled-out pipelines run with `sluice run` for now, not on the server",
                );
            }
            if let Some(registry) = &mut kafka.schema_registry {
                self.registry("source.kafka.schema_registry", registry)?;
            }
            kafka.granted_properties = cluster;
        }
        self.sink("sink", &mut config.sink)?;
        self.sink("dead_letter", &mut config.dead_letter)?;
        for (name, sink) in config.side_outputs.iter_mut() {
            self.sink(&format!("side_outputs.{name}"), sink)?;
        }
        if let Some(checkpoints) = &mut config.checkpoints {
            if let Some(storage) = &checkpoints.storage {
                self.s3_location("checkpoints.storage", storage)?;
            }
            self.s3_options("checkpoints.s3", &mut checkpoints.s3)?;
        }
        Ok(())
    }

    fn sink(&self, field: &str, sink: &mut SinkConfig) -> Result<(), Refusal> {
        match sink {
            SinkConfig::Stdout { .. } | SinkConfig::Stderr { .. } => refuse(
                field,
                "the server's standard output and error are not a tenant's: use a file sink",
            ),
            SinkConfig::File { .. } | SinkConfig::Blackhole {} => Ok(()),
            SinkConfig::Iceberg(iceberg) => self.iceberg(&format!("{field}.iceberg"), iceberg),
            SinkConfig::Postgres(postgres) => self.postgres(&format!("{field}.postgres"), postgres),
            SinkConfig::Kafka(kafka) => {
                let sluice_host::connectors::kafka::KafkaSinkConfig {
                    bootstrap_servers,
                    topic,
                    properties,
                    granted_properties,
                    progress_topic,
                    transactional_id_prefix,
                    schema_registry,
                    subject,
                    ..
                } = &mut **kafka;
                let at = |name: &str| format!("{field}.kafka.{name}");
                *granted_properties =
                    self.kafka_cluster(&at("bootstrap_servers"), bootstrap_servers)?;
                self.writable(&at("topic"), topic)?;
                check_kafka_properties(&at("properties"), properties)?;
                let home = &self.topic_prefixes[0];
                match progress_topic {
                    Some(progress) => self.writable(&at("progress_topic"), progress)?,
                    None => *progress_topic = Some(format!("{home}sluice-progress")),
                }
                match transactional_id_prefix {
                    Some(prefix) => self.prefixed(
                        &at("transactional_id_prefix"),
                        prefix,
                        &self.topic_prefixes,
                        "transactional ids",
                    )?,
                    None => *transactional_id_prefix = Some(format!("{home}sluice.")),
                }
                if let Some(registry) = schema_registry {
                    self.registry(&at("schema_registry"), registry)?;
                }
                if let Some(subject) = subject {
                    self.prefixed(
                        &at("subject"),
                        subject,
                        &self.topic_prefixes,
                        "registry subjects",
                    )?;
                }
                Ok(())
            }
        }
    }

    /// A Postgres sink names a granted database (never a URL: it names a
    /// server and carries credentials) and writes tables of the grant's
    /// schemas (default: the one named after the tenant); the grant's URL
    /// is given to it in memory.
    fn postgres(&self, field: &str, postgres: &mut PostgresSinkConfig) -> Result<(), Refusal> {
        for (name, set) in [
            ("url", postgres.url.is_some()),
            ("url_env", postgres.url_env.is_some()),
        ] {
            if set {
                return refuse(
                    format!("{field}.{name}"),
                    "a tenant names a database the admin granted (`database = \"...\"`), not a URL",
                );
            }
        }
        let Some(name) = &postgres.database else {
            return refuse(
                format!("{field}.database"),
                "name a database the admin granted this tenant",
            );
        };
        let Some(grant) = self
            .reach
            .postgres_databases
            .iter()
            .find(|grant| &grant.name == name)
        else {
            return refuse(
                format!("{field}.database"),
                format!("`{name}` is not a database this tenant may use"),
            );
        };
        let schemas = match grant.schemas.is_empty() {
            true => vec![self.tenant.to_string()],
            false => grant.schemas.clone(),
        };
        let schema = postgres.table.split_once('.').map(|(schema, _)| schema);
        if !schema.is_some_and(|schema| schemas.iter().any(|s| s == schema)) {
            return refuse(
                format!("{field}.table"),
                format!(
                    "`{}` is outside this tenant's schemas in `{name}` (write `<schema>.<table>` with one of: {})",
                    postgres.table,
                    schemas.join(", ")
                ),
            );
        }
        postgres.granted_url = Some(grant.url.secret().clone());
        Ok(())
    }

    fn iceberg(&self, field: &str, iceberg: &mut IcebergSinkConfig) -> Result<(), Refusal> {
        match &mut iceberg.rest {
            Some(rest) => {
                let uri = rest.uri.trim_end_matches('/');
                let Some(grant) = self
                    .reach
                    .iceberg_catalogs
                    .iter()
                    .find(|grant| grant.uri.trim_end_matches('/') == uri)
                else {
                    return refuse(
                        format!("{field}.rest.uri"),
                        format!(
                            "`{}` is not an Iceberg catalog this tenant may use",
                            rest.uri
                        ),
                    );
                };
                for (name, set) in [
                    ("token_env", rest.token_env.is_some()),
                    ("credential_env", rest.credential_env.is_some()),
                ] {
                    if set {
                        return refuse(
                            format!("{field}.rest.{name}"),
                            "a tenant cannot read the server's environment; the admin grants the catalog's credentials with the tenant",
                        );
                    }
                }
                if let Some(name) = rest.properties.keys().next() {
                    return refuse(
                        format!("{field}.rest.properties.\"{name}\""),
                        "catalog properties are the admin's, granted with the tenant",
                    );
                }
                if let Some(warehouse) = &iceberg.warehouse
                    && !grant.warehouses.contains(warehouse)
                {
                    return refuse(
                        format!("{field}.warehouse"),
                        format!("`{warehouse}` is not a warehouse of {uri} this tenant may use"),
                    );
                }
                let namespaces = match grant.namespaces.is_empty() {
                    true => vec![self.tenant.to_string()],
                    false => grant.namespaces.clone(),
                };
                let namespace = &iceberg.namespace;
                if !namespaces
                    .iter()
                    .any(|n| namespace == n || namespace.starts_with(&format!("{n}.")))
                {
                    return refuse(
                        format!("{field}.namespace"),
                        format!(
                            "`{namespace}` is outside this tenant's namespaces in {uri} ({})",
                            namespaces.join(", ")
                        ),
                    );
                }
                rest.granted_properties = secret_map(&grant.properties);
            }
            None => {
                if let Some(warehouse) = &iceberg.warehouse {
                    self.s3_location(&format!("{field}.warehouse"), warehouse)?;
                }
            }
        }
        self.s3_options(&format!("{field}.s3"), &mut iceberg.s3)
    }

    /// The cluster `bootstrap_servers` names (every broker must be one of
    /// a granted cluster's): its granted properties.
    fn kafka_cluster(
        &self,
        field: &str,
        bootstrap_servers: &str,
    ) -> Result<sluice_host::connectors::SecretMap, Refusal> {
        let brokers = |list: &str| -> Vec<String> {
            list.split(',')
                .map(|b| b.trim().to_ascii_lowercase())
                .filter(|b| !b.is_empty())
                .collect()
        };
        let named = brokers(bootstrap_servers);
        let clusters = self.reach.kafka.iter().flat_map(|k| k.clusters.iter());
        for cluster in clusters {
            let granted = brokers(&cluster.bootstrap_servers);
            if !named.is_empty() && named.iter().all(|b| granted.contains(b)) {
                return Ok(secret_map(&cluster.properties));
            }
        }
        refuse(
            field,
            format!("`{bootstrap_servers}` is not a Kafka cluster this tenant may use"),
        )
    }

    fn readable(&self, field: &str, topic: &str) -> Result<(), Refusal> {
        let read_only = self
            .reach
            .kafka
            .iter()
            .flat_map(|k| k.read_topic_prefixes.iter());
        if read_only.clone().any(|p| topic.starts_with(p.as_str())) {
            return Ok(());
        }
        self.prefixed(field, topic, &self.topic_prefixes, "topics")
            .map_err(|mut refusal| {
                let read: Vec<&String> = read_only.collect();
                if !read.is_empty() {
                    refusal.message = format!(
                        "{} (or, to read only, with {})",
                        refusal.message,
                        read.iter()
                            .map(|p| format!("`{p}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
                refusal
            })
    }

    fn writable(&self, field: &str, topic: &str) -> Result<(), Refusal> {
        self.prefixed(field, topic, &self.topic_prefixes, "topics")
    }

    fn prefixed(
        &self,
        field: &str,
        name: &str,
        prefixes: &[String],
        what: &str,
    ) -> Result<(), Refusal> {
        if prefixes.iter().any(|p| name.starts_with(p.as_str())) {
            return Ok(());
        }
        refuse(
            field,
            format!(
                "`{name}`: this tenant's {what} start with {}",
                prefixes
                    .iter()
                    .map(|p| format!("`{p}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    }

    fn registry(&self, field: &str, registry: &mut SchemaRegistryConfig) -> Result<(), Refusal> {
        if registry.token_env.is_some() {
            return refuse(
                format!("{field}.token_env"),
                "a tenant cannot read the server's environment; the admin grants the registry's token with the tenant",
            );
        }
        let url = registry.url.trim_end_matches('/');
        let Some(grant) = self
            .reach
            .schema_registries
            .iter()
            .find(|grant| grant.url.trim_end_matches('/') == url)
        else {
            return refuse(
                format!("{field}.url"),
                format!(
                    "`{}` is not a schema registry this tenant may use",
                    registry.url
                ),
            );
        };
        registry.granted_token = grant.token.as_ref().map(|t| t.secret().clone());
        Ok(())
    }

    /// `location`, if an `s3://` URL, must lie under a granted prefix.
    fn s3_location(&self, field: &str, location: &str) -> Result<(), Refusal> {
        let Some(rest) = location.strip_prefix("s3://") else {
            return Ok(());
        };
        let segments: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
        if segments
            .iter()
            .any(|s| s.is_empty() || *s == "." || *s == "..")
        {
            return refuse(
                field,
                format!("`{location}`: an S3 location has no empty, `.` or `..` segments"),
            );
        }
        let normalized = format!("s3://{}/", segments.join("/"));
        if self
            .s3_prefixes
            .iter()
            .any(|p| normalized.starts_with(p.as_str()))
        {
            return Ok(());
        }
        match self.s3_prefixes.is_empty() {
            true => refuse(field, format!("`{location}`: this tenant may not use S3")),
            false => refuse(
                field,
                format!(
                    "`{location}` is outside this tenant's S3 prefixes ({})",
                    self.s3_prefixes.join(", ")
                ),
            ),
        }
    }

    /// A pipeline's S3 settings: the endpoint is the granted one (a
    /// tenant cannot send the server's signatures elsewhere); granted
    /// credentials are filled in.
    fn s3_options(&self, field: &str, options: &mut S3Options) -> Result<(), Refusal> {
        if let Some(endpoint) = &options.endpoint
            && Some(endpoint.trim_end_matches('/'))
                != self.s3_endpoint.as_deref().map(|e| e.trim_end_matches('/'))
        {
            return refuse(
                format!("{field}.endpoint"),
                format!("`{endpoint}` is not the S3 endpoint granted to this tenant"),
            );
        }
        if options.endpoint.is_none() {
            options.endpoint = self.s3_endpoint.clone();
        }
        if options.region.is_none() {
            options.region = self.s3_region.clone();
        }
        options.credentials = self.s3_credentials.clone();
        Ok(())
    }
}

fn with_slash(prefix: &str) -> String {
    match prefix.ends_with('/') {
        true => prefix.to_string(),
        false => format!("{prefix}/"),
    }
}

/// Every property must be one a tenant may set, with a value in bounds.
fn check_kafka_properties(
    field: &str,
    properties: &BTreeMap<String, String>,
) -> Result<(), Refusal> {
    for (name, value) in properties {
        let at = format!("{field}.\"{name}\"");
        let Some((_, allowed)) = TENANT_KAFKA_PROPERTIES.iter().find(|(n, _)| n == name) else {
            return refuse(
                at,
                format!(
                    "`{name}` is not a Kafka property a tenant may set (tuning only: batching, fetching, compression, timeouts; connection and security settings are the admin's)"
                ),
            );
        };
        let fits = match allowed {
            Allowed::Integer(min, max) => value
                .trim()
                .parse::<i64>()
                .is_ok_and(|v| (*min..=*max).contains(&v)),
            Allowed::OneOf(words) => words.contains(&value.as_str()),
        };
        if !fits {
            let expected = match allowed {
                Allowed::Integer(min, max) => format!("an integer from {min} to {max}"),
                Allowed::OneOf(words) => format!("one of {}", words.join(", ")),
            };
            return refuse(at, format!("`{value}`: {name} must be {expected}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
