//! Manifests, indexes and image configs from a registry.
#![no_main]
use husk::image::manifest::{host_platform, select_platform, Document, ImageConfig};
use libfuzzer_sys::fuzz_target;

const TYPES: [Option<&str>; 5] = [
    None,
    Some("application/vnd.oci.image.manifest.v1+json"),
    Some("application/vnd.oci.image.index.v1+json"),
    Some("application/vnd.docker.distribution.manifest.v2+json"),
    Some("application/vnd.docker.distribution.manifest.list.v2+json"),
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    if let Ok(Document::Index(i)) = Document::parse(body, TYPES[pick as usize % TYPES.len()]) {
        let _ = select_platform(&i, &host_platform());
    }
    let _ = serde_json::from_slice::<ImageConfig>(body);
});
