//! The OOM watcher: every OOM kill the kernel logs (`/dev/kmsg`, read
//! from the end when the kubelet starts) becomes a `Warning` event on the
//! node: `OOMKilling` with the kernel's "Killed process …" line and the
//! victim's memory cgroup (as node-problem-detector reports it), and, for
//! a kill of the whole system (`constraint=CONSTRAINT_NONE`), also
//! `SystemOOM` "System OOM encountered, victim process: NAME, pid: PID"
//! (as the kubelet's OOM watcher reports it). A node whose `/dev/kmsg`
//! cannot be read logs that once and watches nothing.

use crate::kubelet::kit::recorder::{Recorder, WARNING};
use std::os::fd::AsFd;
use tokio::io::unix::AsyncFd;

/// One OOM kill, from the kernel's lines.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Kill {
    /// The "Killed process …" text.
    pub line: String,
    pub constraint: String,
    pub task_memcg: String,
    pub task: String,
    pub pid: u32,
}

/// Joins the kernel's lines into kills: an `oom-kill:` line names the
/// constraint and cgroups, the "Killed process" line that follows ends it.
#[derive(Default)]
pub struct Parser {
    pending: Option<Kill>,
}

impl Parser {
    /// One `/dev/kmsg` record (`prio,seq,ts,flags;text`) or bare text.
    pub fn feed(&mut self, record: &str) -> Option<Kill> {
        let text = record.split_once(';').map(|(_, t)| t).unwrap_or(record);
        let text = text.lines().next().unwrap_or("").trim();
        if let Some(fields) = text.strip_prefix("oom-kill:") {
            let mut k = Kill::default();
            for kv in fields.split(',') {
                match kv.split_once('=') {
                    Some(("constraint", v)) => k.constraint = v.into(),
                    Some(("task_memcg", v)) => k.task_memcg = v.into(),
                    Some(("task", v)) => k.task = v.into(),
                    Some(("pid", v)) => k.pid = v.parse().unwrap_or(0),
                    _ => {}
                }
            }
            self.pending = Some(k);
            return None;
        }
        let at = text.find("Killed process ")?;
        let mut k = self.pending.take().unwrap_or_default();
        k.line = text[at..].to_string();
        if k.pid == 0 {
            // "Killed process 123 (name) …" without its oom-kill line.
            let rest = &text[at + "Killed process ".len()..];
            k.pid = rest
                .split_whitespace()
                .next()
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            k.task = rest
                .split_once('(')
                .and_then(|(_, r)| r.split_once(')'))
                .map(|(n, _)| n.to_string())
                .unwrap_or_default();
        }
        if k.constraint.is_empty() && text.starts_with("Out of memory") {
            k.constraint = "CONSTRAINT_NONE".into();
        }
        Some(k)
    }
}

/// Records the events of one kill.
pub fn record(events: &Recorder, node: &str, k: &Kill) {
    let mut msg = k.line.clone();
    if !k.task_memcg.is_empty() {
        msg.push_str(&format!(" (memory cgroup {})", k.task_memcg));
    }
    tracing::warn!(pid = k.pid, task = %k.task, cgroup = %k.task_memcg, constraint = %k.constraint, "OOM kill");
    events.node(node, WARNING, "OOMKilling", &msg);
    if k.constraint == "CONSTRAINT_NONE" {
        events.node(
            node,
            WARNING,
            "SystemOOM",
            &format!(
                "System OOM encountered, victim process: {}, pid: {}",
                k.task, k.pid
            ),
        );
    }
}

fn open() -> std::io::Result<AsyncFd<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")?;
    rustix::fs::seek(f.as_fd(), rustix::fs::SeekFrom::End(0))?;
    // SAFETY: the AsyncFd owns the File, so the descriptor stays open and
    // the same for as long as it is registered.
    unsafe { AsyncFd::register(f) }.map_err(|e| e.into_parts().1)
}

/// Watches `/dev/kmsg` until aborted.
pub async fn watch(events: Recorder, node: String) {
    let fd = match open() {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read /dev/kmsg: OOM kills are not reported as events");
            return;
        }
    };
    let mut parser = Parser::default();
    let mut buf = vec![0u8; 8192];
    loop {
        let Ok(mut guard) = fd.readable().await else {
            return;
        };
        // One record per read, until there are no more.
        loop {
            match rustix::io::read(guard.get_inner().as_fd(), &mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if let Some(k) = parser.feed(&String::from_utf8_lossy(&buf[..n])) {
                        record(&events, &node, &k);
                    }
                }
                // Overwritten records (EPIPE): go on with the next.
                Err(rustix::io::Errno::PIPE) | Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::AGAIN) => {
                    guard.clear_ready();
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reading /dev/kmsg failed: OOM watcher stopped");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn kernel_lines_become_kills() {
        let mut p = Parser::default();
        assert_eq!(
            p.feed("6,1234,5678,-;memory: usage 32768kB, limit 32768kB, failcnt 9"),
            None
        );
        assert_eq!(p.feed("6,1235,5679,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=x,mems_allowed=0,oom_memcg=/kubepods/podu/c,task_memcg=/kubepods/podu/c,task=sh,pid=4242,uid=0"), None);
        let k = p
            .feed("3,1236,5680,-;Memory cgroup out of memory: Killed process 4242 (sh) total-vm:4400kB, anon-rss:32000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:60kB oom_score_adj:1000")
            .unwrap();
        assert_eq!((k.pid, k.task.as_str()), (4242, "sh"));
        assert_eq!(k.task_memcg, "/kubepods/podu/c");
        assert_eq!(k.constraint, "CONSTRAINT_MEMCG");
        assert!(k.line.starts_with("Killed process 4242 (sh)"));
        let sys = p
            .feed("3,9,9,-;Out of memory: Killed process 77 (hog) total-vm:1kB, anon-rss:1kB")
            .unwrap();
        assert_eq!(
            (sys.pid, sys.task.as_str(), sys.constraint.as_str()),
            (77, "hog", "CONSTRAINT_NONE")
        );
    }

    #[test]
    fn system_ooms_get_both_events() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let r = Recorder::new(tx);
        let k = Kill {
            line: "Killed process 77 (hog)".into(),
            constraint: "CONSTRAINT_NONE".into(),
            task: "hog".into(),
            pid: 77,
            ..Default::default()
        };
        record(&r, "n1", &k);
        let a = rx.try_recv().unwrap();
        assert_eq!(
            (a.kind, a.reason.as_str(), a.name.as_str()),
            ("Node", "OOMKilling", "n1")
        );
        let b = rx.try_recv().unwrap();
        assert_eq!(b.reason, "SystemOOM");
        assert_eq!(
            b.message,
            "System OOM encountered, victim process: hog, pid: 77"
        );
        assert!(rx.try_recv().is_err());
    }
}
