//! SIGHUP: the config is read again (file, drop-ins, flags) and what can
//! change while pods run is applied: the log level and format, the
//! sandbox image, the registry hosts dir, the CDI spec dirs, the metrics
//! endpoint, the tracing settings and the runtime handlers (a running pod keeps its handler by name; its
//! containers are looked up under the new table). A config that does not
//! load or validate is logged and the running one kept, whole. Keys that
//! only take effect at a start are named in a warning when they changed.

use super::instrument::State;
use crate::config::{Config, ConfigError};
use std::sync::Arc;

/// Reads the config again, as at the start.
pub type Reloader = Box<dyn Fn() -> Result<Config, ConfigError> + Send + Sync>;

/// NRI's timeouts, which a reload applies.
fn nri_timeouts(c: &Config) -> (u64, u64) {
    (
        c.nri.plugin_registration_timeout_ms,
        c.nri.plugin_request_timeout_ms,
    )
}

/// What changed between `old` and `new`, by key: (applied, needs a restart).
pub fn changes(old: &Config, new: &Config) -> (Vec<&'static str>, Vec<&'static str>) {
    let live = [
        ("log_level", old.log_level != new.log_level),
        ("log_format", old.log_format != new.log_format),
        ("sandbox_image", old.sandbox_image != new.sandbox_image),
        (
            "registry.config_dir",
            old.registry.config_dir != new.registry.config_dir,
        ),
        ("cdi.spec_dirs", old.cdi.spec_dirs != new.cdi.spec_dirs),
        (
            "cgroup.blockio_config_file",
            old.cgroup.blockio_config_file != new.cgroup.blockio_config_file,
        ),
        ("metrics.address", old.metrics != new.metrics),
        ("tracing", old.tracing != new.tracing),
        (
            "runtimes, default_runtime",
            old.runtimes != new.runtimes || old.default_runtime != new.default_runtime,
        ),
        (
            "nri.plugin_registration_timeout_ms, nri.plugin_request_timeout_ms",
            nri_timeouts(old) != nri_timeouts(new),
        ),
    ];
    let restart = [
        ("root", old.root != new.root),
        ("state", old.state != new.state),
        ("listen", old.listen != new.listen),
        (
            "registry.max_concurrent_downloads, registry.stall_timeout_secs",
            old.registry.max_concurrent_downloads != new.registry.max_concurrent_downloads
                || old.registry.stall_timeout_secs != new.registry.stall_timeout_secs,
        ),
        ("cni", old.cni != new.cni),
        ("cgroup.driver", old.cgroup.driver != new.cgroup.driver),
        (
            "mount_namespace",
            old.mount_namespace != new.mount_namespace,
        ),
        ("streaming", old.streaming != new.streaming),
        (
            "nri (but its timeouts)",
            crate::config::NriConfig {
                plugin_registration_timeout_ms: 0,
                plugin_request_timeout_ms: 0,
                ..old.nri.clone()
            } != crate::config::NriConfig {
                plugin_registration_timeout_ms: 0,
                plugin_request_timeout_ms: 0,
                ..new.nri.clone()
            },
        ),
    ];
    let pick = |v: &[(&'static str, bool)]| v.iter().filter(|(_, c)| *c).map(|(k, _)| *k).collect();
    (pick(&live), pick(&restart))
}

/// Applies what can change live; the keys applied. The new metrics
/// endpoint is bound first: one that cannot be fails the reload whole.
async fn apply(
    state: &Arc<State>,
    old: &Config,
    new: &Config,
) -> Result<Vec<&'static str>, String> {
    let (live, restart) = changes(old, new);
    let metrics = match new.metrics.address.as_str() {
        a if old.metrics == new.metrics || a.is_empty() => None,
        a => Some(crate::server::prometheus::bind(a).await?),
    };
    if old.tracing != new.tracing {
        crate::otel::apply(&new.tracing)?;
    }
    if !restart.is_empty() {
        tracing::warn!(keys = ?restart, "changed in the config, but only a restart applies them");
    }
    if old.metrics != new.metrics {
        match metrics {
            Some(m) => crate::server::prometheus::spawn(m, state),
            None => crate::server::prometheus::stop(),
        }
    }
    if old.log_level != new.log_level || old.log_format != new.log_format {
        crate::logging::reload(&new.log_level, &new.log_format)?;
    }
    if old.sandbox_image != new.sandbox_image {
        *state
            .sandbox_image
            .write()
            .unwrap_or_else(|p| p.into_inner()) = new.sandbox_image.clone();
    }
    if old.registry.config_dir != new.registry.config_dir {
        if let Ok(images) = state.images() {
            images.set_registry_config_dir(new.registry.config_dir.clone());
        }
    }
    if old.cdi.spec_dirs != new.cdi.spec_dirs {
        if let Ok(c) = state.containers() {
            c.set_cdi_dirs(new.cdi.spec_dirs.clone());
        }
    }
    if old.cgroup.blockio_config_file != new.cgroup.blockio_config_file {
        if let Ok(c) = state.containers() {
            c.set_blockio_config(new.cgroup.blockio_config_file.clone());
        }
    }
    if nri_timeouts(old) != nri_timeouts(new) {
        if let Some(nri) = state.containers().ok().and_then(|c| c.nri()) {
            nri.set_timeouts(
                std::time::Duration::from_millis(new.nri.plugin_registration_timeout_ms),
                std::time::Duration::from_millis(new.nri.plugin_request_timeout_ms),
            )
            .await;
        }
    }
    if old.runtimes != new.runtimes || old.default_runtime != new.default_runtime {
        let systemd = crate::cgroup::Driver::current() == crate::cgroup::Driver::Systemd;
        state
            .handlers
            .set(crate::sandbox::handlers::Handlers::new(new, systemd));
    }
    Ok(live)
}

/// Serves SIGHUP until the process ends.
pub fn spawn(state: Arc<State>, start: Config, reload: Reloader) -> anyhow::Result<()> {
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let reload = Arc::new(reload);
    tokio::spawn(async move {
        let mut current = start;
        while hup.recv().await.is_some() {
            crate::sdnotify::reloading();
            let r = reload.clone();
            let loaded = tokio::task::spawn_blocking(move || r())
                .await
                .map_err(|e| ConfigError(format!("reload task: {e}")))
                .and_then(|c| c);
            match loaded {
                Err(e) => {
                    tracing::error!(error = %e, "config reload failed; the running config is kept")
                }
                Ok(new) => match apply(&state, &current, &new).await {
                    Ok(applied) => {
                        tracing::info!(applied = ?applied, "config reloaded");
                        current = new;
                    }
                    Err(e) => tracing::error!(error = %e, "config reload failed"),
                },
            }
            crate::sdnotify::ready();
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nri_timeouts_apply_live_and_its_socket_at_a_restart() {
        let old = Config::default();
        let mut new = old.clone();
        new.nri.plugin_request_timeout_ms = 500;
        assert_eq!(
            changes(&old, &new),
            (
                vec!["nri.plugin_registration_timeout_ms, nri.plugin_request_timeout_ms"],
                vec![]
            )
        );
        new.nri.socket_path = "/run/other/nri.sock".into();
        assert_eq!(changes(&old, &new).1, ["nri (but its timeouts)"]);
    }

    #[test]
    fn changes_are_sorted_into_live_and_restart() {
        let old = Config::default();
        let mut new = old.clone();
        new.log_level = "debug".into();
        new.sandbox_image = "registry.example/pause:9".into();
        new.root = "/elsewhere".into();
        let (live, restart) = changes(&old, &new);
        assert_eq!(live, ["log_level", "sandbox_image"]);
        assert_eq!(restart, ["root"]);
        assert_eq!(changes(&old, &old), (vec![], vec![]));
    }
}
