//! ContainerConfig from a pod's container, as the kubelet builds it:
//! env (from [`super::env`]), command and args with `$(VAR)` expansion,
//! volume mounts, the
//! termination-message file and managed /etc/hosts, resources mapped the
//! kubelet's way (CPU shares, CFS quota, memory limit, OOM score by QoS),
//! the effective security context, and the kubelet's labels and
//! annotations.

use super::env::{env, expand};
use super::inputs::Inputs;
use super::sandbox_config::{namespaces, seccomp};
use crate::api::cri::*;
use crate::kubelet::kit::defaults;
use crate::kubelet::kit::labels;
use crate::kubelet::kit::settings::Settings;
use k8s_openapi::api::core::v1::{Container, Pod};
use std::collections::HashMap;

const MASKED: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
const READONLY: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// CPU shares from a request (limit when no request), min 2, max 262144.
pub fn cpu_shares(milli: Option<i64>) -> i64 {
    match milli {
        None | Some(0) => 2,
        Some(m) => (m * 1024 / 1000).clamp(2, 262_144),
    }
}

/// CFS quota for a limit over a 100 ms period, min 1 ms.
pub fn cpu_quota(milli: i64) -> i64 {
    (milli * 100_000 / 1000).max(1000)
}

/// The OOM score by QoS class, as the kubelet sets it.
pub fn oom_score_adj(pod: &Pod, c: &Container, capacity: i64) -> i64 {
    match defaults::qos_class(pod) {
        "Guaranteed" => -997,
        "BestEffort" => 1000,
        _ => {
            let req = defaults::resources(c).memory_request.unwrap_or(0);
            if capacity <= 0 {
                return 999;
            }
            let adj = 1000 - (1000 * req as i128 / capacity as i128) as i64;
            if adj < 3 {
                3
            } else if adj >= 1000 {
                999
            } else {
                adj
            }
        }
    }
}

pub fn resources(s: &Settings, pod: &Pod, c: &Container) -> LinuxContainerResources {
    let r = defaults::resources(c);
    let mut out = LinuxContainerResources {
        cpu_shares: cpu_shares(r.cpu_request_milli.filter(|m| *m > 0).or(r.cpu_limit_milli)),
        oom_score_adj: oom_score_adj(pod, c, s.memory_capacity),
        ..Default::default()
    };
    if let Some(l) = r.cpu_limit_milli.filter(|l| *l > 0) {
        out.cpu_quota = cpu_quota(l);
        out.cpu_period = 100_000;
    }
    if let Some(m) = r.memory_limit.filter(|m| *m > 0) {
        out.memory_limit_in_bytes = m;
    }
    out
}

/// The container's security context with the pod's as defaults.
pub fn security(s: &Settings, pod: &Pod, c: &Container) -> LinuxContainerSecurityContext {
    let psc = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.clone())
        .unwrap_or_default();
    let sc = c.security_context.clone().unwrap_or_default();
    let privileged = sc.privileged.unwrap_or(false);
    let mut groups = psc.supplemental_groups.clone().unwrap_or_default();
    if let Some(g) = psc.fs_group {
        groups.push(g);
    }
    let unmasked = sc.proc_mount.as_deref() == Some("Unmasked");
    let caps = sc.capabilities.clone().unwrap_or_default();
    LinuxContainerSecurityContext {
        capabilities: Some(Capability {
            add_capabilities: caps.add.unwrap_or_default(),
            drop_capabilities: caps.drop.unwrap_or_default(),
            ..Default::default()
        }),
        privileged,
        namespace_options: Some(namespaces(pod)),
        run_as_user: sc
            .run_as_user
            .or(psc.run_as_user)
            .map(|v| Int64Value { value: v }),
        run_as_group: sc
            .run_as_group
            .or(psc.run_as_group)
            .map(|v| Int64Value { value: v }),
        readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups: groups,
        no_new_privs: sc.allow_privilege_escalation == Some(false),
        masked_paths: if privileged || unmasked {
            vec![]
        } else {
            MASKED.iter().map(|s| s.to_string()).collect()
        },
        readonly_paths: if privileged || unmasked {
            vec![]
        } else {
            READONLY.iter().map(|s| s.to_string()).collect()
        },
        seccomp: Some(seccomp(
            s,
            sc.seccomp_profile.as_ref().or(psc.seccomp_profile.as_ref()),
        )),
        ..Default::default()
    }
}

fn propagation(p: Option<&str>) -> i32 {
    match p {
        Some("HostToContainer") => MountPropagation::PropagationHostToContainer as i32,
        Some("Bidirectional") => MountPropagation::PropagationBidirectional as i32,
        _ => MountPropagation::PropagationPrivate as i32,
    }
}

