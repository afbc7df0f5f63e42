//! The `[nri]` table: NRI, the node's resource plugins (`src/nri`), on by
//! default as in containerd 2.x, with containerd's defaults.

use super::ConfigError;
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

impl NriConfig {
    /// Absolute paths, timeouts above zero.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (key, p) in [
            ("nri.socket_path", &self.socket_path),
            ("nri.plugin_path", &self.plugin_path),
            ("nri.plugin_config_path", &self.plugin_config_path),
        ] {
            if !p.is_absolute() {
                return Err(ConfigError(format!(
                    "{key}: {:?} must be an absolute path",
                    p.display().to_string()
                )));
            }
        }
        for (key, v) in [
            (
                "nri.plugin_registration_timeout_ms",
                self.plugin_registration_timeout_ms,
            ),
            (
                "nri.plugin_request_timeout_ms",
                self.plugin_request_timeout_ms,
            ),
        ] {
            if v == 0 {
                return Err(ConfigError(format!(
                    "{key}: 0 would drop every plugin; give milliseconds above zero"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_and_zero_timeouts_are_refused_by_key() {
        assert!(NriConfig::default().validate().is_ok());
        let e = NriConfig {
            socket_path: "nri.sock".into(),
            ..Default::default()
        }
        .validate()
        .expect_err("relative");
        assert!(e.0.starts_with("nri.socket_path:"), "{e}");
        let e = NriConfig {
            plugin_request_timeout_ms: 0,
            ..Default::default()
        }
        .validate()
        .expect_err("zero");
        assert!(e.0.starts_with("nri.plugin_request_timeout_ms:"), "{e}");
    }
}
