//! The kubelet's certificates on disk and in use: a PEM of a certificate
//! and its key at `<cert-dir>/kubelet-<kind>-<time>.pem` (`client` or
//! `server`), `kubelet-<kind>-current.pem` linking the newest (as the
//! kubelet keeps them), read back with its validity; and [`Identity`],
//! the certificate every new TLS connection presents (as a client to the
//! API server, or as the kubelet API's server), swapped in place when a
//! new one is issued.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// `kubelet-<kind>-current.pem`.
pub fn current(kind: &str) -> String {
    format!("kubelet-{kind}-current.pem")
}

/// A certificate chain with its key, and when it is valid.
#[derive(Debug, Clone)]
pub struct Pair {
    pub pem: String,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    pub subject: String,
}

fn at(secs: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs.max(0) as u64)
}

impl Pair {
    /// Parses a PEM holding the certificate (first) and its private key.
    pub fn parse(pem: &str) -> Result<Pair, String> {
        let der = CertificateDer::pem_slice_iter(pem.as_bytes())
            .next()
            .ok_or("no certificate in the PEM")?
            .map_err(|e| format!("certificate PEM: {e}"))?;
        PrivateKeyDer::from_pem_slice(pem.as_bytes()).map_err(|e| format!("key PEM: {e}"))?;
        let (_, cert) =
            x509_parser::parse_x509_certificate(&der).map_err(|e| format!("certificate: {e}"))?;
        let v = cert.validity();
        Ok(Pair {
            pem: pem.to_string(),
            not_before: at(v.not_before.timestamp()),
            not_after: at(v.not_after.timestamp()),
            subject: cert.subject().to_string(),
        })
    }

    pub fn valid_now(&self) -> bool {
        let now = SystemTime::now();
        self.not_before <= now && now < self.not_after
    }

    /// When to rotate: at `share` (0.7 to 0.9, jittered) of its life.
    pub fn rotate_at(&self, share: f64) -> SystemTime {
        let life = self
            .not_after
            .duration_since(self.not_before)
            .unwrap_or_default();
        self.not_before + life.mul_f64(share.clamp(0.0, 1.0))
    }

    fn certified_key(&self) -> Result<Arc<rustls::sign::CertifiedKey>, String> {
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(self.pem.as_bytes())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("certificate PEM: {e}"))?;
        let key = PrivateKeyDer::from_pem_slice(self.pem.as_bytes())
            .map_err(|e| format!("key PEM: {e}"))?;
        let provider = rustls::crypto::ring::default_provider();
        rustls::sign::CertifiedKey::from_der(chain, key, &provider)
            .map(Arc::new)
            .map_err(|e| format!("certificate and key: {e}"))
    }
}

/// The current pair of `kind` in `dir`, if any.
pub fn load_current(dir: &Path, kind: &str) -> Option<Pair> {
    let pem = std::fs::read_to_string(dir.join(current(kind))).ok()?;
    Pair::parse(&pem).ok()
}

/// Writes `pem` as a new pair of `kind` (0600) and points its current
/// link at it.
pub fn save(dir: &Path, kind: &str, pem: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir)?;
    let stamp = crate::kubelet::kit::defaults::now()
        .0
        .strftime("%Y-%m-%d-%H-%M-%S")
        .to_string();
    let file = dir.join(format!("kubelet-{kind}-{stamp}.pem"));
    let tmp = dir.join(format!(".kubelet-{kind}-{stamp}.pem.tmp"));
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        std::io::Write::write_all(&mut f, pem.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &file)?;
    let link_tmp = dir.join(format!(".kubelet-{kind}-current.tmp"));
    let _ = std::fs::remove_file(&link_tmp);
    std::os::unix::fs::symlink(file.file_name().unwrap_or_default(), &link_tmp)?;
    std::fs::rename(&link_tmp, dir.join(current(kind)))?;
    Ok(dir.join(current(kind)))
}

/// The client certificate new connections present.
#[derive(Debug)]
pub struct Identity {
    current: RwLock<(Pair, Arc<rustls::sign::CertifiedKey>)>,
    /// Bumped by every [`Identity::set`]: connections made under an
    /// older one are not to be reused.
    generation: std::sync::atomic::AtomicU64,
}

impl Identity {
    pub fn new(p: Pair) -> Result<Identity, String> {
        let k = p.certified_key()?;
        Ok(Identity {
            current: RwLock::new((p, k)),
            generation: std::sync::atomic::AtomicU64::new(0),
        })
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn pair(&self) -> Pair {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    fn key(&self) -> Arc<rustls::sign::CertifiedKey> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }

    pub fn set(&self, p: Pair) -> Result<(), String> {
        let k = p.certified_key()?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = (p, k);
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

impl rustls::client::ResolvesClientCert for Identity {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.key())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

impl rustls::server::ResolvesServerCert for Identity {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.key())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pem(end_day: u8) -> String {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:n1");
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2020, 1, end_day);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        format!("{}{}", cert.pem(), key.serialize_pem())
    }

    #[test]
    fn pairs_parse_save_and_rotate() {
        let p = Pair::parse(&pem(11)).unwrap();
        assert!(p.subject.contains("system:node:n1"));
        assert!(!p.valid_now(), "2020 is over");
        let life = p.not_after.duration_since(p.not_before).unwrap();
        assert_eq!(life, Duration::from_secs(10 * 86400));
        assert_eq!(p.rotate_at(0.8), p.not_before + life.mul_f64(0.8));
        let d = tempfile::tempdir().unwrap();
        save(d.path(), "client", &p.pem).unwrap();
        assert_eq!(load_current(d.path(), "client").unwrap().pem, p.pem);
        assert!(load_current(d.path(), "server").is_none());
        let id = Identity::new(p.clone()).unwrap();
        let q = Pair::parse(&pem(21)).unwrap();
        assert_eq!(id.generation(), 0);
        id.set(q.clone()).unwrap();
        assert_eq!(id.pair().not_after, q.not_after);
        assert_eq!(id.generation(), 1);
        assert!(Pair::parse("not a pem").is_err());
    }
}
