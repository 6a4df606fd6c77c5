//! Long operations (start, stop, delete a pipeline): a request answers at
//! once with an operation id; `GET /api/v1/operations/{id}` tells when it
//! is done. A client-chosen `Idempotency-Key` maps a retried request to the
//! operation the first one started, so a retry never acts twice.

use super::supervisor::{PipelineState, Supervisor};
use serde::Serialize;
use sluice_host::sync::lock;
use std::collections::HashMap;
use std::sync::Mutex;

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    /// Start (or create and start) a pipeline: done once it runs.
    Start,
    /// Stop a pipeline with a final checkpoint.
    Stop,
    /// Stop and delete a pipeline.
    Delete,
}

/// Where an operation is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationStatus {
    /// Not done yet.
    Pending,
    /// Done.
    Succeeded,
    /// Failed; see `error`.
    Failed,
}

/// An operation, as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Operation {
    /// Its id.
    pub id: String,
    /// What it does.
    pub kind: OperationKind,
    /// The pipeline it acts on.
    pub pipeline: String,
    /// Where it is.
    pub status: OperationStatus,
    /// Why it failed.
    pub error: Option<String>,
}

#[derive(Default)]
struct Table {
    operations: HashMap<String, (String, Operation)>,
    by_key: HashMap<(String, String), String>,
}

/// Every operation since the server started.
#[derive(Default)]
pub struct Operations {
    table: Mutex<Table>,
}

impl Operations {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        lock(&self.table)
    }

    /// Records a new pending operation of `tenant`.
    pub fn start(
        &self,
        tenant: &str,
        idempotency_key: Option<&str>,
        kind: OperationKind,
        pipeline: &str,
    ) -> Operation {
        let mut bytes = [0u8; 12];
        // Ids only need to be unique; a failing source still gives that
        // with the counter below.
        let _ = getrandom::fill(&mut bytes);
        let mut table = self.table();
        let id = format!("op-{}-{}", hex::encode(bytes), table.operations.len());
        let operation = Operation {
            id: id.clone(),
            kind,
            pipeline: pipeline.to_string(),
            status: OperationStatus::Pending,
            error: None,
        };
        table
            .operations
            .insert(id.clone(), (tenant.to_string(), operation.clone()));
        if let Some(key) = idempotency_key {
            table
                .by_key
                .insert((tenant.to_string(), key.to_string()), id);
        }
        operation
    }

    /// The operation an earlier request with this key started.
    pub fn by_idempotency_key(&self, tenant: &str, key: &str) -> Option<Operation> {
        let table = self.table();
        let id = table.by_key.get(&(tenant.to_string(), key.to_string()))?;
        table.operations.get(id).map(|(_, op)| op.clone())
    }

    /// Marks an operation done.
    pub fn finish_now(&self, id: &str, result: Result<(), String>) {
        if let Some((_, operation)) = self.table().operations.get_mut(id) {
            match result {
                Ok(()) => operation.status = OperationStatus::Succeeded,
                Err(error) => {
                    operation.status = OperationStatus::Failed;
                    operation.error = Some(error);
                }
            }
        }
    }

    /// `tenant`'s operation `id` (another tenant's is `None`); a pending
    /// start is done once its pipeline runs (or failed if it failed).
    pub fn get(&self, tenant: &str, id: &str, supervisor: &Supervisor) -> Option<Operation> {
        let mut table = self.table();
        let (owner, operation) = table.operations.get_mut(id)?;
        if owner != tenant {
            return None;
        }
        if operation.kind == OperationKind::Start && operation.status == OperationStatus::Pending {
            let key = (owner.clone(), operation.pipeline.clone());
            match supervisor.status(&key).map(|s| s.state) {
                Some(PipelineState::Running | PipelineState::Finished) => {
                    operation.status = OperationStatus::Succeeded;
                }
                Some(PipelineState::Failed(error)) => {
                    operation.status = OperationStatus::Failed;
                    operation.error = Some(error);
                }
                None => {
                    operation.status = OperationStatus::Failed;
                    operation.error = Some("the pipeline was deleted".into());
                }
                _ => {}
            }
        }
        Some(operation.clone())
    }
}
