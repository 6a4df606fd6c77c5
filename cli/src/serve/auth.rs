//! Bearer tokens: one admin token, created at the first start and printed
//! once, and tokens per tenant that the admin creates. Only SHA-256 digests
//! are stored (`auth.json` in the state directory); a presented token is
//! hashed and compared with every stored digest in constant time.

use super::reach::TenantReach;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq;

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The admin: manages tenants.
    Admin,
    /// A tenant: manages its own pipelines and plugins.
    Tenant(String),
}

/// A tenant's limits (a request over one is refused, naming it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TenantLimits {
    /// Pipelines the tenant may have.
    #[serde(default = "default_max_pipelines")]
    pub max_pipelines: usize,
    /// Largest plugin the tenant may upload, bytes.
    #[serde(default = "default_max_plugin_bytes")]
    pub max_plugin_bytes: usize,
    /// Plugin instances its pipelines may run together (one per operator
    /// with a plugin and worker), with room left for the largest operator
    /// to hold two versions during a swap.
    #[serde(default = "default_max_plugin_instances")]
    pub max_plugin_instances: u64,
    /// Memory limits of those instances together, MiB (with the same room
    /// for a swap).
    #[serde(default = "default_max_plugin_memory_mb")]
    pub max_plugin_memory_mb: u64,
    /// State of its pipelines on disk together, MiB: a pipeline that takes
    /// the tenant over is stopped with the reason.
    #[serde(default = "default_max_state_mb")]
    pub max_state_mb: u64,
    /// CPUs its plugins may use together (e.g. 0.5); none: no limit.
    #[serde(default)]
    pub cpu_cores: Option<f64>,
}

fn default_max_pipelines() -> usize {
    10
}

fn default_max_plugin_bytes() -> usize {
    64 << 20
}

fn default_max_plugin_instances() -> u64 {
    64
}

fn default_max_plugin_memory_mb() -> u64 {
    4096
}

fn default_max_state_mb() -> u64 {
    10_240
}

impl Default for TenantLimits {
    fn default() -> Self {
        TenantLimits {
            max_pipelines: default_max_pipelines(),
            max_plugin_bytes: default_max_plugin_bytes(),
            max_plugin_instances: default_max_plugin_instances(),
            max_plugin_memory_mb: default_max_plugin_memory_mb(),
            max_state_mb: default_max_state_mb(),
            cpu_cores: None,
        }
    }
}

/// A tenant as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TenantRecord {
    /// Digests of the tenant's tokens.
    pub token_digests: Vec<String>,
    /// Its limits.
    pub limits: TenantLimits,
    /// What its pipelines may reach (credentials sealed).
    #[serde(default)]
    pub reach: TenantReach,
}

/// `auth.json`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct AuthFile {
    admin_token_digest: String,
    tenants: BTreeMap<String, TenantRecord>,
}

/// The server's tokens and tenants, persisted in `auth.json`.
#[derive(Debug)]
pub struct Auth {
    file: PathBuf,
    data: AuthFile,
}

impl Auth {
    /// Loads `auth.json` from `state_dir`, or creates it with a new admin
    /// token, which is returned (the only time it is ever shown).
    pub fn open(state_dir: &Path) -> Result<(Auth, Option<String>)> {
        let file = state_dir.join("auth.json");
        if file.exists() {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let data: AuthFile = serde_json::from_str(&text)
                .with_context(|| format!("{} is not valid", file.display()))?;
            return Ok((Auth { file, data }, None));
        }
        let token = new_token("admin")?;
        let auth = Auth {
            file,
            data: AuthFile {
                admin_token_digest: digest(&token),
                tenants: BTreeMap::new(),
            },
        };
        auth.save()?;
        Ok((auth, Some(token)))
    }

    fn save(&self) -> Result<()> {
        let text = serde_json::to_string_pretty(&self.data)?;
        let temporary = self.file.with_extension("json.tmp");
        write_private(&temporary, text.as_bytes())
            .with_context(|| format!("writing {}", temporary.display()))?;
        std::fs::rename(&temporary, &self.file)
            .with_context(|| format!("writing {}", self.file.display()))
    }

