//! A container as recorded on disk (`<root>/containers/<id>/container.json`,
//! versioned, written atomically): what the managers, the events and the
//! stats read, with no behaviour of its own.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The file in a container dir that names its pod (written first).
pub(super) const SANDBOX_FILE: &str = "sandbox_id";

pub(super) const RECORD_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    Unknown,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ContainerRecord {
    pub version: u32,
    pub id: String,
    pub sandbox_id: String,
    pub name: String,
    pub attempt: u32,
    pub image: String,
    pub image_ref: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub log_path: String,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub state: ContainerState,
    pub reason: String,
    pub message: String,
    pub cgroups_path: String,
    pub stop_signal: i32,
    /// The ids of the images mounted as volumes (RemoveImage refuses them).
    #[serde(default)]
    pub image_volumes: Vec<String>,
    /// The identity of the first process (absent in records written
    /// before it was kept).
    #[serde(default)]
    pub user: Option<super::user::RecordUser>,
}

impl ContainerRecord {
    pub(super) fn reserved_name(&self, pod: &str) -> String {
        format!("{}_{}_{}", self.name, pod, self.attempt)
    }
}
