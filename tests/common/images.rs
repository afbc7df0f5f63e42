//! Test images: layers written entry by entry (malicious ones included),
//! images with OCI or Docker manifests and indexes, pushed to a registry
//! over the distribution API.

use husk::image::content::sha256_digest;
use std::io::Write;

#[derive(Clone, Debug)]
pub enum Entry {
    Dir(String, u32),
    File(String, Vec<u8>, u32),
    /// path, data, mode, uid, gid, mtime, xattrs
    FileFull(String, Vec<u8>, u32, u64, u64, u64, Vec<(String, Vec<u8>)>),
    Symlink(String, String),
    Hardlink(String, String),
    Char(String, u32, u32),
    Fifo(String),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

/// An uncompressed tar of `entries`, names written raw (so `../x` and
/// `/abs` survive as a malicious tool would write them).
pub fn tar(entries: &[Entry]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mtime(1_700_000_000);
        h.set_uid(0);
        h.set_gid(0);
        let (name, link): (&str, Option<&str>) = match e {
            Entry::Dir(p, m) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(*m);
                h.set_size(0);
                (p, None)
            }
            Entry::File(p, d, m) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(*m);
                h.set_size(d.len() as u64);
                (p, None)
            }
            Entry::FileFull(p, d, m, uid, gid, mtime, xattrs) => {
                if !xattrs.is_empty() {
                    b.append_pax_extensions(
                        xattrs
                            .iter()
                            .map(|(k, v)| (format!("SCHILY.xattr.{k}"), v.as_slice()))
                            .collect::<Vec<_>>()
                            .iter()
                            .map(|(k, v)| (k.as_str(), *v)),
                    )
                    .unwrap();
                }
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(*m);
                h.set_uid(*uid);
                h.set_gid(*gid);
                h.set_mtime(*mtime);
                h.set_size(d.len() as u64);
                (p, None)
            }
            Entry::Symlink(p, t) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                (p, Some(t))
            }
            Entry::Hardlink(p, t) => {
                h.set_entry_type(tar::EntryType::Link);
                h.set_mode(0o644);
                h.set_size(0);
                (p, Some(t))
            }
            Entry::Char(p, maj, min) => {
                h.set_entry_type(tar::EntryType::Char);
                h.set_mode(0o666);
                h.set_size(0);
                h.set_device_major(*maj).unwrap();
                h.set_device_minor(*min).unwrap();
                (p, None)
            }
            Entry::Fifo(p) => {
                h.set_entry_type(tar::EntryType::Fifo);
                h.set_mode(0o644);
                h.set_size(0);
                (p, None)
            }
        };
        assert!(name.len() < 100, "test entry names must fit a ustar header");
        let old = h.as_old_mut();
        old.name = [0; 100];
        old.name[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(l) = link {
            old.linkname = [0; 100];
            old.linkname[..l.len()].copy_from_slice(l.as_bytes());
        }
        h.set_cksum();
        let data: &[u8] = match e {
            Entry::File(_, d, _) | Entry::FileFull(_, d, ..) => d,
            _ => &[],
        };
        b.append(&h, data).unwrap();
    }
    b.into_inner().unwrap()
}

pub fn compress(raw: &[u8], c: Compression) -> Vec<u8> {
    match c {
        Compression::None => raw.to_vec(),
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(raw).unwrap();
            e.finish().unwrap()
        }
        Compression::Zstd => zstd::encode_all(raw, 1).unwrap(),
    }
}

/// A layer: the blob as pushed, and its diff ID.
#[derive(Clone)]
pub struct Layer {
    pub blob: Vec<u8>,
    pub diff_id: String,
    pub compression: Compression,
}

impl Layer {
    pub fn new(entries: &[Entry], c: Compression) -> Layer {
        let raw = tar(entries);
        Layer {
            diff_id: sha256_digest(&raw),
            blob: compress(&raw, c),
            compression: c,
        }
    }

    pub fn digest(&self) -> String {
        sha256_digest(&self.blob)
    }
}

