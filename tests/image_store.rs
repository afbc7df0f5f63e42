//! The store's other operations: RemoveImage semantics and garbage
//! collection, ImageFsInfo, and importing archives written by skopeo
//! (docker-archive and oci-archive) through `husk images import`.
#![allow(clippy::unwrap_used)]

mod common;

use common::images::*;
use common::registry::Registry;
use common::server::Husk;
use std::process::Command;

#[tokio::test(flavor = "multi_thread")]
async fn remove_by_tag_id_and_digest_then_collect_content() {
    if !common::require_root() {
        return;
    }
    let reg = Registry::start();
    let push = Pusher::new(&reg);
    let shared = Layer::new(&busybox_entries(), Compression::Gzip);
    let a = Image::new(vec![
        shared.clone(),
        Layer::new(
            &[Entry::File("a".into(), b"a".to_vec(), 0o644)],
            Compression::Gzip,
        ),
    ]);
    let b = Image::new(vec![
        shared.clone(),
        Layer::new(
            &[Entry::File("b".into(), b"b".to_vec(), 0o644)],
            Compression::Gzip,
        ),
    ]);
    let da = push.image("rm/a", "one", &a, Format::Oci).await;
    push.image("rm/a", "two", &a, Format::Oci).await;
    push.image("rm/b", "v1", &b, Format::Oci).await;
    let h = Husk::start().await;
    let host = reg.host();
    let ida = h.pull(&format!("{host}/rm/a:one")).await.unwrap();
    h.pull(&format!("{host}/rm/a:two")).await.unwrap();
    let idb = h.pull(&format!("{host}/rm/b:v1")).await.unwrap();
    // The shared base layer is one snapshot.
    assert_eq!(h.layer_dirs(&ida)[0], h.layer_dirs(&idb)[0]);
    assert_eq!(
        std::fs::read_dir(h.root().join("snapshots/chains"))
            .unwrap()
            .count(),
        3
    );

    // One of two tags names the image: it goes with all its tags and
    // digests (as containerd removes it); its own layer is collected, the
    // shared one stays for b.
    let st = h.status(&ida).await.unwrap();
    assert_eq!(st.repo_tags.len(), 2);
    h.remove(&format!("{host}/rm/a:one")).await.unwrap();
    assert!(h.status(&ida).await.is_none());
    assert!(h.status(&format!("{host}/rm/a:two")).await.is_none());
    assert!(h.status(&format!("{host}/rm/a@{da}")).await.is_none());
    // By digest, once it is gone: not an error.
    h.remove(&format!("{host}/rm/a@{da}")).await.unwrap();
    assert_eq!(
        std::fs::read_dir(h.root().join("snapshots/chains"))
            .unwrap()
            .count(),
        2
    );
    assert!(h.layer_dirs(&idb).iter().all(|d| d.is_dir()));
    assert!(!h
        .root()
        .join("content/blobs/sha256")
        .join(a.layers[1].digest().trim_start_matches("sha256:"))
        .exists());
    assert!(h
        .root()
        .join("content/blobs/sha256")
        .join(shared.digest().trim_start_matches("sha256:"))
        .exists());

    // A short ID, as crictl prints it, names the image too.
    let short = &idb.trim_start_matches("sha256:")[..13];
    assert_eq!(h.status(short).await.unwrap().id, idb);

    // By ID, twice (idempotent): nothing is left.
    h.remove(&idb).await.unwrap();
    h.remove(&idb).await.unwrap();
    assert!(h.list().await.is_empty());
    assert_eq!(common::count_files(&h.root().join("content/blobs")), 0);
    assert_eq!(common::count_files(&h.root().join("snapshots")), 0);
    let left: Vec<_> = std::fs::read_dir(h.root().join("snapshots"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("chains")]);
}

#[tokio::test(flavor = "multi_thread")]
async fn image_fs_info_counts_the_store() {
    if !common::require_root() {
        return;
    }
    let reg = Registry::start();
    let img = Image::new(vec![Layer::new(
        &[Entry::File("f".into(), random_bytes(3 << 20, 1), 0o644)],
        Compression::Gzip,
    )]);
    Pusher::new(&reg)
        .image("fs/info", "v1", &img, Format::Oci)
        .await;
    let h = Husk::start().await;
    let fs = |r: husk::api::cri::ImageFsInfoResponse| r.image_filesystems[0].clone();
    let empty = fs(h
        .images()
        .await
        .image_fs_info(husk::api::cri::ImageFsInfoRequest {})
        .await
        .unwrap()
        .into_inner());
    assert_eq!(
        empty.fs_id.as_ref().unwrap().mountpoint,
        h.root().join("snapshots").display().to_string()
    );
    assert!(
        empty.timestamp > 1_600_000_000_000_000_000,
        "timestamp in ns"
    );
    h.pull(&format!("{}/fs/info:v1", reg.host())).await.unwrap();
    // The usage is cached for a few seconds; wait it out.
    tokio::time::sleep(std::time::Duration::from_millis(5100)).await;
    let full = fs(h
        .images()
        .await
        .image_fs_info(husk::api::cri::ImageFsInfoRequest {})
        .await
        .unwrap()
        .into_inner());
    let grew = full.used_bytes.unwrap().value - empty.used_bytes.unwrap().value;
    assert!(grew >= 6 << 20, "blob + unpacked file counted: grew {grew}");
    assert!(full.inodes_used.unwrap().value > empty.inodes_used.unwrap().value);
}

