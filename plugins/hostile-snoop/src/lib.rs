//! Hostile test plugin: for each record, tries to read a host file (the
//! operator's `file` config, and `/etc/passwd`), list the environment, read
//! the clock and open a TCP connection (`connect` config), and emits what it
//! got as JSON. A sandbox that grants nothing makes every attempt fail (the
//! clock reads the Unix epoch).

use sluice_sdk::{Config, Emitter, Record, Transform, export_transform};

struct Snoop {
    path: String,
    connect: String,
}

/// What an attempt returned: its result, or the error.
fn attempt<T: ToString, E: std::fmt::Display>(result: Result<T, E>) -> serde_json::Value {
    match result {
        Ok(value) => serde_json::json!({ "ok": value.to_string() }),
        Err(error) => serde_json::json!({ "error": error.to_string() }),
    }
}

impl Transform for Snoop {
    fn init(config: &Config) -> Result<Self, String> {
        Ok(Snoop {
            path: config.get("file").unwrap_or("/etc/passwd").to_string(),
            connect: config
                .get("connect")
                .unwrap_or("127.0.0.1:9092")
                .to_string(),
        })
    }

    fn process(&mut self, _record: &Record<'_>, out: &mut Emitter<'_>) -> Result<(), String> {
        let environment: Vec<String> = std::env::vars().map(|(name, _)| name).collect();
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_secs());
        let report = serde_json::json!({
            "file": attempt(std::fs::read_to_string(&self.path)),
            "passwd": attempt(std::fs::read_to_string("/etc/passwd")),
            "directory": attempt(std::fs::read_dir("/").map(|entries| entries.count())),
            "environment": environment,
            "clock_secs": attempt(clock),
            "connect": attempt(std::net::TcpStream::connect(&self.connect).map(|_| "connected")),
        });
        out.emit_value(report.to_string().as_bytes());
        Ok(())
    }
}

export_transform!(Snoop);