pub fn mounts(c: &Container, inp: &Inputs) -> Vec<Mount> {
    let mut out = Vec::new();
    let mut has_hosts = false;
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        // An image volume: the runtime mounts the image (read-only), or
        // its subPath inside it, itself.
        if let Some(image) = inp.image_volumes.get(&m.name) {
            out.push(Mount {
                container_path: m.mount_path.clone(),
                image: Some(crate::api::cri::ImageSpec {
                    image: image.clone(),
                    ..Default::default()
                }),
                image_sub_path: m.sub_path.clone().unwrap_or_default(),
                readonly: true,
                propagation: propagation(m.mount_propagation.as_deref()),
                ..Default::default()
            });
            continue;
        }
        let Some(base) = inp.volumes.get(&m.name) else {
            continue;
        };
        // A subPath is only ever its descriptor-made bind, never a join.
        let host = match m.sub_path.as_deref().filter(|p| !p.is_empty()) {
            Some(_) => match inp.subpaths.get(&i) {
                Some(p) => p.clone(),
                None => continue,
            },
            None => base.clone(),
        };
        has_hosts |= m.mount_path == "/etc/hosts";
        out.push(Mount {
            container_path: m.mount_path.clone(),
            host_path: host.display().to_string(),
            // Secret, ConfigMap, projected and downward API volumes are
            // always read-only, as the kubelet mounts them.
            readonly: m.read_only.unwrap_or(false) || super::api_volumes::read_only(base),
            propagation: propagation(m.mount_propagation.as_deref()),
            ..Default::default()
        });
    }
    if let (Some(h), false) = (&inp.etc_hosts, has_hosts) {
        out.push(Mount {
            container_path: "/etc/hosts".into(),
            host_path: h.display().to_string(),
            ..Default::default()
        });
    }
    if let Some(t) = &inp.termination_file {
        out.push(Mount {
            container_path: c
                .termination_message_path
                .clone()
                .unwrap_or_else(|| defaults::DEFAULT_TERMINATION_MESSAGE_PATH.into()),
            host_path: t.display().to_string(),
            ..Default::default()
        });
    }
    out
}

/// The whole config.
pub fn build(s: &Settings, pod: &Pod, c: &Container, init: bool, inp: &Inputs) -> ContainerConfig {
    let envs = env(s, pod, c, inp);
    let env_map: HashMap<String, String> = envs
        .iter()
        .map(|kv| {
            (
                kv.key.clone(),
                String::from_utf8_lossy(&kv.value).into_owned(),
            )
        })
        .collect();
    let ex = |v: &Option<Vec<String>>| {
        v.iter()
            .flatten()
            .map(|a| expand(a, &env_map))
            .collect::<Vec<_>>()
    };
    let mut l: HashMap<String, String> = labels::pod_labels(
        &s.node_name,
        defaults::name(pod),
        defaults::namespace(pod),
        defaults::uid(pod),
    );
    l.insert(labels::CONTAINER_NAME.into(), c.name.clone());
    let mut a = HashMap::from([
        (
            labels::CONTAINER_HASH.to_string(),
            defaults::container_hash(c),
        ),
        (
            labels::CONTAINER_RESTART_COUNT.to_string(),
            inp.restart_count.to_string(),
        ),
        (
            labels::TERMINATION_MESSAGE_PATH.to_string(),
            c.termination_message_path.clone().unwrap_or_default(),
        ),
        (
            labels::TERMINATION_MESSAGE_POLICY.to_string(),
            c.termination_message_policy.clone().unwrap_or_default(),
        ),
        (
            labels::POD_TERMINATION_GRACE_PERIOD.to_string(),
            defaults::grace_period(pod).to_string(),
        ),
        (labels::INIT_CONTAINER.to_string(), init.to_string()),
    ]);
    if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) {
        a.insert(
            labels::PRE_STOP_HANDLER.into(),
            serde_json::to_string(h).unwrap_or_default(),
        );
    }
    if let Some(p) = c.ports.as_ref().filter(|p| !p.is_empty()) {
        a.insert(
            labels::CONTAINER_PORTS.into(),
            serde_json::to_string(p).unwrap_or_default(),
        );
    }
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: c.name.clone(),
            attempt: inp.restart_count as u32,
        }),
        image: Some(ImageSpec {
            image: inp.image_ref.to_string(),
            user_specified_image: c.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command: ex(&c.command),
        args: ex(&c.args),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs,
        mounts: mounts(c, inp),
        labels: l,
        annotations: a,
        log_path: format!("{}/{}.log", c.name, inp.restart_count),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(LinuxContainerConfig {
            resources: Some(resources(s, pod, c)),
            security_context: Some(security(s, pod, c)),
        }),
        stop_signal: stop_signal(c),
        ..Default::default()
    }
}

