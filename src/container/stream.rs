//! Streaming exec and attach through the pod's shim: the request goes on a
//! connection that stays open; the process's descriptors come back over
//! it (SCM_RIGHTS), then (exec) the exit code. Also the checks the Exec
//! and Attach RPCs make before handing out a URL.

use super::manager::ContainerManager;
use super::record::ContainerState;
use crate::api::shim::{shim_request::Request, AttachRequest, ShimRequest, StreamExecRequest};
use crate::sandbox::SandboxError;
use crate::shim::{fdpass, wire};
use crate::streaming::tokens::StdioOpts;
use crate::streaming::ProcessIo;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;

impl ContainerManager {
    /// The id of a running container (NotFound, or FailedPrecondition).
    pub fn running(&self, id: &str) -> Result<String, SandboxError> {
        let r = self
            .resolve(id)
            .and_then(|i| self.refresh(&i))
            .ok_or_else(|| SandboxError::NotFound(format!("container {id} not found")))?;
        if r.state != ContainerState::Running {
            return Err(SandboxError::NotRunning(format!(
                "container {id} is not running"
            )));
        }
        Ok(r.id)
    }

    fn stream_call(
        self: &Arc<Self>,
        id: &str,
        request: Request,
    ) -> Result<(crate::api::shim::StreamFds, Vec<OwnedFd>, UnixStream), SandboxError> {
        let r = self
            .get(id)
            .ok_or_else(|| SandboxError::NotFound(format!("container {id} not found")))?;
        let dir = self.sandboxes.shim_dir(&r.sandbox_id);
        let addr = std::fs::read_to_string(dir.join("address"))
            .map_err(|e| SandboxError::Shim(format!("{}: {e}", dir.display())))?;
        let shim = |e: io::Error| SandboxError::Shim(e.to_string());
        let mut s = UnixStream::connect(addr.trim()).map_err(shim)?;
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(shim)?;
        wire::write_msg(
            &mut s,
            &ShimRequest {
                request: Some(request),
                ..Default::default()
            },
        )
        .map_err(shim)?;
        let (resp, fds) = fdpass::recv(&mut s).map_err(shim)?;
        if !resp.error.is_empty() {
            return Err(match resp.code {
                5 => SandboxError::NotFound(resp.error),
                9 => SandboxError::NotRunning(resp.error),
                _ => SandboxError::Shim(resp.error),
            });
        }
        let which = resp
            .fds
            .ok_or_else(|| SandboxError::Shim("the shim passed no descriptors".into()))?;
        let want = [which.stdin, which.stdout, which.stderr, which.pty]
            .iter()
            .filter(|b| **b)
            .count();
        if fds.len() != want {
            return Err(SandboxError::Shim(format!(
                "the shim passed {} descriptors, announced {want}",
                fds.len()
            )));
        }
        s.set_read_timeout(None).map_err(shim)?;
        Ok((which, fds, s))
    }

    fn process_io(which: &crate::api::shim::StreamFds, fds: Vec<OwnedFd>) -> ProcessIo {
        let mut it = fds.into_iter();
        let mut take = |b: bool| if b { it.next() } else { None };
        ProcessIo {
            stdin: take(which.stdin),
            stdout: take(which.stdout),
            stderr: take(which.stderr),
            pty: take(which.pty),
            ..Default::default()
        }
    }

