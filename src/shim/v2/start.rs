//! A shim v2 runtime's binary, run as containerd runs it: `start` (from
//! the bundle, the `BootstrapParams` of containerd 2.3 on stdin) prints
//! the address of the task socket it serves (a 2.3 shim's
//! `BootstrapResult`, a 2.0 shim's JSON, or the plain address of older Go
//! shims and of Rust ones); `delete` (after a shim died) cleans what a
//! task left and prints its `DeleteResponse`.

use super::client::NAMESPACE;
use crate::api::containerd::{BootstrapParams, BootstrapResult, DeleteResponse, Extension};
use prost::Message;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// What a shim's binary is run with.
pub struct Launch<'a> {
    pub binary: &'a Path,
    pub id: &'a str,
    pub bundle: &'a Path,
    pub grpc_address: &'a str,
    pub ttrpc_address: &'a Path,
    pub socket_dir: &'a str,
    pub options: Option<prost_types::Any>,
    pub timeout: Duration,
}

/// Where a started shim serves its Task API.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Started {
    pub address: String,
    /// 3: a 2.3 shim (containerd.task.v3); 2: older ones (v2).
    pub version: i32,
    pub protocol: String,
}

/// How running the binary failed: the shim API's code and why.
pub type LaunchError = (i32, String);

impl Launch<'_> {
    fn command(&self, action: &str, cwd: &Path) -> Command {
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("husk"));
        let mut c = Command::new(self.binary);
        c.args(["-namespace", NAMESPACE, "-address", self.grpc_address])
            .arg("-publish-binary")
            .arg(&exe)
            .args(["-id", self.id]);
        if action == "delete" {
            c.arg("-bundle").arg(self.bundle);
        }
        c.arg(action)
            .current_dir(cwd)
            // Go's os.Getwd reports $PWD when it names the cwd: a shim that
            // finds its bundle from the cwd's name sees this path.
            .env("PWD", cwd)
            .env("GOMAXPROCS", "2")
            .env("TTRPC_ADDRESS", self.ttrpc_address)
            .env("GRPC_ADDRESS", self.grpc_address)
            .env("NAMESPACE", NAMESPACE)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        c
    }

    fn run(&self, action: &str, cwd: &Path, input: Vec<u8>) -> Result<Vec<u8>, LaunchError> {
        let bin = self.binary.display();
        let child = self.command(action, cwd).spawn().map_err(|e| {
            (
                9,
                format!("shim {bin}: {e} (cannot run it: is it installed and executable?)"),
            )
        })?;
        let run = if action == "start" {
            crate::network::bounded::run_daemonizing
        } else {
            crate::network::bounded::run
        };
        let out = run(child, input, self.timeout).map_err(|e| match e {
            crate::network::bounded::Bounded::TimedOut => (
                4,
                format!(
                    "shim {bin} {action} did not finish within {:?}; it was killed",
                    self.timeout
                ),
            ),
            crate::network::bounded::Bounded::Io(e) => (13, format!("shim {bin} {action}: {e}")),
        })?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stderr);
            let said = said.trim();
            let said = if said.is_empty() {
                String::from_utf8_lossy(&out.stdout).trim().to_string()
            } else {
                said.to_string()
            };
            return Err((
                9,
                format!("shim {bin} {action} failed ({}): {said}", out.status),
            ));
        }
        Ok(out.stdout)
    }

    /// `start`: where the task's shim serves (it may be one already serving
    /// the task's group).
    pub fn start(&self) -> Result<Started, LaunchError> {
        let params = BootstrapParams {
            instance_id: self.id.into(),
            namespace: NAMESPACE.into(),
            log_level: 0,
            containerd_version: concat!("husk-", env!("CARGO_PKG_VERSION")).into(),
            containerd_ttrpc_address: self.ttrpc_address.display().to_string(),
            containerd_grpc_address: self.grpc_address.into(),
            containerd_binary: std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            extensions: self
                .options
                .iter()
                .map(|a| Extension {
                    value: Some(a.clone()),
                })
                .collect(),
            socket_dir: (!self.socket_dir.is_empty()).then(|| self.socket_dir.to_string()),
        };
        let out = self.run("start", self.bundle, params.encode_to_vec())?;
        let s = parse_start(&out)
            .map_err(|e| (9, format!("shim {} start: {e}", self.binary.display())))?;
        if s.protocol != "ttrpc" {
            return Err((
                9,
                format!(
                    "shim {} serves {:?}; husk speaks ttrpc to shims",
                    self.binary.display(),
                    s.protocol
                ),
            ));
        }
        Ok(s)
    }

    /// `delete`, for a task whose shim is gone: what it reports of the
    /// task's end. `scratch` is a dir of the caller's where the bundle is
    /// linked under the task's id (a shim finds it as `<cwd>/../<id>`).
    pub fn delete(&self, scratch: &Path) -> Result<DeleteResponse, LaunchError> {
        std::fs::create_dir_all(scratch)
            .map_err(|e| (13, format!("{}: {e}", scratch.display())))?;
        let link = scratch.join(self.id);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(self.bundle, &link)
            .map_err(|e| (13, format!("{}: {e}", link.display())))?;
        let out = self.run("delete", &link, Vec::new());
        let _ = std::fs::remove_file(&link);
        let out = out?;
        DeleteResponse::decode(out.as_slice())
            .map_err(|e| (13, format!("shim delete answered no DeleteResponse: {e}")))
    }
}

