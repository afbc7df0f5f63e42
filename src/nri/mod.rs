//! NRI, the Node Resource Interface (containerd/nri v0.12): the node's
//! resource plugins, hosted by husk serve.
//!
//! - External plugins dial `[nri] socket_path`; pre-installed ones
//!   (`<idx>-<name>` under `plugin_path`) are started with a connected
//!   socket on fd 3. Each registers, is configured and synchronized with
//!   every pod and container already there (`plugin.rs`), then joins the
//!   chain, kept in index order.
//! - The pod flow calls the chain at NRI's points: pod run, stop and
//!   remove; container create (whose adjustments change the spec,
//!   `adjust.rs`), post-create, start, post-start, stop and remove.
//! - A plugin that hangs past the request timeout, closes its connection
//!   or speaks garbage is dropped from the chain; a request never waits
//!   longer than the request timeout per plugin. An error a plugin
//!   answers fails a pod's run or a container's create, with the plugin
//!   named; at the other points it is logged.
//! - With no plugin connected, an event is one read of an empty list.
//!
//! The wire is ttrpc over NRI's multiplexed connection (`ttrpc.rs`),
//! written here on prost's messages of NRI's proto: the Rust ttrpc crate
//! brings a second protobuf stack and cannot run over the multiplexed
//! trunk without an adapter of the same size.

pub mod adjust;
pub mod convert;
mod events;
pub mod plugin;
mod preinstalled;
pub mod resources;
pub mod ttrpc;

use crate::api::nri as api;
use crate::config::NriConfig;
use plugin::{Plugin, Setup};
use prost::Message;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::net::UnixStream;
use tokio::sync::RwLock;

/// What applying a plugin's updates comes to: the updates that failed.
pub type Applied = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Vec<api::ContainerUpdate>, String>> + Send>,
>;

/// Applies a plugin's unsolicited container updates and evictions.
pub type Updates = Arc<dyn Fn(api::UpdateContainersRequest) -> Applied + Send + Sync>;

/// Every pod and container there is, for a new plugin's `Synchronize`.
pub type Snapshot = Arc<dyn Fn() -> (Vec<api::PodSandbox>, Vec<api::Container>) + Send + Sync>;

/// A message a little under ttrpc's limit, for `Synchronize` pages.
const PAGE_BYTES: usize = crate::ttrpc::MAX_MESSAGE - (64 << 10);

/// The plugins husk hosts.
pub struct Nri {
    /// What a joining plugin is told (a reload may change the timeouts).
    setup: std::sync::Mutex<Setup>,
    cfg: NriConfig,
    /// The chain, in index order. Events read it; a plugin joining takes
    /// it for writing while it synchronizes, so it misses nothing.
    chain: RwLock<Vec<Arc<Plugin>>>,
    /// The chain's length, read without a lock: no plugin, no work.
    active: AtomicUsize,
    snapshot: OnceLock<Snapshot>,
    updates: OnceLock<Updates>,
    /// The containers the plugins were told stopped, each told once (at
    /// StopContainer, at its own exit or at its removal, whichever comes
    /// first), as containerd tells them.
    stopped: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Held while the plugins are told a container stopped, so a Stop
    /// told from an exit is out before the container's Remove.
    stop_order: tokio::sync::Mutex<()>,
    /// Where an exit seen on husk's exit thread is told from.
    rt: tokio::runtime::Handle,
}

/// A connected plugin, as `husk check` and the status report it.
#[derive(Debug, Clone, PartialEq)]
pub struct Connected {
    pub id: String,
    pub events: i32,
}

