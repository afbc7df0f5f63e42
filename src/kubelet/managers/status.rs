//! The pod's API status from its spec and the runtime, as the kubelet
//! generates it: phase (getPhase), the PodReadyToStartContainers /
//! Initialized / ContainersReady / Ready / PodScheduled conditions, and a
//! status per container (waiting / running / terminated with reasons and
//! exit codes, last state, restart count, image, imageID, containerID as
//! `<runtime>://<id>`, ready, started), plus pod IPs, QoS class and start
//! time. Waiting reasons of failed starts (ErrImagePull, CrashLoopBackOff,
//! …) come from the reason cache the sync fills.

use super::prober::ProbeManager;
use super::reasons::ReasonCache;
use crate::kubelet::kit::defaults;
use crate::kubelet::kit::labels;
use crate::kubelet::kit::progress;
use crate::kubelet::kit::runtime::{CState, ContainerView, RuntimePod};
use crate::kubelet::kit::settings::Settings;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use std::path::Path;

fn time(ns: i64) -> Option<Time> {
    (ns > 0)
        .then(|| Timestamp::from_nanosecond(ns as i128).ok())
        .flatten()
        .map(Time)
}

/// The termination message: the file the container wrote, or (policy
/// FallbackToLogsOnError, failed, empty file) the tail of its log.
fn termination_message(c: &ContainerView) -> Option<String> {
    let path = c.annotations.get(labels::TERMINATION_MESSAGE_PATH)?;
    let mut msg = String::new();
    if let Some(m) = c.mounts.iter().find(|m| &m.container_path == path) {
        // At most what is kept: a container can write gigabytes there.
        if let Ok(b) = read_head(Path::new(&m.host_path), MAX_TERMINATION_MESSAGE) {
            msg = String::from_utf8_lossy(&b).to_string();
        }
    }
    let policy = c
        .annotations
        .get(labels::TERMINATION_MESSAGE_POLICY)
        .map(String::as_str);
    if msg.is_empty()
        && policy == Some("FallbackToLogsOnError")
        && c.exit_code != 0
        && !c.log_path.is_empty()
    {
        msg = log_tail(&c.log_path, 80, 2048);
    }
    (!msg.is_empty()).then_some(msg)
}

/// The most of a termination-message file that is read (the upstream
/// kubelet's per-container limit).
const MAX_TERMINATION_MESSAGE: u64 = 4096;

/// The first `max` bytes of a regular file, opened without blocking (a
/// FIFO put in its place cannot hang the kubelet).
fn read_head(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut b = Vec::new();
    f.take(max).read_to_end(&mut b)?;
    Ok(b)
}

/// The last `bytes` of a regular file, from the start of the first whole
/// line in them (the whole file when it is shorter).
fn read_tail(path: &Path, bytes: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let md = f.metadata()?;
    if !md.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let len = md.len();
    let from = len.saturating_sub(bytes);
    f.seek(SeekFrom::Start(from))?;
    let mut b = Vec::new();
    f.take(bytes).read_to_end(&mut b)?;
    if from > 0 {
        let cut = b
            .iter()
            .position(|c| *c == b'\n')
            .map_or(b.len(), |i| i + 1);
        b.drain(..cut);
    }
    Ok(b)
}

/// The last `lines` lines (at most `max` bytes) of a CRI log file, text
/// only. Only the file's end is read: enough for `lines` CRI records of
/// `max` bytes of text, whatever the log's size.
pub fn log_tail(path: &str, lines: usize, max: usize) -> String {
    let window = (64 << 10).max(max as u64 * 4 + lines as u64 * 128);
    log_tail_text(
        &read_tail(Path::new(path), window).unwrap_or_default(),
        lines,
        max,
    )
}

