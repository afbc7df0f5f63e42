//! PullImage against a real registry: every reference form, manifest kinds,
//! compression, platform selection, image status, persistence.
#![allow(clippy::unwrap_used)]

mod common;

use common::images::*;
use common::registry::Registry;
use common::server::Husk;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

#[tokio::test(flavor = "multi_thread")]
async fn pull_every_reference_form() {
    if !common::require_root() {
        return;
    }
    let reg = Registry::start();
    let push = Pusher::new(&reg);
    let img = Image::with_config(
        vec![Layer::new(&busybox_entries(), Compression::Gzip)],
        "amd64",
        serde_json::json!({"User": "65534", "Cmd": ["/bin/sh"]}),
    );
    let digest = push
        .image("library/busybox", "1.36", &img, Format::Oci)
        .await;
    push.image("library/busybox", "latest", &img, Format::Oci)
        .await;
    let h = Husk::start().await;
    let host = reg.host();

    // name (default tag), name:tag, name@digest, name:tag@digest.
    let id = h.pull(&format!("{host}/library/busybox")).await.unwrap();
    assert_eq!(id, img.config_digest());
    assert_eq!(
        h.pull(&format!("{host}/library/busybox:1.36"))
            .await
            .unwrap(),
        id
    );
    assert_eq!(
        h.pull(&format!("{host}/library/busybox@{digest}"))
            .await
            .unwrap(),
        id
    );
    assert_eq!(
        h.pull(&format!("{host}/library/busybox:1.36@{digest}"))
            .await
            .unwrap(),
        id
    );

    let list = h.list().await;
    assert_eq!(list.len(), 1, "one image however it was named: {list:?}");
    let i = &list[0];
    assert_eq!(i.id, id);
    assert_eq!(
        i.repo_tags,
        vec![
            format!("{host}/library/busybox:1.36"),
            format!("{host}/library/busybox:latest")
        ]
    );
    assert_eq!(
        i.repo_digests,
        vec![format!("{host}/library/busybox@{digest}")]
    );
    let (m, _) = img.manifest(Format::Oci);
    assert_eq!(
        i.size,
        (m.len() + img.config.len() + img.layers[0].blob.len()) as u64
    );
    assert_eq!(i.uid.as_ref().map(|u| u.value), Some(65534));

    // Status by id, bare hex, tag and digest; unknown is an empty answer.
    for spec in [
        id.clone(),
        id.trim_start_matches("sha256:").to_string(),
        format!("{host}/library/busybox:1.36"),
        format!("{host}/library/busybox@{digest}"),
    ] {
        assert_eq!(
            h.status(&spec).await.map(|i| i.id),
            Some(id.clone()),
            "status of {spec}"
        );
    }
    assert!(h
        .status(&format!("{host}/library/busybox:nope"))
        .await
        .is_none());
    assert!(h
        .status("sha256:0000000000000000000000000000000000000000000000000000000000000000")
        .await
        .is_none());

    // The snapshot holds the real busybox, executable.
    let dirs = h.layer_dirs(&id);
    assert_eq!(dirs.len(), 1);
    let bb = dirs[0].join("bin/busybox");
    assert_eq!(
        std::fs::read(&bb).unwrap(),
        std::fs::read("/bin/busybox").unwrap()
    );
    assert_eq!(
        std::fs::metadata(&bb).unwrap().permissions().mode() & 0o777,
        0o755
    );
    assert_eq!(
        std::fs::read_link(dirs[0].join("bin/sh")).unwrap().to_str(),
        Some("busybox")
    );
    let out = std::process::Command::new(dirs[0].join("bin/busybox"))
        .arg("true")
        .status()
        .unwrap();
    assert!(out.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn docker_manifests_zstd_layers_and_platform_indexes() {
    if !common::require_root() {
        return;
    }
    let reg = Registry::start();
    let push = Pusher::new(&reg);
    let host = reg.host();
    let h = Husk::start().await;

    // Docker v2 schema 2 (gzip).
    let docker = Image::new(vec![Layer::new(&busybox_entries(), Compression::Gzip)]);
    push.image("docker/app", "v1", &docker, Format::Docker)
        .await;
    assert_eq!(
        h.pull(&format!("{host}/docker/app:v1")).await.unwrap(),
        docker.config_digest()
    );

    // OCI with a zstd layer over an uncompressed one.
    let zstd = Image::new(vec![
        Layer::new(&busybox_entries(), Compression::None),
        Layer::new(
            &[Entry::File(
                "hello.txt".into(),
                b"from zstd".to_vec(),
                0o644,
            )],
            Compression::Zstd,
        ),
    ]);
    push.image("oci/zstd", "v1", &zstd, Format::Oci).await;
    let id = h.pull(&format!("{host}/oci/zstd:v1")).await.unwrap();
    let view = h.mount_image(&id);
    assert_eq!(
        std::fs::read(view.path().join("hello.txt")).unwrap(),
        b"from zstd"
    );
    assert!(view.path().join("bin/busybox").is_file());
    drop(view);

    // An OCI index and a Docker manifest list with two platforms: the node's wins.
    let amd = Image::with_config(
        vec![Layer::new(
            &[Entry::File("arch".into(), b"amd64".to_vec(), 0o644)],
            Compression::Gzip,
        )],
        "amd64",
        serde_json::json!({}),
    );
    let arm = Image::with_config(
        vec![Layer::new(
            &[Entry::File("arch".into(), b"arm64".to_vec(), 0o644)],
            Compression::Gzip,
        )],
        "arm64",
        serde_json::json!({}),
    );
    let node = husk::image::manifest::host_platform().architecture;
    let want = if node == "arm64" { &arm } else { &amd };
    for (repo, f) in [("multi/oci", Format::Oci), ("multi/docker", Format::Docker)] {
        let idx = push.index(repo, "v1", &[&arm, &amd], f).await;
        let id = h.pull(&format!("{host}/{repo}:v1")).await.unwrap();
        assert_eq!(id, want.config_digest(), "{repo}");
        let dirs = h.layer_dirs(&id);
        assert_eq!(
            std::fs::read(dirs[0].join("arch")).unwrap(),
            node.as_bytes()
        );
        let st = h.status(&id).await.unwrap();
        assert!(
            st.repo_digests.contains(&format!("{host}/{repo}@{idx}")),
            "repo digest is the index's: {:?}",
            st.repo_digests
        );
    }

    // An index with no manifest for this node: NotFound naming the platform.
    let s390 = Image::with_config(
        vec![Layer::new(&[], Compression::Gzip)],
        "s390x",
        serde_json::json!({}),
    );
    push.index("multi/none", "v1", &[&s390], Format::Oci).await;
    let e = h.pull(&format!("{host}/multi/none:v1")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert!(e.message().contains("platform"), "{}", e.message());
}

#[tokio::test(flavor = "multi_thread")]
async fn layers_keep_whiteouts_metadata_and_special_files() {
    if !common::require_root() {
        return;
    }
    let reg = Registry::start();
    let push = Pusher::new(&reg);
    let base = vec![
        Entry::Dir("a/".into(), 0o755),
        Entry::File("a/gone".into(), b"x".to_vec(), 0o644),
        Entry::File("a/kept".into(), b"y".to_vec(), 0o644),
        Entry::Dir("opq/".into(), 0o755),
        Entry::File("opq/old".into(), b"old".to_vec(), 0o644),
        Entry::Dir("lib-real/".into(), 0o755),
        Entry::Symlink("lib".into(), "lib-real".into()),
    ];
    let top = vec![
        Entry::File("a/.wh.gone".into(), Vec::new(), 0o644),
        Entry::Dir("opq/".into(), 0o700),
        Entry::File("opq/.wh..wh..opq".into(), Vec::new(), 0o644),
        Entry::File("opq/new".into(), b"new".to_vec(), 0o644),
        // Written through a symlink from the lower layer (merged-/usr style).
        Entry::File("lib/x.so".into(), b"elf".to_vec(), 0o755),
        Entry::FileFull(
            "meta".into(),
            b"m".to_vec(),
            0o4755,
            1234,
            2345,
            1_600_000_000,
            vec![("user.husk".into(), b"v1".to_vec())],
        ),
        Entry::Hardlink("meta-link".into(), "meta".into()),
        Entry::Symlink("abs-link".into(), "/etc/passwd".into()),
        Entry::Char("dev-null".into(), 1, 3),
        Entry::Fifo("fifo".into()),
    ];
    let img = Image::new(vec![
        Layer::new(&base, Compression::Gzip),
        Layer::new(&top, Compression::Gzip),
    ]);
    push.image("layers/test", "v1", &img, Format::Oci).await;
    let h = Husk::start().await;
    let id = h
        .pull(&format!("{}/layers/test:v1", reg.host()))
        .await
        .unwrap();

    let upper = &h.layer_dirs(&id)[1];
    // overlayfs form in the layer's own dir.
    let wh = std::fs::symlink_metadata(upper.join("a/gone")).unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_char_device(
        &wh.file_type()
    ));
    assert_eq!(wh.rdev(), 0);
    let opq =
        rustix::fs::getxattr(upper.join("opq"), "trusted.overlay.opaque", &mut [0u8; 8]).unwrap();
    assert_eq!(opq, 1);
    assert!(
        upper.join("lib-real/x.so").is_file(),
        "written through the lower symlink"
    );

    let view = h.mount_image(&id);
    let v = view.path();
    assert!(!v.join("a/gone").exists());
    assert_eq!(std::fs::read(v.join("a/kept")).unwrap(), b"y");
    assert!(
        !v.join("opq/old").exists(),
        "opaque dir hides the lower entries"
    );
    assert_eq!(std::fs::read(v.join("opq/new")).unwrap(), b"new");
    assert_eq!(std::fs::read(v.join("lib/x.so")).unwrap(), b"elf");
    let md = std::fs::metadata(v.join("meta")).unwrap();
    assert_eq!((md.uid(), md.gid()), (1234, 2345));
    assert_eq!(md.mode() & 0o7777, 0o4755, "setuid survives chown");
    assert_eq!(md.mtime(), 1_600_000_000);
    let mut buf = [0u8; 8];
    let n = rustix::fs::getxattr(v.join("meta"), "user.husk", &mut buf).unwrap();
    assert_eq!(&buf[..n], b"v1");
    assert_eq!(md.nlink(), 2, "hardlink shares the inode");
    assert_eq!(
        std::fs::metadata(v.join("meta-link")).unwrap().ino(),
        md.ino()
    );
    assert_eq!(
        std::fs::read_link(v.join("abs-link")).unwrap().to_str(),
        Some("/etc/passwd")
    );
    let dev = std::fs::symlink_metadata(v.join("dev-null")).unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_char_device(
        &dev.file_type()
    ));
    assert_eq!(dev.rdev(), rustix::fs::makedev(1, 3));
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(
        &std::fs::symlink_metadata(v.join("fifo"))
            .unwrap()
            .file_type()
    ));
    assert_eq!(
        std::fs::metadata(v.join("opq")).unwrap().mode() & 0o777,
        0o700
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn big_image_and_restart_persistence() {
    if !common::require_root() {
        return;
    }
    let reg = Registry::start();
    let push = Pusher::new(&reg);
    let img = big_image();
    let total: usize = img.layers.iter().map(|l| l.blob.len()).sum();
    assert!(
        total >= 100_000_000,
        "the big image is at least 100 MB ({total})"
    );
    assert_eq!(img.layers.len(), 5);
    push.image("big/image", "v1", &img, Format::Oci).await;
    let mut h = Husk::start().await;
    let r = format!("{}/big/image:v1", reg.host());
    let id = h.pull(&r).await.unwrap();
    let before = h.status(&id).await.unwrap();

    // kill -9 and restart: the same image, the same content, still usable.
    h.restart().await;
    let after = h.status(&r).await.unwrap();
    assert_eq!(before, after);
    let view = h.mount_image(&id);
    for i in 0..4u64 {
        let data = std::fs::read(view.path().join(format!("data/blob{i}"))).unwrap();
        assert_eq!(data.len(), 25 << 20);
        assert!(data == random_bytes(25 << 20, i), "layer {i} content");
    }
    drop(view);
    // Graceful stop removes the socket.
    let st = h.terminate();
    assert!(st.success(), "SIGTERM exits 0: {st:?}");
    assert!(!h.socket().exists(), "socket removed on shutdown");
}