/// `<binary> -info`, given the options as containerd gives them (the Any,
/// marshalled, on stdin): the runtime's name, version and features. A shim
/// older than containerd 2.0's library (Kata's, gVisor's, runwasi's) does
/// not know the flag: its error comes back.
pub fn info(
    binary: &Path,
    options: Option<&prost_types::Any>,
    timeout: Duration,
) -> Result<crate::api::containerd::RuntimeInfo, String> {
    let child = Command::new(binary)
        .arg("-info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    let out = crate::network::bounded::run(
        child,
        options.map(|o| o.encode_to_vec()).unwrap_or_default(),
        timeout,
    )
    .map_err(|_| format!("{} -info did not answer in {timeout:?}", binary.display()))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{} -info failed ({}): {}",
            binary.display(),
            out.status,
            said.trim()
        ));
    }
    crate::api::containerd::RuntimeInfo::decode(out.stdout.as_slice())
        .map_err(|e| format!("{} -info printed no RuntimeInfo: {e}", binary.display()))
}

/// The OCI features JSON a RuntimeInfo carries (the runc shim's is its
/// runc's `features`).
pub fn features_json(info: &crate::api::containerd::RuntimeInfo) -> Option<&[u8]> {
    info.features
        .as_ref()
        .filter(|a| a.type_url.ends_with("/features/Features"))
        .map(|a| a.value.as_slice())
}

/// What `start` printed: a `BootstrapResult` (a 2.3 shim), JSON (2.0 to
/// 2.2), or the plain address (older Go shims, Rust shims).
pub fn parse_start(out: &[u8]) -> Result<Started, String> {
    // A BootstrapResult starts with its version (field 1, varint).
    if out.first() == Some(&0x08) {
        if let Ok(r) = BootstrapResult::decode(out) {
            if !r.address.is_empty() {
                return Ok(Started {
                    address: r.address,
                    version: r.version,
                    protocol: if r.protocol.is_empty() {
                        "ttrpc".into()
                    } else {
                        r.protocol
                    },
                });
            }
        }
    }
    let text = String::from_utf8_lossy(out);
    let text = text.trim();
    if text.starts_with('{') {
        #[derive(serde::Deserialize)]
        struct Json {
            version: i32,
            address: String,
            #[serde(default)]
            protocol: String,
        }
        let j: Json =
            serde_json::from_str(text).map_err(|e| format!("its answer {text:?}: {e}"))?;
        return Ok(Started {
            address: j.address,
            version: j.version,
            protocol: if j.protocol.is_empty() {
                "ttrpc".into()
            } else {
                j.protocol
            },
        });
    }
    if text.is_empty() || text.contains(char::is_whitespace) {
        return Err(format!("it printed no address ({text:?})"));
    }
    Ok(Started {
        address: text.to_string(),
        version: 2,
        protocol: "ttrpc".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_answer_form_gives_the_address_and_version() {
        let proto = BootstrapResult {
            version: 3,
            address: "unix:///run/husk/s/abc".into(),
            protocol: "ttrpc".into(),
            ..Default::default()
        }
        .encode_to_vec();
        assert_eq!(
            parse_start(&proto).expect("proto"),
            Started {
                address: "unix:///run/husk/s/abc".into(),
                version: 3,
                protocol: "ttrpc".into()
            }
        );
        let json = br#"{"version":2,"address":"unix:///run/x","protocol":"grpc"}"#;
        let j = parse_start(json).expect("json");
        assert_eq!((j.version, j.protocol.as_str()), (2, "grpc"));
        let plain = parse_start(b"unix:///run/containerd/s/123\n").expect("plain");
        assert_eq!(
            (plain.address.as_str(), plain.version),
            ("unix:///run/containerd/s/123", 2)
        );
        assert!(parse_start(b"").is_err());
        assert!(parse_start(b"panic: something went wrong").is_err());
    }
}
