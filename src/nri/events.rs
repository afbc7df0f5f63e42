//! The chain called at the pod flow's points: one method per NRI event,
//! each bounded by the request timeout per plugin (`mod.rs` keeps the
//! chain, `plugin.rs` the calls).

use super::plugin::{self, Plugin};
use super::{adjust, api, Nri};
use prost::Message;
use std::sync::Arc;

impl Nri {
    /// The chain now, for one event.
    async fn chain(&self) -> Vec<Arc<Plugin>> {
        self.chain.read().await.clone()
    }

    /// Calls `method` with `req` on every plugin that wants `event` (a
    /// plugin of an older NRI, which answers Unimplemented, gets a state
    /// event as `StateChange`). A fatal error drops the plugin; another is
    /// returned (when `strict`) or logged.
    async fn event<Req: Message>(
        &self,
        event: api::Event,
        method: &str,
        req: &Req,
        pod: &api::PodSandbox,
        c: Option<&api::Container>,
        strict: bool,
    ) -> Result<(), String> {
        for p in self.chain().await {
            if !p.wants(event) {
                continue;
            }
            let r = match p.call::<_, api::Empty>(method, req).await {
                // NRI relays every state event but UpdatePodSandbox to a
                // plugin of an older NRI as StateChange.
                Err(plugin::CallError::Status { code, .. })
                    if code == plugin::UNIMPLEMENTED && event != api::Event::UpdatePodSandbox =>
                {
                    p.state_change(event, pod, c).await
                }
                r => r.map(drop),
            };
            match r {
                Ok(()) => {}
                Err(e) if e.is_fatal() => self.drop_plugin(&p, &format!("{method}: {e}")).await,
                Err(e) if strict => return Err(format!("NRI plugin {}: {method}: {e}", p.id())),
                Err(e) => {
                    tracing::warn!(plugin = %p.id(), method, error = %e, "NRI plugin failed an event")
                }
            }
        }
        Ok(())
    }

    /// RunPodSandbox: a plugin's error fails the pod.
    pub async fn run_pod_sandbox(&self, pod: &api::PodSandbox) -> Result<(), String> {
        self.event(
            api::Event::RunPodSandbox,
            "RunPodSandbox",
            &api::RunPodSandboxRequest {
                pod: Some(pod.clone()),
            },
            pod,
            None,
            true,
        )
        .await
    }

    /// StopPodSandbox.
    pub async fn stop_pod_sandbox(&self, pod: &api::PodSandbox) {
        let _ = self
            .event(
                api::Event::StopPodSandbox,
                "StopPodSandbox",
                &api::StopPodSandboxRequest {
                    pod: Some(pod.clone()),
                },
                pod,
                None,
                false,
            )
            .await;
    }

    /// RemovePodSandbox.
    pub async fn remove_pod_sandbox(&self, pod: &api::PodSandbox) {
        let _ = self
            .event(
                api::Event::RemovePodSandbox,
                "RemovePodSandbox",
                &api::RemovePodSandboxRequest {
                    pod: Some(pod.clone()),
                },
                pod,
                None,
                false,
            )
            .await;
    }

    /// CreateContainer: every plugin's adjustment applied to `spec` (or
    /// none, on any error: a conflict, a refusal, a field husk cannot
    /// apply).
    pub async fn create_container(
        &self,
        pod: &api::PodSandbox,
        container: &api::Container,
        spec: &mut serde_json::Value,
        node: &adjust::Node<'_>,
    ) -> Result<(), String> {
        let chain = self.chain().await;
        if chain.is_empty() {
            return Ok(());
        }
        let mut adjusted = spec.clone();
        let mut owners = adjust::Owners::default();
        let mut merged = api::ContainerAdjustment::default();
        let (mut update, mut evict) = (Vec::new(), Vec::new());
        let req = api::CreateContainerRequest {
            pod: Some(pod.clone()),
            container: Some(container.clone()),
        };
        for p in chain.iter() {
            if !p.wants(api::Event::CreateContainer) {
                continue;
            }
            let rsp: api::CreateContainerResponse = match p.call("CreateContainer", &req).await {
                Ok(r) => r,
                Err(e) if e.is_fatal() => {
                    self.drop_plugin(p, &format!("CreateContainer: {e}")).await;
                    continue;
                }
                Err(e) => return Err(format!("NRI plugin {}: CreateContainer: {e}", p.id())),
            };
            // NRI's words for an update of the container being made.
            if let Some(u) = rsp.update.iter().find(|u| u.container_id == container.id) {
                return Err(format!(
                    "NRI: plugin {:?} asked update of {:?} during creation",
                    p.id(),
                    u.container_id
                ));
            }
            update.extend(rsp.update);
            evict.extend(rsp.evict);
            if let Some(adj) = &rsp.adjust {
                adjust::apply(&mut adjusted, adj, &p.id(), &mut owners, node)
                    .map_err(|e| format!("NRI: {e}"))?;
                // Protobuf's merge: lists add up, maps and fields later win.
                prost::Message::merge(&mut merged, adj.encode_to_vec().as_slice())
                    .map_err(|e| format!("NRI: {e}"))?;
            }
        }
        self.validate(&chain, &req, merged, &update, &owners)
            .await?;
        self.apply_others("CreateContainer", update, evict).await?;
        *spec = adjusted;
        Ok(())
    }