    /// Who presents `token`, if anyone. Every stored digest is compared
    /// (in constant time), so the time taken says nothing about which
    /// matched.
    pub fn authenticate(&self, token: &str) -> Option<Caller> {
        let presented = digest(token);
        let mut caller = None;
        if equal(&presented, &self.data.admin_token_digest) {
            caller = Some(Caller::Admin);
        }
        for (name, tenant) in &self.data.tenants {
            for stored in &tenant.token_digests {
                if equal(&presented, stored) {
                    caller = Some(Caller::Tenant(name.clone()));
                }
            }
        }
        caller
    }

    /// Creates `tenant` (or adds a token to it, keeping its limits and
    /// reach where `limits` or `reach` is `None`); returns the new token.
    pub fn add_tenant_token(
        &mut self,
        tenant: &str,
        limits: Option<TenantLimits>,
        reach: Option<TenantReach>,
    ) -> Result<String> {
        let token = new_token(tenant)?;
        let before = self.data.tenants.get(tenant).cloned();
        let record = self
            .data
            .tenants
            .entry(tenant.to_string())
            .or_insert_with(|| TenantRecord {
                token_digests: Vec::new(),
                limits: TenantLimits::default(),
                reach: TenantReach::default(),
            });
        record.token_digests.push(digest(&token));
        if let Some(limits) = limits {
            record.limits = limits;
        }
        if let Some(reach) = reach {
            record.reach = reach;
        }
        self.save_or_restore(tenant, before)?;
        Ok(token)
    }

    /// Changes an existing tenant's limits and reach (each only if given);
    /// `false` if there is no such tenant.
    pub fn update_tenant(
        &mut self,
        tenant: &str,
        limits: Option<TenantLimits>,
        reach: Option<TenantReach>,
    ) -> Result<bool> {
        let before = self.data.tenants.get(tenant).cloned();
        let Some(record) = self.data.tenants.get_mut(tenant) else {
            return Ok(false);
        };
        if let Some(limits) = limits {
            record.limits = limits;
        }
        if let Some(reach) = reach {
            record.reach = reach;
        }
        self.save_or_restore(tenant, before)?;
        Ok(true)
    }

    /// Saves, or puts `tenant` back as it was if saving fails (e.g. a
    /// credential cannot be sealed), so memory never differs from disk.
    fn save_or_restore(&mut self, tenant: &str, before: Option<TenantRecord>) -> Result<()> {
        let saved = self.save();
        if saved.is_err() {
            match before {
                Some(record) => self.data.tenants.insert(tenant.to_string(), record),
                None => self.data.tenants.remove(tenant),
            };
        }
        saved
    }

    /// The tenant's limits, if it exists.
    pub fn limits(&self, tenant: &str) -> Option<&TenantLimits> {
        self.data.tenants.get(tenant).map(|t| &t.limits)
    }

    /// The tenant's reach, if it exists.
    pub fn reach(&self, tenant: &str) -> Option<&TenantReach> {
        self.data.tenants.get(tenant).map(|t| &t.reach)
    }

    /// The tenants: names, limits and reach.
    pub fn tenants(&self) -> impl Iterator<Item = (&String, &TenantLimits, &TenantReach)> {
        self.data
            .tenants
            .iter()
            .map(|(name, t)| (name, &t.limits, &t.reach))
    }
}

/// Writes `bytes` to a new file at `path` that only this user can read
/// (mode 0600).
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// A new random token: a readable prefix and 32 random bytes.
fn new_token(who: &str) -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    Ok(format!("sluice_{}_{}", who, hex::encode(bytes)))
}

/// The stored form of a token.
fn digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn equal(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_authenticate_their_owner_only_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (mut auth, admin) = Auth::open(dir.path()).unwrap();
        let admin = admin.unwrap();
        assert_eq!(auth.authenticate(&admin), Some(Caller::Admin));
        let a = auth.add_tenant_token("a", None, None).unwrap();
        let b = auth.add_tenant_token("b", None, None).unwrap();
        assert_eq!(auth.authenticate(&a), Some(Caller::Tenant("a".into())));
        assert_eq!(auth.authenticate(&b), Some(Caller::Tenant("b".into())));
        assert_eq!(auth.authenticate("sluice_a_0000"), None);
        let stored = std::fs::read_to_string(dir.path().join("auth.json")).unwrap();
        assert!(
            !stored.contains(&admin) && !stored.contains(&a),
            "tokens stored in clear"
        );
        let (again, shown) = Auth::open(dir.path()).unwrap();
        assert!(shown.is_none(), "the admin token is shown once");
        assert_eq!(again.authenticate(&a), Some(Caller::Tenant("a".into())));
    }
}
