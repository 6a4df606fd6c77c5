use super::*;
use serde_json::json;

/// A reach with one cluster, S3 prefix, catalog and registry for `team-b`.
fn reach() -> TenantReach {
    serde_json::from_value(json!({
        "s3": { "prefixes": ["s3://lake/tenants/team-b/"], "endpoint": "http://127.0.0.1:9000" },
        "kafka": {
            "clusters": [{ "bootstrap_servers": "127.0.0.1:9092,127.0.0.1:9094" }],
            "topic_prefixes": ["team-b."],
            "read_topic_prefixes": ["shared."],
        },
        "iceberg_catalogs": [{ "uri": "http://127.0.0.1:8181" }],
        "schema_registries": [{ "url": "http://127.0.0.1:8081/apis/ccompat/v7" }],
        "postgres_databases": [{ "name": "orders", "url": "postgres://team_b:pw@127.0.0.1:55432/orders" }],
    }))
    .unwrap()
}

const KAFKA_SOURCE: &str = "[source.kafka]\nbootstrap_servers = \"127.0.0.1:9092\"\ntopics = [\"team-b.in\"]\ngroup_id = \"team-b.g\"\n";
const FILE_SOURCE: &str = "[source.file]\npath = \"in.jsonl\"\n";
const FILE_SINK: &str =
    "[sink.file]\npath = \"out.jsonl\"\n[dead_letter.file]\npath = \"dl.jsonl\"\n";
const KAFKA_SINK: &str = "[sink.kafka]\nbootstrap_servers = \"127.0.0.1:9092\"\ntopic = \"team-b.out\"\n[dead_letter.file]\npath = \"dl.jsonl\"\n[checkpoints]\nstorage = \"checkpoints\"\nmode = \"exactly-once\"\n";

/// `text` loaded as a pipeline file in a directory with the files it names.
fn parse(text: &str) -> LoadedConfig {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("in.jsonl"), "{}\n").unwrap();
    std::fs::write(
        dir.path().join("s.avsc"),
        r#"{"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"}]}"#,
    )
    .unwrap();
    LoadedConfig::parse(&dir.path().join("pipeline.toml"), text)
        .unwrap_or_else(|e| panic!("the test's file does not load: {e}\n{text}"))
}

fn admit(body: &str) -> Result<LoadedConfig, ConfigError> {
    let text = format!("[pipeline]\nname = \"p\"\ntenant = \"team-b\"\n{body}");
    let mut loaded = parse(&text);
    apply(&mut loaded, "team-b", &reach(), &ServerReach::default())?;
    Ok(loaded)
}

#[test]
fn a_pipeline_within_its_reach_is_admitted_and_given_its_grants() {
    let loaded = admit(&format!("{KAFKA_SOURCE}{KAFKA_SINK}")).unwrap();
    let SinkConfig::Kafka(kafka) = &loaded.config.sink else {
        panic!("a Kafka sink");
    };
    assert_eq!(
        kafka.progress_topic.as_deref(),
        Some("team-b.sluice-progress")
    );
    assert_eq!(
        kafka.transactional_id_prefix.as_deref(),
        Some("team-b.sluice.")
    );
    let shared = format!(
        "{}{FILE_SINK}",
        KAFKA_SOURCE.replace("team-b.in", "shared.events")
    );
    assert!(admit(&shared).is_ok(), "a read-only prefix may be read");
    let s3 = format!(
        "{FILE_SOURCE}{FILE_SINK}[checkpoints]\nstorage = \"s3://lake/tenants/team-b/cp\"\n"
    );
    let loaded = admit(&s3).unwrap();
    let checkpoints = loaded.config.checkpoints.as_ref().unwrap();
    assert_eq!(
        checkpoints.s3.endpoint.as_deref(),
        Some("http://127.0.0.1:9000")
    );
}

#[test]
fn granted_cluster_properties_and_credentials_are_filled_in_memory() {
    // SAFETY: every test of this binary that seals sets this same value.
    unsafe { std::env::set_var(super::super::reach::SECRET_KEY_VARIABLE, "11".repeat(32)) };
    let mut reach = reach();
    let kafka = reach.kafka.as_mut().unwrap();
    kafka.clusters[0].properties = serde_json::from_value(json!({
        "security.protocol": "SASL_PLAINTEXT", "sasl.password": "cluster-secret"
    }))
    .unwrap();
    reach.s3.as_mut().unwrap().credentials = Some(
        serde_json::from_value(json!({ "access_key_id": "AK", "secret_access_key": "s3-secret" }))
            .unwrap(),
    );
    let text = format!(
        "[pipeline]\nname = \"p\"\n{KAFKA_SOURCE}{FILE_SINK}[checkpoints]\nstorage = \"s3://lake/tenants/team-b/cp\"\n"
    );
    let mut loaded = parse(&text);
    apply(&mut loaded, "team-b", &reach, &ServerReach::default()).unwrap();
    let SourceConfig::Kafka(source) = &loaded.config.source else {
        panic!("a Kafka source");
    };
    let given = source.granted_properties.over(&source.properties);
    assert_eq!(given["sasl.password"], "cluster-secret");
    let checkpoints = loaded.config.checkpoints.as_ref().unwrap();
    let credentials = checkpoints.s3.credentials.as_ref().unwrap();
    assert_eq!(credentials.secret_access_key, "s3-secret");
    assert!(
        !format!("{:?}", loaded.config).contains("secret\""),
        "no secret in Debug"
    );
    assert!(!format!("{:?}", loaded.config).contains("cluster-secret"));
}

