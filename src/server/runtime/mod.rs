//! The CRI RuntimeService. One file per implemented RPC; RPCs of parts not
//! built yet answer Unimplemented with a message naming what is missing.

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
const STREAMING: &str = "streaming sessions";

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
        _: Request<CreateContainerRequest>,
    ) -> Res<CreateContainerResponse> {
        Err(not_yet("CreateContainer", CONTAINERS))
    }
    async fn start_container(
        &self,
        _: Request<StartContainerRequest>,
    ) -> Res<StartContainerResponse> {
        Err(not_yet("StartContainer", CONTAINERS))
    }
    async fn stop_container(&self, _: Request<StopContainerRequest>) -> Res<StopContainerResponse> {
        Err(not_yet("StopContainer", CONTAINERS))
    }
    async fn remove_container(
        &self,
        _: Request<RemoveContainerRequest>,
    ) -> Res<RemoveContainerResponse> {
        Err(not_yet("RemoveContainer", CONTAINERS))
    }
    async fn list_containers(
        &self,
        _: Request<ListContainersRequest>,
    ) -> Res<ListContainersResponse> {
        Err(not_yet("ListContainers", CONTAINERS))
    }
    async fn container_status(
        &self,
        _: Request<ContainerStatusRequest>,
    ) -> Res<ContainerStatusResponse> {
        Err(not_yet("ContainerStatus", CONTAINERS))
    }
    async fn update_container_resources(
        &self,
        _: Request<UpdateContainerResourcesRequest>,
    ) -> Res<UpdateContainerResourcesResponse> {
        Err(not_yet("UpdateContainerResources", CONTAINERS))
    }
    async fn reopen_container_log(
        &self,
        _: Request<ReopenContainerLogRequest>,
    ) -> Res<ReopenContainerLogResponse> {
        Err(not_yet("ReopenContainerLog", CONTAINERS))
    }
    async fn exec_sync(&self, _: Request<ExecSyncRequest>) -> Res<ExecSyncResponse> {
        Err(not_yet("ExecSync", CONTAINERS))
    }
    async fn exec(&self, _: Request<ExecRequest>) -> Res<ExecResponse> {
        Err(not_yet("Exec", STREAMING))
    }
    async fn attach(&self, _: Request<AttachRequest>) -> Res<AttachResponse> {
        Err(not_yet("Attach", STREAMING))
    }
    async fn port_forward(&self, _: Request<PortForwardRequest>) -> Res<PortForwardResponse> {
        Err(not_yet("PortForward", STREAMING))
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
