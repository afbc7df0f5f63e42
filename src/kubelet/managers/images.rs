//! Image pulls by imagePullPolicy, as the kubelet's image manager does:
//! Never uses only a present image (ErrImageNeverPull otherwise),
//! IfNotPresent pulls when missing, Always pulls for every container
//! start. A failed pull is ErrImagePull and starts a back-off per
//! (pod, image); pulls during the back-off are refused as ImagePullBackOff.
//! Events: Pulling, Pulled (or "already present"), Failed, BackOff.

use super::reasons::StartError;
use crate::api::cri::PodSandboxConfig;
use crate::kubelet::kit::backoff::Backoff;
use crate::kubelet::kit::recorder::Recorder;
use crate::kubelet::kit::recorder::{NORMAL, WARNING};
use crate::kubelet::kit::runtime::Cri;
use crate::kubelet::spec::api_volumes::Objects;
use k8s_openapi::api::core::v1::{Container, Pod};
use std::time::Duration;

/// What a container start needs from its image.
#[derive(Debug, Clone)]
pub struct ImageInfo {
    /// The runtime's image ID (what CreateContainer is given).
    pub image_ref: String,
    /// The image's user: a numeric UID when it has one, and the name.
    pub uid: Option<i64>,
    pub username: String,
}

pub struct ImageManager {
    cri: Cri,
    events: Recorder,
    backoff: Backoff,
}

impl ImageManager {
    pub fn new(cri: Cri, events: Recorder, initial: Duration, max: Duration) -> ImageManager {
        ImageManager {
            cri,
            events,
            backoff: Backoff::new(initial, max),
        }
    }

    pub fn forget_pod(&self, uid: &str) {
        self.backoff.gc(Some(&format!("{uid}_")));
    }

    pub async fn ensure(
        &self,
        objects: &Objects,
        pod: &Pod,
        c: &Container,
        sandbox: &PodSandboxConfig,
    ) -> Result<ImageInfo, StartError> {
        let events = &self.events;
        let r = self.ensure_inner(objects, pod, c, sandbox).await;
        if let Err(e) = &r {
            let (reason, message) = match e.reason.as_str() {
                "ImagePullBackOff" => ("BackOff", e.message.clone()),
                "ErrImageNeverPull" => ("ErrImageNeverPull", e.message.clone()),
                "InvalidImageName" => ("InspectFailed", e.message.clone()),
                _ => ("Failed", e.message.clone()),
            };
            let kind = if reason == "BackOff" { NORMAL } else { WARNING };
            events.container(pod, &c.name, kind, reason, &message);
            if e.reason == "ErrImagePull" {
                events.container(pod, &c.name, WARNING, "Failed", "Error: ErrImagePull");
            }
        }
        r
    }

    async fn ensure_inner(
        &self,
        objects: &Objects,
        pod: &Pod,
        c: &Container,
        sandbox: &PodSandboxConfig,
    ) -> Result<ImageInfo, StartError> {
        let (cri, events) = (&self.cri, &self.events);
        let pod_uid = crate::kubelet::kit::defaults::uid(pod);
        let image = c.image.clone().unwrap_or_default();
        let policy = c.image_pull_policy.as_deref().unwrap_or("IfNotPresent");
        let present = cri.image_status(&image).await.map_err(|e| StartError {
            reason: "ImageInspectError".into(),
            message: format!("Failed to inspect image {image:?}: {e}"),
            retry_after: None,
        })?;
        if let Some(img) = &present {
            if policy != "Always" {
                events.container(
                    pod,
                    &c.name,
                    NORMAL,
                    "Pulled",
                    &format!("Container image {image:?} already present on machine"),
                );
                return Ok(info(img));
            }
        } else if policy == "Never" {
            return Err(StartError {
                reason: "ErrImageNeverPull".into(),
                message: format!(
                    "Container image {image:?} is not present with pull policy of Never"
                ),
                retry_after: None,
            });
        }
        let key = format!("{pod_uid}_{image}");
        if let Some(wait) = self.backoff.remaining_since_update(&key) {
            return Err(StartError {
                reason: "ImagePullBackOff".into(),
                message: format!("Back-off pulling image {image:?}"),
                retry_after: Some(wait),
            });
        }
        tracing::info!(image_ref = %image, pod_uid, "pulling image");
        events.container(
            pod,
            &c.name,
            NORMAL,
            "Pulling",
            &format!("Pulling image {image:?}"),
        );
        let started = std::time::Instant::now();
        let auth = crate::kubelet::spec::pull_secrets::auth(objects, pod, &image).await;
        match cri.pull_image(&image, Some(sandbox.clone()), auth).await {
            Ok(r) => {
                self.backoff.reset(&key);
                events.container(
                    pod,
                    &c.name,
                    NORMAL,
                    "Pulled",
                    &format!(
                        "Successfully pulled image {image:?} in {}",
                        crate::kubelet::kit::recorder::human(started.elapsed())
                    ),
                );
                let img = cri.image_status(&r).await.ok().flatten();
                Ok(match img {
                    Some(i) => info(&i),
                    None => ImageInfo {
                        image_ref: r,
                        uid: None,
                        username: String::new(),
                    },
                })
            }
            Err(e) => {
                self.backoff
                    .next(&key, crate::kubelet::kit::backoff::now_ns());
                let reason = if e.code() == tonic::Code::InvalidArgument {
                    "InvalidImageName"
                } else {
                    "ErrImagePull"
                };
                // Back soon: the next sync shows ImagePullBackOff while the
                // back-off runs, as the kubelet's status does.
                Err(StartError {
                    reason: reason.into(),
                    message: format!("Failed to pull image {image:?}: {}", e.status.message()),
                    retry_after: self
                        .backoff
                        .remaining_since_update(&key)
                        .map(|d| d.min(Duration::from_secs(1))),
                })
            }
        }
    }
}

fn info(img: &crate::api::cri::Image) -> ImageInfo {
    ImageInfo {
        image_ref: img.id.clone(),
        uid: img.uid.as_ref().map(|u| u.value),
        username: img.username.clone(),
    }
}
