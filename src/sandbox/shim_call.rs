//! Calling a pod's shim from the sandbox manager: one request, whose
//! answer's code is read as a [`SandboxError`]; and waiting for a shim
//! to be gone.

use super::SandboxError;
use crate::api::shim::{shim_request::Request, ShimRequest, ShimResponse};
use crate::shim::client;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long one call to a pod's shim may take.
const SHIM_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) fn shim_call(dir: &Path, request: Request) -> Result<ShimResponse, SandboxError> {
    let resp = client::call(
        dir,
        &ShimRequest {
            request: Some(request),
            ..Default::default()
        },
        SHIM_TIMEOUT,
    )
    .map_err(|e| SandboxError::Shim(format!("{}: {e}", dir.display())))?;
    answer(resp)
}

/// A shim's answer, or its error by its code.
pub(crate) fn answer(resp: ShimResponse) -> Result<ShimResponse, SandboxError> {
    match resp.code {
        _ if resp.error.is_empty() => Ok(resp),
        // An OCI runtime that hung.
        4 => Err(SandboxError::Timeout(resp.error)),
        // An OCI runtime that failed, or a payload that cannot be run.
        9 => Err(SandboxError::Refused(resp.error)),
        _ => Err(SandboxError::Shim(resp.error)),
    }
}

/// Waits until the shim in `dir` has exited.
pub(super) fn wait_gone(dir: &Path, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while client::pid(dir).is_some() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
}
