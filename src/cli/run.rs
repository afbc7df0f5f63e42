//! `husk run pod.yaml`: one pod, start to finish. The kubelet loop runs
//! in-process with the pod as its only source; a progress line follows
//! the pod's status, its containers' logs stream to stdout as
//! `[container] line`, and the command exits when the pod has completed
//! (0 for Succeeded, the failed container's exit code or 1 for Failed) or,
//! for a restartPolicy Always pod (which never completes), is Ready (0). Then the pod is torn down (preStop hooks, grace period),
//! unless `--keep` leaves a Ready pod running. Ctrl-C tears down and exits 130;
//! `--timeout` exits 124.

use super::kubelet::{format_row, CommonFlags, HEADER};
use crate::kubelet::kit::defaults;
use crate::kubelet::kit::labels;
use crate::kubelet::managers::status_manager::StatusEvent;
use crate::kubelet::pods::sources::{parse_manifest, SourceSnapshot};
use crate::kubelet::{self, Control, Notice};
use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

#[derive(clap::Args, Debug, Clone)]
pub struct RunFlags {
    /// The pod manifest (YAML or JSON, one Pod).
    pub manifest: PathBuf,
    #[command(flatten)]
    pub common: CommonFlags,
    /// Give up after this long (exit code 124).
    #[arg(long, value_parser = super::kubelet::parse_duration, default_value = "5m")]
    pub timeout: Duration,
    /// Leave a Ready pod running instead of removing it.
    #[arg(long)]
    pub keep: bool,
    /// Print each status change as a table row instead of a progress line.
    #[arg(long)]
    pub table: bool,
}

/// A line on stdout, around the progress line (which is on stderr, and
/// only on a terminal).
fn say(bar: &indicatif::ProgressBar, line: impl std::fmt::Display) {
    bar.suspend(|| println!("{line}"));
}

/// Reads the one pod of a manifest, ready for the kubelet.
pub fn load(path: &Path, node: &str) -> anyhow::Result<Pod> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    let mut pods = parse_manifest(&text);
    anyhow::ensure!(
        !pods.is_empty(),
        "{}: no pod in the manifest",
        path.display()
    );
    anyhow::ensure!(
        pods.len() == 1,
        "{}: husk run takes one pod, the manifest has {}",
        path.display(),
        pods.len()
    );
    let mut pod = pods
        .remove(0)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    if pod.metadata.uid.as_deref().unwrap_or("").is_empty() {
        pod.metadata.uid = Some(format!("{:032x}", rand::random::<u128>()));
    }
    defaults::apply(&mut pod);
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node.to_string());
    }
    let ann = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    ann.insert(labels::CONFIG_SOURCE.into(), "run".into());
    ann.insert(labels::CONFIG_SEEN.into(), defaults::now().0.to_string());
    Ok(pod)
}

/// Follows `<log dir>/<container>/<n>.log` files, printing new lines.
struct LogFollower {
    dir: PathBuf,
    offsets: HashMap<PathBuf, u64>,
    partial: HashMap<PathBuf, String>,
}

impl LogFollower {
    fn poll(&mut self, out: &mut dyn FnMut(String)) {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut files: Vec<(String, PathBuf)> = Vec::new();
        for d in rd.flatten() {
            let name = d.file_name().to_string_lossy().to_string();
            for f in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
                files.push((name.clone(), f.path()));
            }
        }
        files.sort();
        for (container, path) in files {
            let off = self.offsets.get(&path).copied().unwrap_or(0);
            let Ok(data) = std::fs::read(&path) else {
                continue;
            };
            if (data.len() as u64) <= off {
                continue;
            }
            let new = &data[off as usize..];
            // Only whole lines; the rest waits for the next poll.
            let Some(end) = new.iter().rposition(|b| *b == b'\n') else {
                continue;
            };
            self.offsets.insert(path.clone(), off + end as u64 + 1);
            let text = String::from_utf8_lossy(&new[..end]);
            for line in text.lines() {
                let mut f = line.splitn(4, ' ');
                let (_, _, tag, body) = (f.next(), f.next(), f.next(), f.next().unwrap_or(""));
                let p = self.partial.entry(path.clone()).or_default();
                p.push_str(body);
                if tag != Some("P") {
                    out(format!("[{container}] {}", std::mem::take(p)));
                }
            }
        }
    }

    /// Prints each file's last line that its container never ended.
    fn finish(&mut self, out: &mut dyn FnMut(String)) {
        self.poll(out);
        for (path, p) in self.partial.drain() {
            let container = path
                .parent()
                .and_then(|d| d.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !p.is_empty() {
                out(format!("[{container}] {p}"));
            }
        }
    }
}

enum Outcome {
    Succeeded,
    Failed(i32, String),
    Ready,
}

