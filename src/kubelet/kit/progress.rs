//! Where a pod stands: whether a stopped container is started again and
//! how far its init containers have got. The sync computes its actions
//! from these, and the status its phase and conditions, so both agree.

use super::defaults;
use super::runtime::{CState, ContainerView, RuntimePod};
use k8s_openapi::api::core::v1::Pod;

pub fn should_restart_on_failure(pod: &Pod) -> bool {
    defaults::restart_policy(pod) != "Never"
}

pub fn succeeded(rt: &RuntimePod, name: &str) -> bool {
    rt.latest(name)
        .is_some_and(|c| c.state == CState::Exited && c.exit_code == 0)
}

/// Whether a stopped container is started again (the kubelet's
/// ShouldContainerBeRestarted).
pub fn should_restart(pod: &Pod, rt: &RuntimePod, name: &str) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(c) = rt.latest(name) else {
        return true;
    };
    match c.state {
        CState::Running => false,
        CState::Created | CState::Unknown => true,
        CState::Exited => match defaults::restart_policy(pod) {
            "Never" => false,
            "OnFailure" => c.exit_code != 0,
            _ => true,
        },
    }
}

fn init_failed(c: &ContainerView) -> bool {
    match c.state {
        CState::Exited => c.exit_code != 0,
        CState::Unknown => true,
        _ => false,
    }
}

/// (last failed init container, next one to run, all done).
pub fn next_init(pod: &Pod, rt: &RuntimePod) -> (Option<usize>, Option<usize>, bool) {
    let inits = defaults::init_containers(pod);
    if inits.is_empty() {
        return (None, None, true);
    }
    // Once an app container exists, initialization is over.
    if defaults::containers(pod)
        .iter()
        .any(|c| rt.latest(&c.name).is_some())
    {
        return (None, None, true);
    }
    for (i, c) in inits.iter().enumerate().rev() {
        if rt.latest(&c.name).is_some_and(init_failed) {
            return (Some(i), Some(i), false);
        }
    }
    for (i, c) in inits.iter().enumerate().rev() {
        let Some(st) = rt.latest(&c.name) else {
            continue;
        };
        match st.state {
            CState::Running => return (None, None, false),
            CState::Exited if i == inits.len() - 1 => return (None, None, true),
            CState::Exited => return (None, Some(i + 1), false),
            _ => return (None, Some(i), false),
        }
    }
    (None, Some(0), false)
}
