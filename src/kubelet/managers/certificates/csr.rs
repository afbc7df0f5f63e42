//! A certificate through the certificates API, as the kubelet asks for
//! one: a new ECDSA P-256 key and a CSR for `CN=system:node:NODE,
//! O=system:nodes`, created as a CertificateSigningRequest named
//! `node-csr-…`, then read until it is issued (status.certificate, once
//! Approved), denied or failed. The client certificate is signed by
//! `kubernetes.io/kube-apiserver-client-kubelet` for `client auth`; the
//! serving one by `kubernetes.io/kubelet-serving` for `server auth`, with
//! the node's name and addresses as its subject alternative names.

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use std::time::{Duration, Instant};

pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// Which certificate is asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Client,
    /// With its subject alternative names (DNS names and IPs).
    Serving(Vec<String>),
}

impl Kind {
    /// The file name part (`kubelet-<name>-current.pem`).
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Client => "client",
            Kind::Serving(_) => "server",
        }
    }

    fn signer(&self) -> &'static str {
        match self {
            Kind::Client => CLIENT_SIGNER,
            Kind::Serving(_) => SERVING_SIGNER,
        }
    }

    fn usage(&self) -> &'static str {
        match self {
            Kind::Client => "client auth",
            Kind::Serving(_) => "server auth",
        }
    }
}

/// A new key and the PEM of a CSR for the node's identity.
pub fn request(node: &str, kind: &Kind) -> Result<(rcgen::KeyPair, String), String> {
    let key = rcgen::KeyPair::generate().map_err(|e| format!("generate a key: {e}"))?;
    let sans = match kind {
        Kind::Client => Vec::new(),
        Kind::Serving(s) => s.clone(),
    };
    let mut p = rcgen::CertificateParams::new(sans).map_err(|e| format!("CSR: {e}"))?;
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    p.distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    let csr = p
        .serialize_request(&key)
        .and_then(|r| r.pem())
        .map_err(|e| format!("CSR: {e}"))?;
    Ok((key, csr))
}

/// Creates the CSR and waits up to `timeout` for its certificate;
/// returns the certificate followed by the key, one PEM.
pub async fn obtain(
    client: kube::Client,
    node: &str,
    kind: &Kind,
    timeout: Duration,
) -> Result<String, String> {
    let (key, csr) = request(node, kind)?;
    let api: Api<CertificateSigningRequest> = Api::all(client);
    let obj = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: Some(format!("node-csr-{:016x}", rand::random::<u64>())),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(csr.into_bytes()),
            signer_name: kind.signer().into(),
            usages: Some(vec!["digital signature".into(), kind.usage().into()]),
            ..Default::default()
        },
        status: None,
    };
    let made = api
        .create(&PostParams::default(), &obj)
        .await
        .map_err(|e| {
            format!(
                "create a CertificateSigningRequest: {}",
                crate::kubelet::kit::api_error::describe(&e)
            )
        })?;
    let name = made.metadata.name.unwrap_or_default();
    tracing::info!(csr = %name, node, "certificate signing request created; waiting for its certificate");
    let deadline = Instant::now() + timeout;
    loop {
        match api.get_opt(&name).await {
            Ok(Some(c)) => {
                let st = c.status.unwrap_or_default();
                for cond in st.conditions.iter().flatten() {
                    if cond.type_ == "Denied" || cond.type_ == "Failed" {
                        return Err(format!(
                            "CertificateSigningRequest {name} {}: {}",
                            cond.type_.to_lowercase(),
                            cond.message
                                .clone()
                                .or(cond.reason.clone())
                                .unwrap_or_default()
                        ));
                    }
                }
                if let Some(cert) = st.certificate.filter(|c| !c.0.is_empty()) {
                    let cert = String::from_utf8(cert.0).map_err(|_| {
                        format!("CertificateSigningRequest {name}: the certificate is not PEM")
                    })?;
                    return Ok(format!("{}{}", cert, key.serialize_pem()));
                }
            }
            Ok(None) => return Err(format!("CertificateSigningRequest {name} was deleted")),
            Err(e) => {
                tracing::debug!(csr = %name, error = %crate::kubelet::kit::api_error::describe(&e), "reading the CSR failed")
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "CertificateSigningRequest {name} was not issued within {}s (is it approved, and does the controller-manager sign {}?)",
                timeout.as_secs(),
                kind.signer()
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use x509_parser::prelude::FromDer;

    #[test]
    fn the_csr_names_the_node() {
        let (_key, pem) = request("n1", &Kind::Client).unwrap();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----"));
        let der = tokio_rustls::rustls::pki_types::pem::PemObject::from_pem_slice(pem.as_bytes())
            .map(
                |d: tokio_rustls::rustls::pki_types::CertificateSigningRequestDer| {
                    d.as_ref().to_vec()
                },
            )
            .unwrap();
        let (_, csr) =
            x509_parser::certification_request::X509CertificationRequest::from_der(&der).unwrap();
        let subject = csr.certification_request_info.subject.to_string();
        assert!(subject.contains("CN=system:node:n1"), "{subject}");
        assert!(subject.contains("O=system:nodes"), "{subject}");
    }
}
