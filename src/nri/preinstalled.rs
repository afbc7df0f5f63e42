//! Pre-installed NRI plugins: each executable `<idx>-<name>` of
//! `[nri] plugin_path`, started at husk serve's start as containerd
//! starts them: one end of a socket pair on fd 3 (`NRI_PLUGIN_SOCKET=3`),
//! `NRI_PLUGIN_NAME` and `NRI_PLUGIN_IDX` set, and its config (the file
//! `<idx>-<name>.conf` or `<name>.conf` of `plugin_config_path`) handed
//! over at `Configure`.

use super::Nri;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

/// `<idx>-<name>` split, when the file name is one.
pub fn split_name(file: &str) -> Option<(String, String)> {
    let (idx, name) = file.split_once('-')?;
    super::plugin::check_index(idx).ok()?;
    super::plugin::check_name(name).ok()?;
    Some((idx.to_string(), name.to_string()))
}

/// Starts every plugin of `dir`; one that cannot start is logged.
pub fn start_all(nri: &Arc<Nri>, dir: &Path, conf_dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<_> = rd.flatten().map(|e| e.path()).collect();
    files.sort();
    for path in files {
        let Some(file) = path.file_name().and_then(|f| f.to_str()) else {
            continue;
        };
        let Some((idx, name)) = split_name(file) else {
            tracing::warn!(plugin = %path.display(), "not an NRI plugin name (<idx>-<name>); skipped");
            continue;
        };
        let executable = std::fs::metadata(&path)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false);
        if !executable {
            continue;
        }
        let config = [
            conf_dir.join(format!("{file}.conf")),
            conf_dir.join(format!("{name}.conf")),
        ]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
        if let Err(e) = start_one(nri, &path, &idx, &name, config) {
            tracing::warn!(plugin = %path.display(), error = %e, "NRI plugin not started");
        }
    }
}

fn start_one(
    nri: &Arc<Nri>,
    path: &Path,
    idx: &str,
    name: &str,
    config: String,
) -> std::io::Result<()> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    let fd = theirs.as_raw_fd();
    let mut cmd = tokio::process::Command::new(path);
    cmd.env("NRI_PLUGIN_NAME", name)
        .env("NRI_PLUGIN_IDX", idx)
        .env("NRI_PLUGIN_SOCKET", "3")
        .stdin(std::process::Stdio::null());
    // SAFETY: dup2(2) in the forked child, before its exec; the pair was
    // made close-on-exec, so only fd 3 crosses.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let pid = child.id();
    drop(theirs);
    ours.set_nonblocking(true)?;
    let stream = tokio::net::UnixStream::from_std(ours)?;
    let label = format!("{idx}-{name}");
    tokio::spawn(async move {
        match child.wait().await {
            Ok(s) => {
                tracing::info!(plugin = %label, status = %s, "pre-installed NRI plugin exited")
            }
            Err(e) => tracing::warn!(plugin = %label, error = %e, "pre-installed NRI plugin"),
        }
    });
    nri.admit_preinstalled(stream, idx.to_string(), name.to_string(), config, pid);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_file_names_are_an_index_and_a_name() {
        assert_eq!(
            split_name("10-logger"),
            Some(("10".into(), "logger".into()))
        );
        assert_eq!(
            split_name("05-device-injector"),
            Some(("05".into(), "device-injector".into()))
        );
        assert_eq!(split_name("logger"), None);
        assert_eq!(split_name("1-logger"), None);
        assert_eq!(split_name("10-bad name"), None);
    }
}