/// `log_tail` of a CRI log's bytes, read back by the kubelet API's reader
/// (`node_api::logs::Reader`): each stream's partial records joined, each
/// ended line with its newline, an unfinished last line as it is; lines
/// that are not CRI records skipped.
pub fn log_tail_text(text: &[u8], lines: usize, max: usize) -> String {
    use crate::kubelet::kit::log_reader::{Options, Reader};
    let (mut r, o) = (Reader::default(), Options::default());
    let mut out = r.lines(text, &o);
    out.extend(r.finish(&o));
    let start = out.len().saturating_sub(lines);
    let mut s = String::from_utf8_lossy(&out[start..].concat()).into_owned();
    if s.len() > max {
        let cut = s.len() - max;
        let cut = (cut..s.len())
            .find(|i| s.is_char_boundary(*i))
            .unwrap_or(s.len());
        s = s[cut..].to_string();
    }
    s
}

fn terminated(rt_name: &str, c: &ContainerView) -> ContainerStateTerminated {
    let reason = if !c.reason.is_empty() {
        c.reason.clone()
    } else if c.exit_code == 0 {
        "Completed".into()
    } else {
        "Error".into()
    };
    ContainerStateTerminated {
        exit_code: c.exit_code,
        reason: Some(reason),
        message: termination_message(c)
            .or_else(|| (!c.message.is_empty()).then(|| c.message.clone())),
        started_at: time(c.started_at),
        finished_at: time(c.finished_at),
        container_id: Some(format!("{rt_name}://{}", c.id)),
        signal: None,
    }
}

fn waiting(reason: &str, message: Option<String>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message: message.filter(|m| !m.is_empty()),
        }),
        ..Default::default()
    }
}

/// What a status is generated from besides the pod and the runtime.
pub struct Inputs<'a> {
    /// The runtime's name, for container IDs (`<runtime>://<id>`).
    pub runtime: &'a str,
    pub settings: &'a Settings,
    pub probes: &'a ProbeManager,
    pub reasons: &'a ReasonCache,
}

fn container_status(
    ctx: &Inputs,
    pod: &Pod,
    rt: &RuntimePod,
    c: &Container,
    default_waiting: &str,
) -> ContainerStatus {
    let uid = defaults::uid(pod);
    let mut all = rt.all_named(&c.name);
    let latest = all.next();
    let previous = all.next();
    let cached = ctx
        .reasons
        .get(uid, &c.name)
        .or_else(|| ctx.reasons.get(uid, ""));
    let mut st = ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        ..Default::default()
    };
    let Some(l) = latest else {
        let (r, m) = cached.unwrap_or_else(|| (default_waiting.to_string(), String::new()));
        st.state = Some(waiting(&r, Some(m)));
        st.started = Some(false);
        return st;
    };
    st.restart_count = l.restart_count;
    st.image_id = l.image_ref.clone();
    st.container_id = Some(format!("{}://{}", ctx.runtime, l.id));
    match l.state {
        CState::Running => {
            st.state = Some(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: time(l.started_at),
                }),
                ..Default::default()
            });
            st.ready = ctx.probes.ready(uid, &l.id, c);
            st.started = Some(ctx.probes.started(uid, &l.id, c));
            if let Some(p) = previous.filter(|p| p.state == CState::Exited) {
                st.last_state = Some(ContainerState {
                    terminated: Some(terminated(ctx.runtime, p)),
                    ..Default::default()
                });
            }
        }
        CState::Exited | CState::Unknown => {
            let mut term = terminated(ctx.runtime, l);
            if l.state == CState::Unknown {
                term.reason = Some("ContainerStatusUnknown".into());
                term.exit_code = 137;
            }
            let restarting = progress::should_restart(pod, rt, &c.name);
            match cached.filter(|_| restarting) {
                Some((r, m)) => {
                    st.state = Some(waiting(&r, Some(m)));
                    st.last_state = Some(ContainerState {
                        terminated: Some(term),
                        ..Default::default()
                    });
                }
                None => {
                    st.state = Some(ContainerState {
                        terminated: Some(term),
                        ..Default::default()
                    });
                    if let Some(p) = previous.filter(|p| p.state == CState::Exited) {
                        st.last_state = Some(ContainerState {
                            terminated: Some(terminated(ctx.runtime, p)),
                            ..Default::default()
                        });
                    }
                }
            }
            st.started = Some(false);
        }
        CState::Created => {
            let (r, m) = cached.unwrap_or_else(|| ("ContainerCreating".into(), String::new()));
            st.state = Some(waiting(&r, Some(m)));
            st.started = Some(false);
        }
    }
    st
}

