//! CNI with Debian's real plugins (/usr/lib/cni) on a test-unique bridge
//! and subnet: two namespaces get distinct addresses and reach each other,
//! a hostPort reaches a server in one from 127.0.0.1, DEL is idempotent, a
//! failing plugin is reported and unwound, and nothing is left behind.
#![allow(clippy::unwrap_used)]

mod common;

use husk::network::cni::{pod_ips, Attachment, Cni, NetworkList};
use husk::network::netns::{self, Kind};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;

struct TestNet {
    dir: tempfile::TempDir,
    tn: common::cni::TestNetwork,
    net: NetworkList,
    cni: Cni,
}

impl TestNet {
    fn new(extra_plugins: Vec<serde_json::Value>) -> TestNet {
        let dir = tempfile::tempdir().unwrap();
        let tn = common::cni::TestNetwork::new(&dir.path().join("ipam"));
        let conf = dir.path().join("net.d");
        tn.write(&conf, extra_plugins);
        let net = NetworkList::load_first(&conf).unwrap().unwrap();
        let cni = Cni {
            bin_dirs: vec![PathBuf::from("/usr/lib/cni")],
            cache_dir: dir.path().join("cache"),
            timeout: std::time::Duration::from_secs(30),
        };
        TestNet { dir, tn, net, cni }
    }

    fn netns(&self, name: &str) -> PathBuf {
        let p = self.dir.path().join("ns").join(name);
        netns::create(Kind::Net, &p, None).unwrap();
        netns::loopback_up(&p).unwrap();
        p
    }

    fn leases(&self) -> usize {
        self.tn.leases()
    }

    fn veths(&self) -> usize {
        self.tn.veths()
    }
}

use common::cni::iptables_mentions;

fn in_ns(ns: &Path, args: &[&str]) -> std::process::Output {
    Command::new("nsenter")
        .arg(format!("--net={}", ns.display()))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn two_namespaces_on_a_bridge_with_a_host_port() {
    if !common::require_root() {
        return;
    }
    let t = TestNet::new(vec![]);
    let (ns1, ns2) = (t.netns("a"), t.netns("b"));
    let id1 = format!("c1{:x}", rand::random::<u64>());
    let id2 = format!("c2{:x}", rand::random::<u64>());
    let a1 = Attachment::for_pod(&id1, &ns1, "default", "pod-a", "uid-a");
    let mut a2 = Attachment::for_pod(&id2, &ns2, "default", "pod-b", "uid-b");
    let host_port = common::free_port();
    a2.capability_args.insert(
        "portMappings".into(),
        json!([{"hostPort": host_port, "containerPort": 8080, "protocol": "tcp", "hostIP": "127.0.0.1"}]),
    );
    let r1 = t.cni.add(&t.net, &a1).unwrap();
    let r2 = t.cni.add(&t.net, &a2).unwrap();
    let (ip1, ip2) = (pod_ips(&r1)[0].clone(), pod_ips(&r2)[0].clone());
    assert_ne!(ip1, ip2);
    assert!(ip1.starts_with(&t.tn.subnet_prefix) && ip2.starts_with(&t.tn.subnet_prefix));
    assert_eq!(t.leases(), 2);
    assert_eq!(t.veths(), 2);
    assert!(netns::interfaces(&ns1)
        .unwrap()
        .contains(&"eth0".to_string()));

    // ns1 reaches ns2 over the bridge.
    let ping = in_ns(&ns1, &["/bin/busybox", "ping", "-c", "1", "-W", "2", &ip2]);
    assert!(
        ping.status.success(),
        "ping: {}",
        String::from_utf8_lossy(&ping.stdout)
    );

    // A server in ns2 is reached from the host's 127.0.0.1 through the hostPort.
    let www = t.dir.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("index.html"), "hello from the pod").unwrap();
    let mut httpd = Command::new("nsenter")
        .arg(format!("--net={}", ns2.display()))
        .args(["/bin/busybox", "httpd", "-f", "-p", "8080", "-h"])
        .arg(&www)
        .spawn()
        .unwrap();
    let body = common::http_get_until(host_port, "/index.html", "hello");
    let _ = httpd.kill();
    let _ = httpd.wait();
    assert!(
        body.contains("hello from the pod"),
        "hostPort answer: {body:?}"
    );
    assert!(
        iptables_mentions(&id2) > 0,
        "portmap rules exist while attached"
    );

    // DEL twice (idempotent), then nothing is left.
    for a in [&a1, &a2] {
        t.cni.del(&t.net, a).unwrap();
        t.cni.del(&t.net, a).unwrap();
    }
    for ns in [&ns1, &ns2] {
        netns::remove(ns).unwrap();
    }
    assert_eq!(t.leases(), 0, "no host-local lease left");
    assert_eq!(t.veths(), 0, "no veth left");
    assert_eq!(
        iptables_mentions(&id1) + iptables_mentions(&id2),
        0,
        "no portmap rule left"
    );
    assert_eq!(
        common::count_files(&t.dir.path().join("cache")),
        0,
        "no cached result left"
    );
    assert!(
        common::mounts_under(t.dir.path()).is_empty(),
        "no netns mount left"
    );
}

#[test]
fn a_failing_plugin_is_reported_and_unwound() {
    if !common::require_root() {
        return;
    }
    // A plugin that does not exist after bridge: bridge's ADD must be undone.
    let t = TestNet::new(vec![json!({"type": "no-such-plugin"})]);
    let ns = t.netns("x");
    let id = format!("cf{:x}", rand::random::<u64>());
    let a = Attachment::for_pod(&id, &ns, "default", "p", "u");
    let e = t.cni.add(&t.net, &a).unwrap_err();
    assert!(e.to_string().contains("no-such-plugin"), "{e}");
    assert_eq!(t.leases(), 0);
    assert_eq!(t.veths(), 0);
    assert_eq!(common::count_files(&t.dir.path().join("cache")), 0);

    // A plugin error carries the plugin's code and message.
    let bad = TestNet::new(vec![]);
    let ns2 = bad.netns("y");
    let mut att = Attachment::for_pod("bad", &ns2, "default", "p", "u");
    att.ifname = "this-name-is-far-too-long-for-linux".into();
    let e = bad.cni.add(&bad.net, &att).unwrap_err().to_string();
    assert!(e.contains("bridge") && e.contains("code"), "{e}");
    netns::remove(&ns).unwrap();
    netns::remove(&ns2).unwrap();
}
