//! Static pod manifests (YAML or JSON, multi-document) through parsing,
//! defaulting and admission.
#![no_main]
use husk::kubelet::pods::admission::admit;
use husk::kubelet::pods::sources::{make_static, parse_manifest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    for pod in parse_manifest(s).into_iter().flatten() {
        let pod = make_static(pod, "node-1", "file", "/etc/kubernetes/manifests/x.yaml");
        let _ = admit(&pod);
    }
});
