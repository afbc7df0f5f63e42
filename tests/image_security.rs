//! Malicious and corrupt content: layers that try to escape the image root,
//! hardlinks out of it, tampered blobs. Each is confined or refused, and the
//! host is untouched.
#![allow(clippy::unwrap_used)]

mod common;

use common::images::*;
use common::registry::Registry;
use common::server::Husk;

fn unique(tag: &str) -> String {
    format!("husk-{tag}-{:08x}", rand::random::<u32>())
}

#[tokio::test(flavor = "multi_thread")]
async fn escaping_entries_are_confined_to_the_image() {
    if !common::require_root() {
        return;
    }
    let reg = Registry::start();
    let push = Pusher::new(&reg);
    let h = Husk::start().await;
    let (dotdot, abs, same, lower, rel) = (
        unique("dotdot"),
        unique("abs"),
        unique("same"),
        unique("lower"),
        unique("rel"),
    );
    let base = Layer::new(
        &[
            Entry::Symlink("evil-lower".into(), "/tmp".into()),
            Entry::Symlink("up".into(), "../../../../../../tmp".into()),
        ],
        Compression::Gzip,
    );
    let top = Layer::new(
        &[
            Entry::File(
                format!("../../../../../../tmp/{dotdot}"),
                b"x".to_vec(),
                0o644,
            ),
            Entry::File(format!("/tmp/{abs}"), b"x".to_vec(), 0o644),
            Entry::Symlink("evil".into(), "/tmp".into()),
            Entry::File(format!("evil/{same}"), b"x".to_vec(), 0o644),
            Entry::File(format!("evil-lower/{lower}"), b"x".to_vec(), 0o644),
            Entry::File(format!("up/{rel}"), b"x".to_vec(), 0o644),
        ],
        Compression::Gzip,
    );
    let img = Image::new(vec![base, top]);
    push.image("evil/escape", "v1", &img, Format::Oci).await;
    let id = h
        .pull(&format!("{}/evil/escape:v1", reg.host()))
        .await
        .unwrap();
    for name in [&dotdot, &abs, &same, &lower, &rel] {
        assert!(
            !std::path::Path::new("/tmp").join(name).exists(),
            "{name} escaped to the host's /tmp"
        );
    }
    let view = h.mount_image(&id);
    for name in [&dotdot, &abs, &same, &lower, &rel] {
        assert!(
            view.path().join("tmp").join(name).is_file(),
            "{name} confined to the image's /tmp"
        );
    }
    // Nothing outside the store changed: only husk's root and the test dir.
    assert!(view.path().join("evil").is_symlink());
}

#[tokio::test(flavor = "multi_thread")]
async fn hardlink_out_of_the_image_is_refused_and_nothing_is_kept() {
    if !common::require_root() {
        return;
    }
    let reg = Registry::start();
    let push = Pusher::new(&reg);
    let h = Husk::start().await;
    let passwd_links = std::fs::metadata("/etc/passwd")
        .map(|m| std::os::unix::fs::MetadataExt::nlink(&m))
        .unwrap();
    let img = Image::new(vec![Layer::new(
        &[
            Entry::File("ok".into(), b"fine".to_vec(), 0o644),
            Entry::Hardlink("stolen".into(), "../../etc/passwd".into()),
        ],
        Compression::Gzip,
    )]);
    push.image("evil/hardlink", "v1", &img, Format::Oci).await;
    let e = h
        .pull(&format!("{}/evil/hardlink:v1", reg.host()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains("stolen"),
        "names the entry: {}",
        e.message()
    );
    assert_eq!(
        std::fs::metadata("/etc/passwd")
            .map(|m| std::os::unix::fs::MetadataExt::nlink(&m))
            .unwrap(),
        passwd_links
    );
    assert!(h.list().await.is_empty(), "no partial image listed");
    // The unfinished snapshot is gone; only the committed-nothing store remains.
    let snaps: Vec<_> = std::fs::read_dir(h.root().join("snapshots"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != "chains")
        .collect();
    assert!(snaps.is_empty(), "snapshot dirs left: {snaps:?}");
    assert!(common::mounts_below(&h.root()).is_empty());

    // A hardlink to a file that does exist inside the image is fine.
    let ok = Image::new(vec![Layer::new(
        &[
            Entry::Dir("etc/".into(), 0o755),
            Entry::File(
                "etc/passwd".into(),
                b"root:x:0:0::/:/bin/sh\n".to_vec(),
                0o644,
            ),
            Entry::Hardlink("linked".into(), "../../etc/passwd".into()),
        ],
        Compression::Gzip,
    )]);
    push.image("evil/hardlink-ok", "v1", &ok, Format::Oci).await;
    let id = h
        .pull(&format!("{}/evil/hardlink-ok:v1", reg.host()))
        .await
        .unwrap();
    let d = &h.layer_dirs(&id)[0];
    assert_eq!(
        std::fs::read(d.join("linked")).unwrap(),
        b"root:x:0:0::/:/bin/sh\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tampered_blob_and_wrong_diff_id_are_refused() {
    if !common::require_root() {
        return;
    }
    let reg = Registry::start();
    let push = Pusher::new(&reg);
    let h = Husk::start().await;

    // The registry serves bytes that do not match the layer's digest.
    let img = Image::new(vec![Layer::new(&busybox_entries(), Compression::Gzip)]);
    push.image("bad/tampered", "v1", &img, Format::Oci).await;
    reg.tamper_blob(&img.layers[0].digest());
    let e = h
        .pull(&format!("{}/bad/tampered:v1", reg.host()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("digest mismatch"), "{}", e.message());
    assert!(!h
        .root()
        .join("content/blobs/sha256")
        .join(img.layers[0].digest().trim_start_matches("sha256:"))
        .exists());

    // The config's diff ID does not match the unpacked layer.
    let mut wrong = Image::new(vec![Layer::new(
        &[Entry::File("f".into(), b"1".to_vec(), 0o644)],
        Compression::Gzip,
    )]);
    wrong.layers[0].diff_id = format!("sha256:{}", "0".repeat(64));
    let wrong = Image::new(wrong.layers);
    push.image("bad/diffid", "v1", &wrong, Format::Oci).await;
    let e = h
        .pull(&format!("{}/bad/diffid:v1", reg.host()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(h.list().await.is_empty());
    assert_eq!(
        std::fs::read_dir(h.root().join("snapshots/chains"))
            .unwrap()
            .count(),
        0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_clear_codes() {
    if !common::require_root() {
        return;
    }
    let reg = Registry::start();
    let h = Husk::start().await;
    let e = h.pull("").await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    let e = h.pull("Not A Reference").await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("Not A Reference"), "{}", e.message());
    let e = h
        .pull(&format!("{}/no/such:image", reg.host()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
    // Nothing listens here: Unavailable, naming the address.
    let dead = common::free_port();
    let e = h.pull(&format!("127.0.0.1:{dead}/x:y")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    assert!(e.message().contains(&dead.to_string()), "{}", e.message());
    // Removing an unknown image is success (CRI).
    h.remove("never/pulled:1").await.unwrap();
    let e = h.remove("").await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
}
