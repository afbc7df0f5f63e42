//! A `husk kubelet` joined to the stand-in API server (common/apiserver.rs)
//! over a real `husk serve`, with a registry holding `test/busybox:1`,
//! and helpers to create pods bound to the node and wait on API objects.

use super::apiserver::{self, ApiServer};
use super::images::*;
use super::kubelet::*;
use super::pod::{self, Pod};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

pub const TOKEN: &str = "node-token-1";

/// husk serve + a registry with `test/busybox:1` + the stand-in API
/// server + a kubelet joined to it. On drop, the API pods are deleted
/// first so the kubelet tears them down while the runtime is there.
pub struct Env {
    pub k: Kubelet,
    pub api: ApiServer,
    pub p: Pod,
    pub image: String,
    /// The kubeconfigs (`kubeconfig`; `kubelet.conf` once bootstrapped).
    pub _kc: tempfile::TempDir,
}

impl Drop for Env {
    fn drop(&mut self) {
        for pod in self.api.s.list("pods") {
            let path = format!(
                "/api/v1/namespaces/{}/pods/{}",
                pod["metadata"]["namespace"].as_str().unwrap_or("default"),
                pod["metadata"]["name"].as_str().unwrap_or("")
            );
            self.api.s.delete(&path, Some(0));
        }
    }
}

pub async fn env_with(token: &str, extra: Vec<String>) -> Env {
    env_full(token, vec![], extra).await
}

/// `env_with`, with flags for husk serve too.
pub async fn env_full(token: &str, husk_args: Vec<String>, extra: Vec<String>) -> Env {
    start_env(token, husk_args, "", None, extra).await
}

/// `env`, the server's config file holding `config`.
pub async fn env_config(config: &str) -> Env {
    start_env(TOKEN, vec![], config, None, vec![]).await
}

/// A kubelet that joins by TLS bootstrap: `--bootstrap-kubeconfig` holds
/// the token, `--kubeconfig` (`<dir>/kubelet.conf`) does not exist yet.
pub async fn env_bootstrap(extra: Vec<String>) -> Env {
    start_env(
        TOKEN,
        vec![],
        "",
        Some(Box::new(|port| kubeconfig_text("http", port, TOKEN, ""))),
        extra,
    )
    .await
}

/// `env_bootstrap` with the bootstrap kubeconfig `front` writes for the
/// stand-in's port (a TLS front of the test's own, say).
pub async fn env_bootstrap_via(
    front: impl FnOnce(u16) -> String + 'static,
    extra: Vec<String>,
) -> Env {
    start_env(TOKEN, vec![], "", Some(Box::new(front)), extra).await
}

/// A kubeconfig for `scheme://127.0.0.1:port` with a bearer token and,
/// if given, a CA (base64 PEM).
pub fn kubeconfig_text(scheme: &str, port: u16, token: &str, ca_b64: &str) -> String {
    let ca = if ca_b64.is_empty() {
        String::new()
    } else {
        format!(", certificate-authority-data: '{ca_b64}'")
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: '{scheme}://127.0.0.1:{port}'{ca}}}\nusers:\n- name: u\n  user: {{token: '{token}'}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
    )
}

type Front = Box<dyn FnOnce(u16) -> String>;

