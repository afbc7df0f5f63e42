//! What CNI plugins print (results) and what the node's net.d holds
//! (network configs, single and lists).
#![no_main]
use husk::network::cni::{pod_ips, NetworkList};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        for ip in pod_ips(&v) {
            assert!(ip.parse::<std::net::IpAddr>().is_ok(), "{ip:?} is an address");
        }
    }
    let _ = NetworkList::parse(data, "10-net.conflist".as_ref());
    let _ = NetworkList::parse(data, "10-net.conf".as_ref());
});
