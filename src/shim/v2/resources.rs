//! A shim v2 runtime's container's resources: updated through the shim's
//! Update (the OCI spec's LinuxResources, as JSON), and its usage from the
//! shim's Stats (the runtime reads its cgroups, or its guest's).

use super::call_failure;
use super::client::CallError;
use crate::api::containerd::{StatsRequest, StatsResponse, UpdateTaskRequest};
use crate::api::shim::{ShimResponse, UpdateRequest};
use crate::shim::monitor::{reply_err, Shim};

impl Shim {
    pub(in crate::shim) fn v2_update(&mut self, req: &UpdateRequest) -> ShimResponse {
        let r: Result<(), CallError> = self.v2_call(
            &req.id,
            "Update",
            &UpdateTaskRequest {
                id: req.id.clone(),
                resources: Some(super::any(
                    "types.containerd.io/opencontainers/runtime-spec/1/LinuxResources",
                    req.resources.clone(),
                )),
                annotations: Default::default(),
            },
        );
        match r {
            Ok(()) => self.ok(&req.id),
            Err(e) => {
                let (code, e) = call_failure(&format!("update container {}", req.id), e);
                reply_err(code, e)
            }
        }
    }

    pub(in crate::shim) fn v2_stats(&mut self, id: &str) -> ShimResponse {
        let r: Result<StatsResponse, CallError> =
            self.v2_call(id, "Stats", &StatsRequest { id: id.to_string() });
        match r {
            Ok(s) => {
                let any = s.stats.unwrap_or_default();
                ShimResponse {
                    stats_type: any.type_url,
                    stats: any.value,
                    ..self.ok(id)
                }
            }
            Err(e) => {
                let (code, e) = call_failure(&format!("stats of container {id}"), e);
                reply_err(code, e)
            }
        }
    }
}

impl Shim {
    pub(in crate::shim) fn v2_resize(
        &mut self,
        r: &crate::api::shim::ResizeRequest,
    ) -> ShimResponse {
        let res: Result<(), CallError> = self.v2_call(
            &r.id,
            "ResizePty",
            &crate::api::containerd::ResizePtyRequest {
                id: r.id.clone(),
                exec_id: r.exec_id.clone(),
                width: r.width,
                height: r.height,
            },
        );
        match res {
            Ok(()) => self.ok(&r.id),
            Err(e) => {
                let (code, e) = call_failure(&format!("resize in {}", r.id), e);
                reply_err(code, e)
            }
        }
    }

    /// Ends the stdin of `id`'s exec `exec_id` (its init when empty): the
    /// shim holds the FIFO open until told.
    pub(in crate::shim) fn v2_close_stdin(&mut self, id: &str, exec_id: &str) -> ShimResponse {
        let res: Result<(), CallError> = self.v2_call(
            id,
            "CloseIO",
            &crate::api::containerd::CloseIoRequest {
                id: id.to_string(),
                exec_id: exec_id.to_string(),
                stdin: true,
            },
        );
        match res {
            Ok(()) => self.ok(id),
            Err(e) if e.is_not_found() => self.ok(id),
            Err(e) => {
                let (code, e) = call_failure(&format!("close the stdin of {id}"), e);
                reply_err(code, e)
            }
        }
    }
}