fn is_terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded") | Some("Failed"))
}

/// The kubelet's getPhase.
pub fn phase(pod: &Pod, init: &[ContainerStatus], apps: &[ContainerStatus]) -> &'static str {
    let (mut pending_init, mut failed_init) = (0, 0);
    for st in init {
        let s = st.state.clone().unwrap_or_default();
        if s.running.is_some() {
            pending_init += 1;
        } else if let Some(t) = &s.terminated {
            if t.exit_code != 0 {
                failed_init += 1;
            }
        } else if s.waiting.is_some() {
            match st.last_state.as_ref().and_then(|l| l.terminated.as_ref()) {
                Some(t) if t.exit_code != 0 => failed_init += 1,
                Some(_) => {}
                None => pending_init += 1,
            }
        } else {
            pending_init += 1;
        }
    }
    let (mut unknown, mut running, mut waiting_n, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for c in defaults::containers(pod) {
        let Some(st) = apps.iter().find(|s| s.name == c.name) else {
            unknown += 1;
            continue;
        };
        let s = st.state.clone().unwrap_or_default();
        if s.running.is_some() {
            running += 1;
        } else if let Some(t) = &s.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if s.waiting.is_some() {
            if st
                .last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .is_some()
            {
                stopped += 1;
            } else {
                waiting_n += 1;
            }
        } else {
            unknown += 1;
        }
    }
    let policy = defaults::restart_policy(pod);
    if failed_init > 0 && policy == "Never" {
        return "Failed";
    }
    let any_app_started = apps.iter().any(|s| {
        s.state
            .as_ref()
            .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
            || s.last_state.is_some()
    });
    if (pending_init > 0 && !any_app_started) || waiting_n > 0 {
        return "Pending";
    }
    if running > 0 && unknown == 0 {
        return "Running";
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        if policy == "Always" {
            return "Running";
        }
        if stopped == succeeded {
            return "Succeeded";
        }
        if policy == "Never" {
            return "Failed";
        }
        return "Running";
    }
    "Pending"
}

fn condition(kind: &str, ok: bool, reason: Option<&str>, message: Option<String>) -> PodCondition {
    PodCondition {
        type_: kind.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.filter(|_| !ok).map(str::to_string),
        message: message.filter(|_| !ok),
        ..Default::default()
    }
}

/// Keeps a condition's transition time while its status stays the same.
fn carry_times(conds: &mut [PodCondition], prev: Option<&PodStatus>) {
    let now = defaults::now();
    for c in conds {
        let old = prev
            .and_then(|p| p.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|o| o.type_ == c.type_));
        c.last_transition_time = match old {
            Some(o) if o.status == c.status => o.last_transition_time.clone(),
            _ => Some(now.clone()),
        };
    }
}

