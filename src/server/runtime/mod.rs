//! The CRI RuntimeService. One file per implemented RPC; RPCs of parts not
//! built yet answer Unimplemented with a message naming what is missing.

mod attach;
mod container_create;
mod container_list;
mod container_remove;
mod container_reopen_log;
mod container_start;
mod container_status;
mod container_stop;
mod exec;
mod exec_sync;
mod port_forward;
mod runtime_config;
mod sandbox_list;
mod sandbox_remove;
mod sandbox_run;
mod sandbox_status;
mod sandbox_stop;
mod status;
mod version;

use super::instrument::{not_yet, observe, Op, State};
use crate::api::cri::runtime_service_server::RuntimeService;
use crate::api::cri::*;
use std::pin::Pin;
use std::sync::Arc;
use tonic::{Request, Response, Status};

pub struct Runtime {
    state: Arc<State>,
}

impl Runtime {
    pub fn new(state: Arc<State>) -> Runtime {
        Runtime { state }
    }
}

type Res<T> = Result<Response<T>, Status>;
const PODS: &str = "pod sandboxes";
const CONTAINERS: &str = "containers";

#[tonic::async_trait]
impl RuntimeService for Runtime {
    async fn version(&self, r: Request<VersionRequest>) -> Res<VersionResponse> {
        observe(
            "Version",
            Op::Read,
            version::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn status(&self, r: Request<StatusRequest>) -> Res<StatusResponse> {
        observe(
            "Status",
            Op::Read,
            status::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn runtime_config(&self, r: Request<RuntimeConfigRequest>) -> Res<RuntimeConfigResponse> {
        observe(
            "RuntimeConfig",
            Op::Read,
            runtime_config::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn run_pod_sandbox(
        &self,
        r: Request<RunPodSandboxRequest>,
    ) -> Res<RunPodSandboxResponse> {
        observe(
            "RunPodSandbox",
            Op::Mutate,
            sandbox_run::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn stop_pod_sandbox(
        &self,
        r: Request<StopPodSandboxRequest>,
    ) -> Res<StopPodSandboxResponse> {
        observe(
            "StopPodSandbox",
            Op::Mutate,
            sandbox_stop::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn remove_pod_sandbox(
        &self,
        r: Request<RemovePodSandboxRequest>,
    ) -> Res<RemovePodSandboxResponse> {
        observe(
            "RemovePodSandbox",
            Op::Mutate,
            sandbox_remove::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn pod_sandbox_status(
        &self,
        r: Request<PodSandboxStatusRequest>,
    ) -> Res<PodSandboxStatusResponse> {
        observe(
            "PodSandboxStatus",
            Op::Read,
            sandbox_status::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn list_pod_sandbox(
        &self,
        r: Request<ListPodSandboxRequest>,
    ) -> Res<ListPodSandboxResponse> {
        observe(
            "ListPodSandbox",
            Op::Read,
            sandbox_list::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn create_container(
        &self,
        r: Request<CreateContainerRequest>,
    ) -> Res<CreateContainerResponse> {
        observe(
            "CreateContainer",
            Op::Mutate,
            container_create::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn start_container(
        &self,
        r: Request<StartContainerRequest>,
    ) -> Res<StartContainerResponse> {
        observe(
            "StartContainer",
            Op::Mutate,
            container_start::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn stop_container(&self, r: Request<StopContainerRequest>) -> Res<StopContainerResponse> {
        observe(
            "StopContainer",
            Op::Mutate,
            container_stop::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn remove_container(
        &self,
        r: Request<RemoveContainerRequest>,
    ) -> Res<RemoveContainerResponse> {
        observe(
            "RemoveContainer",
            Op::Mutate,
            container_remove::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn list_containers(
        &self,
        r: Request<ListContainersRequest>,
    ) -> Res<ListContainersResponse> {
        observe(
            "ListContainers",
            Op::Read,
            container_list::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn container_status(
        &self,
        r: Request<ContainerStatusRequest>,
    ) -> Res<ContainerStatusResponse> {
        observe(
            "ContainerStatus",
            Op::Read,
            container_status::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn update_container_resources(
        &self,
        _: Request<UpdateContainerResourcesRequest>,
    ) -> Res<UpdateContainerResourcesResponse> {
        Err(not_yet("UpdateContainerResources", CONTAINERS))
    }
    async fn reopen_container_log(
        &self,
        r: Request<ReopenContainerLogRequest>,
    ) -> Res<ReopenContainerLogResponse> {
        observe(
            "ReopenContainerLog",
            Op::Mutate,
            container_reopen_log::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn exec_sync(&self, r: Request<ExecSyncRequest>) -> Res<ExecSyncResponse> {
        observe(
            "ExecSync",
            Op::Mutate,
            exec_sync::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn exec(&self, r: Request<ExecRequest>) -> Res<ExecResponse> {
        observe(
            "Exec",
            Op::Mutate,
            exec::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn attach(&self, r: Request<AttachRequest>) -> Res<AttachResponse> {
        observe(
            "Attach",
            Op::Mutate,
            attach::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn port_forward(&self, r: Request<PortForwardRequest>) -> Res<PortForwardResponse> {
        observe(
            "PortForward",
            Op::Mutate,
            port_forward::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn container_stats(
        &self,
        _: Request<ContainerStatsRequest>,
    ) -> Res<ContainerStatsResponse> {
        Err(not_yet("ContainerStats", CONTAINERS))
    }
    async fn list_container_stats(
        &self,
        _: Request<ListContainerStatsRequest>,
    ) -> Res<ListContainerStatsResponse> {
        Err(not_yet("ListContainerStats", CONTAINERS))
    }
    async fn pod_sandbox_stats(
        &self,
        _: Request<PodSandboxStatsRequest>,
    ) -> Res<PodSandboxStatsResponse> {
        Err(not_yet("PodSandboxStats", PODS))
    }
    async fn list_pod_sandbox_stats(
        &self,
        _: Request<ListPodSandboxStatsRequest>,
    ) -> Res<ListPodSandboxStatsResponse> {
        Err(not_yet("ListPodSandboxStats", PODS))
    }
    async fn update_runtime_config(
        &self,
        _: Request<UpdateRuntimeConfigRequest>,
    ) -> Res<UpdateRuntimeConfigResponse> {
        Err(not_yet("UpdateRuntimeConfig", "pod networking"))
    }
    async fn checkpoint_container(
        &self,
        _: Request<CheckpointContainerRequest>,
    ) -> Res<CheckpointContainerResponse> {
        Err(Status::unimplemented(
            "CheckpointContainer is not supported by husk",
        ))
    }
    type GetContainerEventsStream = Pin<
        Box<
            dyn tokio_stream::Stream<Item = Result<ContainerEventResponse, Status>>
                + Send
                + 'static,
        >,
    >;
    async fn get_container_events(
        &self,
        _: Request<GetEventsRequest>,
    ) -> Res<Self::GetContainerEventsStream> {
        Err(not_yet("GetContainerEvents", CONTAINERS))
    }
    async fn list_metric_descriptors(
        &self,
        _: Request<ListMetricDescriptorsRequest>,
    ) -> Res<ListMetricDescriptorsResponse> {
        Err(Status::unimplemented(
            "ListMetricDescriptors is not supported by husk",
        ))
    }
    async fn list_pod_sandbox_metrics(
        &self,
        _: Request<ListPodSandboxMetricsRequest>,
    ) -> Res<ListPodSandboxMetricsResponse> {
        Err(Status::unimplemented(
            "ListPodSandboxMetrics is not supported by husk",
        ))
    }
}
