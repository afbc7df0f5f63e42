//! Containers in test pods: a busybox app image in the test registry, a
//! container config, create+start, status and cgroup file helpers.

use super::images::{busybox_entries, Compression, Entry, Format, Image, Layer, Pusher};
use super::pod::Pod;
use super::server::Husk;
use husk::api::cri::*;
use std::path::PathBuf;

/// Pushes and pulls a busybox image whose entrypoint is `sh -c`.
pub async fn app_image(p: &Pod) -> String {
    let img = Image::with_config(
        vec![Layer::new(&busybox_entries(), Compression::Gzip)],
        "amd64",
        serde_json::json!({"Entrypoint": ["/bin/sh", "-c"], "Cmd": ["sleep 3600"], "Env": ["PATH=/bin"]}),
    );
    Pusher::new(&p.reg)
        .image("app/busybox", "v1", &img, Format::Oci)
        .await;
    let r = format!("{}/app/busybox:v1", p.reg.host());
    p.h.pull(&r).await.unwrap();
    r
}

/// The pod config of `name` in the test's network and cgroup parent, with
/// its logs under the server's dir.
pub fn pod_config(p: &Pod, name: &str) -> PodSandboxConfig {
    let mut c = p.config(name);
    c.log_directory = p.h.dir.path().join("logs").join(name).display().to_string();
    c
}

