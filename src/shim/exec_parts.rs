//! What every exec is made of, whichever path runs it (libcontainer's
//! tenant builder or an OCI runtime's `exec`): its process, from the
//! container's bundle; its pipes; and the notify sockets libcontainer
//! leaves in the container's state dir.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

/// The container's spec, and its own process (user, env, cwd,
/// capabilities, rlimits as its bundle has them) with `args` swapped in,
/// for an exec (a terminal's gets TERM when the image set none).
pub(super) fn exec_process(
    bundle: &Path,
    args: &[String],
    tty: bool,
) -> Result<(serde_json::Value, serde_json::Value), String> {
    let spec: serde_json::Value = std::fs::read(bundle.join("config.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or("cannot read the container's spec")?;
    let mut process = spec
        .get("process")
        .cloned()
        .ok_or("the container's spec has no process")?;
    process["args"] = serde_json::json!(args);
    process["terminal"] = serde_json::json!(tty);
    if tty {
        let mut env = process["env"].as_array().cloned().unwrap_or_default();
        if !env
            .iter()
            .any(|e| e.as_str().is_some_and(|s| s.starts_with("TERM=")))
        {
            env.push(serde_json::json!("TERM=xterm"));
            process["env"] = serde_json::json!(env);
        }
    }
    Ok((spec, process))
}

/// A close-on-exec pipe.
pub(super) fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| format!("pipe: {e}"))
}

/// A pipe for collected output: its read end non-blocking, so the shim's
/// single-threaded loop never waits on it.
pub(super) fn output_pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let (r, w) = pipe()?;
    rustix::io::ioctl_fionbio(&r, true).map_err(|e| format!("pipe: {e}"))?;
    Ok((r, w))
}

/// How long a tenant's notify socket may stay: libcontainer leaves one per
/// exec in the container's state dir; the handshake it serves is over in
/// well under a second.
const NOTIFY_SOCKET_TTL: Duration = Duration::from_secs(10);

/// Removes the notify sockets earlier execs left in a container's state dir
/// (`tenant-notify-*.sock`), once they are older than a handshake can be.
pub fn sweep_notify_sockets(container_dir: &Path) {
    for name in notify_sockets(container_dir) {
        let path = container_dir.join(name);
        let old = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > NOTIFY_SOCKET_TTL);
        if old {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The notify sockets in a container's state dir now.
pub fn notify_sockets(container_dir: &Path) -> std::collections::HashSet<std::ffi::OsString> {
    std::fs::read_dir(container_dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| {
            let n = n.to_string_lossy();
            n.starts_with("tenant-notify-") && n.ends_with(".sock")
        })
        .collect()
}

/// Removes the notify sockets not in `before`: the one an exec just made.
/// Its handshake is over once libcontainer's builder has returned (the
/// builder itself connects to it), so no exec leaves a file behind.
pub fn remove_new_notify_sockets(
    container_dir: &Path,
    before: &std::collections::HashSet<std::ffi::OsString>,
) {
    for n in notify_sockets(container_dir) {
        if !before.contains(&n) {
            let _ = std::fs::remove_file(container_dir.join(n));
        }
    }
}
