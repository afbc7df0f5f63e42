//! Registry access: htpasswd basic auth, the bearer-token flow, hosts.toml
//! mirrors and plain-HTTP hosts, concurrent pulls sharing one download, a
//! pull killed midway.
#![allow(clippy::unwrap_used)]

mod common;

use base64::Engine as _;
use common::images::*;
use common::registry::Registry;
use common::server::Husk;
use husk::api::cri::AuthConfig;

fn small() -> Image {
    Image::new(vec![Layer::new(&busybox_entries(), Compression::Gzip)])
}

#[tokio::test(flavor = "multi_thread")]
async fn htpasswd_basic_auth() {
    if !common::require_root() {
        return;
    }
    let reg = Registry::start_with(Some(("alice", "wonderland")));
    let img = small();
    Pusher::new(&reg)
        .image("private/app", "v1", &img, Format::Oci)
        .await;
    let h = Husk::start().await;
    let r = format!("{}/private/app:v1", reg.host());

    let e = h.pull(&r).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    let wrong = AuthConfig {
        username: "alice".into(),
        password: "nope".into(),
        ..Default::default()
    };
    assert_eq!(
        h.pull_auth(&r, Some(wrong)).await.unwrap_err().code(),
        tonic::Code::Unauthenticated
    );
    assert!(h.list().await.is_empty());

    let right = AuthConfig {
        username: "alice".into(),
        password: "wonderland".into(),
        ..Default::default()
    };
    assert_eq!(
        h.pull_auth(&r, Some(right)).await.unwrap(),
        img.config_digest()
    );
    h.remove(&r).await.unwrap();
    let auth = base64::engine::general_purpose::STANDARD.encode("alice:wonderland");
    let encoded = AuthConfig {
        auth,
        ..Default::default()
    };
    assert_eq!(
        h.pull_auth(&r, Some(encoded)).await.unwrap(),
        img.config_digest()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bearer_token_challenge_flow() {
    if !common::require_root() {
        return;
    }
    use common::token_auth::*;
    let reg = Registry::start();
    let img = small();
    Pusher::new(&reg)
        .image("tok/app", "v1", &img, Format::Oci)
        .await;
    let front = start(reg.port).await;
    let h = Husk::start().await;
    let r = format!("127.0.0.1:{}/tok/app:v1", front.port);

    let e = h.pull(&r).await.unwrap_err();
    assert_eq!(
        e.code(),
        tonic::Code::Unauthenticated,
        "anonymous is refused: {e:?}"
    );

    let basic = AuthConfig {
        username: USER.into(),
        password: PASS.into(),
        ..Default::default()
    };
    assert_eq!(
        h.pull_auth(&r, Some(basic)).await.unwrap(),
        img.config_digest()
    );
    h.remove(&r).await.unwrap();

    let identity = AuthConfig {
        identity_token: REFRESH.into(),
        ..Default::default()
    };
    assert_eq!(
        h.pull_auth(&r, Some(identity)).await.unwrap(),
        img.config_digest()
    );
    h.remove(&r).await.unwrap();

    let before = front
        .token_requests
        .load(std::sync::atomic::Ordering::SeqCst);
    let registry_token = AuthConfig {
        registry_token: TOKEN.into(),
        ..Default::default()
    };
    assert_eq!(
        h.pull_auth(&r, Some(registry_token)).await.unwrap(),
        img.config_digest()
    );
    assert_eq!(
        front
            .token_requests
            .load(std::sync::atomic::Ordering::SeqCst),
        before,
        "a registry token is used as is"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn hosts_toml_mirrors_and_plain_http_hosts() {
    if !common::require_root() {
        return;
    }
    let mirror = Registry::start();
    let upstream = Registry::start();
    let img = small();
    Pusher::new(&mirror)
        .image("team/app", "v1", &img, Format::Oci)
        .await;
    let only_upstream = Image::new(vec![Layer::new(
        &[Entry::File("u".into(), b"upstream".to_vec(), 0o644)],
        Compression::Gzip,
    )]);
    Pusher::new(&upstream)
        .image("team/other", "v1", &only_upstream, Format::Oci)
        .await;
    let h = Husk::start().await;
    let dead = common::free_port();

    // A made-up registry name served by plain-HTTP hosts: a dead mirror
    // first, then the real mirror, then the upstream.
    h.hosts_toml(
        "registry.example.test",
        &format!(
            "server = \"http://{}\"\n\n[host.\"http://127.0.0.1:{dead}\"]\n  capabilities = [\"pull\", \"resolve\"]\n\n[host.\"http://{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
            upstream.host(),
            mirror.host()
        ),
    );
    let id = h.pull("registry.example.test/team/app:v1").await.unwrap();
    assert_eq!(id, img.config_digest());
    assert!(
        mirror.blob_gets(&img.layers[0].digest()) == 1,
        "served by the mirror"
    );
    let mirror_log = std::fs::read_to_string(&mirror.log).unwrap();
    assert!(
        mirror_log.contains("ns=registry.example.test"),
        "mirror requests carry ?ns="
    );

    // Not on the mirror: falls through to the upstream server.
    let id = h.pull("registry.example.test/team/other:v1").await.unwrap();
    assert_eq!(id, only_upstream.config_digest());
    assert_eq!(upstream.blob_gets(&only_upstream.layers[0].digest()), 1);

    // A mirror without `resolve` is not asked for tags, only for digests.
    h.hosts_toml(
        "pull-only.example.test",
        &format!(
            "server = \"http://{}\"\n\n[host.\"http://{}\"]\n  capabilities = [\"pull\"]\n",
            upstream.host(),
            mirror.host()
        ),
    );
    let e = h
        .pull("pull-only.example.test/team/app:v1")
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        tonic::Code::NotFound,
        "the tag exists only on the pull-only mirror: {e:?}"
    );

    // A broken hosts.toml is reported, naming the file.
    h.hosts_toml("broken.example.test", "server = 42\n");
    let e = h.pull("broken.example.test/x:y").await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("hosts.toml"), "{}", e.message());
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_pulls_share_one_download() {
    if !common::require_root() {
        return;
    }
    let reg = Registry::start();
    let img = Image::new(vec![
        Layer::new(&busybox_entries(), Compression::Gzip),
        Layer::new(
            &[Entry::File("a".into(), random_bytes(4 << 20, 7), 0o644)],
            Compression::Gzip,
        ),
        Layer::new(
            &[Entry::File("b".into(), random_bytes(4 << 20, 8), 0o644)],
            Compression::Zstd,
        ),
    ]);
    Pusher::new(&reg)
        .image("conc/app", "v1", &img, Format::Oci)
        .await;
    let h = Husk::start().await;
    let r = format!("{}/conc/app:v1", reg.host());
    let pulls: Vec<_> = (0..6).map(|_| h.pull(&r)).collect();
    for res in futures::future::join_all(pulls).await {
        assert_eq!(res.unwrap(), img.config_digest());
    }
    for l in &img.layers {
        assert_eq!(
            reg.blob_gets(&l.digest()),
            1,
            "layer {} fetched once",
            l.digest()
        );
    }
    assert_eq!(
        reg.blob_gets(&img.config_digest()),
        1,
        "config fetched once"
    );
    assert_eq!(h.list().await.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn pull_killed_midway_leaves_no_image_and_completes_later() {
    if !common::require_root() {
        return;
    }
    let reg = Registry::start();
    let img = Image::new(vec![
        Layer::new(&busybox_entries(), Compression::Gzip),
        Layer::new(
            &[Entry::File("big".into(), random_bytes(12 << 20, 3), 0o644)],
            Compression::Gzip,
        ),
        Layer::new(
            &[Entry::File("big2".into(), random_bytes(12 << 20, 4), 0o644)],
            Compression::Gzip,
        ),
    ]);
    Pusher::new(&reg)
        .image("slow/app", "v1", &img, Format::Oci)
        .await;
    // About 8 MB/s: the pull takes several seconds.
    let (port, _proxy) = common::throttle_proxy(reg.port, 8 << 20).await;
    let mut h = Husk::start().await;
    let r = format!("127.0.0.1:{port}/slow/app:v1");

    let pulling = {
        let ep = h.endpoint();
        let r = r.clone();
        tokio::spawn(async move {
            let mut c = husk::api::cri::image_service_client::ImageServiceClient::new(
                husk::api::connect(&ep).await.unwrap(),
            );
            c.pull_image(husk::api::cri::PullImageRequest {
                image: Some(husk::api::cri::ImageSpec {
                    image: r,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
        })
    };
    // Wait until some layer bytes have arrived, then kill -9.
    let mut admin = husk::api::admin::admin_client::AdminClient::new(h.channel().await);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let pulls = admin
            .list_pulls(husk::api::admin::ListPullsRequest {})
            .await
            .unwrap()
            .into_inner()
            .pulls;
        if let Some(p) = pulls.first() {
            if p.bytes_done > (4 << 20) {
                assert!(p.bytes_done < p.bytes_total, "still mid-pull");
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "pull never progressed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    h.kill9();
    assert!(
        pulling.await.unwrap().is_err(),
        "the killed pull did not succeed"
    );

    h.spawn().await;
    assert!(h.list().await.is_empty(), "no partial image after restart");
    assert!(
        common::mounts_below(&h.root()).is_empty(),
        "no apply mounts left"
    );
    assert_eq!(
        common::count_files(&h.root().join("content/ingest")),
        0,
        "no ingest files left"
    );
    let id = h.pull(&r).await.unwrap();
    assert_eq!(id, img.config_digest());
    let view = h.mount_image(&id);
    assert_eq!(
        std::fs::read(view.path().join("big2")).unwrap(),
        random_bytes(12 << 20, 4)
    );
}
