//! NRI plugins for the tests: the real ones of `../shared/nri/`, dialing
//! a test server's socket, and one made by the test, for the adjustments
//! no sample plugin makes (scheduling, seccomp, namespaces), which
//! registers over NRI's protocol (husk's ttrpc trunk, from the plugin's
//! end) and answers every CreateContainer with the adjustment it is given.
//! Also the image the NRI tests run.

use super::images::busybox_entries;
use super::images::{Compression, Format, Layer, Pusher};
use super::pod::Pod;
use husk::api::nri as api;
use husk::nri::plugin::bit;
use husk::nri::ttrpc::{Conn, Serve};
use prost::Message;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UnixStream;

pub async fn image(p: &Pod) -> String {
    let img = super::images::Image::with_config(
        vec![Layer::new(&busybox_entries(), Compression::Gzip)],
        "amd64",
        serde_json::json!({"Env": ["PATH=/bin"]}),
    );
    Pusher::new(&p.reg)
        .image("app/nri", "v1", &img, Format::Oci)
        .await;
    let r = format!("{}/app/nri:v1", p.reg.host());
    p.h.pull(&r).await.unwrap();
    r
}

/// A plugin of `../shared/nri/` dialing the server's socket; killed on
/// drop.
pub struct Plugin(Child);

impl Plugin {
    /// Starts `binary` and waits until the server has it in its chain as
    /// `id` (`<idx>-<name>`).
    pub async fn start(p: &Pod, binary: &str, id: &str, args: &[&str]) -> Plugin {
        // As a plugin ordered after the server's readiness: the socket is
        // bound (and listening) once recovery is done, a little after the
        // CRI socket.
        let socket = p.h.nri_socket();
        crate::wait_for!(20, format!("{}", socket.display()), {
            socket.exists().then_some(())
        });
        let before = connected(p, id);
        let child = Command::new(super::shared(&format!("nri/{binary}")))
            // The samples name the flag two ways.
            .arg(match binary {
                "nri-logger" | "nri-device-injector" => "-socket-path",
                _ => "-socket",
            })
            .arg(p.h.nri_socket())
            .arg("-idx")
            .arg(&id[..2])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        crate::wait_for!(20, format!("{id} to connect"), {
            (connected(p, id) > before).then_some(())
        });
        Plugin(child)
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on the plugin this test started.
        unsafe { libc::kill(self.0.id() as i32, sig) };
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How many times the server logged `id` joining its chain.
pub fn connected(p: &Pod, id: &str) -> usize {
    p.h.log()
        .lines()
        .filter(|l| l.contains("NRI plugin connected") && l.contains(&format!("plugin={id} ")))
        .count()
}

/// What a test plugin answers to a CreateContainer.
pub type Respond =
    Arc<dyn Fn(&api::CreateContainerRequest) -> api::CreateContainerResponse + Send + Sync>;

/// A connection to the server's NRI `socket`, once it is bound (up to
/// 20 s: husk binds it when its recovery is done, after the CRI socket).
pub async fn dial(socket: &Path) -> UnixStream {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        match UnixStream::connect(socket).await {
            Ok(s) => return s,
            Err(e) if std::time::Instant::now() > deadline => {
                panic!("NRI socket {}: {e}", socket.display())
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A connected test plugin; its connection closes on drop.
pub struct TestPlugin(Arc<Conn>);

impl TestPlugin {
    /// Dials the server's NRI `socket` and registers as `<idx>-<name>`,
    /// subscribed to CreateContainer only, answering each with `adjust`.
    pub async fn connect(
        socket: &Path,
        name: &str,
        idx: &str,
        adjust: api::ContainerAdjustment,
    ) -> TestPlugin {
        let respond: Respond = Arc::new(move |_| api::CreateContainerResponse {
            adjust: Some(adjust.clone()),
            ..Default::default()
        });
        TestPlugin::answering(socket, name, idx, respond).await
    }

    /// As [`TestPlugin::connect`], answering each CreateContainer with
    /// what `respond` makes of it.
    pub async fn answering(socket: &Path, name: &str, idx: &str, respond: Respond) -> TestPlugin {
        TestPlugin::syncing(socket, name, idx, respond, Vec::new()).await
    }

    /// As [`TestPlugin::answering`], answering `Synchronize` with `sync`
    /// (updates of containers already there). Registration only: whether
    /// the plugin joined is the server's to say.
    pub async fn syncing(
        socket: &Path,
        name: &str,
        idx: &str,
        respond: Respond,
        sync: Vec<api::ContainerUpdate>,
    ) -> TestPlugin {
        let stream = dial(socket).await;
        let serve: Serve = Arc::new(move |_service, method, payload| {
            let respond = respond.clone();
            let sync = sync.clone();
            Box::pin(async move {
                Ok(match method.as_str() {
                    "Configure" => api::ConfigureResponse {
                        events: bit(api::Event::CreateContainer),
                    }
                    .encode_to_vec(),
                    "Synchronize" => api::SynchronizeResponse {
                        update: sync,
                        more: false,
                    }
                    .encode_to_vec(),
                    "CreateContainer" => {
                        let req = api::CreateContainerRequest::decode(payload.as_slice()).unwrap();
                        respond(&req).encode_to_vec()
                    }
                    _ => api::Empty {}.encode_to_vec(),
                })
            })
        });
        let conn = Conn::start_plugin(stream, serve);
        let req = api::RegisterPluginRequest {
            plugin_name: name.into(),
            plugin_idx: idx.into(),
            ..Default::default()
        };
        conn.call(
            "nri.pkg.api.v1alpha1.Runtime",
            "RegisterPlugin",
            req.encode_to_vec(),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        TestPlugin(conn)
    }
}

impl Drop for TestPlugin {
    fn drop(&mut self) {
        let conn = self.0.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { conn.close().await });
        }
    }
}
