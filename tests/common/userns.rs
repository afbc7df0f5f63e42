//! User namespace options of test pods and containers (`hostUsers: false`
//! as the kubelet sends it).

use husk::api::cri::*;

pub fn map(container_id: u32, host_id: u32, length: u32) -> IdMapping {
    IdMapping {
        container_id,
        host_id,
        length,
    }
}

pub fn userns(mode: NamespaceMode, uids: Vec<IdMapping>, gids: Vec<IdMapping>) -> UserNamespace {
    UserNamespace {
        mode: mode as i32,
        uids,
        gids,
    }
}

pub fn with_userns(mut pc: PodSandboxConfig, u: UserNamespace) -> PodSandboxConfig {
    let sc = pc
        .linux
        .as_mut()
        .expect("linux config")
        .security_context
        .get_or_insert_with(Default::default);
    sc.namespace_options
        .get_or_insert_with(Default::default)
        .userns_options = Some(u);
    pc
}

/// The container repeats the pod's options, as the kubelet sends them.
pub fn container_userns(c: &mut ContainerConfig, u: UserNamespace) {
    super::ctr::security(c).namespace_options = Some(NamespaceOption {
        userns_options: Some(u),
        ..Default::default()
    });
}