/// The container's `lifecycle.stopSignal` (`SIGUSR1`, `SIGRTMIN+1`) in the
/// CRI's enum; unset or unknown: RUNTIME_DEFAULT (the image's, else
/// SIGTERM). The API server admits only the enum's names.
fn stop_signal(c: &Container) -> i32 {
    c.lifecycle
        .as_ref()
        .and_then(|l| l.stop_signal.as_deref())
        .map(|n| n.replacen('+', "PLUS", 1).replacen('-', "MINUS", 1))
        .and_then(|n| crate::api::cri::Signal::from_str_name(&n))
        .unwrap_or(crate::api::cri::Signal::RuntimeDefault) as i32
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn expansion_follows_the_kubelet() {
        let env = HashMap::from([("A".to_string(), "x".to_string())]);
        assert_eq!(expand("$(A)-$(B)-$$(A)-$", &env), "x-$(B)-$(A)-$");
        assert_eq!(expand("unterminated $(A", &env), "unterminated $(A");
        assert_eq!(expand("ü$(A)ü", &env), "üxü");
    }

    #[test]
    fn cpu_and_memory_map_like_the_kubelet() {
        assert_eq!(cpu_shares(None), 2);
        assert_eq!(cpu_shares(Some(100)), 102);
        assert_eq!(cpu_shares(Some(1000)), 1024);
        assert_eq!(cpu_quota(250), 25_000);
        assert_eq!(cpu_quota(1), 1000);
        let mut pod: Pod = serde_yaml::from_str("metadata: {name: a, uid: u}\nspec:\n  containers:\n  - name: c\n    image: i\n    resources: {requests: {cpu: 250m, memory: 1Gi}, limits: {cpu: 500m, memory: 2Gi}}\n    env:\n    - {name: ME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}\n    - {name: IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}\n    - {name: BOTH, value: '$(ME)@$(IP)'}\n    - {name: MEM, valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}}\n    - {name: SEC, valueFrom: {secretKeyRef: {name: s, key: k}}}\n    - {name: CM_B, value: mine}\n    envFrom: [{configMapRef: {name: m}, prefix: CM_}]\n    command: [echo, '$(BOTH)']\n").unwrap();
        defaults::apply(&mut pod);
        let s = Settings::new("unix:///x");
        let c = &pod.spec.as_ref().unwrap().containers[0];
        let vols = HashMap::new();
        let ips = vec!["10.1.2.3".to_string()];
        use crate::kubelet::spec::api_volumes::Kind;
        use crate::kubelet::spec::inputs::EnvObjects;
        let mut objs = EnvObjects::new();
        objs.insert(
            (Kind::Secret, "s".into()),
            Some([("k".to_string(), b"v".to_vec())].into()),
        );
        objs.insert(
            (Kind::ConfigMap, "m".into()),
            Some(
                [
                    ("A".to_string(), b"1".to_vec()),
                    ("B".to_string(), b"2".to_vec()),
                    ("bad key".to_string(), b"x".to_vec()),
                ]
                .into(),
            ),
        );
        let inp = Inputs {
            service_env: &[
                (
                    "KUBERNETES_SERVICE_HOST".to_string(),
                    "10.0.0.1".to_string(),
                ),
                ("CM_B".to_string(), "svc".to_string()),
            ],
            env_objects: &objs,
            restart_count: 2,
            pod_ips: &ips,
            host_ip: "",
            volumes: &vols,
            image_volumes: &Default::default(),
            subpaths: &HashMap::new(),
            termination_file: None,
            etc_hosts: None,
            image_ref: "sha256:abc",
        };
        let cfg = build(&s, &pod, c, false, &inp);
        let r = cfg.linux.as_ref().unwrap().resources.as_ref().unwrap();
        assert_eq!(r.cpu_shares, 256);
        assert_eq!(r.cpu_quota, 50_000);
        assert_eq!(r.cpu_period, 100_000);
        assert_eq!(r.memory_limit_in_bytes, 2 << 30);
        assert!((3..1000).contains(&r.oom_score_adj));
        let env: HashMap<_, _> = cfg
            .envs
            .iter()
            .map(|k| (k.key.as_str(), std::str::from_utf8(&k.value).unwrap()))
            .collect();
        assert_eq!(env["BOTH"], "a@10.1.2.3");
        assert_eq!(env["MEM"], "2048");
        assert_eq!(env["SEC"], "v");
        assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.0.0.1");
        assert_eq!(
            crate::kubelet::spec::downward::go_quote("a\"b\\c\nd\u{1}"),
            "\"a\\\"b\\\\c\\nd\\x01\""
        );
        assert_eq!(env["CM_A"], "1");
        assert_eq!(env["CM_B"], "mine", "env overrides envFrom");
        assert!(!env.contains_key("CM_bad key"));
        assert_eq!(cfg.command, vec!["echo", "a@10.1.2.3"]);
        assert_eq!(cfg.log_path, "c/2.log");
        assert_eq!(cfg.metadata.unwrap().attempt, 2);
        assert_eq!(cfg.annotations[labels::CONTAINER_RESTART_COUNT], "2");
        assert_eq!(cfg.image.unwrap().user_specified_image, "i");
    }
}
