//! `sluice`: run stream pipelines whose logic is WebAssembly plugins.

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use sluice_cli::{build, checkpoints, client, inspect, run, scaffold, serve, sql, try_plugin};
use sluice_host::checkpoint::RestoreFrom;
use sluice_host::connectors::file::FileFormat;
use sluice_host::runtime::{CacheOutcome, CallMode};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

/// Records are allocated by the source thread and freed by the operator
/// thread; glibc's malloc makes such cross-thread frees expensive enough that
/// two cores ran slower than one (docs/benchmarks.md). mimalloc frees
/// cross-thread cheaply.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Sluice: a stream processor whose user logic runs as sandboxed WebAssembly
/// components.
#[derive(Parser)]
#[command(name = "sluice", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a pipeline file until its input ends (or Ctrl-C / SIGTERM).
    Run {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
        /// Do not draw the live progress line.
        #[arg(long)]
        quiet: bool,
        /// Start over: ignore existing checkpoints (and drop uncommitted output).
        #[arg(long, conflicts_with = "from_checkpoint")]
        fresh: bool,
        /// Restore this checkpoint (an id, or a manifest's URI as
        /// `sluice checkpoints list` prints it) instead of the latest.
        #[arg(long, value_name = "ID|URI")]
        from_checkpoint: Option<String>,
        /// Serve Prometheus metrics (`/metrics`), the JSON status and the
        /// dashboard (`/`) on this loopback address, e.g. 127.0.0.1:9464.
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        /// Serve `/healthz` and `/readyz` (ready: every task this process
        /// owns is restored and running) on this address, for Kubernetes
        /// probes of a scaled-out pipeline, e.g. 0.0.0.0:8080.
        #[arg(long, value_name = "ADDR")]
        health: Option<std::net::SocketAddr>,
    },
    /// List and show the checkpoints of a pipeline.
    #[command(subcommand)]
    Checkpoints(CheckpointsCommand),
    /// Build, scaffold, inspect and try plugins.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Check or explain the SQL operators of a pipeline file.
    #[command(subcommand)]
    Sql(SqlCommand),
    /// Run a long-lived host for many tenants' pipelines, with a REST API.
    Serve {
        /// Where pipelines, plugins, checkpoints and tokens live.
        #[arg(long, default_value = ".sluice/serve")]
        state_dir: PathBuf,
        /// The address to listen on (loopback unless TLS is given).
        #[arg(long, default_value = "127.0.0.1:7070")]
        listen: std::net::SocketAddr,
        /// A PEM certificate chain: serve HTTPS (with --tls-key).
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The certificate's PEM private key.
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Allow plain HTTP on a non-loopback address.
        #[arg(long)]
        insecure: bool,
        /// Plugin instances that may exist at once, over all pipelines.
        #[arg(long, default_value_t = 128)]
        max_instances: u32,
        /// A bucket for tenants: each may use `s3://<bucket>/tenants/<tenant>/`
        /// (with the server's AWS credentials) unless granted other S3.
        #[arg(long)]
        s3_bucket: Option<String>,
        /// The S3-compatible endpoint of `--s3-bucket` (default: AWS).
        #[arg(long, requires = "s3_bucket")]
        s3_endpoint: Option<String>,
        /// Mutating API requests per second each caller may make.
        #[arg(long, default_value_t = serve::api::guard::DEFAULT_MUTATIONS_PER_SECOND)]
        rate_limit: u32,
        /// Mutating API requests each caller may make in a burst.
        #[arg(long, default_value_t = serve::api::guard::DEFAULT_MUTATION_BURST)]
        rate_burst: u32,
    },
    /// Deploy a pipeline file to a `sluice serve` (its plugins are built
    /// and uploaded).
    Deploy {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// List, show, stop, start and delete pipelines on a `sluice serve`.
    #[command(subcommand)]
    Pipelines(PipelinesCommand),
    /// Manage tenants on a `sluice serve` (admin token).
    #[command(subcommand)]
    Tenants(TenantsCommand),
    /// Print a pipeline's plugin logs (from a `sluice serve`).
    Logs {
        /// The pipeline.
        pipeline: String,
        /// Only lines from this long ago on, e.g. `10m`, `2h`.
        #[arg(long)]
        since: Option<String>,
        /// Keep printing new lines as they come.
        #[arg(short, long)]
        follow: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Swap an operator of a running pipeline back to a kept plugin
    /// version: by default the one it ran before the current one.
    Rollback {
        /// The pipeline.
        pipeline: String,
        /// The operator (default: the operator of the latest deployment).
        #[arg(long)]
        operator: Option<String>,
        /// The kept version to go back to: its sha256, or a prefix of at
        /// least 8 hex digits.
        #[arg(long)]
        to: Option<String>,
        /// List the operator's kept versions instead (needs `--operator`).
        #[arg(long, conflicts_with = "to")]
        list: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// Where the server is, and how to answer.
#[derive(clap::Args, Debug, Clone)]
struct ServerArgs {
    /// The server's URL (default: $SLUICE_SERVER, the config file, or http://127.0.0.1:7070).
    #[arg(long)]
    server: Option<String>,
    /// The bearer token (default: $SLUICE_TOKEN or the config file).
    #[arg(long)]
    token: Option<String>,
    /// JSON output for scripts.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum SqlCommand {
    /// Compile every query of the pipeline file without running it; an
    /// error names the line and column in the SQL.
    Check {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
    },
    /// Print the operator graph the pipeline file becomes, each query with
    /// the fields it reads, its condition and its columns.
    Explain {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
    },
}

#[derive(Subcommand)]
enum PipelinesCommand {
    /// A line per pipeline.
    Ls {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// A pipeline's state and counters.
    Show {
        /// The pipeline.
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Stop a pipeline (drain, final checkpoint).
    Stop {
        /// The pipeline.
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Start a stopped pipeline (from its last checkpoint).
    Start {
        /// The pipeline.
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Stop and delete a pipeline.
    Rm {
        /// The pipeline.
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
}

#[derive(Subcommand)]
enum TenantsCommand {
    /// Create a tenant (or add a token to one) and print its new token.
    Create {
        /// The tenant.
        name: String,
        #[command(flatten)]
        settings: TenantSettings,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Change a tenant's limits or reach (given settings replace the old;
    /// pipelines outside a narrowed reach are stopped).
    Update {
        /// The tenant.
        name: String,
        #[command(flatten)]
        settings: TenantSettings,
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// A tenant's limits and reach, as `sluice tenants create|update` take them.
#[derive(clap::Args)]
struct TenantSettings {
    /// Most pipelines it may have.
    #[arg(long)]
    max_pipelines: Option<usize>,
    /// Most plugin instances its pipelines may run together.
    #[arg(long)]
    max_plugin_instances: Option<u64>,
    /// Most memory its plugin instances may have together, MiB.
    #[arg(long)]
    max_plugin_memory_mb: Option<u64>,
    /// Most state on disk its pipelines may hold together, MiB.
    #[arg(long)]
    max_state_mb: Option<u64>,
    /// CPUs its plugins may use together (e.g. 0.5).
    #[arg(long)]
    cpu_cores: Option<f64>,
    /// What its pipelines may reach: a JSON or TOML file (`docs/api.md`,
    /// "Tenants"), with any credentials; replaces the reach flags below.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["kafka", "topic_prefix", "read_topic_prefix", "group_prefix", "s3_prefix", "iceberg_catalog", "schema_registry"])]
    reach: Option<PathBuf>,
    /// A Kafka cluster it may use (bootstrap list; repeat for more).
    #[arg(long, value_name = "BROKERS")]
    kafka: Vec<String>,
    /// A topic prefix it may read and write (default `<tenant>.`).
    #[arg(long, value_name = "PREFIX")]
    topic_prefix: Vec<String>,
    /// A topic prefix it may only read.
    #[arg(long, value_name = "PREFIX")]
    read_topic_prefix: Vec<String>,
    /// A consumer-group prefix (default: the topic prefixes).
    #[arg(long, value_name = "PREFIX")]
    group_prefix: Vec<String>,
    /// An `s3://bucket/prefix/` it may use.
    #[arg(long, value_name = "URL")]
    s3_prefix: Vec<String>,
    /// An Iceberg REST catalog it may use.
    #[arg(long, value_name = "URI")]
    iceberg_catalog: Vec<String>,
    /// A schema registry it may use.
    #[arg(long, value_name = "URL")]
    schema_registry: Vec<String>,
}

impl TenantSettings {
    /// The request body's `limits` (only what was given; none if nothing
    /// was) and `reach` (none if no reach setting was given).
    fn body(&self) -> Result<(Option<serde_json::Value>, Option<serde_json::Value>)> {
        let mut limits = serde_json::Map::new();
        let mut set = |name: &str, value: Option<serde_json::Value>| {
            if let Some(value) = value {
                limits.insert(name.to_string(), value);
            }
        };
        set("max_pipelines", self.max_pipelines.map(Into::into));
        set(
            "max_plugin_instances",
            self.max_plugin_instances.map(Into::into),
        );
        set(
            "max_plugin_memory_mb",
            self.max_plugin_memory_mb.map(Into::into),
        );
        set("max_state_mb", self.max_state_mb.map(Into::into));
        set("cpu_cores", self.cpu_cores.map(Into::into));
        let limits = (!limits.is_empty()).then_some(serde_json::Value::Object(limits));
        if let Some(file) = &self.reach {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("reading {}", file.display()))?;
            let reach: serde_json::Value = match file.extension().and_then(|e| e.to_str()) {
                Some("toml") => toml::from_str(&text)
                    .with_context(|| format!("{} is not valid TOML", file.display()))?,
                _ => serde_json::from_str(&text)
                    .with_context(|| format!("{} is not valid JSON", file.display()))?,
            };
            return Ok((limits, Some(reach)));
        }
        let flags = [
            &self.kafka,
            &self.topic_prefix,
            &self.read_topic_prefix,
            &self.group_prefix,
            &self.s3_prefix,
            &self.iceberg_catalog,
            &self.schema_registry,
        ];
        if flags.iter().all(|f| f.is_empty()) {
            return Ok((limits, None));
        }
        let mut reach = serde_json::Map::new();
        if !self.kafka.is_empty() {
            let clusters: Vec<serde_json::Value> = self
                .kafka
                .iter()
                .map(|b| serde_json::json!({ "bootstrap_servers": b }))
                .collect();
            reach.insert(
                "kafka".into(),
                serde_json::json!({
                    "clusters": clusters,
                    "topic_prefixes": self.topic_prefix,
                    "read_topic_prefixes": self.read_topic_prefix,
                    "group_prefixes": self.group_prefix,
                }),
            );
        }
        if !self.s3_prefix.is_empty() {
            reach.insert(
                "s3".into(),
                serde_json::json!({ "prefixes": self.s3_prefix }),
            );
        }
        let uris = |list: &[String], key: &str| -> Vec<serde_json::Value> {
            list.iter().map(|u| serde_json::json!({ key: u })).collect()
        };
        reach.insert(
            "iceberg_catalogs".into(),
            uris(&self.iceberg_catalog, "uri").into(),
        );
        reach.insert(
            "schema_registries".into(),
            uris(&self.schema_registry, "url").into(),
        );
        Ok((limits, Some(serde_json::Value::Object(reach))))
    }
}

#[derive(Subcommand)]
enum CheckpointsCommand {
    /// Every retained checkpoint: id, time, state size, uploaded bytes,
    /// duration, and which one a restart would use.
    List {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
        /// JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One checkpoint's manifest.
    Show {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
        /// Checkpoint id (default: the latest).
        id: Option<u64>,
    },
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Compile a plugin (Rust, Python, JavaScript or C) into a WebAssembly component.
    Build {
        /// The plugin directory (the language is detected from its files).
        dir: PathBuf,
        /// Where to write the component (default: `<target>/sluice/<name>.wasm`).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Build even if the inputs are unchanged (Python and JavaScript
        /// builds of unchanged inputs are otherwise reused from
        /// ~/.cache/sluice/builds, or $SLUICE_BUILD_CACHE_DIR).
        #[arg(long)]
        rebuild: bool,
    },
    /// Create a new plugin (Rust, Python, JavaScript or C).
    New {
        /// Plugin (crate) name.
        name: String,
        /// Directory to create it in.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// Language: rust, python, js or c.
        #[arg(long, default_value = "rust")]
        lang: String,
        /// What it is: a record transform, or a window aggregate.
        #[arg(long, value_enum, default_value = "transform")]
        world: scaffold::TemplateWorld,
        /// Path of the sluice-sdk crate for Rust plugins (default: $SLUICE_SDK_PATH or this build's source tree).
        #[arg(long)]
        sdk_path: Option<PathBuf>,
    },
    /// Build (if needed), upload and hot-swap a plugin into a running
    /// pipeline on a `sluice serve`, at its next checkpoint barrier.
    Push {
        /// A plugin directory or a component file.
        path: PathBuf,
        /// The pipeline.
        #[arg(long)]
        pipeline: String,
        /// The operator whose plugin it replaces.
        #[arg(long)]
        operator: String,
        /// Answer once the new version runs, without waiting for the
        /// verdict of its verify window.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Print a component's world, WIT version, imports, exports and size.
    Inspect {
        /// The component file.
        file: PathBuf,
    },
    /// Run a component on sample records and print what it emits (an
    /// aggregate plugin: per key and tumbling window, all fired at the end).
    Test {
        /// The component file.
        file: PathBuf,
        /// JSON-lines input.
        #[arg(short, long)]
        input: PathBuf,
        /// Hand each input line to the plugin as it is, without checking
        /// that it is JSON (to test how a plugin handles malformed input).
        #[arg(long)]
        raw: bool,
        /// Plugin config entries, `key=value` (repeatable).
        #[arg(short, long = "config", value_name = "KEY=VALUE")]
        config: Vec<String>,
        /// `auto`, `typed` or `packed`.
        #[arg(long, default_value = "auto")]
        call_mode: String,
        /// Aggregate plugins: the field whose value is the key (default:
        /// the record key).
        #[arg(long)]
        key_field: Option<String>,
        /// Aggregate plugins: the field holding the event time, ms
        /// (default: every record in the window starting at 0).
        #[arg(long)]
        timestamp_field: Option<String>,
        /// Aggregate plugins: the size of the tumbling windows, ms.
        #[arg(long, default_value_t = 60_000)]
        tumbling_ms: i64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(matches!(cli.command, Command::Serve { .. }));
    match execute(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr at the level `SLUICE_LOG` says (default `warn`). A
/// server also keeps what plugins log, per pipeline, for `sluice logs`
/// ([`serve::logs`]).
fn init_logging(serving: bool) {
    use tracing_subscriber::prelude::*;
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(
            tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        );
    let capture = serving.then(|| {
        serve::logs::CaptureLayer(serve::logs::global())
            .with_filter(tracing_subscriber::filter::LevelFilter::DEBUG)
    });
    tracing_subscriber::registry()
        .with(stderr)
        .with(capture)
        .init();
}

/// A client for `server`.
fn client_for(server: &ServerArgs) -> Result<client::Client> {
    client::Client::new(client::ClientConfig::resolve(
        server.server.clone(),
        server.token.clone(),
    )?)
}

/// Stop, start or delete `name`; what to print.
fn lifecycle(server: &ServerArgs, name: &str, action: &str) -> Result<String> {
    let client = client_for(server)?;
    let (method, path) = match action {
        "rm" => (reqwest::Method::DELETE, format!("/api/v1/pipelines/{name}")),
        other => (
            reqwest::Method::POST,
            format!("/api/v1/pipelines/{name}/{other}"),
        ),
    };
    let operation = client.operation(method, &path, None)?;
    Ok(match server.json {
        true => operation.to_string(),
        false => format!("pipeline `{name}`: {action} done"),
    })
}

fn execute(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Serve {
            state_dir,
            listen,
            tls_cert,
            tls_key,
            insecure,
            max_instances,
            s3_bucket,
            s3_endpoint,
            rate_limit,
            rate_burst,
        } => {
            let mut options = serve::ServeOptions::new(state_dir, listen)
                .insecure(insecure)
                .max_instances(max_instances)
                .tenant_bucket(s3_bucket, s3_endpoint)
                .rate_limit(rate_limit, rate_burst);
            if let (Some(cert), Some(key)) = (tls_cert, tls_key) {
                options = options.with_tls(cert, key);
            }
            serve::serve(options)?;
        }
        Command::Deploy { pipeline, server } => {
            println!(
                "{}",
                client::deploy(&client_for(&server)?, &pipeline, server.json)?.trim_end()
            );
        }
        Command::Pipelines(PipelinesCommand::Ls { server }) => {
            print!("{}", client::list(&client_for(&server)?, server.json)?);
        }
        Command::Pipelines(PipelinesCommand::Show { name, server }) => {
            println!(
                "{}",
                client::show(&client_for(&server)?, &name, server.json)?.trim_end()
            );
        }
        Command::Pipelines(PipelinesCommand::Stop { name, server }) => {
            println!("{}", lifecycle(&server, &name, "stop")?);
        }
        Command::Pipelines(PipelinesCommand::Start { name, server }) => {
            println!("{}", lifecycle(&server, &name, "start")?);
        }
        Command::Pipelines(PipelinesCommand::Rm { name, server }) => {
            println!("{}", lifecycle(&server, &name, "rm")?);
        }
        Command::Plugin(PluginCommand::Push {
            path,
            pipeline,
            operator,
            no_wait,
            server,
        }) => {
            println!(
                "{}",
                client::push_plugin(
                    &client_for(&server)?,
                    &path,
                    &pipeline,
                    &operator,
                    !no_wait,
                    server.json
                )?
            );
        }
        Command::Logs {
            pipeline,
            since,
            follow,
            server,
        } => {
            client::logs(
                &client_for(&server)?,
                &pipeline,
                since.as_deref(),
                follow,
                server.json,
            )?;
        }
        Command::Rollback {
            pipeline,
            operator,
            to,
            list,
            server,
        } => {
            let client = client_for(&server)?;
            let text = if list {
                let operator = operator.context("`--list` needs `--operator`")?;
                client::kept_versions(&client, &pipeline, &operator, server.json)?
            } else {
                client::rollback(
                    &client,
                    &pipeline,
                    operator.as_deref(),
                    to.as_deref(),
                    server.json,
                )?
            };
            println!("{text}");
        }
        Command::Tenants(TenantsCommand::Update {
            name,
            settings,
            server,
        }) => {
            let (limits, reach) = settings.body()?;
            let body = serde_json::json!({ "limits": limits, "reach": reach });
            let answer =
                client_for(&server)?.patch_json(&format!("/api/v1/tenants/{name}"), &body)?;
            match server.json {
                true => println!("{answer}"),
                false => {
                    println!("tenant `{name}` updated");
                    for stopped in answer["stopped"].as_array().into_iter().flatten() {
                        println!(
                            "stopped pipeline `{}`: {}",
                            stopped["pipeline"].as_str().unwrap_or("?"),
                            stopped["reason"].as_str().unwrap_or("?")
                        );
                    }
                }
            }
        }
        Command::Tenants(TenantsCommand::Create {
            name,
            settings,
            server,
        }) => {
            let (limits, reach) = settings.body()?;
            let body = serde_json::json!({ "name": name, "limits": limits, "reach": reach });
            let answer = client_for(&server)?.post_json("/api/v1/tenants", &body)?;
            match server.json {
                true => println!("{answer}"),
                false => println!(
                    "tenant `{name}` token (shown once): {}",
                    answer["token"].as_str().unwrap_or("?")
                ),
            }
        }
        Command::Run {
            pipeline,
            quiet,
            fresh,
            from_checkpoint,
            http,
            health,
        } => {
            let from = match (fresh, from_checkpoint) {
                (true, _) => RestoreFrom::Fresh,
                (false, Some(text)) => {
                    RestoreFrom::Checkpoint(checkpoints::parse_checkpoint_ref(&text)?)
                }
                (false, None) => RestoreFrom::Latest,
            };
            let progress = !quiet && std::io::stderr().is_terminal();
            let options = run::RunOptions::new(progress, from)
                .with_http(http)
                .with_health(health);
            eprint!("{}", run::run_file(&pipeline, &options)?);
        }
        Command::Sql(SqlCommand::Check { pipeline }) => print!("{}", sql::check(&pipeline)?),
        Command::Sql(SqlCommand::Explain { pipeline }) => print!("{}", sql::explain(&pipeline)?),
        Command::Checkpoints(CheckpointsCommand::List { pipeline, json }) => {
            print!("{}", checkpoints::list(&pipeline, json)?);
        }
        Command::Checkpoints(CheckpointsCommand::Show { pipeline, id }) => {
            print!("{}", checkpoints::show(&pipeline, id)?);
        }
        Command::Plugin(PluginCommand::Build {
            dir,
            output,
            rebuild,
        }) => {
            let mut options = build::BuildOptions::new();
            options.output = output;
            options.show_progress = std::io::stderr().is_terminal();
            if rebuild {
                options.cache = None;
            }
            let built = build::build_plugin_with(&dir, &options)?;
            let route = built
                .route
                .map(|route| format!(", {route:?} route"))
                .unwrap_or_default();
            let route = if built.reused {
                format!("{route}, inputs unchanged: reused")
            } else {
                route
            };
            let (compiled, took) = build::compile_for_this_host(&built.path)?;
            let native = match compiled {
                CacheOutcome::Hit => "native code cached".to_string(),
                CacheOutcome::Miss => {
                    format!("native code compiled in {:.1} s", took.as_secs_f64())
                }
            };
            println!(
                "{} ({} bytes, {}{route}; {native})",
                built.path.display(),
                built.size_bytes,
                built.language,
            );
        }
        Command::Plugin(PluginCommand::New {
            name,
            dir,
            lang,
            world,
            sdk_path,
        }) => {
            let language = build::Language::from_name(&lang)?;
            let sdk = sdk_path.unwrap_or_else(scaffold::default_sdk_path);
            let created = scaffold::new_plugin(&dir, &name, language, world, &sdk)?;
            println!(
                "created {}; build it with `sluice plugin build {}`",
                created.display(),
                created.display()
            );
        }
        Command::Plugin(PluginCommand::Inspect { file }) => print!("{}", inspect::describe(&file)?),
        Command::Plugin(PluginCommand::Test {
            file,
            input,
            raw,
            config,
            call_mode,
            key_field,
            timestamp_field,
            tumbling_ms,
        }) => {
            let config = config
                .iter()
                .map(|entry| {
                    entry
                        .split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .with_context(|| format!("--config {entry}: expected KEY=VALUE"))
                })
                .collect::<Result<Vec<_>>>()?;
            let call_mode = match call_mode.as_str() {
                "auto" => CallMode::Auto,
                "typed" => CallMode::Typed,
                "packed" => CallMode::Packed,
                other => bail!("--call-mode {other}: expected auto, typed or packed"),
            };
            let format = if raw {
                FileFormat::Lines
            } else {
                FileFormat::Jsonl
            };
            let mut options = try_plugin::TryOptions::default();
            options.format = format;
            options.config = config;
            options.call_mode = call_mode;
            options.key_field = key_field;
            options.timestamp_field = timestamp_field;
            options.tumbling_ms = tumbling_ms;
            let stdout = std::io::stdout();
            let counts = try_plugin::try_plugin(&file, &input, options, &mut stdout.lock())?;
            eprintln!(
                "{} records in: {} main, {} side, {} dead-letter",
                counts.input, counts.main, counts.side, counts.dead_letter
            );
        }
    }
    Ok(())
}
