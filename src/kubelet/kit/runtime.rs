//! The kubelet's side of CRI: one client for any runtime (husk serve,
//! containerd), and the runtime's view of one pod (its sandboxes and
//! containers, newest first) as the sync loop and status need it.
//!
//! Invariants: every call has a deadline; NotFound on stop/remove counts
//! as done (removes are idempotent, as the CRI promises); objects are
//! found by this node's labels only, never by name.

use super::labels;
use crate::api::cri::image_service_client::ImageServiceClient;
use crate::api::cri::runtime_service_client::RuntimeServiceClient;
use crate::api::cri::*;
use std::collections::HashMap;
use std::time::Duration;
use tonic::transport::Channel;

/// A failed CRI call.
#[derive(Debug, thiserror::Error)]
#[error("{op}: {code:?}: {msg}", code = .status.code(), msg = .status.message())]
pub struct CriError {
    pub op: String,
    pub status: tonic::Status,
}

impl CriError {
    pub fn code(&self) -> tonic::Code {
        self.status.code()
    }
}

pub type CriResult<T> = Result<T, CriError>;

pub(super) fn cri<T>(
    op: impl Into<String>,
    r: Result<tonic::Response<T>, tonic::Status>,
) -> CriResult<T> {
    r.map(|r| r.into_inner()).map_err(|status| CriError {
        op: op.into(),
        status,
    })
}

fn with_timeout<T>(mut req: tonic::Request<T>, d: Duration) -> tonic::Request<T> {
    req.set_timeout(d);
    req
}

const CALL: Duration = Duration::from_secs(120);

/// A connected runtime.
#[derive(Clone)]
pub struct Cri {
    pub rt: RuntimeServiceClient<Channel>,
    pub img: ImageServiceClient<Channel>,
    /// `runtime_name` from Version: the scheme of container IDs.
    pub name: String,
    pub version: String,
}

impl Cri {
    pub async fn connect(endpoint: &str) -> anyhow::Result<Cri> {
        let ch = crate::api::connect(endpoint).await?;
        let mut rt = RuntimeServiceClient::new(ch.clone()).max_decoding_message_size(64 << 20);
        let img = ImageServiceClient::new(ch).max_decoding_message_size(64 << 20);
        let v = cri(
            "Version",
            rt.version(with_timeout(
                tonic::Request::new(VersionRequest {
                    version: "v1".into(),
                }),
                Duration::from_secs(10),
            ))
            .await,
        )?;
        Ok(Cri {
            rt,
            img,
            name: v.runtime_name,
            version: v.runtime_version,
        })
    }

    pub(super) fn req<T>(&self, m: T) -> tonic::Request<T> {
        with_timeout(tonic::Request::new(m), CALL)
    }

    pub async fn list_sandboxes(
        &self,
        selector: HashMap<String, String>,
    ) -> CriResult<Vec<PodSandbox>> {
        let r = self
            .rt
            .clone()
            .list_pod_sandbox(self.req(ListPodSandboxRequest {
                filter: Some(PodSandboxFilter {
                    label_selector: selector,
                    ..Default::default()
                }),
            }))
            .await;
        Ok(cri("ListPodSandbox", r)?.items)
    }

    pub async fn list_containers(
        &self,
        selector: HashMap<String, String>,
    ) -> CriResult<Vec<Container>> {
        let r = self
            .rt
            .clone()
            .list_containers(self.req(ListContainersRequest {
                filter: Some(ContainerFilter {
                    label_selector: selector,
                    ..Default::default()
                }),
            }))
            .await;
        Ok(cri("ListContainers", r)?.containers)
    }

    /// CRI Status: what is not ready, as "Type=false reason:R message:M"
    /// lines (empty when RuntimeReady and NetworkReady are both true).
    pub async fn not_ready(&self) -> CriResult<Vec<String>> {
        let r = self
            .rt
            .clone()
            .status(with_timeout(
                tonic::Request::new(StatusRequest { verbose: false }),
                Duration::from_secs(10),
            ))
            .await;
        let st = cri("Status", r)?.status.unwrap_or_default();
        let mut out = Vec::new();
        for want in ["RuntimeReady", "NetworkReady"] {
            match st.conditions.iter().find(|c| c.r#type == want) {
                Some(c) if c.status => {}
                Some(c) => out.push(format!(
                    "{want}=false reason:{} message:{}",
                    c.reason, c.message
                )),
                None => out.push(format!("{want}=false reason:Missing message:not reported")),
            }
        }
        Ok(out)
    }

    pub async fn sandbox_status(&self, id: &str) -> CriResult<PodSandboxStatus> {
        let r = self
            .rt
            .clone()
            .pod_sandbox_status(self.req(PodSandboxStatusRequest {
                pod_sandbox_id: id.into(),
                verbose: false,
            }))
            .await;
        cri(format!("PodSandboxStatus {id}"), r)?
            .status
            .ok_or_else(|| CriError {
                op: format!("PodSandboxStatus {id}"),
                status: tonic::Status::internal("empty status"),
            })
    }