/// The environment (the server's config file holding `config`); with
/// `bootstrap`, the kubelet joins by TLS bootstrap
/// with the kubeconfig it writes.
async fn start_env(
    token: &str,
    husk_args: Vec<String>,
    config: &str,
    bootstrap: Option<Front>,
    extra: Vec<String>,
) -> Env {
    let p = pod::setup_config(vec![], "/usr/lib/cni", husk_args, config).await;
    let pusher = Pusher::new(&p.reg);
    let img = Image::new(vec![Layer::new(&busybox_entries(), Compression::Gzip)]);
    pusher.image("test/busybox", "1", &img, Format::Oci).await;
    let image = format!("{}/test/busybox:1", p.reg.host());
    let api = apiserver::start(TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    let mut args = match bootstrap {
        None => {
            std::fs::write(&kc, api.kubeconfig(token)).unwrap();
            vec!["--kubeconfig".into(), kc.display().to_string()]
        }
        Some(f) => {
            std::fs::write(&kc, f(api.port)).unwrap();
            vec![
                "--kubeconfig".into(),
                dir.path().join("kubelet.conf").display().to_string(),
                "--bootstrap-kubeconfig".into(),
                kc.display().to_string(),
            ]
        }
    };
    args.extend([
        "--node-ip".into(),
        "127.0.0.1".into(),
        "--address".into(),
        "127.0.0.1".into(),
        "--port".into(),
        super::free_port().to_string(),
        "--node-status-update-frequency".into(),
        "2s".into(),
    ]);
    args.extend(extra);
    let k = Kubelet::start_with(&p.h.endpoint(), &p.cgroup_parent, args);
    Env {
        k,
        api,
        p,
        image,
        _kc: dir,
    }
}

pub async fn env() -> Env {
    env_with(TOKEN, vec![]).await
}

impl Env {
    pub fn pod_path(&self, name: &str) -> String {
        format!("/api/v1/namespaces/default/pods/{name}")
    }

    pub fn node_path(&self) -> String {
        format!("/api/v1/nodes/{}", self.k.node)
    }

    pub fn lease_path(&self) -> String {
        format!(
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{}",
            self.k.node
        )
    }

    /// Creates a pod bound to this node.
    pub fn create(&self, name: &str, containers: Value) -> Value {
        self.api.s.create(
            "/api/v1/namespaces/default/pods",
            json!({"metadata": {"name": name},
                   "spec": {"nodeName": self.k.node, "terminationGracePeriodSeconds": 5,
                            "containers": containers}}),
        )
    }

    pub fn sleeper(&self) -> Value {
        json!([{"name": "app", "image": self.image, "command": ["/bin/sleep", "3600"]}])
    }

    /// Waits until `pred` holds for the object at `path`.
    pub async fn wait(
        &self,
        path: &str,
        what: &str,
        secs: u64,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let v = self.api.s.get(path);
            if let Some(v) = &v {
                if pred(v) {
                    return v.clone();
                }
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what} at {path}\nlast: {}\nkubelet log:\n{}",
                v.map(|v| serde_json::to_string_pretty(&v).unwrap())
                    .unwrap_or_default(),
                tail(&self.k.log(), 60)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn wait_gone(&self, path: &str, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while self.api.s.get(path).is_some() {
            assert!(
                Instant::now() < deadline,
                "{path} still there\nkubelet log:\n{}",
                tail(&self.k.log(), 60)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn running_and_ready(&self, name: &str) -> Value {
        self.wait(&self.pod_path(name), "Running and Ready", 60, |v| {
            phase(v) == "Running" && condition(v, "Ready")
        })
        .await
    }

    pub fn event_reasons(&self, uid: &str) -> Vec<String> {
        self.api
            .s
            .list("events")
            .iter()
            .filter(|e| e["involvedObject"]["uid"] == uid)
            .map(|e| e["reason"].as_str().unwrap_or("").to_string())
            .collect()
    }
}

pub fn cond_status<'a>(v: &'a Value, kind: &str) -> &'a str {
    v["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
}

/// Sandboxes the runtime holds for a pod UID (any state).
pub async fn sandboxes(endpoint: &str, uid: &str) -> usize {
    let ch = husk::api::connect(endpoint).await.unwrap();
    let mut rt = husk::api::cri::runtime_service_client::RuntimeServiceClient::new(ch);
    rt.list_pod_sandbox(husk::api::cri::ListPodSandboxRequest {
        filter: Some(husk::api::cri::PodSandboxFilter {
            label_selector: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
            ..Default::default()
        }),
    })
    .await
    .unwrap()
    .into_inner()
    .items
    .len()
}
