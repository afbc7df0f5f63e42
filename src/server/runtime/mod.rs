//! The CRI RuntimeService. One file per implemented RPC; RPCs of parts not
//! built yet answer Unimplemented with a message naming what is missing.

mod args;
mod attach;
mod container_create;
pub mod container_events;
mod container_list;
mod container_remove;
mod container_reopen_log;
mod container_start;
mod container_stats;
mod container_stats_list;
mod container_stats_stream;
mod container_status;
mod container_stop;
mod container_stream;
mod container_update;
mod exec;
mod exec_sync;
mod metric_descriptors;
mod port_forward;
mod runtime_config;
mod runtime_config_update;
mod sandbox_list;
mod sandbox_metrics;
mod sandbox_metrics_stream;
mod sandbox_remove;
mod sandbox_run;
mod sandbox_stats;
mod sandbox_stats_list;
mod sandbox_stats_stream;
mod sandbox_status;
mod sandbox_stop;
mod sandbox_stream;
mod sandbox_update;
mod status;
mod version;

use super::instrument::{observe, Op, State};
use crate::api::cri::runtime_service_server::RuntimeService;
use crate::api::cri::*;
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
    type StreamPodSandboxesStream = sandbox_stream::Stream;
    async fn stream_pod_sandboxes(
        &self,
        r: Request<StreamPodSandboxesRequest>,
    ) -> Res<Self::StreamPodSandboxesStream> {
        observe(
            "StreamPodSandboxes",
            Op::Read,
            sandbox_stream::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn update_pod_sandbox_resources(
        &self,
        r: Request<UpdatePodSandboxResourcesRequest>,
    ) -> Res<UpdatePodSandboxResourcesResponse> {
        observe(
            "UpdatePodSandboxResources",
            Op::Mutate,
            sandbox_update::handle(&self.state, r.into_inner()),
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
    type StreamContainersStream = container_stream::Stream;
    async fn stream_containers(
        &self,
        r: Request<StreamContainersRequest>,
    ) -> Res<Self::StreamContainersStream> {
        observe(
            "StreamContainers",
            Op::Read,
            container_stream::handle(&self.state, r.into_inner()),
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
        r: Request<UpdateContainerResourcesRequest>,
    ) -> Res<UpdateContainerResourcesResponse> {
        observe(
            "UpdateContainerResources",
            Op::Mutate,
            container_update::handle(&self.state, r.into_inner()),
        )
        .await
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
        r: Request<ContainerStatsRequest>,
    ) -> Res<ContainerStatsResponse> {
        observe(
            "ContainerStats",
            Op::Read,
            container_stats::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn list_container_stats(
        &self,
        r: Request<ListContainerStatsRequest>,
    ) -> Res<ListContainerStatsResponse> {
        observe(
            "ListContainerStats",
            Op::Read,
            container_stats_list::handle(&self.state, r.into_inner()),
        )
        .await
    }
    type StreamContainerStatsStream = container_stats_stream::Stream;
    async fn stream_container_stats(
        &self,
        r: Request<StreamContainerStatsRequest>,
    ) -> Res<Self::StreamContainerStatsStream> {
        observe(
            "StreamContainerStats",
            Op::Read,
            container_stats_stream::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn pod_sandbox_stats(
        &self,
        r: Request<PodSandboxStatsRequest>,
    ) -> Res<PodSandboxStatsResponse> {
        observe(
            "PodSandboxStats",
            Op::Read,
            sandbox_stats::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn list_pod_sandbox_stats(
        &self,
        r: Request<ListPodSandboxStatsRequest>,
    ) -> Res<ListPodSandboxStatsResponse> {
        observe(
            "ListPodSandboxStats",
            Op::Read,
            sandbox_stats_list::handle(&self.state, r.into_inner()),
        )
        .await
    }
    type StreamPodSandboxStatsStream = sandbox_stats_stream::Stream;
    async fn stream_pod_sandbox_stats(
        &self,
        r: Request<StreamPodSandboxStatsRequest>,
    ) -> Res<Self::StreamPodSandboxStatsStream> {
        observe(
            "StreamPodSandboxStats",
            Op::Read,
            sandbox_stats_stream::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn update_runtime_config(
        &self,
        r: Request<UpdateRuntimeConfigRequest>,
    ) -> Res<UpdateRuntimeConfigResponse> {
        observe(
            "UpdateRuntimeConfig",
            Op::Mutate,
            runtime_config_update::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn checkpoint_container(
        &self,
        _: Request<CheckpointContainerRequest>,
    ) -> Res<CheckpointContainerResponse> {
        Err(Status::unimplemented(
            "CheckpointContainer is not supported by husk: checkpoint/restore (CRIU) is not built",
        ))
    }
    type GetContainerEventsStream = container_events::EventStream;
    async fn get_container_events(
        &self,
        r: Request<GetEventsRequest>,
    ) -> Res<Self::GetContainerEventsStream> {
        observe(
            "GetContainerEvents",
            Op::Read,
            container_events::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn list_metric_descriptors(
        &self,
        r: Request<ListMetricDescriptorsRequest>,
    ) -> Res<ListMetricDescriptorsResponse> {
        observe(
            "ListMetricDescriptors",
            Op::Read,
            metric_descriptors::handle(&self.state, r.into_inner()),
        )
        .await
    }
    async fn list_pod_sandbox_metrics(
        &self,
        r: Request<ListPodSandboxMetricsRequest>,
    ) -> Res<ListPodSandboxMetricsResponse> {
        observe(
            "ListPodSandboxMetrics",
            Op::Read,
            sandbox_metrics::handle(&self.state, r.into_inner()),
        )
        .await
    }
    type StreamPodSandboxMetricsStream = sandbox_metrics_stream::Stream;
    async fn stream_pod_sandbox_metrics(
        &self,
        r: Request<StreamPodSandboxMetricsRequest>,
    ) -> Res<Self::StreamPodSandboxMetricsStream> {
        observe(
            "StreamPodSandboxMetrics",
            Op::Read,
            sandbox_metrics_stream::handle(&self.state, r.into_inner()),
        )
        .await
    }
}
