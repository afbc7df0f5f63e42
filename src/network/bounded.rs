//! Running a CNI plugin within bounds: its input fed, its output read up
//! to a size, its whole process group killed at a deadline (a hung plugin,
//! or a child it left holding the pipes).

use std::io::Write;
/// Most a plugin may print on stdout or stderr; the rest is dropped.
const MAX_PLUGIN_OUTPUT: u64 = 4 << 20;

#[derive(Debug)]
pub enum Bounded {
    TimedOut,
    Io(std::io::Error),
}

/// Feeds `input` to a started plugin and collects its output, killing its
/// whole process group when `timeout` passes (a hung plugin, or one whose
/// child keeps the pipes open). Output is read up to a bound.
pub fn run(
    child: std::process::Child,
    input: Vec<u8>,
    timeout: std::time::Duration,
) -> Result<std::process::Output, Bounded> {
    run_group(child, input, timeout, true)
}

/// As [`run`], but a process that succeeds leaves its group alone: a
/// daemon it started (a shim's `start` forks the shim that serves) lives
/// on. A timeout or a failure still kills the whole group.
pub fn run_daemonizing(
    child: std::process::Child,
    input: Vec<u8>,
    timeout: std::time::Duration,
) -> Result<std::process::Output, Bounded> {
    run_group(child, input, timeout, false)
}

fn run_group(
    mut child: std::process::Child,
    input: Vec<u8>,
    timeout: std::time::Duration,
    kill_on_success: bool,
) -> Result<std::process::Output, Bounded> {
    use std::io::Read;
    let deadline = std::time::Instant::now() + timeout;
    let reader = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(r) = r {
                let mut r = r.take(MAX_PLUGIN_OUTPUT);
                let _ = r.read_to_end(&mut buf);
                // Whatever is left is drained, so the plugin never blocks.
                let _ = std::io::copy(r.get_mut(), &mut std::io::sink());
            }
            buf
        })
    };
    let stdin = child.stdin.take();
    let writer = std::thread::spawn(move || {
        if let Some(mut s) = stdin {
            let _ = s.write_all(&input);
        }
    });
    let out = reader(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let mut pause = std::time::Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Ok(st),
            Ok(None) if std::time::Instant::now() >= deadline => break Err(Bounded::TimedOut),
            Ok(None) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(50));
            }
            Err(e) => break Err(Bounded::Io(e)),
        }
    };
    // The plugin's group goes (unless a daemon is what it was for): a child
    // it left behind would hold the pipes (and run on unseen).
    let succeeded = matches!(&status, Ok(st) if st.success());
    if !kill_on_success && succeeded {
        // A daemon that kept the pipes open is not waited for past the
        // deadline: then the group goes after all.
        while !(out.is_finished() && err.is_finished()) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    if kill_on_success || !succeeded || !(out.is_finished() && err.is_finished()) {
        if let Some(pg) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process_group(pg, rustix::process::Signal::KILL);
        }
    }
    let status = match status {
        Ok(st) => st,
        Err(e) => {
            let _ = child.wait();
            return Err(e);
        }
    };
    let _ = writer.join();
    Ok(std::process::Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    fn spawn(script: &str) -> std::process::Child {
        Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("sh")
    }

    fn alive(pid: i32) -> bool {
        // A zombie is not alive: it is reaped here when it is one.
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    }

    const DAEMON: &str = "sleep 30 </dev/null >/dev/null 2>&1 & echo $!";

    #[test]
    fn a_daemon_left_by_a_success_lives_on_only_when_asked() {
        let out =
            run_daemonizing(spawn(DAEMON), Vec::new(), Duration::from_secs(10)).expect("runs");
        let pid: i32 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("pid");
        assert!(alive(pid), "the daemon {pid} was killed");
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid).expect("pid"),
            rustix::process::Signal::KILL,
        );
        let out = run(spawn(DAEMON), Vec::new(), Duration::from_secs(10)).expect("runs");
        let pid: i32 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("pid");
        std::thread::sleep(Duration::from_millis(100));
        assert!(!alive(pid), "a plugin's straggler {pid} lives on");
    }

    #[test]
    fn a_failure_or_a_daemon_holding_the_pipes_still_takes_the_group() {
        let out = run_daemonizing(
            spawn("sleep 30 </dev/null >/dev/null 2>&1 & echo $!; exit 3"),
            Vec::new(),
            Duration::from_secs(10),
        )
        .expect("runs");
        let pid: i32 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("pid");
        std::thread::sleep(Duration::from_millis(100));
        assert!(!alive(pid), "a failed start's child {pid} lives on");
        // A child that keeps stdout open: waited for to the deadline, then
        // killed, and the output still comes back.
        let t = std::time::Instant::now();
        let out = run_daemonizing(
            spawn("sleep 30 & echo started"),
            Vec::new(),
            Duration::from_millis(500),
        )
        .expect("runs");
        assert!(t.elapsed() < Duration::from_secs(10));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "started");
    }
}
