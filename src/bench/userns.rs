//! `husk bench --ops userns`: what a pod's own user namespace costs. On
//! the first endpoint only (containerd 1.6 has no user namespaces), a
//! plain pod and a `hostUsers: false` pod (one uid and one gid mapping of
//! 65536, as the kubelet sends them) are started and torn down in turns:
//! sandbox plus one started container, then stop and remove.

use super::container::container;
use super::sandbox::pod_config;
use super::{ratio, summarize, Summary, Target};
use crate::api::cri::*;
use serde::Serialize;
use std::time::Instant;

#[derive(Debug, Serialize)]
pub struct UsernsResult {
    pub runtime: String,
    pub plain_start: Summary,
    pub userns_start: Summary,
    pub plain_teardown: Summary,
    pub userns_teardown: Summary,
}

fn userns_options() -> NamespaceOption {
    let m = || {
        vec![IdMapping {
            container_id: 0,
            host_id: 65536 * 7,
            length: 65536,
        }]
    };
    NamespaceOption {
        userns_options: Some(UserNamespace {
            mode: NamespaceMode::Pod as i32,
            uids: m(),
            gids: m(),
        }),
        pid: NamespaceMode::Container as i32,
        ..Default::default()
    }
}

/// Interleaved plain and hostUsers: false pods on `t`.
pub async fn bench_userns(
    t: &mut Target,
    image: &str,
    iterations: usize,
) -> anyhow::Result<UsernsResult> {
    t.pull_app(image).await?;
    let mut start: [Vec<_>; 2] = Default::default();
    let mut down: [Vec<_>; 2] = Default::default();
    for i in 0..iterations {
        for k in [i % 2, (i + 1) % 2] {
            let mut sc = pod_config(&format!("u{k}"), i, &t.cgroup_parent);
            let mut c = container(image);
            if k == 1 {
                let sec = sc.linux.get_or_insert_with(Default::default);
                sec.security_context
                    .get_or_insert_with(Default::default)
                    .namespace_options = Some(userns_options());
                let cs = c.linux.get_or_insert_with(Default::default);
                let ns = cs
                    .security_context
                    .get_or_insert_with(Default::default)
                    .namespace_options
                    .get_or_insert_with(Default::default);
                ns.userns_options = userns_options().userns_options;
            }
            let t0 = Instant::now();
            let sandbox = t.run_pod(sc.clone()).await?;
            let id = t
                .runtime
                .create_container(CreateContainerRequest {
                    pod_sandbox_id: sandbox.clone(),
                    config: Some(c),
                    sandbox_config: Some(sc),
                })
                .await?
                .into_inner()
                .container_id;
            t.runtime
                .start_container(StartContainerRequest { container_id: id })
                .await?;
            start[k].push(t0.elapsed());
            let t1 = Instant::now();
            t.stop_remove(&sandbox).await?;
            down[k].push(t1.elapsed());
        }
    }
    Ok(UsernsResult {
        runtime: t.name.clone(),
        plain_start: summarize(&start[0]),
        userns_start: summarize(&start[1]),
        plain_teardown: summarize(&down[0]),
        userns_teardown: summarize(&down[1]),
    })
}

/// The table.
pub fn report(iterations: usize, r: &UsernsResult) -> String {
    let mut s = format!(
        "user namespace cost on {} ({iterations} pods of each, interleaved; pod + 1 container)\n",
        r.runtime
    );
    s.push_str(&format!(
        "{:<34} {:>8} {:>8} {:>8}\n",
        "", "p50 ms", "p90 ms", "ratio"
    ));
    for (name, row, base) in [
        ("start: plain", &r.plain_start, &r.plain_start),
        ("start: hostUsers false", &r.userns_start, &r.plain_start),
        ("stop+remove: plain", &r.plain_teardown, &r.plain_teardown),
        (
            "stop+remove: hostUsers false",
            &r.userns_teardown,
            &r.plain_teardown,
        ),
    ] {
        s.push_str(&format!(
            "{:<34} {:>8.2} {:>8.2} {:>8.2}\n",
            name,
            row.p50_ms,
            row.p90_ms,
            ratio(row.p50_ms, base.p50_ms)
        ));
    }
    s
}