    /// Starts `cmd` in the container for a streaming session.
    pub async fn exec_stream(
        self: &Arc<Self>,
        id: &str,
        cmd: &[String],
        o: StdioOpts,
    ) -> Result<ProcessIo, SandboxError> {
        let id = self.running(id)?;
        let id_for_controls = id.clone();
        let req = StreamExecRequest {
            id: id.clone(),
            args: cmd.to_vec(),
            tty: o.tty,
            stdin: o.stdin,
            stdout: o.stdout,
            stderr: o.stderr && !o.tty,
        };
        let this = self.clone();
        let (which, fds, conn) =
            tokio::task::spawn_blocking(move || this.stream_call(&id, Request::StreamExec(req)))
                .await
                .map_err(|e| SandboxError::Shim(e.to_string()))??;
        tracing::debug!(container_id = %which.pid, "stream exec started");
        let mut pio = Self::process_io(&which, fds);
        if !which.exec_id.is_empty() {
            self.shim_exec_controls(&mut pio, &which.exec_id, id_for_controls);
        }
        conn.set_nonblocking(true)
            .map_err(|e| SandboxError::Shim(e.to_string()))?;
        let mut conn = tokio::net::UnixStream::from_std(conn)
            .map_err(|e| SandboxError::Shim(e.to_string()))?;
        pio.exit = Some(Box::pin(async move {
            let mut len = [0u8; 4];
            conn.read_exact(&mut len).await?;
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            conn.read_exact(&mut body).await?;
            let r = <crate::api::shim::ShimResponse as prost::Message>::decode(body.as_slice())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            r.exec
                .map(|x| x.exit_code)
                .ok_or_else(|| io::Error::other("the shim sent no exit code"))
        }));
        Ok(pio)
    }

    /// A shim v2 runtime's exec: resizes and the end of stdin go to its
    /// shim.
    fn shim_exec_controls(&self, pio: &mut ProcessIo, exec_id: &str, id: String) {
        let sandbox = self.get(&id).map(|r| r.sandbox_id).unwrap_or_default();
        let dir = self.sandboxes.shim_dir(&sandbox);
        Self::shim_resizer(pio, dir.clone(), exec_id, id.clone());
        let e = exec_id.to_string();
        pio.stdin_closer = Some(Box::pin(async move {
            let _ = tokio::task::spawn_blocking(move || {
                super::manager::shim_call(
                    &dir,
                    Request::CloseStdin(crate::api::shim::CloseStdinRequest { id, exec_id: e }),
                )
            })
            .await;
        }));
    }

    /// Resizes of a terminal that a shim v2 runtime holds (an exec's, or
    /// with `exec_id` empty the container's own) go to its pod's shim,
    /// whose dir is `dir`.
    fn shim_resizer(pio: &mut ProcessIo, dir: PathBuf, exec_id: &str, id: String) {
        let (d, i, e) = (dir, id, exec_id.to_string());
        pio.resizer = Some(Arc::new(move |width: u16, height: u16| {
            let (d, i, e) = (d.clone(), i.clone(), e.clone());
            Box::pin(async move {
                let _ = tokio::task::spawn_blocking(move || {
                    super::manager::shim_call(
                        &d,
                        Request::Resize(crate::api::shim::ResizeRequest {
                            id: i,
                            exec_id: e,
                            width: width as u32,
                            height: height as u32,
                        }),
                    )
                })
                .await;
            })
        }));
    }

    /// Joins the running container's stdio.
    pub async fn attach(
        self: &Arc<Self>,
        id: &str,
        o: StdioOpts,
    ) -> Result<ProcessIo, SandboxError> {
        let id = self.running(id)?;
        let config = self.saved_config(&id);
        let stdin_once = config.as_ref().is_some_and(|c| c.stdin_once);
        // A tty a shim v2 runtime holds is resized through the shim.
        let sandbox = self.get(&id).map(|r| r.sandbox_id).unwrap_or_default();
        let runtime_tty = (config.is_some_and(|c| c.tty) && self.under_shim(&sandbox))
            .then(|| (self.sandboxes.shim_dir(&sandbox), id.clone()));
        let req = AttachRequest {
            id: id.clone(),
            stdin: o.stdin,
            stdout: o.stdout,
            stderr: o.stderr,
        };
        let this = self.clone();
        let (which, fds, conn) =
            tokio::task::spawn_blocking(move || this.stream_call(&id, Request::Attach(req)))
                .await
                .map_err(|e| SandboxError::Shim(e.to_string()))??;
        let mut pio = Self::process_io(&which, fds);
        if let Some((dir, id)) = runtime_tty {
            Self::shim_resizer(&mut pio, dir, "", id);
        }
        pio.control = Some(Box::new(conn));
        // Ends with stdin unless stdin_once without a tty.
        pio.end_with_stdin = o.stdin && (!stdin_once || o.tty);
        Ok(pio)
    }
}
