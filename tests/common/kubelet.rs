//! A `husk kubelet` process against any CRI endpoint, with its own
//! manifest, status, root and log directories, a test-unique node name
//! and cgroup root, and back-offs shortened so tests do not wait minutes.
//! Its disk thresholds are off unless a test gives its own, so a full
//! disk on the machine running the tests evicts nothing.
//! Helpers read the status files it writes and wait for conditions.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Kubelet {
    pub dir: tempfile::TempDir,
    pub endpoint: String,
    pub node: String,
    pub cgroup_root: String,
    pub child: Option<Child>,
    pub extra: Vec<String>,
    starts: usize,
}

impl Kubelet {
    pub fn start(endpoint: &str, cgroup_root: &str) -> Kubelet {
        Kubelet::start_with(endpoint, cgroup_root, vec![])
    }

    pub fn start_with(endpoint: &str, cgroup_root: &str, extra: Vec<String>) -> Kubelet {
        let dir = tempfile::Builder::new()
            .prefix("husk-kubelet-test-")
            .tempdir()
            .unwrap();
        std::fs::create_dir_all(dir.path().join("manifests")).unwrap();
        let mut k = Kubelet {
            dir,
            endpoint: endpoint.into(),
            node: format!("node-{:08x}", rand::random::<u32>()),
            cgroup_root: cgroup_root.into(),
            child: None,
            extra,
            starts: 0,
        };
        k.spawn();
        k
    }