/// The whole status of an admitted pod.
pub fn generate(ctx: &Inputs, pod: &Pod, rt: &RuntimePod, prev: Option<&PodStatus>) -> PodStatus {
    let (_, _, initialized) = progress::next_init(pod, rt);
    let init: Vec<ContainerStatus> = defaults::init_containers(pod)
        .iter()
        .map(|c| container_status(ctx, pod, rt, c, "PodInitializing"))
        .collect();
    let app_default = if initialized {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let apps: Vec<ContainerStatus> = defaults::containers(pod)
        .iter()
        .map(|c| container_status(ctx, pod, rt, c, app_default))
        .collect();
    let mut ph = phase(pod, &init, &apps);
    // A terminal phase is final.
    if let Some(p) = prev
        .and_then(|p| p.phase.as_deref())
        .filter(|p| is_terminal(Some(p)))
    {
        ph = if p == "Succeeded" {
            "Succeeded"
        } else {
            "Failed"
        };
    }
    let sandbox = rt.ready_sandbox();
    let ips: Vec<String> = sandbox.map(|s| s.ips.clone()).unwrap_or_default();
    let incomplete: Vec<&str> = defaults::init_containers(pod)
        .iter()
        .zip(&init)
        .filter(|(_, s)| {
            s.state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_none_or(|t| t.exit_code != 0)
        })
        .map(|(c, _)| c.name.as_str())
        .collect();
    let unready: Vec<&str> = apps
        .iter()
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect();
    let ready_reason = if ph == "Succeeded" || ph == "Failed" {
        "PodCompleted"
    } else {
        "ContainersNotReady"
    };
    let unready_msg = (!unready.is_empty())
        .then(|| format!("containers with unready status: [{}]", unready.join(" ")));
    let mut conds = vec![
        condition("PodReadyToStartContainers", sandbox.is_some(), None, None),
        condition(
            "Initialized",
            initialized,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: [{}]",
                incomplete.join(" ")
            )),
        ),
        condition(
            "Ready",
            unready.is_empty(),
            Some(ready_reason),
            unready_msg.clone(),
        ),
        condition(
            "ContainersReady",
            unready.is_empty(),
            Some(ready_reason),
            unready_msg,
        ),
        condition("PodScheduled", true, None, None),
    ];
    carry_times(&mut conds, prev);
    PodStatus {
        phase: Some(ph.into()),
        conditions: Some(conds),
        pod_ip: ips.first().cloned(),
        pod_ips: (!ips.is_empty()).then(|| ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect()),
        host_ip: ctx.settings.node_ip.clone(),
        host_ips: ctx
            .settings
            .node_ip
            .clone()
            .map(|ip| vec![k8s_openapi::api::core::v1::HostIP { ip }]),
        start_time: prev
            .and_then(|p| p.start_time.clone())
            .or_else(|| Some(defaults::now())),
        qos_class: Some(defaults::qos_class(pod).into()),
        init_container_statuses: (!init.is_empty()).then_some(init),
        container_statuses: Some(apps),
        ..Default::default()
    }
}

