//! The streaming server's view of `husk serve`: exec and attach go to the
//! container manager (and so to the pod's shim), port-forward finds the
//! sandbox's pinned network namespace. Managers are looked up per session,
//! so the server can start before recovery is done.

use super::instrument::State;
use crate::streaming::tokens::StdioOpts;
use crate::streaming::{Backend, ProcessIo, Settings};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub struct StateBackend(pub Arc<State>);

#[async_trait::async_trait]
impl Backend for StateBackend {
    async fn exec(
        &self,
        container: &str,
        cmd: &[String],
        opts: StdioOpts,
    ) -> Result<ProcessIo, String> {
        let c = self.0.containers().map_err(|s| s.message().to_string())?;
        c.exec_stream(container, cmd, opts)
            .await
            .map_err(|e| e.to_string())
    }

    async fn attach(&self, container: &str, opts: StdioOpts) -> Result<ProcessIo, String> {
        let c = self.0.containers().map_err(|s| s.message().to_string())?;
        c.attach(container, opts).await.map_err(|e| e.to_string())
    }

    fn netns(&self, sandbox: &str) -> Result<PathBuf, String> {
        let s = self.0.sandboxes().map_err(|s| s.message().to_string())?;
        let rec = s
            .get(sandbox)
            .ok_or_else(|| format!("pod sandbox {sandbox} not found"))?;
        // A host-network pod has no namespace of its own: its ports are
        // the host's, as husk serve sees them.
        Ok(rec
            .netns
            .unwrap_or_else(|| PathBuf::from("/proc/self/ns/net")))
    }
}

/// The streaming settings from the config.
pub fn settings(cfg: &crate::config::Config) -> Settings {
    let path = |s: &str| (!s.is_empty()).then(|| PathBuf::from(s));
    Settings {
        address: cfg.streaming.address.clone(),
        tls_cert: path(&cfg.streaming.tls_cert),
        tls_key: path(&cfg.streaming.tls_key),
        token_ttl: Duration::from_secs(cfg.streaming.token_ttl_secs),
    }
}
