//! A husk serve with a pause image in a real registry and a test-unique
//! CNI network and cgroup parent: the setup every pod test starts from,
//! and the count of everything a pod could leave behind.

use super::cni::TestNetwork;
use super::images::*;
use super::registry::Registry;
use super::server::Husk;
use husk::api::cri::*;
use std::path::Path;
use std::process::Command;

pub struct Pod {
    pub cgroup_parent: String,
    pub reg: Registry,
    pub net: TestNetwork,
    pub h: Husk,
    pub _ipam: tempfile::TempDir,
}

pub fn pause_image() -> super::images::Image {
    super::images::Image::with_config(
        vec![Layer::new(&busybox_entries(), Compression::Gzip)],
        "amd64",
        serde_json::json!({"Entrypoint": ["/bin/sleep", "2147483647"], "User": "65534:65534"}),
    )
}

pub async fn setup(extra: Vec<serde_json::Value>) -> Pod {
    setup_with(extra, "/usr/lib/cni", vec![]).await
}

/// `setup` with CNI plugins searched in `bin_dirs` (colon-separated) and
/// more server flags.
pub async fn setup_with(extra: Vec<serde_json::Value>, bin_dirs: &str, args: Vec<String>) -> Pod {
    setup_config(extra, bin_dirs, args, "").await
}

/// `setup`, the server's Prometheus metrics served on 127.0.0.1:`port`.
pub async fn setup_with_metrics(port: u16) -> Pod {
    let flag = vec!["--metrics-address".into(), format!("127.0.0.1:{port}")];
    setup_with(vec![], "/usr/lib/cni", flag).await
}

/// `setup_with`, the server's config file holding `config`.
pub async fn setup_config(
    extra: Vec<serde_json::Value>,
    bin_dirs: &str,
    args: Vec<String>,
    config: &str,
) -> Pod {
    let reg = Registry::start();
    Pusher::new(&reg)
        .image("k8s/pause", "test", &pause_image(), Format::Oci)
        .await;
    let ipam = tempfile::tempdir().unwrap();
    let net = TestNetwork::new(ipam.path());
    // The pause image is the config file's (a reload may change it), not
    // a flag's.
    let config = format!(
        "sandbox_image = \"{}/k8s/pause:test\"\n{config}",
        reg.host()
    );
    let mut flags = vec!["--cni-bin-dir".into(), bin_dirs.into()];
    flags.extend(args);
    let h = Husk::start_with_config(flags, &config).await;
    net.write(&h.dir.path().join("net.d"), extra);
    Pod {
        cgroup_parent: format!("husk-test-{:08x}", rand::random::<u32>()),
        reg,
        net,
        h,
        _ipam: ipam,
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        // A test that failed midway may leave pods running: kill what is in
        // the test's cgroups, then remove them, deepest first.
        for h in cgroup_hierarchies() {
            remove_cgroup_tree(&h.join(&self.cgroup_parent));
        }
    }
}

pub fn remove_cgroup_tree(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            remove_cgroup_tree(&e.path());
        }
    }
    for _ in 0..50 {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        if procs.trim().is_empty() {
            break;
        }
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = std::fs::remove_dir(dir);
}

/// Every cgroup hierarchy mounted under /sys/fs/cgroup: the one unified
/// hierarchy on a cgroup v2 node, one per v1 controller otherwise.
pub fn cgroup_hierarchies() -> Vec<std::path::PathBuf> {
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        return vec!["/sys/fs/cgroup".into()];
    }
    std::fs::read_dir("/sys/fs/cgroup")
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && !p.is_symlink())
        .collect()
}

impl Pod {
    pub fn config(&self, name: &str) -> PodSandboxConfig {
        let mut c = config(name);
        c.linux.as_mut().unwrap().cgroup_parent = format!("/{}", self.cgroup_parent);
        c
    }
}

pub fn config(name: &str) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            attempt: 0,
        }),
        hostname: name.into(),
        log_directory: format!("/tmp/husk-test-logs/{name}"),
        dns_config: Some(DnsConfig {
            servers: vec!["10.96.0.10".into()],
            searches: vec!["default.svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        }),
        labels: [("app".to_string(), name.to_string())].into(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: "/husk-test".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub async fn run(h: &Husk, c: PodSandboxConfig) -> Result<String, tonic::Status> {
    run_under(h, c, "").await
}

/// RunPodSandbox under runtime handler `handler`.
pub async fn run_under(
    h: &Husk,
    c: PodSandboxConfig,
    handler: &str,
) -> Result<String, tonic::Status> {
    h.runtime()
        .await
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(c),
            runtime_handler: handler.into(),
        })
        .await
        .map(|r| r.into_inner().pod_sandbox_id)
}

pub async fn status(h: &Husk, id: &str) -> Result<PodSandboxStatusResponse, tonic::Status> {
    h.runtime()
        .await
        .pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: true,
        })
        .await
        .map(|r| r.into_inner())
}