fn skopeo(args: &[&str]) {
    let out = Command::new("skopeo")
        .args(args)
        .output()
        .expect("skopeo must be installed");
    assert!(
        out.status.success(),
        "skopeo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn husk_cli(h: &Husk, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_husk"))
        .arg("images")
        .arg("--endpoint")
        .arg(h.endpoint())
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn import_docker_and_oci_archives_written_by_skopeo() {
    if !common::require_root() {
        return;
    }
    let reg = Registry::start();
    let img = Image::new(vec![
        Layer::new(&busybox_entries(), Compression::Gzip),
        Layer::new(
            &[Entry::File("imported".into(), b"yes".to_vec(), 0o644)],
            Compression::Gzip,
        ),
    ]);
    Pusher::new(&reg)
        .image("air/gapped", "v1", &img, Format::Docker)
        .await;
    let work = tempfile::tempdir().unwrap();
    let src = format!("docker://{}/air/gapped:v1", reg.host());
    let docker_tar = work.path().join("docker.tar");
    let oci_tar = work.path().join("oci.tar");
    skopeo(&[
        "copy",
        "--src-tls-verify=false",
        &src,
        &format!(
            "docker-archive:{}:example.test/air/docker:v1",
            docker_tar.display()
        ),
    ]);
    skopeo(&[
        "copy",
        "--src-tls-verify=false",
        &src,
        &format!("oci-archive:{}:v2", oci_tar.display()),
    ]);
    drop(reg); // air-gapped from here on

    let h = Husk::start().await;
    let out = husk_cli(&h, &["import", docker_tar.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let st = h
        .status("example.test/air/docker:v1")
        .await
        .expect("docker archive imported with its tag");
    let view = h.mount_image(&st.id);
    assert_eq!(std::fs::read(view.path().join("imported")).unwrap(), b"yes");
    drop(view);

    // An OCI archive names only a tag: --tag gives the repository.
    let out = husk_cli(&h, &["import", oci_tar.to_str().unwrap()]);
    assert!(!out.status.success(), "a bare tag needs --tag");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tag"));
    let out = husk_cli(
        &h,
        &[
            "import",
            oci_tar.to_str().unwrap(),
            "--tag",
            "example.test/air/oci",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let st2 = h
        .status("example.test/air/oci:v2")
        .await
        .expect("oci archive imported");
    let view = h.mount_image(&st2.id);
    assert_eq!(std::fs::read(view.path().join("imported")).unwrap(), b"yes");
    drop(view);

    // Garbage is refused clearly.
    let junk = work.path().join("junk.tar");
    std::fs::write(&junk, b"not a tar at all").unwrap();
    let out = husk_cli(&h, &["import", junk.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tar"), "{err}");
    assert_eq!(
        common::count_files(&h.root().join("content/ingest")),
        0,
        "scratch cleaned"
    );

    // The CLI lists and removes.
    let ls = husk_cli(&h, &["ls"]);
    let text = String::from_utf8_lossy(&ls.stdout);
    assert!(
        text.contains("example.test/air/docker:v1") && text.contains("example.test/air/oci:v2"),
        "{text}"
    );
    assert!(husk_cli(&h, &["rm", "example.test/air/docker:v1"])
        .status
        .success());
    assert!(husk_cli(&h, &["rm", "example.test/air/oci:v2"])
        .status
        .success());
    assert!(h.list().await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn cli_pull_and_the_pinned_sandbox_image() {
    if !common::require_root() {
        return;
    }
    let reg = Registry::start();
    let push = Pusher::new(&reg);
    let pause = Image::new(vec![Layer::new(&busybox_entries(), Compression::Gzip)]);
    let other = Image::new(vec![Layer::new(
        &[Entry::File("o".into(), b"o".to_vec(), 0o644)],
        Compression::Gzip,
    )]);
    push.image("k8s/pause", "3.10", &pause, Format::Oci).await;
    push.image("app/other", "v1", &other, Format::Oci).await;
    let sandbox = format!("{}/k8s/pause:3.10", reg.host());
    let h = Husk::start_with(vec!["--sandbox-image".into(), sandbox.clone()]).await;

    let out = husk_cli(&h, &["pull", &sandbox]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(&pause.config_digest()));
    let out = husk_cli(&h, &["pull", &format!("{}/app/other:v1", reg.host())]);
    assert!(out.status.success());
    assert!(
        h.status(&sandbox).await.unwrap().pinned,
        "the sandbox image is pinned"
    );
    assert!(!h.status(&other.config_digest()).await.unwrap().pinned);
    let out = husk_cli(&h, &["pull", &format!("{}/app/missing:v1", reg.host())]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found"));
}
