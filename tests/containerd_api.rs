//! What husk serve answers at the address it gives shim v2 runtimes as
//! containerd's (`<state>/shim-v2.sock`): the Containers, Images, Content
//! and Leases calls runwasi's shims make, from husk's own records and
//! content store; and the pull of an OCI WebAssembly image, whose module
//! layer is kept as a blob rather than unpacked.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::*;
use common::images::{push_wasm_oci, random_bytes};
use common::pod::{self, leftovers, run};
use husk::api::containerd_services::containers::{
    containers_client::ContainersClient, GetContainerRequest,
};
use husk::api::containerd_services::content::{
    content_client::ContentClient, DeleteContentRequest, Info, InfoRequest, ReadContentRequest,
    UpdateRequest, WriteAction, WriteContentRequest, WriteContentResponse,
};
use husk::api::containerd_services::images::{images_client::ImagesClient, GetImageRequest};
use husk::api::containerd_services::leases::{
    leases_client::LeasesClient, CreateRequest, DeleteRequest,
};
use husk::api::cri::*;
use tonic::transport::Channel;
use tonic::Code;

async fn channel(p: &pod::Pod) -> Channel {
    let sock = p.h.dir.path().join("run").join("shim-v2.sock");
    husk::api::connect(&format!("unix://{}", sock.display()))
        .await
        .unwrap()
}

fn sha256(data: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(data)))
}

async fn read_all(c: &mut ContentClient<Channel>, digest: &str, offset: i64, size: i64) -> Vec<u8> {
    let mut s = c
        .read(ReadContentRequest {
            digest: digest.into(),
            offset,
            size,
        })
        .await
        .unwrap()
        .into_inner();
    let mut out = Vec::new();
    while let Some(m) = s.message().await.unwrap() {
        assert_eq!(m.offset as usize, offset as usize + out.len());
        out.extend(m.data);
    }
    out
}