pub fn pause_pid(st: &PodSandboxStatusResponse) -> i32 {
    let info: serde_json::Value = serde_json::from_str(&st.info["info"]).unwrap();
    info["pid"].as_i64().unwrap() as i32
}

pub fn shims_for(dir: &Path) -> usize {
    let out = Command::new("pgrep")
        .args(["-f", &format!("husk shim --dir {}", dir.display())])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// The ids of the spares (`sandbox/spare.rs`): a shim dir or a namespace
/// dir whose id has no sandbox dir, since a pod's RunPodSandbox makes that
/// first.
pub fn spares(p: &Pod) -> Vec<String> {
    spares_in(p.h.dir.path())
}

/// [`spares`] of the server whose test dir is `d`.
pub fn spares_in(d: &Path) -> Vec<String> {
    let mut ids: Vec<String> = ["run/s", "run/ns"]
        .iter()
        .flat_map(|sub| {
            std::fs::read_dir(d.join(sub))
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|id| !d.join("root/sandboxes").join(id).exists())
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// The entries of `root/sandboxes`, `run/s` and `run/ns` under the test
/// dir `d` that are no spare's, each with its dir, and the spares. One
/// may be in the making while this looks, so what is there is listed first
/// and the spares after: a spare made in between is then known as one.
pub fn unspared(d: &Path) -> (Vec<(&'static str, Vec<String>)>, Vec<String>) {
    let listed: Vec<(&'static str, Vec<String>)> = ["root/sandboxes", "run/s", "run/ns"]
        .into_iter()
        .map(|sub| {
            let names = std::fs::read_dir(d.join(sub))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            (sub, names)
        })
        .collect();
    let spares = spares_in(d);
    let left = listed
        .into_iter()
        .map(|(sub, names)| {
            (
                sub,
                names.into_iter().filter(|n| !spares.contains(n)).collect(),
            )
        })
        .collect();
    (left, spares)
}

/// Makes `c` a pod on the node's network.
pub fn host_network(c: &mut PodSandboxConfig) {
    c.linux.as_mut().unwrap().security_context = Some(LinuxSandboxSecurityContext {
        namespace_options: Some(NamespaceOption {
            network: NamespaceMode::Node as i32,
            ..Default::default()
        }),
        ..Default::default()
    });
}

/// Everything a sandbox could leave behind, counted once it has settled:
/// a removed pod's shim exits after its answer, and a spare is made in
/// the background, so a count is taken again for up to 10 s while it is
/// not empty. What stays is a leak.
pub fn leftovers(p: &Pod) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let v = leftovers_now(p);
        if v.is_empty() || std::time::Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Whether the mount point `m` is one of the server's own dirs under the
/// test's `d` (its root and state), bound onto themselves as private
/// mounts with `mount_namespace = "pod"`: no pod's.
pub fn servers_own(d: &Path, m: &str) -> bool {
    Path::new(m) == d.join("root") || Path::new(m) == d.join("run")
}

/// Everything a sandbox could leave behind, counted now.
pub fn leftovers_now(p: &Pod) -> Vec<String> {
    let mut v = Vec::new();
    if p.net.veths() > 0 {
        v.push(format!("{} veths", p.net.veths()));
    }
    if p.net.leases() > 0 {
        v.push(format!("{} leases", p.net.leases()));
    }
    // The spare the server makes ahead for the next pod is no pod's: one
    // at most, with its three pins and its shim.
    let d = p.h.dir.path();
    let (left, _) = unspared(d);
    let all_mounts = super::mounts_under(d);
    let shims = shims_for(d);
    let spares = spares(p);
    let spare_dirs: Vec<std::path::PathBuf> = spares
        .iter()
        .flat_map(|id| [d.join("run/ns").join(id), d.join("run/s").join(id)])
        .collect();
    let (kept, mounts): (Vec<String>, Vec<String>) = all_mounts
        .into_iter()
        .filter(|m| !servers_own(d, m))
        .partition(|m| spare_dirs.iter().any(|s| Path::new(m).starts_with(s)));
    if !mounts.is_empty() {
        v.push(format!("mounts {mounts:?}"));
    }
    if spares.len() > 1 || kept.len() > 3 {
        v.push(format!(
            "{} spares: {spares:?}, pins {kept:?}",
            spares.len()
        ));
    }
    let spare_shims: usize = spare_dirs.iter().map(|s| shims_for(s)).sum();
    if spare_shims > 1 || shims > spare_shims {
        v.push(format!("{shims} shim processes ({spare_shims} of a spare)"));
    }
    for (sub, names) in left {
        if !names.is_empty() {
            v.push(format!("{} entries in {sub}", names.len()));
        }
    }
    if super::count_files(&p.h.root().join("cni-cache")) > 0 {
        v.push("CNI cache files".into());
    }
    for h in cgroup_hierarchies() {
        let d = h.join(&p.cgroup_parent);
        if let Ok(rd) = std::fs::read_dir(&d) {
            let n = rd
                .flatten()
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                .count();
            if n > 0 {
                v.push(format!("{n} cgroups in {}", d.display()));
            }
        }
    }
    v
}

pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z"))
        .unwrap_or(false)
}

pub async fn list_pods(p: &Pod) -> Vec<PodSandbox> {
    p.h.runtime()
        .await
        .list_pod_sandbox(ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .items
}

pub async fn list_containers(p: &Pod) -> Vec<Container> {
    p.h.runtime()
        .await
        .list_containers(ListContainersRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .containers
}

/// Removes everything listed (containers, then pods), as a kubelet would
/// after a restart, and checks each listed state is one CRI allows.
pub async fn remove_listed(p: &Pod) {
    let mut rt = p.h.runtime().await;
    for c in list_containers(p).await {
        assert!(
            matches!(
                ContainerState::try_from(c.state),
                Ok(ContainerState::ContainerCreated
                    | ContainerState::ContainerRunning
                    | ContainerState::ContainerExited
                    | ContainerState::ContainerUnknown)
            ),
            "{c:?}"
        );
        rt.remove_container(RemoveContainerRequest {
            container_id: c.id.clone(),
        })
        .await
        .unwrap_or_else(|e| panic!("remove container {}: {e:?}\n{}", c.id, p.h.log()));
    }
    for s in list_pods(p).await {
        rt.stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: s.id.clone(),
        })
        .await
        .unwrap_or_else(|e| panic!("stop pod {}: {e:?}\n{}", s.id, p.h.log()));
        rt.remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: s.id.clone(),
        })
        .await
        .unwrap_or_else(|e| panic!("remove pod {}: {e:?}\n{}", s.id, p.h.log()));
    }
}

/// The pid of the shim of `pod` (its pid file).
pub fn shim_pid(h: &Husk, pod: &str) -> u32 {
    std::fs::read_to_string(h.dir.path().join("run/s").join(pod).join("shim.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// `path` as the processes of `pod` see it: through its monitor's root
/// when the pod's mounts live in the monitor's own mount namespace
/// (`--mount-namespace pod`, or `HUSK_TEST_MOUNT_NAMESPACE=pod`), else
/// the path itself.
pub fn as_pod_sees(h: &Husk, pod: &str, path: &Path) -> std::path::PathBuf {
    let mon = shim_pid(h, pod);
    let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/mnt")).ok();
    if ns(&mon.to_string()) == ns("self") {
        return path.to_path_buf();
    }
    Path::new(&format!("/proc/{mon}/root")).join(path.strip_prefix("/").unwrap_or(path))
}

/// The mount points under `dir` as the processes of `pod` see them.
pub fn mounts_as_pod_sees(h: &Husk, pod: &str, dir: &Path) -> Vec<String> {
    mounts_of(shim_pid(h, pod), dir)
}

/// The mount points under `dir` in the mount namespace of process `pid`.
pub fn mounts_of(pid: u32, dir: &Path) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|m| Path::new(m).starts_with(dir))
        .collect()
}

/// The containers an OCI handler's runtime keeps state of under this
/// server (`<state>/runtimes/<handler>/`).
pub fn runtime_state(p: &Pod, handler: &str) -> Vec<String> {
    std::fs::read_dir(p.h.dir.path().join("run/runtimes").join(handler))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}
