//! A layer from a registry, unpacked onto a scratch root: whatever the tar
//! (or gzip/zstd stream) says, nothing is created outside the root.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let base = tempfile::tempdir().expect("tempdir");
    let root = base.path().join("root");
    std::fs::create_dir(&root).expect("root");
    let _ = husk::image::unpack::apply_layer(&root, data, data.first() == Some(&0));
    let _ = husk::image::unpack::apply_layer(&root, data, true);
    // Only the root is in the scratch dir: no sibling was made through a
    // `..`, an absolute path, a symlink or a hard link.
    let names: Vec<_> = std::fs::read_dir(base.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("root")]);
    // Nor at the absolute paths the seed corpus aims at.
    for p in ["/tmp/husk-fuzz-escape", "/husk-fuzz-escape", "/etc/husk-fuzz-escape"] {
        assert!(std::fs::symlink_metadata(p).is_err(), "{p} was created");
    }
});