/// busybox-static plus applet links and minimal /etc files.
pub fn busybox_entries() -> Vec<Entry> {
    let bb =
        std::fs::read("/bin/busybox").expect("busybox-static must be installed (/bin/busybox)");
    let mut v = vec![
        Entry::Dir("bin/".into(), 0o755),
        Entry::Dir("etc/".into(), 0o755),
        Entry::Dir("tmp/".into(), 0o1777),
        Entry::File("bin/busybox".into(), bb, 0o755),
        Entry::File(
            "etc/passwd".into(),
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n".to_vec(),
            0o644,
        ),
        Entry::File(
            "etc/group".into(),
            b"root:x:0:\nnogroup:x:65534:\n".to_vec(),
            0o644,
        ),
    ];
    for applet in [
        "sh", "ls", "cat", "echo", "sleep", "true", "false", "env", "id", "wget", "httpd", "nc",
        "ip", "hostname", "mount", "ps", "kill", "head", "yes", "dd", "timeout", "touch", "mkdir",
        "rm", "grep", "sed", "chmod",
    ] {
        v.push(Entry::Symlink(format!("bin/{applet}"), "busybox".into()));
    }
    v
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Format {
    Oci,
    Docker,
}

/// An image ready to push.
pub struct Image {
    pub layers: Vec<Layer>,
    pub config: Vec<u8>,
    pub arch: String,
}

impl Image {
    pub fn new(layers: Vec<Layer>) -> Image {
        Image::with_config(
            layers,
            "amd64",
            serde_json::json!({"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"]}),
        )
    }

    pub fn with_config(layers: Vec<Layer>, arch: &str, config: serde_json::Value) -> Image {
        let cfg = serde_json::json!({
            "architecture": arch,
            "os": "linux",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>()},
        });
        Image {
            layers,
            config: serde_json::to_vec(&cfg).unwrap(),
            arch: arch.into(),
        }
    }

    pub fn config_digest(&self) -> String {
        sha256_digest(&self.config)
    }

    /// The manifest body and media type.
    pub fn manifest(&self, f: Format) -> (Vec<u8>, &'static str) {
        let (mt, cfg_mt) = match f {
            Format::Oci => (
                "application/vnd.oci.image.manifest.v1+json",
                "application/vnd.oci.image.config.v1+json",
            ),
            Format::Docker => (
                "application/vnd.docker.distribution.manifest.v2+json",
                "application/vnd.docker.container.image.v1+json",
            ),
        };
        let layer_mt = |c: Compression| match (f, c) {
            (Format::Oci, Compression::None) => "application/vnd.oci.image.layer.v1.tar",
            (Format::Oci, Compression::Gzip) => "application/vnd.oci.image.layer.v1.tar+gzip",
            (Format::Oci, Compression::Zstd) => "application/vnd.oci.image.layer.v1.tar+zstd",
            (Format::Docker, _) => "application/vnd.docker.image.rootfs.diff.tar.gzip",
        };
        let m = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": mt,
            "config": {"mediaType": cfg_mt, "digest": self.config_digest(), "size": self.config.len()},
            "layers": self.layers.iter().map(|l| serde_json::json!({
                "mediaType": layer_mt(l.compression), "digest": l.digest(), "size": l.blob.len()
            })).collect::<Vec<_>>(),
        });
        (serde_json::to_vec(&m).unwrap(), mt)
    }
}

/// Pushes over the distribution API.
pub struct Pusher {
    client: reqwest::Client,
    base: String,
    auth: Option<(String, String)>,
}

impl Pusher {
    pub fn new(reg: &super::registry::Registry) -> Pusher {
        Pusher {
            client: reqwest::Client::new(),
            base: format!("http://{}", reg.host()),
            auth: reg.user.clone(),
        }
    }

    fn req(&self, m: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let r = self.client.request(m, url);
        match &self.auth {
            Some((u, p)) => r.basic_auth(u, Some(p)),
            None => r,
        }
    }

    pub async fn blob(&self, repo: &str, data: &[u8]) -> String {
        let digest = sha256_digest(data);
        let head = self
            .req(
                reqwest::Method::HEAD,
                &format!("{}/v2/{repo}/blobs/{digest}", self.base),
            )
            .send()
            .await
            .unwrap();
        if head.status().is_success() {
            return digest;
        }
        let r = self
            .req(
                reqwest::Method::POST,
                &format!("{}/v2/{repo}/blobs/uploads/", self.base),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202, "start upload");
        let loc = r.headers()["location"].to_str().unwrap().to_string();
        let loc = if loc.starts_with("http") {
            loc
        } else {
            format!("{}{loc}", self.base)
        };
        let sep = if loc.contains('?') { '&' } else { '?' };
        let r = self
            .req(reqwest::Method::PUT, &format!("{loc}{sep}digest={digest}"))
            .header("content-type", "application/octet-stream")
            .body(data.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            201,
            "finish upload: {}",
            r.text().await.unwrap_or_default()
        );
        digest
    }

