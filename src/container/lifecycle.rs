//! StartContainer, StopContainer and RemoveContainer as the CRI sees
//! them: husk's own steps (`ops.rs`) with NRI's events at containerd's
//! points around them.
//!
//! - Start: plugins' StartContainer first (an error fails the start, and
//!   they are told StopContainer), then PostStartContainer.
//! - Stop: StopContainer once a running container has stopped.
//! - Remove: RemoveContainer once it is gone.
//! - Update: UpdateContainer first (a plugin may answer other resources
//!   for it, which are applied instead; an error fails the update), then
//!   PostUpdateContainer.

use super::manager::ContainerManager;
use super::record::ContainerState;
use crate::api::cri::LinuxContainerResources;
use crate::sandbox::SandboxError;
use std::sync::Arc;
use std::time::Duration;

impl ContainerManager {
    /// StartContainer.
    pub async fn start(self: &Arc<Self>, id: &str) -> Result<(), SandboxError> {
        let view = self
            .resolve(id)
            .filter(|id| {
                self.get(id)
                    .is_some_and(|r| r.state == ContainerState::Created)
            })
            .and_then(|id| self.nri_event(&id));
        if let Some((nri, pod, c)) = &view {
            nri.start_container(pod, c)
                .await
                .map_err(SandboxError::Refused)?;
        }
        let r = self.start_task(id).await;
        if let Some((nri, pod, c)) = view {
            match &r {
                Ok(()) => {
                    let now = self.nri_view(&c.id).map(|(_, c)| c).unwrap_or(c);
                    nri.post_start_container(&pod, &now).await
                }
                Err(_) => nri.stop_container(&pod, &c).await,
            }
        }
        r
    }

    /// StopContainer: the plugins are told (once a container, as
    /// containerd tells them, whatever its state).
    pub async fn stop(self: &Arc<Self>, id: &str, timeout: Duration) -> Result<(), SandboxError> {
        self.stop_task(id, timeout).await?;
        if let Some((nri, pod, c)) = self.resolve(id).and_then(|id| self.nri_event(&id)) {
            nri.stop_container(&pod, &c).await;
        }
        Ok(())
    }

    /// RemoveContainer.
    pub async fn remove(self: &Arc<Self>, id: &str) -> Result<(), SandboxError> {
        // Stopped first, so the view is of the stopped container.
        if let Some(full) = self.resolve(id) {
            self.stop(&full, Duration::ZERO).await?;
        }
        let full = self.resolve(id);
        let view = full.as_deref().and_then(|id| self.nri_event(id));
        self.remove_task(id).await?;
        match (view, self.nri(), full) {
            (Some((nri, pod, c)), _, _) => nri.remove_container(&pod, &c).await,
            (None, Some(nri), Some(full)) => nri.forget_container(&full),
            _ => {}
        }
        Ok(())
    }

    /// UpdateContainerResources.
    pub async fn update_resources(
        self: &Arc<Self>,
        id: &str,
        mut new: LinuxContainerResources,
    ) -> Result<(), SandboxError> {
        let view = self.resolve(id).and_then(|id| self.nri_event(&id));
        if let Some((nri, pod, c)) = &view {
            let asked = crate::nri::resources::to_nri(&new);
            if let Some(r) = nri
                .update_container(pod, c, asked)
                .await
                .map_err(SandboxError::Refused)?
            {
                new = crate::nri::resources::from_nri(&r, &new);
            }
        }
        self.update_task(id, new).await?;
        if let Some((nri, pod, c)) = view {
            let now = self.nri_view(&c.id).map(|(_, c)| c).unwrap_or(c);
            nri.post_update_container(&pod, &now).await;
        }
        Ok(())
    }
}