/// Every free-form or reaching field a tenant controls, with a dangerous
/// value: each is refused, naming the field.
/// A file source into a Postgres sink with `connection` (its `url`,
/// `url_env` or `database` line) writing `table`.
fn postgres_sink(connection: &str, table: &str) -> String {
    format!(
        "{FILE_SOURCE}[sink.postgres]\n{connection}table = \"{table}\"\nkey = [\"id\"]\ncolumns = [\"id\"]\n[dead_letter.file]\npath = \"dl.jsonl\"\n"
    )
}

#[test]
fn a_granted_database_is_admitted_by_name_and_given_its_url_in_memory() {
    let loaded = admit(&postgres_sink("database = \"orders\"\n", "team-b.totals")).unwrap();
    let SinkConfig::Postgres(postgres) = &loaded.config.sink else {
        panic!("a Postgres sink");
    };
    assert_eq!(
        postgres.granted_url.as_ref().map(|url| url.expose()),
        Some("postgres://team_b:pw@127.0.0.1:55432/orders")
    );
    assert!(
        !format!("{postgres:?}").contains("pw@"),
        "the granted URL is a secret"
    );
}

#[test]
fn every_dangerous_value_a_tenant_can_write_is_refused_naming_its_field() {
    let with_property = |name: &str, value: &str| {
        format!(
            "{}properties = {{ \"{name}\" = \"{value}\" }}\n{FILE_SINK}",
            KAFKA_SOURCE
        )
    };
    let mut cases: Vec<(String, &str)> = Vec::new();
    for name in [
        "plugin.library.paths",
        "sasl.kerberos.kinit.cmd",
        "sasl.kerberos.keytab",
        "ssl.key.location",
        "ssl.certificate.location",
        "ssl.ca.location",
        "ssl.crl.location",
        "ssl.keystore.location",
        "ssl.engine.location",
        "ssl_engine_callback_data",
        "sasl.oauthbearer.config",
        "sasl.oauthbearer.method",
        "sasl.oauthbearer.token.endpoint.url",
        "enable.sasl.oauthbearer.unsecure.jwt",
        "debug",
        "log_level",
        "bootstrap.servers",
        "security.protocol",
        "sasl.username",
        "group.id",
        "transactional.id",
        "client.id",
        "isolation.level",
        "statistics.interval.ms",
        "Plugin.Library.Paths",
    ] {
        cases.push((with_property(name, "/tmp/x"), "source.kafka.properties"));
    }
    // Tuning within bounds only.
    cases.push((
        with_property("fetch.max.bytes", "99999999999"),
        "fetch.max.bytes",
    ));
    cases.push((
        with_property("queued.max.messages.kbytes", "-1"),
        "queued.max",
    ));
    cases.push((
        with_property("compression.type", "brotli"),
        "compression.type",
    ));
    let sink_with = |extra: &str| {
        format!(
            "{FILE_SOURCE}[sink.kafka]\nbootstrap_servers = \"127.0.0.1:9092\"\ntopic = \"team-b.out\"\n{extra}[dead_letter.file]\npath = \"dl.jsonl\"\n[checkpoints]\nstorage = \"checkpoints\"\nmode = \"exactly-once\"\n"
        )
    };
    cases.extend([
        (sink_with("properties = { \"plugin.library.paths\" = \"x.so\" }\n"), "sink.kafka.properties"),
        (sink_with("progress_topic = \"sluice-progress\"\n"), "sink.kafka.progress_topic"),
        (sink_with("progress_topic = \"team-a.sluice-progress\"\n"), "sink.kafka.progress_topic"),
        (sink_with("transactional_id_prefix = \"sluice.\"\n"), "sink.kafka.transactional_id_prefix"),
        (sink_with("value_format = \"avro-confluent\"\navro_schema = \"s.avsc\"\nsubject = \"team-a.orders-value\"\nschema_registry = { url = \"http://127.0.0.1:8081/apis/ccompat/v7\" }\n"), "sink.kafka.subject"),
        (sink_with("value_format = \"avro-confluent\"\navro_schema = \"s.avsc\"\nschema_registry = { url = \"http://evil.example:8081\" }\n"), "sink.kafka.schema_registry.url"),
        (sink_with("value_format = \"avro-confluent\"\navro_schema = \"s.avsc\"\nschema_registry = { url = \"http://127.0.0.1:8081/apis/ccompat/v7\", token_env = \"AWS_SECRET_ACCESS_KEY\" }\n"), "sink.kafka.schema_registry.token_env"),
        (format!("{FILE_SOURCE}[sink.kafka]\nbootstrap_servers = \"10.0.0.9:9092\"\ntopic = \"team-b.out\"\ndelivery = \"at-least-once\"\n[dead_letter.file]\npath = \"dl.jsonl\"\n"), "sink.kafka.bootstrap_servers"),
        (format!("{FILE_SOURCE}[sink.kafka]\nbootstrap_servers = \"127.0.0.1:9092\"\ntopic = \"team-a.out\"\ndelivery = \"at-least-once\"\n[dead_letter.file]\npath = \"dl.jsonl\"\n"), "sink.kafka.topic"),
        (format!("{}{FILE_SINK}", KAFKA_SOURCE.replace("team-b.in", "team-a.orders")), "source.kafka.topics[0]"),
        (format!("{}{FILE_SINK}", KAFKA_SOURCE.replace("team-b.g", "team-a.g")), "source.kafka.group_id"),
        (format!("{}{FILE_SINK}", KAFKA_SOURCE.replace("127.0.0.1:9092", "127.0.0.1:9092,evil:9092")), "source.kafka.bootstrap_servers"),
        (format!("{KAFKA_SOURCE}schema_registry = {{ url = \"http://169.254.169.254/latest\" }}\nvalue_format = \"avro-confluent\"\n{FILE_SINK}"), "source.kafka.schema_registry.url"),
        // S3: another tenant's prefix, a sibling prefix, traversal, another endpoint.
        (format!("{FILE_SOURCE}{FILE_SINK}[checkpoints]\nstorage = \"s3://lake/tenants/team-a/cp\"\n"), "checkpoints.storage"),
        (format!("{FILE_SOURCE}{FILE_SINK}[checkpoints]\nstorage = \"s3://lake/tenants/team-b-evil/cp\"\n"), "checkpoints.storage"),
        (format!("{FILE_SOURCE}{FILE_SINK}[checkpoints]\nstorage = \"s3://lake/tenants/team-b/../team-a\"\n"), "checkpoints.storage"),
        (format!("{FILE_SOURCE}{FILE_SINK}[checkpoints]\nstorage = \"s3://team-a-bucket/anything\"\n"), "checkpoints.storage"),
        (format!("{FILE_SOURCE}{FILE_SINK}[checkpoints]\nstorage = \"s3://lake/tenants/team-b/cp\"\n[checkpoints.s3]\nendpoint = \"http://evil.example\"\n"), "checkpoints.s3.endpoint"),
        // Iceberg.
        (format!("{FILE_SOURCE}[sink.iceberg]\ncatalog = \"c.db\"\nwarehouse = \"s3://lake/tenants/team-a/w\"\nnamespace = \"n\"\ntable = \"t\"\n[dead_letter.file]\npath = \"dl.jsonl\"\n"), "sink.iceberg.warehouse"),
        (format!("{FILE_SOURCE}[sink.iceberg]\nrest = {{ uri = \"http://evil.example:8181\" }}\nnamespace = \"team-b\"\ntable = \"t\"\n[dead_letter.file]\npath = \"dl.jsonl\"\n"), "sink.iceberg.rest.uri"),
        (format!("{FILE_SOURCE}[sink.iceberg]\nrest = {{ uri = \"http://127.0.0.1:8181\", token_env = \"AWS_SECRET_ACCESS_KEY\" }}\nnamespace = \"team-b\"\ntable = \"t\"\n[dead_letter.file]\npath = \"dl.jsonl\"\n"), "sink.iceberg.rest.token_env"),
        (format!("{FILE_SOURCE}[sink.iceberg]\nrest = {{ uri = \"http://127.0.0.1:8181\", credential_env = \"HOME\" }}\nnamespace = \"team-b\"\ntable = \"t\"\n[dead_letter.file]\npath = \"dl.jsonl\"\n"), "sink.iceberg.rest.credential_env"),
        (format!("{FILE_SOURCE}[sink.iceberg]\nrest = {{ uri = \"http://127.0.0.1:8181\", properties = {{ \"oauth2-server-uri\" = \"http://evil.example/token\" }} }}\nnamespace = \"team-b\"\ntable = \"t\"\n[dead_letter.file]\npath = \"dl.jsonl\"\n"), "sink.iceberg.rest.properties"),
        (format!("{FILE_SOURCE}[sink.iceberg]\nrest = {{ uri = \"http://127.0.0.1:8181\", properties = {{ \"header.X-Iceberg-Access-Delegation\" = \"vended-credentials\" }} }}\nnamespace = \"team-b\"\ntable = \"t\"\n[dead_letter.file]\npath = \"dl.jsonl\"\n"), "sink.iceberg.rest.properties"),
        (format!("{FILE_SOURCE}[sink.iceberg]\nrest = {{ uri = \"http://127.0.0.1:8181\" }}\nnamespace = \"team-a\"\ntable = \"t\"\n[dead_letter.file]\npath = \"dl.jsonl\"\n"), "sink.iceberg.namespace"),
        (format!("{FILE_SOURCE}[sink.iceberg]\nrest = {{ uri = \"http://127.0.0.1:8181\" }}\nwarehouse = \"team-a-warehouse\"\nnamespace = \"team-b\"\ntable = \"t\"\n[dead_letter.file]\npath = \"dl.jsonl\"\n"), "sink.iceberg.warehouse"),
        // PostgreSQL: a granted database by name, never a URL (it names a
        // server and carries credentials; `url_env` reads the server's),
        // tables of the tenant's schema only.
        (postgres_sink("url = \"postgres://postgres@127.0.0.1:55432/postgres\"\n", "team-b.t"), "sink.postgres.url"),
        (postgres_sink("url_env = \"DATABASE_URL\"\n", "team-b.t"), "sink.postgres.url_env"),
        (postgres_sink("", "team-b.t"), "sink.postgres.database"),
        (postgres_sink("database = \"payroll\"\n", "team-b.t"), "sink.postgres.database"),
        (postgres_sink("database = \"orders\"\n", "team-a.t"), "sink.postgres.table"),
        (postgres_sink("database = \"orders\"\n", "t"), "sink.postgres.table"),
        (postgres_sink("database = \"orders\"\n", "public.t"), "sink.postgres.table"),
        // The server's own streams.
        (format!("{FILE_SOURCE}[sink.stdout]\n[dead_letter.file]\npath = \"dl.jsonl\"\n"), "sink"),
        (format!("{FILE_SOURCE}[sink.file]\npath = \"o\"\n[dead_letter.stderr]\n"), "dead_letter"),
        (format!("{FILE_SOURCE}{FILE_SINK}[side_outputs.late.stderr]\n"), "side_outputs.late"),
    ]);
    for (body, field) in &cases {
        let error = match admit(body) {
            Ok(_) => panic!("admitted, but `{field}` is dangerous:\n{body}"),
            Err(error) => error.to_string(),
        };
        assert!(
            error.contains(field),
            "the refusal names `{field}`: {error}\n{body}"
        );
        assert!(
            error.contains("team-b"),
            "the refusal says for whom: {error}"
        );
    }
}

