//! The certificate manager of `husk kubelet` against the stand-in API
//! server, the test acting as the controller-manager's approver and
//! signer: TLS bootstrap from a bootstrap token and rotation of the client
//! certificate, a kept certificate across a restart, an unreachable
//! bootstrap server refusing the start with nothing made, and the kubelet
//! API serving the certificate the cluster issues.
#![allow(clippy::unwrap_used)]

mod common;

use common::cluster::*;
use common::kubelet::tail;
use common::managers::*;
use common::require_root;
use husk::cgroup::Layout;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The cluster CA a test's controller-manager signs with.
fn test_ca() -> rcgen::CertifiedIssuer<'static, rcgen::KeyPair> {
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "test-cluster-ca");
    rcgen::CertifiedIssuer::self_signed(p, rcgen::KeyPair::generate().unwrap()).unwrap()
}

/// Approves and signs every CSR not yet issued with a certificate valid
/// for `secs` seconds, as the controller-manager's approver and signer
/// do; returns the CSRs signed (their objects as they were asked).
fn sign_pending(
    env: &Env,
    ca: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    secs: u64,
) -> Vec<Value> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut signed = Vec::new();
    for csr in env.api.s.list("certificatesigningrequests") {
        if csr["status"]["certificate"].is_string() {
            continue;
        }
        let req = b64
            .decode(csr["spec"]["request"].as_str().unwrap())
            .unwrap();
        let mut params =
            rcgen::CertificateSigningRequestParams::from_pem(&String::from_utf8(req).unwrap())
                .unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let epoch = rcgen::date_time_ymd(1970, 1, 1);
        params.params.not_before = epoch + (now - Duration::from_secs(5));
        params.params.not_after = epoch + (now + Duration::from_secs(secs));
        let cert = params.signed_by(ca).unwrap();
        let name = csr["metadata"]["name"].as_str().unwrap();
        env.api.s.patch(
            &format!("/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}"),
            json!({"status": {
                "conditions": [{"type": "Approved", "status": "True", "reason": "AutoApproved", "message": "signed by the test"}],
                "certificate": b64.encode(cert.pem())}}),
        );
        signed.push(csr);
    }
    signed
}