/// A Write stream of `msgs`: its answers, or the status it ended with.
async fn write(
    c: &mut ContentClient<Channel>,
    msgs: Vec<WriteContentRequest>,
) -> Result<Vec<WriteContentResponse>, tonic::Status> {
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    for m in msgs {
        tx.send(m).await.unwrap();
    }
    drop(tx);
    let mut s = c
        .write(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    let mut out = Vec::new();
    while let Some(m) = s.message().await? {
        out.push(m);
    }
    Ok(out)
}

fn req(action: WriteAction, offset: i64, data: &[u8]) -> WriteContentRequest {
    WriteContentRequest {
        action: action as i32,
        r#ref: "precompile-test".into(),
        offset,
        data: data.to_vec(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn shims_find_containers_images_and_content_and_store_what_they_compiled() {
    if !common::require_root() {
        return;
    }
    let p = pod::setup(vec![]).await;
    let app = app_image(&p).await;
    let pc = pod_config(&p, "capi");
    let pod_id = run(&p.h, pc.clone()).await.unwrap();
    let id = create_start(&p.h, &pod_id, &pc, shell(&app, "app", "sleep 3600", &[])).await;
    let ch = channel(&p).await;

    // Containers: a container's image by id, a sandbox's pause image.
    let mut containers = ContainersClient::new(ch.clone());
    let c = containers
        .get(GetContainerRequest { id: id.clone() })
        .await
        .unwrap()
        .into_inner()
        .container
        .unwrap();
    let status = container_status(&p.h, &id).await;
    assert_eq!(c.image, status.image_id);
    assert_eq!(c.sandbox, pod_id);
    let sb = containers
        .get(GetContainerRequest { id: pod_id.clone() })
        .await
        .unwrap()
        .into_inner()
        .container
        .unwrap();
    assert!(sb.image.ends_with("/k8s/pause:test"), "{sb:?}");
    let e = containers
        .get(GetContainerRequest { id: "nope".into() })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);

    // Images: the manifest's descriptor; Content: its bytes.
    let mut images = ImagesClient::new(ch.clone());
    let img = images
        .get(GetImageRequest { name: c.image })
        .await
        .unwrap()
        .into_inner()
        .image
        .unwrap();
    let target = img.target.unwrap();
    assert_eq!(
        target.media_type,
        "application/vnd.oci.image.manifest.v1+json"
    );
    let mut content = ContentClient::new(ch.clone());
    let manifest = read_all(&mut content, &target.digest, 0, 0).await;
    assert_eq!(manifest.len() as i64, target.size);
    assert_eq!(sha256(&manifest), target.digest);
    let e = images
        .get(GetImageRequest {
            name: "nowhere/nothing:1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);

    // An OCI WebAssembly image: its module layer is kept, not unpacked,
    // and read back whole or in part.
    let module = random_bytes(3 << 20, 7);
    let (layer, manifest_digest) = push_wasm_oci(&p.reg, "wasm/oci", "v1", &module).await;
    let wasm = format!("{}/wasm/oci:v1", p.reg.host());
    p.h.pull(&wasm).await.unwrap();
    let w = images
        .get(GetImageRequest { name: wasm.clone() })
        .await
        .unwrap()
        .into_inner()
        .image
        .unwrap();
    assert_eq!(w.target.unwrap().digest, manifest_digest);
    assert_eq!(read_all(&mut content, &layer, 0, 0).await, module);
    assert_eq!(
        read_all(&mut content, &layer, (1 << 20) + 5, 10).await,
        module[(1 << 20) + 5..(1 << 20) + 15]
    );
    let info = content
        .info(InfoRequest {
            digest: layer.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .info
        .unwrap();
    assert_eq!(info.size, module.len() as i64);
    let e = content
        .read(ReadContentRequest {
            digest: layer.clone(),
            offset: module.len() as i64 + 1,
            size: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange);

    // A shim stores what it compiled: Stat, Writes, a Commit with labels
    // (under a lease), then labels the layer with it.
    let mut leases = LeasesClient::new(ch.clone());
    let lease = leases
        .create(CreateRequest {
            id: "precompile-test".into(),
            labels: [("containerd.io/gc.expire".into(), "soon".into())].into(),
        })
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    assert_eq!(lease.id, "precompile-test");
    let compiled = random_bytes(300_000, 11);
    let digest = sha256(&compiled);
    let stat = WriteContentRequest {
        expected: digest.clone(),
        ..req(WriteAction::Stat, 0, b"")
    };
    let commit = WriteContentRequest {
        total: compiled.len() as i64,
        expected: digest.clone(),
        labels: [("runwasi.io/precompiled".into(), "x".into())].into(),
        ..req(WriteAction::Commit, compiled.len() as i64, b"")
    };
    let answers = write(
        &mut content,
        vec![
            stat.clone(),
            req(WriteAction::Write, 0, &compiled[..100_000]),
            req(WriteAction::Write, 100_000, &compiled[100_000..]),
            commit.clone(),
        ],
    )
    .await
    .unwrap();
    assert_eq!(
        answers.iter().map(|a| a.offset).collect::<Vec<_>>(),
        vec![0, 100_000, 300_000, 300_000]
    );
    let last = answers.last().unwrap();
    assert_eq!(
        (last.action, &last.digest),
        (WriteAction::Commit as i32, &digest)
    );
    assert_eq!(read_all(&mut content, &digest, 0, 0).await, compiled);
    let stored = content
        .info(InfoRequest {
            digest: digest.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .info
        .unwrap();
    assert_eq!(stored.labels["runwasi.io/precompiled"], "x");
    // Written again: AlreadyExists, as runwasi expects.
    let e = write(&mut content, vec![stat]).await.unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists);
    // A commit whose bytes are not the digest expected, or not the size;
    // a digest that is not one.
    let other = sha256(b"other");
    let e = write(
        &mut content,
        vec![
            req(WriteAction::Write, 0, b"not other"),
            WriteContentRequest {
                expected: other.clone(),
                ..req(WriteAction::Commit, 9, b"")
            },
        ],
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    let e = write(
        &mut content,
        vec![WriteContentRequest {
            total: 10,
            ..req(WriteAction::Commit, 0, b"short")
        }],
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    let e = write(
        &mut content,
        vec![req(WriteAction::Write, 5, b"past the end")],
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange);
    let e = content
        .info(InfoRequest {
            digest: "sha256:../../etc".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = content
        .info(InfoRequest { digest: other })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    // The layer labelled with what was compiled for it; a label removed.
    let labelled = content
        .update(UpdateRequest {
            info: Some(Info {
                digest: layer.clone(),
                labels: [
                    ("runwasi.io/precompiled/wasmtime/1".into(), digest.clone()),
                    ("keep".into(), "1".into()),
                ]
                .into(),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["labels".into()],
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .info
        .unwrap();
    assert_eq!(labelled.labels.len(), 2);
    let one = content
        .update(UpdateRequest {
            info: Some(Info {
                digest: layer.clone(),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["labels.keep".into()],
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .info
        .unwrap();
    assert_eq!(
        one.labels.keys().collect::<Vec<_>>(),
        vec!["runwasi.io/precompiled/wasmtime/1"]
    );
    let e = content
        .delete(DeleteContentRequest {
            digest: digest.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    leases
        .delete(DeleteRequest {
            id: lease.id,
            sync: false,
        })
        .await
        .unwrap();

    // The WebAssembly image's rootfs has no filesystem layer: the image is
    // listed, removed, and its blobs go with it.
    let mut imgs = p.h.images().await;
    let st = imgs
        .image_status(ImageStatusRequest {
            image: Some(ImageSpec {
                image: wasm.clone(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .image
        .unwrap();
    assert!(st.size >= module.len() as u64, "{st:?}");
    imgs.remove_image(RemoveImageRequest {
        image: Some(ImageSpec {
            image: wasm,
            ..Default::default()
        }),
    })
    .await
    .unwrap();

    stop_remove_pod(&p.h, &pod_id).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
