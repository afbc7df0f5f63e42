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
            cgroup_driver: match crate::cgroup::Driver::current() {
                crate::cgroup::Driver::Cgroupfs => CgroupDriver::Cgroupfs,
                crate::cgroup::Driver::Systemd => CgroupDriver::Systemd,
            } as i32,
        }),
    })
}