fn subject_of_csr(csr: &Value) -> String {
    use base64::Engine;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(csr["spec"]["request"].as_str().unwrap())
        .unwrap();
    let p =
        rcgen::CertificateSigningRequestParams::from_pem(&String::from_utf8(pem).unwrap()).unwrap();
    format!("{:?}", p.params.distinguished_name)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_joins_by_tls_bootstrap_and_rotates_its_certificate() {
    if !require_root() {
        return;
    }
    let mut env = env_bootstrap(vec!["--rotate-certificates".into()]).await;
    env.api
        .s
        .certificate_clients
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let ca = test_ca();
    let mut asked = Vec::new();
    wait_until("the bootstrap CSR", &env, 60, || {
        asked.extend(sign_pending(&env, &ca, 30));
        !asked.is_empty()
    })
    .await;
    let csr = &asked[0];
    assert_eq!(
        csr["spec"]["signerName"],
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert_eq!(
        csr["spec"]["usages"],
        json!(["digital signature", "client auth"])
    );
    let subject = subject_of_csr(csr);
    assert!(
        subject.contains(&format!("system:node:{}", env.k.node)),
        "{subject}"
    );
    assert!(subject.contains("system:nodes"), "{subject}");
    // The node joins on the issued certificate, through the written kubeconfig.
    env.wait(&env.node_path(), "the Node registered", 60, |_| true)
        .await;
    let conf = std::fs::read_to_string(env._kc.path().join("kubelet.conf")).unwrap();
    let current = env.k.root().join("pki/kubelet-client-current.pem");
    assert!(conf.contains(&current.display().to_string()), "{conf}");
    let first = std::fs::read_to_string(&current).unwrap();
    assert!(first.contains("BEGIN CERTIFICATE") && first.contains("PRIVATE KEY"));
    // A 30 s certificate is renewed 21 to 27 s into its life, by the node.
    let mut renewed = Vec::new();
    wait_until("the renewal CSR", &env, 60, || {
        renewed.extend(sign_pending(&env, &ca, 3600));
        !renewed.is_empty()
    })
    .await;
    assert!(subject_of_csr(&renewed[0]).contains(&format!("system:node:{}", env.k.node)));
    wait_until("the renewed certificate in use", &env, 30, || {
        std::fs::read_to_string(&current).is_ok_and(|p| p != first)
    })
    .await;
    // A restarted kubelet keeps the certificate it has: no new CSR.
    env.k.kill9();
    let before = env.api.s.list("certificatesigningrequests").len();
    env.k.spawn();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(env.api.s.list("certificatesigningrequests").len(), before);
    assert!(tail(&env.k.log(), 200).contains("certificate rotation scheduled"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bootstrap_that_cannot_reach_the_api_server_refuses_the_start() {
    if !require_root() {
        return;
    }
    let p = common::pod::setup(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let boot = dir.path().join("bootstrap.conf");
    let port = common::free_port();
    std::fs::write(
        &boot,
        format!("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'http://127.0.0.1:{port}'}}\nusers:\n- name: u\n  user: {{token: 'x'}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"),
    )
    .unwrap();
    let conf = dir.path().join("kubelet.conf");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_husk"))
        .args(["kubelet", "--runtime-endpoint", &p.h.endpoint()])
        .arg("--kubeconfig")
        .arg(&conf)
        .arg("--bootstrap-kubeconfig")
        .arg(&boot)
        .arg("--root")
        .arg(dir.path().join("root"))
        .args(["--cgroup-root", &format!("/{}", p.cgroup_parent)])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("TLS bootstrap") && err.contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );
    assert!(!conf.exists(), "a kubeconfig was written");
    assert!(
        !dir.path().join("root/pki").exists(),
        "certificates were kept"
    );
    for h in ["memory", "cpu", ""] {
        if let Some(d) = Layout::host().dir(h, &p.cgroup_parent) {
            assert!(!d.exists(), "left {}", d.display());
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kubelet_api_serves_the_certificate_the_cluster_issues() {
    if !require_root() {
        return;
    }
    let env = env_with(TOKEN, vec!["--rotate-server-certificates".into()]).await;
    let ca = test_ca();
    let port: u16 = env.k.args().windows(2).find(|w| w[0] == "--port").unwrap()[1]
        .parse()
        .unwrap();
    let mut asked = Vec::new();
    wait_until("the serving CSR", &env, 60, || {
        asked.extend(sign_pending(&env, &ca, 3600));
        !asked.is_empty()
    })
    .await;
    let csr = &asked[0];
    assert_eq!(csr["spec"]["signerName"], "kubernetes.io/kubelet-serving");
    assert_eq!(
        csr["spec"]["usages"],
        json!(["digital signature", "server auth"])
    );
    use base64::Engine;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(csr["spec"]["request"].as_str().unwrap())
        .unwrap();
    let p =
        rcgen::CertificateSigningRequestParams::from_pem(&String::from_utf8(pem).unwrap()).unwrap();
    let sans = format!("{:?}", p.params.subject_alt_names);
    assert!(
        sans.contains("127.0.0.1") && sans.contains(&env.k.node),
        "{sans}"
    );
    // A client that trusts only the cluster CA now gets through.
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    roots.add(ca.as_ref().der().clone()).unwrap();
    let cfg = tokio_rustls::rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        tokio_rustls::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let name = tokio_rustls::rustls::pki_types::ServerName::IpAddress(
            std::net::IpAddr::from([127, 0, 0, 1]).into(),
        );
        match connector.connect(name, tcp).await {
            Ok(_) => break,
            Err(e) => assert!(
                Instant::now() < deadline,
                "the issued certificate is not served: {e}\n{}",
                tail(&env.k.log(), 40)
            ),
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let current = env.k.root().join("pki/kubelet-server-current.pem");
    assert!(std::fs::read_to_string(current)
        .unwrap()
        .contains("BEGIN CERTIFICATE"));
}

type Seen = std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>;

/// A TLS front for the stand-in on `listener`: a server certificate for
/// 127.0.0.1 from `ca`, client certificates from `ca` optional (the
/// bootstrap token comes without one), TLS sessions resumable as a real
/// API server's are; each connection's client certificate (empty: none)
/// goes to `seen`.
fn tls_front(
    ca: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    listener: std::net::TcpListener,
    upstream: u16,
    seen: Seen,
) {
    use tokio_rustls::rustls;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, ca)
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.as_ref().der().clone()).unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        std::sync::Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()
    .unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(cfg));
    listener.set_nonblocking(true).unwrap();
    let l = tokio::net::TcpListener::from_std(listener).unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let peer = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .map(|c| c.to_vec())
                    .unwrap_or_default();
                seen.lock().unwrap().push(peer);
                let Ok(mut up) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
            });
        }
    });
}

fn first_cert_der(pem: &str) -> Vec<u8> {
    use tokio_rustls::rustls::pki_types::{pem::PemObject, CertificateDer};
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_certificate_is_what_new_connections_present() {
    if !require_root() {
        return;
    }
    use base64::Engine;
    let ca = std::sync::Arc::new(test_ca());
    let seen: Seen = Default::default();
    let (front_ca, front_seen) = (ca.clone(), seen.clone());
    let env = env_bootstrap_via(
        move |upstream| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            tls_front(&front_ca, l, upstream, front_seen);
            let ca_b64 = base64::engine::general_purpose::STANDARD.encode(front_ca.as_ref().pem());
            kubeconfig_text("https", port, TOKEN, &ca_b64)
        },
        vec!["--rotate-certificates".into()],
    )
    .await;
    env.api
        .s
        .certificate_clients
        .store(true, std::sync::atomic::Ordering::SeqCst);
    wait_until("the bootstrap CSR", &env, 60, || {
        !sign_pending(&env, &ca, 30).is_empty()
    })
    .await;
    let current = env.k.root().join("pki/kubelet-client-current.pem");
    env.wait(&env.node_path(), "the Node registered", 60, |_| true)
        .await;
    let first = first_cert_der(&std::fs::read_to_string(&current).unwrap());
    wait_until("the first certificate presented", &env, 30, || {
        seen.lock().unwrap().contains(&first)
    })
    .await;
    wait_until("the renewal CSR", &env, 60, || {
        !sign_pending(&env, &ca, 3600).is_empty()
    })
    .await;
    let mut second = Vec::new();
    wait_until("the renewed certificate saved", &env, 30, || {
        second = std::fs::read_to_string(&current)
            .map(|p| first_cert_der(&p))
            .unwrap_or_default();
        !second.is_empty() && second != first
    })
    .await;
    // Not a pooled connection, nor a resumed session: the API server
    // sees the new certificate.
    wait_until("the renewed certificate presented", &env, 30, || {
        seen.lock().unwrap().contains(&second)
    })
    .await;
}
