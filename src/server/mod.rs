//! `husk serve`: the CRI v1 RuntimeService and ImageService, plus husk's
//! admin API, on one unix socket.
//!
//! Handlers are thin: validate → convert → call a manager → convert back;
//! one file per RPC under `runtime/` and `image/`. The socket is bound
//! first; managers are opened (recovering state) in the background, and
//! until then every RPC answers Unavailable (see `instrument.rs`).

pub mod admin;
pub mod chunks;
mod containerd_api;
pub mod deadline;
pub mod h2front;
pub(crate) mod idle;
pub mod image;
pub mod instrument;
pub mod prometheus;
pub mod reload;
pub mod runtime;
pub mod status;
pub mod streaming;

use crate::api::admin::admin_server::AdminServer;
use crate::api::cri::image_service_server::ImageServiceServer;
use crate::api::cri::runtime_service_server::RuntimeServiceServer;
use crate::config::Config;
use crate::image::{ImageManager, ImageStoreConfig};
use anyhow::Context as _;
use instrument::State;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::StreamExt as _;

/// kubelet sends messages over tonic's 4 MiB default.
const MAX_MESSAGE: usize = 64 << 20;

/// Holds `<root>/husk.lock` so two servers never share a root.
fn lock_root(cfg: &Config) -> anyhow::Result<std::fs::File> {
    std::fs::create_dir_all(&cfg.root)
        .with_context(|| format!("create root {}", cfg.root.display()))?;
    let path = cfg.root.join("husk.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("open {}", path.display()))?;
    // A server killed a moment ago may have left a child between fork and
    // exec (a CNI plugin, a shim being started) holding the lock's file
    // for a few milliseconds: wait a little before calling the root taken.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        if std::time::Instant::now() >= deadline {
            anyhow::bail!("another husk serve is using root {}", cfg.root.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(f)
}

fn bind(path: &std::path::Path) -> anyhow::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("remove stale socket {}", path.display()))
        }
        _ => {}
    }
    let l = UnixListener::bind(path).with_context(|| format!("listen on {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .with_context(|| format!("chmod {}", path.display()))?;
    Ok(l)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}

/// The sealed handle of the husk binary that every shim is started from
/// (`shim::sealed`), made once per server process.
fn sealed_exe(cfg: &Config) -> anyhow::Result<std::path::PathBuf> {
    static SEALED: std::sync::OnceLock<crate::shim::sealed::Sealed> = std::sync::OnceLock::new();
    if let Some(s) = SEALED.get() {
        return Ok(s.program());
    }
    let exe = std::env::current_exe().context("locate the husk binary")?;
    let s = crate::shim::sealed::Sealed::new(&exe, &cfg.state.join("exe"))
        .map_err(anyhow::Error::msg)
        .context("seal the husk binary for the shims")?;
    tracing::info!(kind = ?s.kind(), binary = %s.original().display(), "shims start from a sealed binary");
    Ok(SEALED.get_or_init(|| s).program())
}

/// Runs the server until SIGTERM/SIGINT; SIGHUP reloads the config
/// through `reload` (`reload.rs`), when given.
pub async fn serve(cfg: Config, reload: Option<reload::Reloader>) -> anyhow::Result<()> {
    let driver = crate::cgroup::Driver::resolve(&cfg.cgroup.driver, crate::cgroup::Layout::host())
        .map_err(anyhow::Error::msg)?;
    crate::cgroup::Driver::set_current(driver);
    tracing::info!(driver = driver.name(), configured = %cfg.cgroup.driver, "cgroup driver");
    let _lock = lock_root(&cfg)?;
    std::fs::create_dir_all(&cfg.state)
        .with_context(|| format!("create state {}", cfg.state.display()))?;
    crate::store::modes::secure_layout(&cfg.root, &cfg.state).with_context(|| {
        format!(
            "set the modes of {} and {}",
            cfg.root.display(),
            cfg.state.display()
        )
    })?;
    // With mount_namespace = "pod", the pods' namespaces keep the node's
    // propagation, but not under the server's own dirs (`podns`).
    let own_ns_dirs = if cfg.mount_namespace == "pod" {
        Some(
            crate::sandbox::podns::keep_private(&[cfg.root.as_path(), cfg.state.as_path()])
                .context("make the server's root and state private mounts")?,
        )
    } else {
        None
    };
    // Released when serve returns: at a clean stop, and on a failed start.
    let _release = own_ns_dirs.clone().map(ReleasePrivate);
    let metrics = match cfg.metrics.address.as_str() {
        "" => None,
        a => Some(
            crate::server::prometheus::bind(a)
                .await
                .map_err(|e| anyhow::anyhow!(crate::config::ConfigError(e)))?,
        ),
    };
    crate::otel::apply(&cfg.tracing).map_err(anyhow::Error::msg)?;
    let listener = bind(&cfg.listen)?;
    let state = Arc::new(State::new(cfg.clone()));
    let stream_server = crate::streaming::Server::start(
        &streaming::settings(&cfg),
        Arc::new(streaming::StateBackend(state.clone())),
    )
    .await
    .context("start the streaming server")?;
    state.set_streaming(stream_server);
    if let Some(m) = metrics {
        tracing::info!(address = %m.address(), "metrics served at /metrics");
        crate::server::prometheus::spawn(m, &state);
    }
    if let Some(r) = reload {
        reload::spawn(state.clone(), cfg.clone(), r).context("handle SIGHUP")?;
    }

    let recover = state.clone();
    let store_cfg = ImageStoreConfig {
        root: cfg.root.clone(),
        registry_config_dir: cfg.registry.config_dir.clone(),
        max_concurrent_downloads: cfg.registry.max_concurrent_downloads,
        stall_timeout: Duration::from_secs(cfg.registry.stall_timeout_secs),
    };
    crate::shim::client::set_own_mount_ns(own_ns_dirs.as_deref());
    let sandbox_paths = crate::sandbox::manager::SandboxPaths {
        root: cfg.root.clone(),
        state: cfg.state.clone(),
        cni_conf_dir: cfg.cni.conf_dir.clone(),
        cni_bin_dirs: cfg.cni.bin_dirs.clone(),
        cni_timeout: std::time::Duration::from_secs(cfg.cni.plugin_timeout_secs),
        sandbox_image: state.sandbox_image.clone(),
        exe: sealed_exe(&cfg)?,
        handlers: state.handlers.clone(),
        quiet_for: idle::quiet_for,
    };
    let root = cfg.root.clone();
    let cdi_dirs = cfg.cdi.spec_dirs.clone();
    let blockio = cfg.cgroup.blockio_config_file.clone();
    let (emitter, raw_events) = crate::container::events::channel();
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<anyhow::Error>();
    let nri_state = state.clone();
    let nri_cfg = cfg.nri.clone();
    tokio::spawn(async move {
        let r = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
            let images = Arc::new(ImageManager::open(store_cfg).context("open image store")?);
            let sandboxes = crate::sandbox::SandboxManager::open(sandbox_paths, images.clone())
                .context("recover pod sandboxes")?;
            let sandboxes = Arc::new(sandboxes);
            let containers = crate::container::manager::ContainerManager::open(
                &root,
                images.clone(),
                sandboxes.clone(),
                emitter,
            )
            .context("recover containers")?
            .with_cdi_dirs(cdi_dirs);
            containers.set_blockio_config(blockio);
            let containers = Arc::new(containers);
            containers.watch_exits();
            recover.set_containers(containers);
            recover.set_sandboxes(sandboxes);
            recover.set_events(
                runtime::container_events::start(recover.clone(), raw_events)
                    .context("start the event dispatcher")?,
            );
            recover.set_images(images);
            Ok(())
        })
        .await;
        // NRI's plugins join once every pod and container is known, so
        // their Synchronize misses none.
        let r = match r {
            Ok(Ok(())) => start_nri(&nri_state, &nri_cfg).await.map(Ok),
            r => r.map_err(anyhow::Error::from),
        };
        match r {
            Ok(Ok(())) => {
                tracing::info!("recovery done; serving");
                crate::sdnotify::ready();
            }
            Ok(Err(e)) => {
                let _ = failed_tx.send(e);
            }
            Err(e) => {
                let _ = failed_tx.send(anyhow::anyhow!("recovery: {e:#}"));
            }
        }
    });
    let failure = Arc::new(std::sync::Mutex::new(None));
    let failure_slot = failure.clone();
    let stop = async move {
        tokio::select! {
            _ = shutdown_signal() => {}
            Ok(e) = failed_rx => {
                tracing::error!(error = %format!("{e:#}"), "recovery failed");
                *failure_slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            }
        }
    };

    idle::spawn_trimmer();
    containerd_api::spawn(&cfg.state, state.clone())?;
    tracing::info!(listen = %cfg.listen.display(), root = %cfg.root.display(), version = env!("CARGO_PKG_VERSION"), "husk serve listening");
    let result = tonic::transport::Server::builder()
        .trace_fn(|req| tracing::debug_span!("rpc", method = %req.uri().path()))
        .layer(deadline::DeadlineLayer)
        .layer(crate::otel::propagate::TraceLayer)
        .add_service(
            RuntimeServiceServer::new(runtime::Runtime::new(state.clone()))
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        )
        .add_service(
            ImageServiceServer::new(image::Images::new(state.clone()))
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        )
        .add_service(AdminServer::new(admin::Admin::new(state.clone())))
        .serve_with_incoming_shutdown(
            UnixListenerStream::new(listener).map(|c| c.map(h2front::FrontStream::new)),
            stop,
        )
        .await;
    let _ = std::fs::remove_file(&cfg.listen);
    if let Ok(sandboxes) = state.sandboxes() {
        sandboxes.close();
    }
    crate::otel::stop().await;
    result.context("grpc server")?;
    if let Some(e) = failure.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(e);
    }
    tracing::info!("husk serve stopped");
    Ok(())
}

/// The server's root and state, bound onto themselves in pod mode: their
/// binds go when it returns, stopped or failed at its start
/// (`podns::release_private`).
struct ReleasePrivate(Vec<std::path::PathBuf>);

impl Drop for ReleasePrivate {
    fn drop(&mut self) {
        crate::sandbox::podns::release_private(&self.0);
    }
}

/// Starts hosting NRI plugins (`[nri]`), handing the chain to the
/// container manager. A socket that cannot be bound leaves the node
/// without NRI, loudly, as containerd does; pods still run.
async fn start_nri(state: &Arc<State>, cfg: &crate::config::NriConfig) -> anyhow::Result<()> {
    let containers = state
        .containers()
        .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
    let view = containers.clone();
    let snapshot = Arc::new(move || view.nri_snapshot());
    let nri = match crate::nri::Nri::start(cfg, snapshot, containers.nri_updates()).await {
        Ok(Some(n)) => n,
        Ok(None) => return Ok(()),
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "NRI is off: its plugins cannot connect");
            return Ok(());
        }
    };
    containers.set_nri(nri);
    Ok(())
}