    pub fn manifests(&self) -> PathBuf {
        self.dir.path().join("manifests")
    }
    pub fn status_dir(&self) -> PathBuf {
        self.dir.path().join("status")
    }
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }
    pub fn log_root(&self) -> PathBuf {
        self.dir.path().join("logs")
    }

    pub fn args(&self) -> Vec<String> {
        let mut a: Vec<String> = [
            "kubelet",
            "--runtime-endpoint",
            &self.endpoint,
            "--manifests",
            &self.manifests().display().to_string(),
            "--status-dir",
            &self.status_dir().display().to_string(),
            "--root",
            &self.root().display().to_string(),
            "--pod-log-root",
            &self.log_root().display().to_string(),
            "--node-name",
            &self.node,
            "--cgroup-root",
            &format!("/{}", self.cgroup_root),
            "--crash-backoff-initial",
            "1s",
            "--crash-backoff-max",
            "4s",
            "--image-backoff-initial",
            "1s",
            "--image-backoff-max",
            "4s",
            "--sync-frequency",
            "10s",
            "--file-check-frequency",
            "2s",
            "--log-level",
            "husk=debug,info",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // The node's disk is shared with every other job of the machine:
        // the kubelet's disk thresholds (imagefs.available<15%, image GC at
        // 85% used) would evict pods or remove images whenever it fills up.
        // The memory threshold stays the kubelet's default. Tests of those
        // managers give their own thresholds, on a tmpfs.
        for (flag, value) in [
            ("--eviction-hard", "memory.available<100Mi"),
            ("--image-gc-high-threshold", "100"),
        ] {
            if !self.extra.iter().any(|e| e == flag) {
                a.extend([flag.to_string(), value.to_string()]);
            }
        }
        a.extend(self.extra.iter().cloned());
        a
    }

    pub fn spawn(&mut self) {
        self.starts += 1;
        let out = std::fs::File::create(self.dir.path().join(format!("table.{}.txt", self.starts)))
            .unwrap();
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("kubelet.log"))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_husk"))
            .args(self.args())
            .stdout(out)
            .stderr(err)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kubelet.log")).unwrap_or_default()
    }

    /// Every table the kubelet printed, in order.
    pub fn table(&self) -> String {
        (1..=self.starts)
            .map(|i| {
                std::fs::read_to_string(self.dir.path().join(format!("table.{i}.txt")))
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("")
    }

    pub fn write(&self, file: &str, yaml: &str) {
        let tmp = self.dir.path().join(format!(".{file}.tmp"));
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(&tmp, self.manifests().join(file)).unwrap();
    }

    pub fn remove(&self, file: &str) {
        std::fs::remove_file(self.manifests().join(file)).unwrap();
    }

    /// The static pod's name on this node.
    pub fn pod_name(&self, name: &str) -> String {
        format!("{name}-{}", self.node)
    }

    pub fn status_file(&self, name: &str) -> PathBuf {
        self.status_dir()
            .join(format!("default_{}.json", self.pod_name(name)))
    }

    pub fn status(&self, name: &str) -> Option<Value> {
        let b = std::fs::read(self.status_file(name)).ok()?;
        serde_json::from_slice(&b).ok()
    }

    fn explain(&self, what: &str, last: &Option<Value>) -> String {
        format!(
            "timed out waiting for {what}\nlast status: {}\ntable:\n{}\nkubelet log (tail):\n{}",
            last.as_ref()
                .map(|v| serde_json::to_string_pretty(v).unwrap())
                .unwrap_or_default(),
            self.table(),
            tail(&self.log(), 60)
        )
    }

    /// Waits until `pred` holds for the pod's status; returns it.
    pub async fn wait(
        &self,
        name: &str,
        what: &str,
        secs: u64,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut last = None;
        loop {
            if let Some(v) = self.status(name) {
                if pred(&v) {
                    return v;
                }
                last = Some(v);
            }
            assert!(Instant::now() < deadline, "{}", self.explain(what, &last));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the pod's status file is gone (the pod was removed).
    pub async fn wait_gone(&self, name: &str, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while self.status_file(name).exists() {
            assert!(
                Instant::now() < deadline,
                "{}",
                self.explain("the pod's removal", &self.status(name))
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Removes every manifest and waits for every pod to be gone.
    pub fn remove_all(&self) {
        for e in std::fs::read_dir(self.manifests())
            .into_iter()
            .flatten()
            .flatten()
        {
            let _ = std::fs::remove_file(e.path());
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline && pod_files(&self.status_dir()) > 0 {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn pod_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    let n = e.file_name().to_string_lossy().to_string();
                    n.ends_with(".json") && n.contains('_')
                })
                .count()
        })
        .unwrap_or(0)
}

pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        if self.child.is_some() {
            // Pods go the way they would on a node: manifests removed, the
            // kubelet tears them down.
            self.remove_all();
        }
        self.kill9();
        // HUSK_TEST_KEEP_LOGS=DIR keeps each kubelet's log and table there.
        if let Some(d) = std::env::var_os("HUSK_TEST_KEEP_LOGS") {
            let d = PathBuf::from(d);
            let _ = std::fs::create_dir_all(&d);
            let _ = std::fs::write(d.join(format!("{}.log", self.node)), self.log());
            let _ = std::fs::write(d.join(format!("{}.table", self.node)), self.table());
        }
        for m in super::mounts_under(self.dir.path()).iter().rev() {
            let _ = Command::new("umount").arg("-l").arg(m).status();
        }
    }
}

// Status accessors.

pub fn phase(v: &Value) -> &str {
    v["status"]["phase"].as_str().unwrap_or("")
}

pub fn condition(v: &Value, kind: &str) -> bool {
    v["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

pub fn container<'a>(v: &'a Value, name: &str) -> &'a Value {
    for key in ["containerStatuses", "initContainerStatuses"] {
        if let Some(c) = v["status"][key]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == name)
        {
            return c;
        }
    }
    &Value::Null
}

pub fn waiting_reason<'a>(v: &'a Value, name: &str) -> &'a str {
    container(v, name)["state"]["waiting"]["reason"]
        .as_str()
        .unwrap_or("")
}

pub fn restarts(v: &Value, name: &str) -> i64 {
    container(v, name)["restartCount"].as_i64().unwrap_or(0)
}

pub fn running(v: &Value, name: &str) -> bool {
    !container(v, name)["state"]["running"].is_null()
}

/// Lines a container wrote to its CRI log files (all attempts), text only.
pub fn logs(k: &Kubelet, v: &Value, container: &str) -> Vec<String> {
    let meta = &v["metadata"];
    let dir = k.log_root().join(format!(
        "{}_{}_{}",
        meta["namespace"].as_str().unwrap(),
        meta["name"].as_str().unwrap(),
        meta["uid"].as_str().unwrap()
    ));
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(container))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    for f in files {
        for l in std::fs::read_to_string(f).unwrap_or_default().lines() {
            if let Some(text) = l.splitn(4, ' ').nth(3) {
                out.push(text.to_string());
            }
        }
    }
    out
}
