//! Image pulls by imagePullPolicy, as the kubelet's image manager does:
//! Never uses only a present image (ErrImageNeverPull otherwise),
//! IfNotPresent pulls when missing, Always pulls for every container
//! start. A failed pull is ErrImagePull and starts a back-off per
//! (pod, image); pulls during the back-off are refused as ImagePullBackOff.
//! Events: Pulling, Pulled (or "already present"), Failed, BackOff.
//! Image volumes' images are pulled the same way, by their volume's
//! policy, before the container that mounts them is created.

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

/// One image a container start needs: whose, which, by what policy.
struct Wanted<'a> {
    container: &'a str,
    image: &'a str,
    policy: &'a str,
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
        let image = c.image.clone().unwrap_or_default();
        let policy = c.image_pull_policy.as_deref().unwrap_or("IfNotPresent");
        let want = Wanted {
            container: &c.name,
            image: &image,
            policy,
        };
        self.ensure_image(objects, pod, &want, sandbox).await
    }

    /// The images of the image volumes `c` mounts, each by its volume's
    /// pull policy (default: Always for `:latest` or no tag, else
    /// IfNotPresent, as the API server defaults it): volume name → the
    /// runtime's image ID, which CreateContainer's mount is given.
    pub async fn ensure_volumes(
        &self,
        objects: &Objects,
        pod: &Pod,
        c: &Container,
        sandbox: &PodSandboxConfig,
    ) -> Result<std::collections::HashMap<String, String>, StartError> {
        let mut out = std::collections::HashMap::new();
        let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
        for m in c.volume_mounts.iter().flatten() {
            let Some(src) = volumes
                .into_iter()
                .flatten()
                .find(|v| v.name == m.name)
                .and_then(|v| v.image.as_ref())
            else {
                continue;
            };
            if out.contains_key(&m.name) {
                continue;
            }
            let image = src.reference.clone().unwrap_or_default();
            let policy = src
                .pull_policy
                .clone()
                .unwrap_or_else(|| default_policy(&image).to_string());
            let want = Wanted {
                container: &c.name,
                image: &image,
                policy: &policy,
            };
            let info = self.ensure_image(objects, pod, &want, sandbox).await?;
            out.insert(m.name.clone(), info.image_ref);
        }
        Ok(out)
    }

    async fn ensure_image(
        &self,
        objects: &Objects,
        pod: &Pod,
        want: &Wanted<'_>,
        sandbox: &PodSandboxConfig,
    ) -> Result<ImageInfo, StartError> {
        let (events, container) = (&self.events, want.container);
        let r = self.ensure_inner(objects, pod, want, sandbox).await;
        if let Err(e) = &r {
            let (reason, message) = match e.reason.as_str() {
                "ImagePullBackOff" => ("BackOff", e.message.clone()),
                "ErrImageNeverPull" => ("ErrImageNeverPull", e.message.clone()),
                "InvalidImageName" => ("InspectFailed", e.message.clone()),
                _ => ("Failed", e.message.clone()),
            };
            let kind = if reason == "BackOff" { NORMAL } else { WARNING };
            events.container(pod, container, kind, reason, &message);
            if e.reason == "ErrImagePull" {
                events.container(pod, container, WARNING, "Failed", "Error: ErrImagePull");
            }
        }
        r
    }

    async fn ensure_inner(
        &self,
        objects: &Objects,
        pod: &Pod,
        want: &Wanted<'_>,
        sandbox: &PodSandboxConfig,
    ) -> Result<ImageInfo, StartError> {
        let (cri, events) = (&self.cri, &self.events);
        let (container, policy) = (want.container, want.policy);
        let pod_uid = crate::kubelet::kit::defaults::uid(pod);
        let image = want.image.to_string();
        let present = cri.image_status(&image).await.map_err(|e| StartError {
            reason: "ImageInspectError".into(),
            message: format!("Failed to inspect image {image:?}: {e}"),
            retry_after: None,
        })?;
        if let Some(img) = &present {
            if policy != "Always" {
                events.container(
                    pod,
                    container,
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
            container,
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
                    container,
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

/// An image volume's pull policy when its volume gives none.
fn default_policy(image: &str) -> &'static str {
    let name = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || name.contains(':') && !name.ends_with(":latest") {
        "IfNotPresent"
    } else {
        "Always"
    }
}

fn info(img: &crate::api::cri::Image) -> ImageInfo {
    ImageInfo {
        image_ref: img.id.clone(),
        uid: img.uid.as_ref().map(|u| u.value),
        username: img.username.clone(),
    }
}