    /// Updates and evictions of other containers the plugins answered at
    /// `what`, applied as containerd applies them: the evictions (a stop;
    /// one that fails is logged), then the updates, through the path of a
    /// plugin's own UpdateContainers. An update that fails, unless marked
    /// `ignore_failure`, fails `what`.
    pub(super) async fn apply_others(
        &self,
        what: &str,
        update: Vec<api::ContainerUpdate>,
        evict: Vec<api::ContainerEviction>,
    ) -> Result<(), String> {
        if update.is_empty() && evict.is_empty() {
            return Ok(());
        }
        let Some(apply) = self.updates.get() else {
            return Err(format!(
                "NRI: {what}: plugins asked to update or evict containers, and nothing here applies that"
            ));
        };
        let failed = apply(api::UpdateContainersRequest { update, evict }).await?;
        if failed.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = failed.iter().map(|u| u.container_id.as_str()).collect();
        Err(format!(
            "NRI: {what}: failed to update containers {}",
            ids.join(", ")
        ))
    }

    /// ValidateContainerAdjustment: every validator plugin sees the
    /// adjustments and who made them; one that rejects refuses the
    /// container with its reason.
    async fn validate(
        &self,
        chain: &[Arc<Plugin>],
        req: &api::CreateContainerRequest,
        merged: api::ContainerAdjustment,
        update: &[api::ContainerUpdate],
        owners: &adjust::Owners,
    ) -> Result<(), String> {
        let validators: Vec<&Arc<Plugin>> = chain
            .iter()
            .filter(|p| p.wants(api::Event::ValidateContainerAdjustment) && !p.is_closed())
            .collect();
        if validators.is_empty() {
            return Ok(());
        }
        let id = req
            .container
            .as_ref()
            .map(|c| c.id.clone())
            .unwrap_or_default();
        let v = api::ValidateContainerAdjustmentRequest {
            pod: req.pod.clone(),
            container: req.container.clone(),
            adjust: Some(merged),
            update: update.to_vec(),
            owners: Some(owners.to_proto(&id)),
            plugins: chain
                .iter()
                .map(|p| api::PluginInstance {
                    name: p.name.clone(),
                    index: p.idx.clone(),
                })
                .collect(),
        };
        for p in validators {
            let rsp: api::ValidateContainerAdjustmentResponse =
                match p.call("ValidateContainerAdjustment", &v).await {
                    Ok(r) => r,
                    Err(e) if e.is_fatal() => {
                        self.drop_plugin(p, &format!("ValidateContainerAdjustment: {e}"))
                            .await;
                        continue;
                    }
                    Err(e) => return Err(format!("NRI validator {} failed: {e}", p.id())),
                };
            if rsp.reject {
                return Err(format!(
                    "NRI validator {} rejected the container's adjustment: {}",
                    p.id(),
                    rsp.reason
                ));
            }
        }
        Ok(())
    }

    /// PostCreateContainer.
    pub async fn post_create_container(&self, pod: &api::PodSandbox, c: &api::Container) {
        let _ = self
            .event(
                api::Event::PostCreateContainer,
                "PostCreateContainer",
                &api::PostCreateContainerRequest {
                    pod: Some(pod.clone()),
                    container: Some(c.clone()),
                },
                pod,
                Some(c),
                false,
            )
            .await;
    }

    /// StartContainer: a plugin's error fails the start.
    pub async fn start_container(
        &self,
        pod: &api::PodSandbox,
        c: &api::Container,
    ) -> Result<(), String> {
        self.event(
            api::Event::StartContainer,
            "StartContainer",
            &api::StartContainerRequest {
                pod: Some(pod.clone()),
                container: Some(c.clone()),
            },
            pod,
            Some(c),
            true,
        )
        .await
    }

    /// PostStartContainer.
    pub async fn post_start_container(&self, pod: &api::PodSandbox, c: &api::Container) {
        let _ = self
            .event(
                api::Event::PostStartContainer,
                "PostStartContainer",
                &api::PostStartContainerRequest {
                    pod: Some(pod.clone()),
                    container: Some(c.clone()),
                },
                pod,
                Some(c),
                false,
            )
            .await;
    }