/// The status of a pod admission refused.
pub fn rejected(pod: &Pod, reason: &str, message: &str, prev: Option<&PodStatus>) -> PodStatus {
    let mut conds = vec![condition("PodScheduled", true, None, None)];
    carry_times(&mut conds, prev);
    PodStatus {
        phase: Some("Failed".into()),
        reason: Some(reason.into()),
        message: Some(message.into()),
        conditions: Some(conds),
        start_time: prev
            .and_then(|p| p.start_time.clone())
            .or_else(|| Some(defaults::now())),
        qos_class: Some(defaults::qos_class(pod).into()),
        ..Default::default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cs(yaml: &str) -> Vec<ContainerStatus> {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn pod(policy: &str) -> Pod {
        let mut p: Pod = serde_yaml::from_str(&format!(
            "metadata: {{name: p}}\nspec:\n  restartPolicy: {policy}\n  initContainers: [{{name: i, image: x}}]\n  containers: [{{name: a, image: x}}]\n"
        ))
        .unwrap();
        defaults::apply(&mut p);
        p
    }

    const DONE: &str = "[{name: i, image: x, imageID: '', ready: false, restartCount: 0, state: {terminated: {exitCode: 0}}}]";

    #[test]
    fn phases_follow_get_phase() {
        let waiting = cs("[{name: a, image: x, imageID: '', ready: false, restartCount: 0, state: {waiting: {reason: PodInitializing}}}]");
        let init_running = cs("[{name: i, image: x, imageID: '', ready: false, restartCount: 0, state: {running: {}}}]");
        assert_eq!(phase(&pod("Always"), &init_running, &waiting), "Pending");
        let init_failed = cs("[{name: i, image: x, imageID: '', ready: false, restartCount: 0, state: {terminated: {exitCode: 1}}}]");
        assert_eq!(phase(&pod("Never"), &init_failed, &waiting), "Failed");
        assert_eq!(phase(&pod("Always"), &init_failed, &waiting), "Pending");
        let running = cs("[{name: a, image: x, imageID: '', ready: true, restartCount: 0, state: {running: {}}}]");
        assert_eq!(phase(&pod("Always"), &cs(DONE), &running), "Running");
        let ok = cs("[{name: a, image: x, imageID: '', ready: false, restartCount: 0, state: {terminated: {exitCode: 0}}}]");
        let bad = cs("[{name: a, image: x, imageID: '', ready: false, restartCount: 0, state: {terminated: {exitCode: 2}}}]");
        assert_eq!(phase(&pod("Never"), &cs(DONE), &ok), "Succeeded");
        assert_eq!(phase(&pod("Never"), &cs(DONE), &bad), "Failed");
        assert_eq!(
            phase(&pod("OnFailure"), &cs(DONE), &bad),
            "Running",
            "restarting"
        );
        assert_eq!(
            phase(&pod("Always"), &cs(DONE), &ok),
            "Running",
            "restarting"
        );
        let backoff = cs("[{name: a, image: x, imageID: '', ready: false, restartCount: 3, state: {waiting: {reason: CrashLoopBackOff}}, lastState: {terminated: {exitCode: 1}}}]");
        assert_eq!(phase(&pod("Always"), &cs(DONE), &backoff), "Running");
    }

    #[test]
    fn log_tail_joins_partial_lines() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("0.log");
        std::fs::write(&p, "t stdout P abc\nt stdout F def\nt stderr F last\n").unwrap();
        assert_eq!(log_tail(p.to_str().unwrap(), 80, 2048), "abcdef\nlast\n");
        assert_eq!(log_tail(p.to_str().unwrap(), 1, 2048), "last\n");
        assert_eq!(log_tail(p.to_str().unwrap(), 80, 3), "st\n");
        // A last line the container never ended has no newline added.
        std::fs::write(&p, "t stdout F one\nt stdout P DONE\n").unwrap();
        assert_eq!(log_tail(p.to_str().unwrap(), 80, 2048), "one\nDONE");
        assert_eq!(log_tail(p.to_str().unwrap(), 1, 2048), "DONE");
    }

    #[test]
    fn only_the_ends_of_huge_files_are_read() {
        use std::io::Write;
        let d = tempfile::tempdir().unwrap();
        // A 64 MiB log: its tail is the last lines, read from the end.
        let p = d.path().join("0.log");
        let mut f = std::fs::File::create(&p).unwrap();
        let line = format!("t stdout F {}\n", "x".repeat(1000));
        for _ in 0..(64 << 10) {
            f.write_all(line.as_bytes()).unwrap();
        }
        f.write_all(b"t stdout F the end\n").unwrap();
        drop(f);
        let tail = log_tail(p.to_str().unwrap(), 2, 2048);
        assert!(
            tail.ends_with("xxx\nthe end\n"),
            "{}",
            &tail[tail.len() - 20..]
        );
        assert!(tail.len() <= 2048);
        let b = read_tail(&p, 4096).unwrap();
        assert!(
            b.len() <= 4096 && b.starts_with(b"t stdout F "),
            "whole lines only"
        );
        // A termination file is read to the kept size, a FIFO not at all.
        let t = d.path().join("term");
        std::fs::write(&t, vec![b'm'; 1 << 20]).unwrap();
        assert_eq!(read_head(&t, MAX_TERMINATION_MESSAGE).unwrap().len(), 4096);
        let fifo = d.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        assert!(read_head(&fifo, 4096).is_err());
        assert_eq!(log_tail(fifo.to_str().unwrap(), 80, 2048), "");
    }
}
