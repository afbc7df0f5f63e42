//! RuntimeConfig: tells the kubelet which cgroup driver husk uses.

use crate::api::cri::{
    CgroupDriver, LinuxRuntimeConfiguration, RuntimeConfigRequest, RuntimeConfigResponse,
};
use crate::server::instrument::State;
use tonic::Status;

pub async fn handle(
    _state: &State,
    _req: RuntimeConfigRequest,
) -> Result<RuntimeConfigResponse, Status> {
    Ok(RuntimeConfigResponse {
        linux: Some(LinuxRuntimeConfiguration {
            cgroup_driver: CgroupDriver::Cgroupfs as i32,
        }),
    })
}