    /// StopContainer, once a container; the updates of other containers
    /// the plugins answer are applied (one that fails is logged: the
    /// container is stopped).
    pub async fn stop_container(&self, pod: &api::PodSandbox, c: &api::Container) {
        let _order = self.stop_order.lock().await;
        if !self.stopped_set().insert(c.id.clone()) {
            return;
        }
        let req = api::StopContainerRequest {
            pod: Some(pod.clone()),
            container: Some(c.clone()),
        };
        let mut update = Vec::new();
        for p in self.chain().await {
            if !p.wants(api::Event::StopContainer) {
                continue;
            }
            match p
                .call::<_, api::StopContainerResponse>("StopContainer", &req)
                .await
            {
                Ok(r) => update.extend(r.update),
                Err(e) if e.is_fatal() => {
                    self.drop_plugin(&p, &format!("StopContainer: {e}")).await
                }
                Err(e) => {
                    tracing::warn!(plugin = %p.id(), error = %e, "NRI plugin failed StopContainer")
                }
            }
        }
        if let Err(e) = self.apply_others("StopContainer", update, Vec::new()).await {
            tracing::warn!(container_id = %c.id, error = %e, "NRI updates at StopContainer");
        }
    }

    /// UpdateContainer: the plugins see the resources asked; an update a
    /// plugin answers for this container replaces them (the last wins).
    /// A plugin's error fails the update; so does an update of another
    /// container the plugins answer that fails. Evictions stop theirs.
    pub async fn update_container(
        &self,
        pod: &api::PodSandbox,
        c: &api::Container,
        asked: api::LinuxResources,
    ) -> Result<Option<api::LinuxResources>, String> {
        let mut req = api::UpdateContainerRequest {
            pod: Some(pod.clone()),
            container: Some(c.clone()),
            linux_resources: Some(asked),
        };
        let mut changed = None;
        let (mut others, mut evict) = (Vec::new(), Vec::new());
        for p in self.chain().await {
            if !p.wants(api::Event::UpdateContainer) {
                continue;
            }
            let rsp: api::UpdateContainerResponse = match p.call("UpdateContainer", &req).await {
                Ok(r) => r,
                Err(e) if e.is_fatal() => {
                    self.drop_plugin(&p, &format!("UpdateContainer: {e}")).await;
                    continue;
                }
                Err(e) => return Err(format!("NRI plugin {}: UpdateContainer: {e}", p.id())),
            };
            for u in rsp.update {
                if u.container_id != c.id {
                    others.push(u);
                } else if let Some(r) = u.linux.and_then(|l| l.resources) {
                    req.linux_resources = Some(r.clone());
                    changed = Some(r);
                }
            }
            evict.extend(rsp.evict);
        }
        self.apply_others("UpdateContainer", others, evict).await?;
        Ok(changed)
    }

    /// PostUpdateContainer.
    pub async fn post_update_container(&self, pod: &api::PodSandbox, c: &api::Container) {
        let req = api::PostUpdateContainerRequest {
            pod: Some(pod.clone()),
            container: Some(c.clone()),
        };
        let _ = self
            .event(
                api::Event::PostUpdateContainer,
                "PostUpdateContainer",
                &req,
                pod,
                Some(c),
                false,
            )
            .await;
    }

    /// UpdatePodSandbox: a plugin's error fails the resize.
    pub async fn update_pod_sandbox(
        &self,
        pod: &api::PodSandbox,
        overhead: Option<api::LinuxResources>,
        resources: Option<api::LinuxResources>,
    ) -> Result<(), String> {
        let req = api::UpdatePodSandboxRequest {
            pod: Some(pod.clone()),
            overhead_linux_resources: overhead,
            linux_resources: resources,
        };
        self.event(
            api::Event::UpdatePodSandbox,
            "UpdatePodSandbox",
            &req,
            pod,
            None,
            true,
        )
        .await
    }

    /// PostUpdatePodSandbox.
    pub async fn post_update_pod_sandbox(&self, pod: &api::PodSandbox) {
        let req = api::PostUpdatePodSandboxRequest {
            pod: Some(pod.clone()),
        };
        let _ = self
            .event(
                api::Event::PostUpdatePodSandbox,
                "PostUpdatePodSandbox",
                &req,
                pod,
                None,
                false,
            )
            .await;
    }

    /// A container that exited by itself (seen on husk's exit thread):
    /// the plugins are told it stopped, unless they were.
    pub fn container_exited(self: &Arc<Self>, pod: api::PodSandbox, c: api::Container) {
        let me = self.clone();
        self.rt
            .spawn(async move { me.stop_container(&pod, &c).await });
    }

    /// A removed container's mark, when no plugin was told of its removal.
    pub fn forget_container(&self, id: &str) {
        self.stopped_set().remove(id);
    }

    fn stopped_set(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.stopped.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// RemoveContainer, after its StopContainer if the plugins were not
    /// told yet (a container created and never started).
    pub async fn remove_container(&self, pod: &api::PodSandbox, c: &api::Container) {
        self.stop_container(pod, c).await;
        self.forget_container(&c.id);
        let _ = self
            .event(
                api::Event::RemoveContainer,
                "RemoveContainer",
                &api::RemoveContainerRequest {
                    pod: Some(pod.clone()),
                    container: Some(c.clone()),
                },
                pod,
                Some(c),
                false,
            )
            .await;
    }
}