    pub async fn container_status(&self, id: &str) -> CriResult<ContainerStatus> {
        let r = self
            .rt
            .clone()
            .container_status(self.req(ContainerStatusRequest {
                container_id: id.into(),
                verbose: false,
            }))
            .await;
        cri(format!("ContainerStatus {id}"), r)?
            .status
            .ok_or_else(|| CriError {
                op: format!("ContainerStatus {id}"),
                status: tonic::Status::internal("empty status"),
            })
    }

    pub async fn run_sandbox(
        &self,
        config: PodSandboxConfig,
        runtime_handler: &str,
    ) -> CriResult<String> {
        let r = self
            .rt
            .clone()
            .run_pod_sandbox(with_timeout(
                tonic::Request::new(RunPodSandboxRequest {
                    config: Some(config),
                    runtime_handler: runtime_handler.into(),
                }),
                Duration::from_secs(240),
            ))
            .await;
        Ok(cri("RunPodSandbox", r)?.pod_sandbox_id)
    }

    pub async fn stop_sandbox(&self, id: &str) -> CriResult<()> {
        let r = self
            .rt
            .clone()
            .stop_pod_sandbox(self.req(StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
            }))
            .await;
        ok_if_gone(cri(format!("StopPodSandbox {id}"), r))
    }

    pub async fn remove_sandbox(&self, id: &str) -> CriResult<()> {
        let r = self
            .rt
            .clone()
            .remove_pod_sandbox(self.req(RemovePodSandboxRequest {
                pod_sandbox_id: id.into(),
            }))
            .await;
        ok_if_gone(cri(format!("RemovePodSandbox {id}"), r))
    }

    pub async fn create_container(
        &self,
        sandbox_id: &str,
        config: ContainerConfig,
        sandbox_config: PodSandboxConfig,
    ) -> CriResult<String> {
        let r = self
            .rt
            .clone()
            .create_container(self.req(CreateContainerRequest {
                pod_sandbox_id: sandbox_id.into(),
                config: Some(config),
                sandbox_config: Some(sandbox_config),
            }))
            .await;
        Ok(cri("CreateContainer", r)?.container_id)
    }

    pub async fn start_container(&self, id: &str) -> CriResult<()> {
        let r = self
            .rt
            .clone()
            .start_container(self.req(StartContainerRequest {
                container_id: id.into(),
            }))
            .await;
        cri(format!("StartContainer {id}"), r).map(|_| ())
    }

    /// Stops with `timeout` seconds of grace (the call waits for it).
    pub async fn stop_container(&self, id: &str, timeout: i64) -> CriResult<()> {
        let req = with_timeout(
            tonic::Request::new(StopContainerRequest {
                container_id: id.into(),
                timeout,
            }),
            Duration::from_secs(timeout.max(0) as u64 + 60),
        );
        let r = self.rt.clone().stop_container(req).await;
        ok_if_gone(cri(format!("StopContainer {id}"), r))
    }

    pub async fn remove_container(&self, id: &str) -> CriResult<()> {
        let r = self
            .rt
            .clone()
            .remove_container(self.req(RemoveContainerRequest {
                container_id: id.into(),
            }))
            .await;
        ok_if_gone(cri(format!("RemoveContainer {id}"), r))
    }

    /// Runs `cmd` in a container; a timeout is an error (DeadlineExceeded).
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> CriResult<ExecSyncResponse> {
        let secs = timeout.as_secs().max(1) as i64;
        let req = with_timeout(
            tonic::Request::new(ExecSyncRequest {
                container_id: id.into(),
                cmd,
                timeout: secs,
            }),
            timeout + Duration::from_secs(5),
        );
        let r = self.rt.clone().exec_sync(req).await;
        cri(format!("ExecSync {id}"), r)
    }

    /// The image's ID when present, None when not.
    pub async fn image_status(&self, image: &str) -> CriResult<Option<Image>> {
        let r = self
            .img
            .clone()
            .image_status(self.req(ImageStatusRequest {
                image: Some(ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                verbose: false,
            }))
            .await;
        Ok(cri(format!("ImageStatus {image}"), r)?.image)
    }

    pub async fn pull_image(
        &self,
        image: &str,
        sandbox: Option<PodSandboxConfig>,
        auth: Option<AuthConfig>,
    ) -> CriResult<String> {
        let req = with_timeout(
            tonic::Request::new(PullImageRequest {
                image: Some(ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                auth,
                sandbox_config: sandbox,
            }),
            Duration::from_secs(1800),
        );
        let r = self.img.clone().pull_image(req).await;
        Ok(cri(format!("PullImage {image}"), r)?.image_ref)
    }

    /// Everything the runtime holds for one pod of this node.
    pub async fn pod(&self, node: &str, uid: &str) -> CriResult<RuntimePod> {
        let sel = HashMap::from([
            (labels::POD_UID.to_string(), uid.to_string()),
            (labels::NODE.to_string(), node.to_string()),
        ]);
        let mut pod = RuntimePod {
            uid: uid.to_string(),
            ..Default::default()
        };
        for s in self.list_sandboxes(sel.clone()).await? {
            match self.sandbox_status(&s.id).await {
                Ok(st) => pod.sandboxes.push(SandboxView::from(st)),
                Err(e) if e.code() == tonic::Code::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        for c in self.list_containers(sel).await? {
            match self.container_status(&c.id).await {
                Ok(st) => pod
                    .containers
                    .push(ContainerView::new(st, &c.pod_sandbox_id)),
                Err(e) if e.code() == tonic::Code::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        pod.sandboxes
            .sort_by_key(|s| std::cmp::Reverse((s.created_at, s.attempt)));
        pod.containers
            .sort_by_key(|c| std::cmp::Reverse((c.created_at, c.restart_count)));
        Ok(pod)
    }
}

fn ok_if_gone(r: CriResult<impl Sized>) -> CriResult<()> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.code() == tonic::Code::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[derive(Debug, Clone, Default)]
pub struct SandboxView {
    pub id: String,
    pub ready: bool,
    pub created_at: i64,
    pub attempt: u32,
    pub ip: String,
    pub ips: Vec<String>,
    pub host_network: bool,
    pub annotations: HashMap<String, String>,
    pub labels: HashMap<String, String>,
}

impl From<PodSandboxStatus> for SandboxView {
    fn from(s: PodSandboxStatus) -> Self {
        let net = s.network.unwrap_or_default();
        let mut ips = vec![];
        if !net.ip.is_empty() {
            ips.push(net.ip.clone());
        }
        ips.extend(net.additional_ips.iter().map(|i| i.ip.clone()));
        let host_network = s
            .linux
            .as_ref()
            .and_then(|l| l.namespaces.as_ref())
            .and_then(|n| n.options.as_ref())
            .map(|o| o.network == NamespaceMode::Node as i32)
            .unwrap_or(false);
        SandboxView {
            id: s.id,
            ready: s.state == PodSandboxState::SandboxReady as i32,
            created_at: s.created_at,
            attempt: s.metadata.map(|m| m.attempt).unwrap_or(0),
            ip: net.ip,
            ips,
            host_network,
            annotations: s.annotations,
            labels: s.labels,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CState {
    Created,
    Running,
    Exited,
    Unknown,
}

#[derive(Debug, Clone)]
pub struct ContainerView {
    pub id: String,
    pub name: String,
    pub sandbox_id: String,
    pub state: CState,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    pub image: String,
    pub image_ref: String,
    pub hash: String,
    pub restart_count: i32,
    pub annotations: HashMap<String, String>,
    pub mounts: Vec<Mount>,
    pub log_path: String,
}

impl ContainerView {
    pub fn new(s: ContainerStatus, sandbox_id: &str) -> ContainerView {
        let state = match ContainerState::try_from(s.state) {
            Ok(ContainerState::ContainerCreated) => CState::Created,
            Ok(ContainerState::ContainerRunning) => CState::Running,
            Ok(ContainerState::ContainerExited) => CState::Exited,
            _ => CState::Unknown,
        };
        let meta = s.metadata.unwrap_or_default();
        let restart_count = s
            .annotations
            .get(labels::CONTAINER_RESTART_COUNT)
            .and_then(|v| v.parse().ok())
            .unwrap_or(meta.attempt as i32);
        ContainerView {
            id: s.id,
            name: s
                .labels
                .get(labels::CONTAINER_NAME)
                .cloned()
                .unwrap_or(meta.name),
            sandbox_id: sandbox_id.to_string(),
            state,
            created_at: s.created_at,
            started_at: s.started_at,
            finished_at: s.finished_at,
            exit_code: s.exit_code,
            reason: s.reason,
            message: s.message,
            image: s.image.map(|i| i.image).unwrap_or_default(),
            image_ref: s.image_ref,
            hash: s
                .annotations
                .get(labels::CONTAINER_HASH)
                .cloned()
                .unwrap_or_default(),
            restart_count,
            annotations: s.annotations,
            mounts: s.mounts,
            log_path: s.log_path,
        }
    }
}

/// One pod as the runtime has it.
#[derive(Debug, Clone, Default)]
pub struct RuntimePod {
    pub uid: String,
    /// Newest first.
    pub sandboxes: Vec<SandboxView>,
    /// Newest first.
    pub containers: Vec<ContainerView>,
}

impl RuntimePod {
    /// The newest container of this name.
    pub fn latest(&self, name: &str) -> Option<&ContainerView> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// Every container of this name, newest first.
    pub fn all_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a ContainerView> + 'a {
        self.containers.iter().filter(move |c| c.name == name)
    }

    pub fn running(&self) -> impl Iterator<Item = &ContainerView> {
        self.containers
            .iter()
            .filter(|c| c.state == CState::Running)
    }

    /// The newest sandbox's IP, when it is ready.
    pub fn ready_sandbox(&self) -> Option<&SandboxView> {
        self.sandboxes.first().filter(|s| s.ready)
    }
}
