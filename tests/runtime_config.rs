//! UpdateRuntimeConfig on a real husk serve: the pod CIDR reaches a CNI
//! network whose bridge plugin declares the `ipRanges` capability (its
//! host-local IPAM has no ranges of its own), pods get addresses in it, and
//! a restarted server keeps it.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::stop_remove_pod;
use common::pod::*;
use husk::api::cri::*;

/// A conflist whose addresses come only from the runtime's `ipRanges`.
fn write_ip_ranges_conflist(p: &Pod) {
    let conf = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": p.net.name,
        "plugins": [{
            "type": "bridge", "bridge": p.net.bridge, "isGateway": true, "ipMasq": false,
            "capabilities": {"ipRanges": true},
            "ipam": {"type": "host-local", "dataDir": p.net.ipam_dir}
        }]
    });
    let dir = p.h.dir.path().join("net.d");
    std::fs::write(
        dir.join("10-test.conflist"),
        serde_json::to_vec_pretty(&conf).unwrap(),
    )
    .unwrap();
}

async fn set_pod_cidr(h: &common::server::Husk, cidr: &str) -> Result<(), tonic::Status> {
    h.runtime()
        .await
        .update_runtime_config(UpdateRuntimeConfigRequest {
            runtime_config: Some(RuntimeConfig {
                network_config: Some(NetworkConfig {
                    pod_cidr: cidr.into(),
                }),
            }),
        })
        .await
        .map(|_| ())
}

async fn pod_ip(h: &common::server::Husk, id: &str) -> String {
    status(h, id)
        .await
        .unwrap()
        .status
        .unwrap()
        .network
        .unwrap()
        .ip
}

#[tokio::test(flavor = "multi_thread")]
async fn pod_cidr_reaches_cni_as_ip_ranges_and_survives_a_restart() {
    if !common::require_root() {
        return;
    }
    let mut p = setup(vec![]).await;
    write_ip_ranges_conflist(&p);
    // Without a pod CIDR, host-local has no range to allocate from.
    let e = run(&p.h, p.config("before")).await.unwrap_err();
    assert!(e.message().contains("no IP ranges"), "{e:?}");
    // The bridge plugin made the bridge before its IPAM failed, and (1.1.1)
    // then fails the next ADD setting that bridge's MAC: start afresh.
    std::process::Command::new("ip")
        .args(["link", "del", &p.net.bridge])
        .status()
        .unwrap();

    for bad in ["10.1.2.3/24", "10.1.2.0", "nonsense/8", "10.0.0.0/40"] {
        let e = set_pod_cidr(&p.h, bad).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}: {e:?}");
    }
    // An empty CIDR changes nothing.
    set_pod_cidr(&p.h, "").await.unwrap();

    let r: u32 = rand::random();
    let prefix = format!("10.{}.{}", 100 + r % 50, (r >> 8) % 250);
    set_pod_cidr(&p.h, &format!("{prefix}.0/24")).await.unwrap();
    let a = run(&p.h, p.config("a")).await.unwrap();
    let ip = pod_ip(&p.h, &a).await;
    assert!(
        ip.starts_with(&format!("{prefix}.")),
        "{ip} in {prefix}.0/24"
    );

    p.h.restart().await;
    let b = run(&p.h, p.config("b")).await.unwrap();
    let ip_b = pod_ip(&p.h, &b).await;
    assert!(
        ip_b.starts_with(&format!("{prefix}.")),
        "{ip_b} after a restart"
    );
    assert_ne!(ip, ip_b);

    stop_remove_pod(&p.h, &a).await;
    stop_remove_pod(&p.h, &b).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