    pub async fn manifest(
        &self,
        repo: &str,
        reference: &str,
        body: &[u8],
        media_type: &str,
    ) -> String {
        let r = self
            .req(
                reqwest::Method::PUT,
                &format!("{}/v2/{repo}/manifests/{reference}", self.base),
            )
            .header("content-type", media_type)
            .body(body.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            201,
            "put manifest: {}",
            r.text().await.unwrap_or_default()
        );
        sha256_digest(body)
    }

    /// Pushes blobs and the manifest; returns the manifest digest.
    pub async fn image(&self, repo: &str, tag: &str, img: &Image, f: Format) -> String {
        for l in &img.layers {
            self.blob(repo, &l.blob).await;
        }
        self.blob(repo, &img.config).await;
        let (m, mt) = img.manifest(f);
        self.manifest(repo, tag, &m, mt).await
    }

    /// Pushes each image's manifest by digest and an index naming them.
    pub async fn index(&self, repo: &str, tag: &str, imgs: &[&Image], f: Format) -> String {
        let mut descs = Vec::new();
        for img in imgs {
            for l in &img.layers {
                self.blob(repo, &l.blob).await;
            }
            self.blob(repo, &img.config).await;
            let (m, mt) = img.manifest(f);
            let d = self.manifest(repo, &sha256_digest(&m), &m, mt).await;
            descs.push(serde_json::json!({
                "mediaType": mt, "digest": d, "size": m.len(),
                "platform": {"architecture": img.arch, "os": "linux"}
            }));
        }
        let mt = match f {
            Format::Oci => "application/vnd.oci.image.index.v1+json",
            Format::Docker => "application/vnd.docker.distribution.manifest.list.v2+json",
        };
        let body = serde_json::to_vec(
            &serde_json::json!({"schemaVersion": 2, "mediaType": mt, "manifests": descs}),
        )
        .unwrap();
        self.manifest(repo, tag, &body, mt).await
    }
}

/// `n` bytes of incompressible data.
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    use rand::{RngCore, SeedableRng};
    let mut v = vec![0u8; n];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// The 100 MB, 5-layer image (busybox base + four 25 MB random layers).
pub fn big_image() -> Image {
    let mut layers = vec![Layer::new(&busybox_entries(), Compression::Gzip)];
    for i in 0..4u64 {
        layers.push(Layer::new(
            &[
                Entry::Dir("data/".into(), 0o755),
                Entry::File(format!("data/blob{i}"), random_bytes(25 << 20, i), 0o644),
            ],
            Compression::Gzip,
        ));
    }
    Image::new(layers)
}

/// The media type of runwasi's WebAssembly layers.
pub const WASM_LAYER: &str = "application/vnd.bytecodealliance.wasm.component.layer.v0+wasm";

/// Pushes `repo:tag` as runwasi's OCI WebAssembly image: `module` itself
/// is the one layer ([`WASM_LAYER`]), the config's platform wasip1/wasm,
/// with no filesystem layer. Returns the layer's and the manifest's
/// digests.
pub async fn push_wasm_oci(
    reg: &super::registry::Registry,
    repo: &str,
    tag: &str,
    module: &[u8],
) -> (String, String) {
    let pusher = Pusher::new(reg);
    let layer = pusher.blob(repo, module).await;
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "wasm", "os": "wasip1",
        "config": {"Entrypoint": ["hello.wasm"]},
        "rootfs": {"type": "layers", "diff_ids": []}
    }))
    .unwrap();
    let config_digest = pusher.blob(repo, &config).await;
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": WASM_LAYER, "digest": layer, "size": module.len()}]
    }))
    .unwrap();
    let digest = pusher
        .manifest(
            repo,
            tag,
            &manifest,
            "application/vnd.oci.image.manifest.v1+json",
        )
        .await;
    (layer, digest)
}