/// A container running `command` with `args` (empty: the image's), its
/// log at `<name>/0.log`, in its own PID namespace.
pub fn ccfg(image: &str, name: &str, command: &[&str], args: &[&str]) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        command: command.iter().map(|s| s.to_string()).collect(),
        args: args.iter().map(|s| s.to_string()).collect(),
        log_path: format!("{name}/0.log"),
        linux: Some(LinuxContainerConfig {
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: Some(NamespaceOption {
                    pid: NamespaceMode::Container as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The container's security context, made if absent.
pub fn security(c: &mut ContainerConfig) -> &mut LinuxContainerSecurityContext {
    c.linux
        .as_mut()
        .unwrap()
        .security_context
        .get_or_insert_with(Default::default)
}

/// A container running `sh -c script` (the app image's entrypoint), with
/// `labels`.
pub fn shell(image: &str, name: &str, script: &str, labels: &[(&str, &str)]) -> ContainerConfig {
    let mut c = ccfg(image, name, &[], &[script]);
    c.labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    c
}

/// CreateContainer, its answer as it came.
pub async fn try_create(
    h: &Husk,
    pod: &str,
    pc: &PodSandboxConfig,
    c: ContainerConfig,
) -> Result<String, tonic::Status> {
    h.runtime()
        .await
        .create_container(CreateContainerRequest {
            pod_sandbox_id: pod.into(),
            config: Some(c),
            sandbox_config: Some(pc.clone()),
        })
        .await
        .map(|r| r.into_inner().container_id)
}

pub async fn create(h: &Husk, pod: &str, pc: &PodSandboxConfig, c: ContainerConfig) -> String {
    try_create(h, pod, pc, c).await.unwrap_or_else(|e| {
        panic!(
            "create in {pod}: {e:?}\nshim log: {}\nserver log: {}",
            std::fs::read_to_string(h.dir.path().join("run/s").join(pod).join("shim.log"))
                .unwrap_or_default(),
            h.log()
        )
    })
}

pub async fn start(h: &Husk, id: &str) {
    h.runtime()
        .await
        .start_container(StartContainerRequest {
            container_id: id.into(),
        })
        .await
        .unwrap_or_else(|e| panic!("start {id}: {e:?}"));
}

pub async fn create_start(
    h: &Husk,
    pod: &str,
    pc: &PodSandboxConfig,
    c: ContainerConfig,
) -> String {
    let id = create(h, pod, pc, c).await;
    start(h, &id).await;
    id
}

pub async fn container_status(h: &Husk, id: &str) -> ContainerStatus {
    h.runtime()
        .await
        .container_status(ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap()
}

pub async fn stop_remove(h: &Husk, id: &str) {
    let mut rt = h.runtime().await;
    rt.stop_container(StopContainerRequest {
        container_id: id.into(),
        timeout: 0,
    })
    .await
    .unwrap();
    rt.remove_container(RemoveContainerRequest {
        container_id: id.into(),
    })
    .await
    .unwrap();
}

pub async fn stop_remove_pod(h: &Husk, id: &str) {
    let mut rt = h.runtime().await;
    rt.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .unwrap();
    rt.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .unwrap();
}

/// Evaluates `$check` (an `Option` expression, which may `.await`) every
/// 100 ms until it is Some, for up to `$secs` seconds; gives the value.
#[macro_export]
macro_rules! wait_for {
    ($secs:expr, $what:expr, $check:expr) => {{
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs($secs);
        loop {
            if let Some(v) = $check {
                break v;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {}",
                $what
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }};
}

/// Waits (up to 2 minutes) for a container to exit; its status then.
pub async fn wait_exited(h: &Husk, id: &str) -> ContainerStatus {
    crate::wait_for!(120, format!("{id} to exit"), {
        let st = container_status(h, id).await;
        (st.state == ContainerState::ContainerExited as i32).then_some(st)
    })
}

/// A v1 controller's directory for a container (`<parent>/<id>`).
pub fn cgroup_dir(p: &Pod, controller: &str, id: &str) -> PathBuf {
    PathBuf::from("/sys/fs/cgroup")
        .join(controller)
        .join(&p.cgroup_parent)
        .join(id)
}

pub fn cgroup_file(p: &Pod, controller: &str, id: &str, file: &str) -> String {
    std::fs::read_to_string(cgroup_dir(p, controller, id).join(file))
        .unwrap_or_else(|e| panic!("{controller}/{file} of {id}: {e}"))
        .trim()
        .to_string()
}

/// ExecSync of `cmd` (10 s), the answer as it came.
pub async fn exec_sync(
    h: &Husk,
    id: &str,
    cmd: &[&str],
) -> Result<ExecSyncResponse, tonic::Status> {
    h.runtime()
        .await
        .exec_sync(ExecSyncRequest {
            container_id: id.into(),
            cmd: cmd.iter().map(|s| s.to_string()).collect(),
            timeout: 10,
        })
        .await
        .map(|r| r.into_inner())
}

/// Creates and starts `c`, waits for its exit and removes it: its status
/// at the exit, or None when the create or the start was refused.
pub async fn run_to_exit(
    h: &Husk,
    pod: &str,
    pc: &PodSandboxConfig,
    c: ContainerConfig,
) -> Option<ContainerStatus> {
    let id = try_create(h, pod, pc, c).await.ok()?;
    let started = h
        .runtime()
        .await
        .start_container(StartContainerRequest {
            container_id: id.clone(),
        })
        .await;
    let st = match started {
        Ok(_) => Some(wait_exited(h, &id).await),
        Err(_) => None,
    };
    h.runtime()
        .await
        .remove_container(RemoveContainerRequest { container_id: id })
        .await
        .unwrap();
    st
}

/// Pushes and pulls an image of busybox plus `extra` entries, with
/// `config` (Entrypoint `sh -c` unless it says otherwise).
pub async fn attack_image(
    p: &Pod,
    name: &str,
    extra: Vec<Entry>,
    config: serde_json::Value,
) -> String {
    let mut entries = busybox_entries();
    // Later entries of the same path win when the layer is unpacked.
    entries.extend(extra);
    let mut cfg = serde_json::json!({"Entrypoint": ["/bin/sh", "-c"], "Cmd": ["sleep 3600"], "Env": ["PATH=/bin"]});
    for (k, v) in config.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    let img = Image::with_config(vec![Layer::new(&entries, Compression::Gzip)], "amd64", cfg);
    Pusher::new(&p.reg)
        .image(&format!("attack/{name}"), "v1", &img, Format::Oci)
        .await;
    let r = format!("{}/attack/{name}:v1", p.reg.host());
    p.h.pull(&r).await.unwrap();
    r
}

/// What `sh -c script` printed in container `id`, which must exit 0.
pub async fn sh(p: &Pod, id: &str, script: &str) -> String {
    let r = exec_sync(&p.h, id, &["/bin/sh", "-c", script])
        .await
        .unwrap();
    assert_eq!(r.exit_code, 0, "{}", String::from_utf8_lossy(&r.stderr));
    String::from_utf8_lossy(&r.stdout).into_owned()
}

/// The containers husk still has on disk.
pub fn container_dirs(p: &Pod) -> usize {
    std::fs::read_dir(p.h.root().join("containers"))
        .map(|rd| rd.count())
        .unwrap_or(0)
}