fn outcome(ev: &StatusEvent) -> Option<Outcome> {
    let st = ev.pod.status.as_ref()?;
    match st.phase.as_deref() {
        Some("Succeeded") => Some(Outcome::Succeeded),
        Some("Failed") => {
            let failed = st
                .init_container_statuses
                .iter()
                .flatten()
                .chain(st.container_statuses.iter().flatten())
                .filter_map(|c| {
                    let t = c.state.as_ref()?.terminated.as_ref()?;
                    (t.exit_code != 0).then(|| {
                        (
                            t.exit_code,
                            format!(
                                "container {} exited with {} ({})",
                                c.name,
                                t.exit_code,
                                t.reason.clone().unwrap_or_default()
                            ),
                        )
                    })
                })
                .next();
            Some(match failed {
                Some((code, why)) => Outcome::Failed(code, why),
                None => Outcome::Failed(
                    1,
                    format!(
                        "{}: {}",
                        st.reason.clone().unwrap_or_else(|| "Failed".into()),
                        st.message.clone().unwrap_or_default()
                    ),
                ),
            })
        }
        // A pod that restarts forever is done when Ready; one that may
        // complete (OnFailure, Never) is waited for.
        _ => (defaults::restart_policy(&ev.pod) == "Always"
            && st
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True"))
        .then_some(Outcome::Ready),
    }
}

/// `husk run`; returns the process exit code.
pub async fn run(f: RunFlags) -> anyhow::Result<i32> {
    let settings = f.common.settings()?;
    let pod = load(&f.manifest, &settings.node_name)?;
    let uid = defaults::uid(&pod).to_string();
    let log_dir = crate::kubelet::spec::sandbox_config::log_dir(&settings, &pod);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (snap_tx, snap_rx) = mpsc::channel(4);
    let (stop_tx, stop_rx) = watch::channel(false);
    let control = Control {
        snapshots: snap_rx,
        sources: vec!["run".into()],
        stop: stop_rx,
    };
    snap_tx
        .send(SourceSnapshot {
            source: "run".into(),
            pods: vec![pod.clone()],
            errors: vec![],
        })
        .await
        .ok();
    let mut loop_task = tokio::spawn(kubelet::run(settings, tx, control));
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar.set_message(format!("pod {}: starting", defaults::name(&pod)));
    if f.table {
        say(&bar, HEADER);
    }
    let mut logs = LogFollower {
        dir: log_dir,
        offsets: HashMap::new(),
        partial: HashMap::new(),
    };
    let deadline = Instant::now() + f.timeout;
    let mut poll = tokio::time::interval(Duration::from_millis(200));
    let mut result: Option<(i32, String)> = None;
    let mut last_row = None;
    while result.is_none() {
        tokio::select! {
            r = &mut loop_task => {
                bar.finish_and_clear();
                r??;
                anyhow::bail!("the kubelet loop stopped");
            }
            _ = tokio::signal::ctrl_c() => { result = Some((130, "interrupted".into())); }
            _ = tokio::time::sleep_until(deadline.into()) => {
                let last = last_row.clone().unwrap_or_default();
                result = Some((124, format!("timed out after {:?} ({last})", f.timeout)));
            }
            _ = poll.tick() => logs.poll(&mut |l| say(&bar, l)),
            Some(n) = rx.recv() => match n {
                Notice::Runtime(name, version) => say(&bar, format!("runtime: {name} {version}")),
                Notice::ManifestError(e) => say(&bar, format!("error: {}: {}", e.origin, e.message)),
                Notice::Status(ev) if defaults::uid(&ev.pod) == uid => {
                    let row = format!("{} {} restarts={}", ev.row.status, ev.row.ready, ev.row.restarts);
                    if f.table {
                        say(&bar, format_row(&ev));
                    } else if last_row.as_ref() != Some(&row) {
                        say(&bar, format!("pod {}: {}", ev.row.name, row));
                    }
                    bar.set_message(format!("pod {}: {}", ev.row.name, row));
                    last_row = Some(row);
                    match outcome(&ev) {
                        Some(Outcome::Succeeded) => result = Some((0, "Succeeded".into())),
                        Some(Outcome::Ready) => result = Some((0, "Ready".into())),
                        Some(Outcome::Failed(code, why)) => result = Some((code, format!("Failed: {why}"))),
                        None => {}
                    }
                }
                Notice::Status(_) => {}
            }
        }
    }
    let (code, why) = result.unwrap_or((1, String::new()));
    // The last lines the containers wrote.
    tokio::time::sleep(Duration::from_millis(300)).await;
    logs.finish(&mut |l| say(&bar, l));
    let name = defaults::name(&pod).to_string();
    say(&bar, format!("pod {name}: {why}"));
    let ready_and_kept = f.keep && why == "Ready";
    if !ready_and_kept {
        bar.set_message(format!("pod {name}: removing"));
        let _ = snap_tx
            .send(SourceSnapshot {
                source: "run".into(),
                pods: vec![],
                errors: vec![],
            })
            .await;
        let grace = defaults::grace_period(&pod).max(0) as u64;
        let limit = Instant::now() + Duration::from_secs(grace + 60);
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(limit.into()) => {
                    say(&bar, format!("pod {name}: removal did not finish in time"));
                    break;
                }
                n = rx.recv() => match n {
                    Some(Notice::Status(ev)) if ev.removed && defaults::uid(&ev.pod) == uid => break,
                    Some(_) => {}
                    None => break,
                }
            }
        }
        say(&bar, format!("pod {name}: removed"));
    }
    bar.finish_and_clear();
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), loop_task).await;
    Ok(code)
}
