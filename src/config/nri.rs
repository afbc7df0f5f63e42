//! The `[nri]` table: NRI, the node's resource plugins (`src/nri`), on by
//! default as in containerd 2.x, with containerd's defaults.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NriConfig {
    /// Whether husk hosts NRI plugins at all.
    pub enable: bool,
    /// The socket external plugins dial.
    pub socket_path: PathBuf,
    /// Pre-installed plugins (`<idx>-<name>` executables) started at
    /// start-up with a connection on fd 3.
    pub plugin_path: PathBuf,
    /// Their configs: `<idx>-<name>.conf` or `<name>.conf`.
    pub plugin_config_path: PathBuf,
    /// Milliseconds a plugin has to register once connected.
    pub plugin_registration_timeout_ms: u64,
    /// Milliseconds a plugin has to answer one request.
    pub plugin_request_timeout_ms: u64,
    /// Refuse external connections: only pre-installed plugins run.
    pub disable_connections: bool,
}

impl Default for NriConfig {
    fn default() -> Self {
        NriConfig {
            enable: true,
            socket_path: "/var/run/nri/nri.sock".into(),
            plugin_path: "/opt/nri/plugins".into(),
            plugin_config_path: "/etc/nri/conf.d".into(),
            plugin_registration_timeout_ms: 5000,
            plugin_request_timeout_ms: 2000,
            disable_connections: false,
        }
    }
}
