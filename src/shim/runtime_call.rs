//! What a runtime call is given and how its failure reads: the inputs of
//! a create ([`Made`]), and a runtime's failure as the shim API's code and
//! message ([`Failure`]), with what the process's stderr said when the
//! runtime's log said nothing.

use super::oci::{OciError, Stdio3};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// A runtime's failure: the shim API's code and the message.
pub(super) type Failure = (i32, String);

const INTERNAL: i32 = 13;

pub(super) fn internal(e: String) -> Failure {
    (INTERNAL, e)
}

pub(super) fn oci_failure(e: OciError) -> Failure {
    (e.code(), e.to_string())
}

/// What a create is given.
pub(super) struct Made<'a> {
    pub id: &'a str,
    pub bundle: &'a Path,
    pub console: Option<PathBuf>,
    pub io: Stdio3,
    /// The read end of the process's stderr, where an OCI runtime's own
    /// complaints land when its create fails.
    pub stderr_reader: Option<&'a OwnedFd>,
}

/// Whatever `fd` (non-blocking) holds now, as text, at most 4 KiB.
pub(super) fn pending_text(fd: Option<&OwnedFd>) -> String {
    let Some(fd) = fd else {
        return String::new();
    };
    let mut buf = vec![0u8; 4096];
    match rustix::io::read(fd, &mut buf) {
        Ok(n) => String::from_utf8_lossy(&buf[..n]).trim().to_string(),
        Err(_) => String::new(),
    }
}

/// `e`, with what the process's stderr holds when the log said nothing.
pub(super) fn with_stderr(e: OciError, stderr: Option<&OwnedFd>) -> Failure {
    let said = pending_text(stderr);
    let e = match e {
        OciError::Failed(m) if !said.is_empty() => {
            OciError::Failed(m.replace("(it said nothing)", &said))
        }
        e => e,
    };
    oci_failure(e)
}