#[test]
fn a_tenant_without_grants_reaches_no_kafka_and_only_its_own_s3_prefix() {
    let server = ServerReach {
        s3_bucket: Some("lake".into()),
        s3_endpoint: None,
    };
    let check = |body: &str| {
        let text = format!("[pipeline]\nname = \"p\"\n{body}");
        let mut loaded = parse(&text);
        apply(&mut loaded, "team-c", &TenantReach::default(), &server).map_err(|e| e.to_string())
    };
    let kafka = check(&format!("{KAFKA_SOURCE}{FILE_SINK}")).unwrap_err();
    assert!(kafka.contains("source.kafka.bootstrap_servers"), "{kafka}");
    check(&format!(
        "{FILE_SOURCE}{FILE_SINK}[checkpoints]\nstorage = \"s3://lake/tenants/team-c/cp\"\n"
    ))
    .unwrap();
    let other = check(&format!(
        "{FILE_SOURCE}{FILE_SINK}[checkpoints]\nstorage = \"s3://lake/tenants/team-b/cp\"\n"
    ))
    .unwrap_err();
    assert!(other.contains("checkpoints.storage"), "{other}");
}

#[test]
fn every_allowed_property_is_one_librdkafka_knows() {
    for (name, allowed) in TENANT_KAFKA_PROPERTIES {
        let value = match allowed {
            Allowed::Integer(min, _) => min.to_string(),
            Allowed::OneOf(words) => words[0].to_string(),
        };
        let mut config = rdkafka::ClientConfig::new();
        config.set(*name, &value);
        let made: Result<rdkafka::producer::BaseProducer, _> = config.create();
        let consumer: Result<rdkafka::consumer::BaseConsumer, _> =
            config.set("group.id", "g").create();
        assert!(
            made.is_ok() || consumer.is_ok(),
            "librdkafka refuses `{name} = {value}`: {:?}",
            made.err()
        );
    }
}
