//! A node's `certs.d/<host>/hosts.toml`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(eps) = husk::image::hosts::parse(s, "registry.example", "hosts.toml".as_ref()) {
        assert!(!eps.is_empty(), "the upstream is always last");
        for e in eps {
            let _ = e.api_root();
        }
    }
});