impl Nri {
    /// Starts hosting: binds the socket (unless connections are refused)
    /// and starts the pre-installed plugins. None when `[nri]` is off.
    pub async fn start(
        cfg: &NriConfig,
        snapshot: Snapshot,
        updates: Updates,
    ) -> anyhow::Result<Option<Arc<Nri>>> {
        if !cfg.enable {
            return Ok(None);
        }
        let nri = Arc::new(Nri {
            setup: std::sync::Mutex::new(Setup {
                runtime_name: "husk".into(),
                runtime_version: env!("CARGO_PKG_VERSION").into(),
                registration_timeout: Duration::from_millis(cfg.plugin_registration_timeout_ms),
                request_timeout: Duration::from_millis(cfg.plugin_request_timeout_ms),
                config: String::new(),
            }),
            cfg: cfg.clone(),
            chain: RwLock::new(Vec::new()),
            active: AtomicUsize::new(0),
            snapshot: OnceLock::new(),
            updates: OnceLock::new(),
            stopped: Default::default(),
            stop_order: Default::default(),
            rt: tokio::runtime::Handle::current(),
        });
        nri.set_snapshot(snapshot);
        nri.set_updates(updates);
        if !cfg.disable_connections {
            let listener = bind(&cfg.socket_path)?;
            let me = nri.clone();
            tokio::spawn(async move {
                loop {
                    match listener.accept().await {
                        Ok((s, _)) => {
                            let me = me.clone();
                            tokio::spawn(
                                async move { me.admit(s, None, String::new(), None).await },
                            );
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "NRI socket accept");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            });
            tracing::info!(socket = %cfg.socket_path.display(), "NRI plugins may connect");
        }
        preinstalled::start_all(&nri, &cfg.plugin_path, &cfg.plugin_config_path);
        Ok(Some(nri))
    }

    /// Sets who applies a plugin's unsolicited updates and evictions.
    fn set_updates(&self, u: Updates) {
        let _ = self.updates.set(u);
    }

    /// New registration and request timeouts: for plugins that join from
    /// now on, and the request timeout for those in the chain too.
    pub async fn set_timeouts(&self, registration: Duration, request: Duration) {
        {
            let mut s = self.setup.lock().unwrap_or_else(|p| p.into_inner());
            s.registration_timeout = registration;
            s.request_timeout = request;
        }
        for p in self.chain.read().await.iter() {
            p.set_timeout(request);
        }
    }

    /// Whether any plugin is in the chain.
    pub fn has_plugins(&self) -> bool {
        self.active.load(Ordering::Relaxed) > 0
    }

    /// Sets where a new plugin's `Synchronize` reads pods and containers.
    fn set_snapshot(&self, s: Snapshot) {
        let _ = self.snapshot.set(s);
    }

    /// The plugins in the chain.
    pub async fn connected(&self) -> Vec<Connected> {
        self.chain
            .read()
            .await
            .iter()
            .filter(|p| !p.is_closed())
            .map(|p| Connected {
                id: p.id(),
                events: p.events,
            })
            .collect()
    }

    /// The socket's path, when external plugins may dial it.
    pub fn socket(&self) -> Option<PathBuf> {
        (!self.cfg.disable_connections).then(|| self.cfg.socket_path.clone())
    }

    /// Registers, configures and synchronizes the plugin on `s`, then adds
    /// it to the chain until its connection closes.
    async fn admit(
        self: Arc<Self>,
        s: UnixStream,
        preset: Option<(String, String)>,
        config: String,
        pid: Option<u32>,
    ) {
        self.admit_and_watch(s, preset, config).await;
        // A pre-installed plugin out of the chain is stopped, as
        // containerd stops it (and does not start it again).
        if let Some(pid) = pid {
            // SAFETY: kill(2) on the plugin husk started (its waiter reaps it).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    }

    async fn admit_and_watch(
        self: &Arc<Self>,
        s: UnixStream,
        preset: Option<(String, String)>,
        config: String,
    ) {
        let setup = Setup {
            config,
            ..self.setup.lock().unwrap_or_else(|p| p.into_inner()).clone()
        };
        let p = match Plugin::connect(s, preset, &setup, self.updates.get().cloned()).await {
            Ok(p) => Arc::new(p),
            Err(e) => {
                tracing::warn!(error = %e, "NRI plugin refused");
                return;
            }
        };
        {
            let mut chain = self.chain.write().await;
            if let Err(e) = self.synchronize(&p).await {
                tracing::warn!(plugin = %p.id(), error = %e, "NRI plugin failed to synchronize; dropped");
                p.close().await;
                return;
            }
            chain.push(p.clone());
            chain.sort_by(|a, b| (&a.idx, &a.name).cmp(&(&b.idx, &b.name)));
            self.active.store(chain.len(), Ordering::Relaxed);
        }
        tracing::info!(plugin = %p.id(), events = format!("0x{:x}", p.events), "NRI plugin connected");
        let why = p.closed().await;
        self.drop_plugin(&p, &format!("connection closed: {why}"))
            .await;
    }

    async fn drop_plugin(&self, p: &Arc<Plugin>, why: &str) {
        let mut chain = self.chain.write().await;
        let before = chain.len();
        chain.retain(|x| !Arc::ptr_eq(x, p));
        self.active.store(chain.len(), Ordering::Relaxed);
        if chain.len() < before {
            tracing::warn!(plugin = %p.id(), reason = why, "NRI plugin dropped from the chain");
        }
        drop(chain);
        p.close().await;
    }

    /// `Synchronize`, paged so no message is over ttrpc's limit.
    async fn synchronize(&self, p: &Plugin) -> Result<(), String> {
        let (pods, containers) = match self.snapshot.get() {
            Some(s) => s(),
            None => (Vec::new(), Vec::new()),
        };
        let mut pages: Vec<api::SynchronizeRequest> = vec![Default::default()];
        let mut size = 0;
        let mut push = |pages: &mut Vec<api::SynchronizeRequest>,
                        n: usize,
                        add: &dyn Fn(&mut api::SynchronizeRequest)| {
            if size + n > PAGE_BYTES && size > 0 {
                pages.push(Default::default());
                size = 0;
            }
            size += n + 8;
            add(pages.last_mut().expect("a page"));
        };
        for pod in pods {
            let n = pod.encoded_len();
            push(&mut pages, n, &|r| r.pods.push(pod.clone()));
        }
        for c in containers {
            let n = c.encoded_len();
            push(&mut pages, n, &|r| r.containers.push(c.clone()));
        }
        let last = pages.len() - 1;
        let mut updates = Vec::new();
        for (i, mut page) in pages.into_iter().enumerate() {
            page.more = i < last;
            let rsp: api::SynchronizeResponse = p
                .call("Synchronize", &page)
                .await
                .map_err(|e| e.to_string())?;
            if page.more && (!rsp.update.is_empty() || !rsp.more) {
                return Err("plugin does not handle split sync requests".into());
            }
            updates.extend(rsp.update);
        }
        // As containerd: updates that fail fail the plugin's joining.
        self.apply_others("Synchronize", updates, Vec::new()).await
    }

    /// Hands a started pre-installed plugin's end of its socket to the
    /// chain.
    pub(crate) fn admit_preinstalled(
        self: &Arc<Self>,
        s: UnixStream,
        idx: String,
        name: String,
        config: String,
        pid: Option<u32>,
    ) {
        let me = self.clone();
        tokio::spawn(async move { me.admit(s, Some((name, idx)), config, pid).await });
    }
}

/// The socket external plugins dial: its dir made, a stale socket
/// replaced, mode 0600.
fn bind(path: &std::path::Path) -> anyhow::Result<tokio::net::UnixListener> {
    use anyhow::Context;
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("create the NRI socket's dir {}", dir.display()))?;
    }
    let _ = std::fs::remove_file(path);
    let l = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("bind the NRI socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod the NRI socket {}", path.display()))?;
    Ok(l)
}
