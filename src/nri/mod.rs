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
const PAGE_BYTES: usize = ttrpc::MAX_MESSAGE - (64 << 10);

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
                            tokio::spawn(async move { me.admit(s, None, String::new()).await });
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
        for (i, mut page) in pages.into_iter().enumerate() {
            page.more = i < last;
            let rsp: api::SynchronizeResponse = p
                .call("Synchronize", &page)
                .await
                .map_err(|e| e.to_string())?;
            if page.more && (!rsp.update.is_empty() || !rsp.more) {
                return Err("plugin does not handle split sync requests".into());
            }
            if !rsp.update.is_empty() {
                tracing::warn!(plugin = %p.id(), updates = rsp.update.len(), "NRI plugin asked for container updates at synchronization; husk applies none yet");
            }
        }
        Ok(())
    }

    /// The chain now, for one event.
    async fn chain(&self) -> Vec<Arc<Plugin>> {
        self.chain.read().await.clone()
    }

    /// Calls `event` on every plugin that wants it. A fatal error drops
    /// the plugin; another is returned (when `strict`) or logged.
    async fn state_event(
        &self,
        event: api::Event,
        method: &str,
        pod: &api::PodSandbox,
        container: Option<&api::Container>,
        strict: bool,
    ) -> Result<(), String> {
        for p in self.chain().await {
            if !p.wants(event) {
                continue;
            }
            match p.state_event(event, method, Some(pod), container).await {
                Ok(()) => {}
                Err(e) if e.is_fatal() => {
                    self.drop_plugin(&p, &format!("{method}: {e}")).await;
                }
                Err(e) if strict => return Err(format!("NRI plugin {}: {method}: {e}", p.id())),
                Err(e) => {
                    tracing::warn!(plugin = %p.id(), method, error = %e, "NRI plugin failed an event")
                }
            }
        }
        Ok(())
    }

    /// RunPodSandbox: a plugin's error fails the pod.
    pub async fn run_pod_sandbox(&self, pod: &api::PodSandbox) -> Result<(), String> {
        self.state_event(api::Event::RunPodSandbox, "RunPodSandbox", pod, None, true)
            .await
    }

    /// StopPodSandbox.
    pub async fn stop_pod_sandbox(&self, pod: &api::PodSandbox) {
        let _ = self
            .state_event(
                api::Event::StopPodSandbox,
                "StopPodSandbox",
                pod,
                None,
                false,
            )
            .await;
    }

    /// RemovePodSandbox.
    pub async fn remove_pod_sandbox(&self, pod: &api::PodSandbox) {
        let _ = self
            .state_event(
                api::Event::RemovePodSandbox,
                "RemovePodSandbox",
                pod,
                None,
                false,
            )
            .await;
    }

    /// CreateContainer: every plugin's adjustment applied to `spec` (or
    /// none, on any error: a conflict, a refusal, a field husk cannot
    /// apply).
    pub async fn create_container(
        &self,
        pod: &api::PodSandbox,
        container: &api::Container,
        spec: &mut serde_json::Value,
        cdi: adjust::CdiInject<'_>,
    ) -> Result<(), String> {
        let chain = self.chain().await;
        if chain.is_empty() {
            return Ok(());
        }
        let mut adjusted = spec.clone();
        let mut owners = adjust::Owners::default();
        let mut merged = api::ContainerAdjustment::default();
        let req = api::CreateContainerRequest {
            pod: Some(pod.clone()),
            container: Some(container.clone()),
        };
        for p in chain.iter() {
            if !p.wants(api::Event::CreateContainer) {
                continue;
            }
            let rsp: api::CreateContainerResponse = match p.call("CreateContainer", &req).await {
                Ok(r) => r,
                Err(e) if e.is_fatal() => {
                    self.drop_plugin(p, &format!("CreateContainer: {e}")).await;
                    continue;
                }
                Err(e) => return Err(format!("NRI plugin {}: CreateContainer: {e}", p.id())),
            };
            if !rsp.update.is_empty() || !rsp.evict.is_empty() {
                return Err(format!(
                    "NRI plugin {} asked to update or evict other containers at CreateContainer; \
                     husk does not apply that yet",
                    p.id()
                ));
            }
            if let Some(adj) = &rsp.adjust {
                adjust::apply(&mut adjusted, adj, &p.id(), &mut owners, cdi)
                    .map_err(|e| format!("NRI: {e}"))?;
                // Protobuf's merge: lists add up, maps and fields later win.
                prost::Message::merge(&mut merged, adj.encode_to_vec().as_slice())
                    .map_err(|e| format!("NRI: {e}"))?;
            }
        }
        self.validate(&chain, &req, merged, &owners).await?;
        *spec = adjusted;
        Ok(())
    }

    /// ValidateContainerAdjustment: every validator plugin sees the
    /// adjustments and who made them; one that rejects refuses the
    /// container with its reason.
    async fn validate(
        &self,
        chain: &[Arc<Plugin>],
        req: &api::CreateContainerRequest,
        merged: api::ContainerAdjustment,
        owners: &adjust::Owners,
    ) -> Result<(), String> {
        let validators: Vec<&Arc<Plugin>> = chain
            .iter()
            .filter(|p| p.wants(api::Event::ValidateContainerAdjustment) && !p.is_closed())
            .collect();
        if validators.is_empty() {
            return Ok(());
        }
        let id = req
            .container
            .as_ref()
            .map(|c| c.id.clone())
            .unwrap_or_default();
        let v = api::ValidateContainerAdjustmentRequest {
            pod: req.pod.clone(),
            container: req.container.clone(),
            adjust: Some(merged),
            update: Vec::new(),
            owners: Some(owners.to_proto(&id)),
            plugins: chain
                .iter()
                .map(|p| api::PluginInstance {
                    name: p.name.clone(),
                    index: p.idx.clone(),
                })
                .collect(),
        };
        for p in validators {
            let rsp: api::ValidateContainerAdjustmentResponse =
                match p.call("ValidateContainerAdjustment", &v).await {
                    Ok(r) => r,
                    Err(e) if e.is_fatal() => {
                        self.drop_plugin(p, &format!("ValidateContainerAdjustment: {e}"))
                            .await;
                        continue;
                    }
                    Err(e) => return Err(format!("NRI validator {} failed: {e}", p.id())),
                };
            if rsp.reject {
                return Err(format!(
                    "NRI validator {} rejected the container's adjustment: {}",
                    p.id(),
                    rsp.reason
                ));
            }
        }
        Ok(())
    }

    /// PostCreateContainer.
    pub async fn post_create_container(&self, pod: &api::PodSandbox, c: &api::Container) {
        let _ = self
            .state_event(
                api::Event::PostCreateContainer,
                "PostCreateContainer",
                pod,
                Some(c),
                false,
            )
            .await;
    }

    /// StartContainer: a plugin's error fails the start.
    pub async fn start_container(
        &self,
        pod: &api::PodSandbox,
        c: &api::Container,
    ) -> Result<(), String> {
        self.state_event(
            api::Event::StartContainer,
            "StartContainer",
            pod,
            Some(c),
            true,
        )
        .await
    }

    /// PostStartContainer.
    pub async fn post_start_container(&self, pod: &api::PodSandbox, c: &api::Container) {
        let _ = self
            .state_event(
                api::Event::PostStartContainer,
                "PostStartContainer",
                pod,
                Some(c),
                false,
            )
            .await;
    }

    /// StopContainer (updates it answers are not applied yet: logged).
    pub async fn stop_container(&self, pod: &api::PodSandbox, c: &api::Container) {
        let req = api::StopContainerRequest {
            pod: Some(pod.clone()),
            container: Some(c.clone()),
        };
        for p in self.chain().await {
            if !p.wants(api::Event::StopContainer) {
                continue;
            }
            match p
                .call::<_, api::StopContainerResponse>("StopContainer", &req)
                .await
            {
                Ok(r) if !r.update.is_empty() => {
                    tracing::warn!(plugin = %p.id(), "NRI plugin asked for container updates at StopContainer; husk applies none yet")
                }
                Ok(_) => {}
                Err(e) if e.is_fatal() => {
                    self.drop_plugin(&p, &format!("StopContainer: {e}")).await
                }
                Err(e) => {
                    tracing::warn!(plugin = %p.id(), error = %e, "NRI plugin failed StopContainer")
                }
            }
        }
    }

    /// UpdateContainer: the plugins see the resources asked; an update a
    /// plugin answers for this container replaces them (the last wins).
    /// A plugin's error fails the update. Updates of other containers and
    /// evictions are not applied yet (logged).
    pub async fn update_container(
        &self,
        pod: &api::PodSandbox,
        c: &api::Container,
        asked: api::LinuxResources,
    ) -> Result<Option<api::LinuxResources>, String> {
        let mut req = api::UpdateContainerRequest {
            pod: Some(pod.clone()),
            container: Some(c.clone()),
            linux_resources: Some(asked),
        };
        let mut changed = None;
        for p in self.chain().await {
            if !p.wants(api::Event::UpdateContainer) {
                continue;
            }
            let rsp: api::UpdateContainerResponse = match p.call("UpdateContainer", &req).await {
                Ok(r) => r,
                Err(e) if e.is_fatal() => {
                    self.drop_plugin(&p, &format!("UpdateContainer: {e}")).await;
                    continue;
                }
                Err(e) => return Err(format!("NRI plugin {}: UpdateContainer: {e}", p.id())),
            };
            for u in rsp.update {
                match u.linux.and_then(|l| l.resources) {
                    Some(r) if u.container_id == c.id => {
                        req.linux_resources = Some(r.clone());
                        changed = Some(r);
                    }
                    _ => {
                        tracing::warn!(plugin = %p.id(), container_id = %u.container_id, "NRI plugin asked to update another container at UpdateContainer; husk does not apply that yet")
                    }
                }
            }
            for e in rsp.evict {
                tracing::warn!(plugin = %p.id(), container_id = %e.container_id, reason = %e.reason, "NRI plugin asked for an eviction; husk does not apply that yet");
            }
        }
        Ok(changed)
    }

    /// PostUpdateContainer.
    pub async fn post_update_container(&self, pod: &api::PodSandbox, c: &api::Container) {
        let req = api::PostUpdateContainerRequest {
            pod: Some(pod.clone()),
            container: Some(c.clone()),
        };
        self.notify(
            api::Event::PostUpdateContainer,
            "PostUpdateContainer",
            &req,
            pod,
            Some(c),
        )
        .await;
    }

    /// UpdatePodSandbox: a plugin's error fails the resize.
    pub async fn update_pod_sandbox(
        &self,
        pod: &api::PodSandbox,
        overhead: Option<api::LinuxResources>,
        resources: Option<api::LinuxResources>,
    ) -> Result<(), String> {
        let req = api::UpdatePodSandboxRequest {
            pod: Some(pod.clone()),
            overhead_linux_resources: overhead,
            linux_resources: resources,
        };
        for p in self.chain().await {
            if !p.wants(api::Event::UpdatePodSandbox) {
                continue;
            }
            match p
                .call::<_, api::UpdatePodSandboxResponse>("UpdatePodSandbox", &req)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_fatal() => {
                    self.drop_plugin(&p, &format!("UpdatePodSandbox: {e}"))
                        .await
                }
                Err(e) => return Err(format!("NRI plugin {}: UpdatePodSandbox: {e}", p.id())),
            }
        }
        Ok(())
    }

    /// PostUpdatePodSandbox.
    pub async fn post_update_pod_sandbox(&self, pod: &api::PodSandbox) {
        let req = api::PostUpdatePodSandboxRequest {
            pod: Some(pod.clone()),
        };
        self.notify(
            api::Event::PostUpdatePodSandbox,
            "PostUpdatePodSandbox",
            &req,
            pod,
            None,
        )
        .await;
    }

    /// A post-event by its own method (or `StateChange` for a plugin of
    /// an older NRI); errors are logged.
    async fn notify<Req: prost::Message>(
        &self,
        event: api::Event,
        method: &str,
        req: &Req,
        pod: &api::PodSandbox,
        c: Option<&api::Container>,
    ) {
        for p in self.chain().await {
            if !p.wants(event) {
                continue;
            }
            let r = match p.call::<_, api::Empty>(method, req).await {
                Err(plugin::CallError::Status { code: 12, .. }) => {
                    p.state_event(event, "StateChange", Some(pod), c).await
                }
                r => r.map(drop),
            };
            match r {
                Ok(()) => {}
                Err(e) if e.is_fatal() => self.drop_plugin(&p, &format!("{method}: {e}")).await,
                Err(e) => {
                    tracing::warn!(plugin = %p.id(), method, error = %e, "NRI plugin failed an event")
                }
            }
        }
    }

    /// RemoveContainer.
    pub async fn remove_container(&self, pod: &api::PodSandbox, c: &api::Container) {
        let _ = self
            .state_event(
                api::Event::RemoveContainer,
                "RemoveContainer",
                pod,
                Some(c),
                false,
            )
            .await;
    }

    /// Hands a started pre-installed plugin's end of its socket to the
    /// chain.
    pub(crate) fn admit_preinstalled(
        self: &Arc<Self>,
        s: UnixStream,
        idx: String,
        name: String,
        config: String,
    ) {
        let me = self.clone();
        tokio::spawn(async move { me.admit(s, Some((name, idx)), config).await });
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
