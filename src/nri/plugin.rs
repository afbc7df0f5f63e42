//! One NRI plugin: its registration, `Configure`, `Synchronize`, and the
//! calls of its events, each bounded by the request timeout.
//!
//! The order is NRI's: the plugin dials (or is handed fd 3), calls
//! `Runtime.RegisterPlugin` with its name and two-digit index within the
//! registration timeout, and husk then calls `Configure` (the plugin
//! answers with the events it wants) and `Synchronize` with every pod and
//! container already there, paged when a message would be over ttrpc's
//! limit.

pub use super::ttrpc::CallError;
use super::ttrpc::{Conn, Serve};
use crate::api::nri as api;
use crate::ttrpc::Status;
use prost::Message;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::UnixStream;
use tokio::sync::oneshot;

const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";

/// ttrpc's Unimplemented code: a plugin built against an older NRI takes
/// state events through `StateChange`.
pub(super) const UNIMPLEMENTED: i32 = 12;

/// The bit of `event` in an NRI event mask.
pub fn bit(event: api::Event) -> i32 {
    1 << (event as i32 - 1)
}

/// Every event a plugin may subscribe to.
pub fn valid_events() -> i32 {
    (1 << (api::Event::Last as i32 - 1)) - 1
}

/// What a plugin is told at `Configure`.
#[derive(Clone, Debug)]
pub struct Setup {
    pub runtime_name: String,
    pub runtime_version: String,
    pub registration_timeout: Duration,
    pub request_timeout: Duration,
    /// The plugin's config (a pre-installed plugin's file), or empty.
    pub config: String,
}

/// A registered, configured plugin.
pub struct Plugin {
    /// The name it registered with.
    pub name: String,
    /// Its two-digit index: plugins are called in index order.
    pub idx: String,
    /// The events it subscribed to.
    pub events: i32,
    conn: Arc<Conn>,
    /// The request timeout, in milliseconds (a reload may change it).
    timeout_ms: std::sync::atomic::AtomicU64,
}

/// A plugin name: `[a-zA-Z0-9_.+-]+`.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("invalid plugin name: name is empty".into());
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-_.+".contains(*c)))
    {
        Some(c) => Err(format!(
            "invalid plugin name {name:?}: contains invalid character {c:?}"
        )),
        None => Ok(()),
    }
}

/// A plugin index: two digits.
pub fn check_index(idx: &str) -> Result<(), String> {
    if idx.len() == 2 && idx.bytes().all(|b| b.is_ascii_digit()) {
        Ok(())
    } else {
        Err(format!("invalid plugin index {idx:?}, must be 2 digits"))
    }
}

/// What the runtime's service answers a plugin: its registration (once),
/// and `UpdateContainers`.
type Registered = Arc<Mutex<Option<oneshot::Sender<Result<(String, String), String>>>>>;

fn runtime_service(
    registered: Registered,
    preset: Option<(String, String)>,
    updates: Option<super::Updates>,
) -> Serve {
    Arc::new(move |service, method, payload| {
        let registered = registered.clone();
        let preset = preset.clone();
        let updates = updates.clone();
        Box::pin(async move {
            if service != RUNTIME_SERVICE {
                return Err(Status {
                    code: UNIMPLEMENTED,
                    message: format!("service {service} is not served"),
                });
            }
            match method.as_str() {
                "RegisterPlugin" => {
                    let req =
                        api::RegisterPluginRequest::decode(payload.as_slice()).map_err(|e| {
                            Status {
                                code: 3,
                                message: format!("RegisterPlugin: {e}"),
                            }
                        })?;
                    // A pre-installed plugin is known by its file name.
                    let (name, idx) = match &preset {
                        Some(p) => p.clone(),
                        None => (req.plugin_name.clone(), req.plugin_idx.clone()),
                    };
                    let checked = check_name(&name).and_then(|()| check_index(&idx));
                    let tx = registered.lock().unwrap_or_else(|p| p.into_inner()).take();
                    if let Some(tx) = tx {
                        let _ = tx.send(checked.clone().map(|()| (name, idx)));
                    }
                    checked
                        .map(|()| api::Empty {}.encode_to_vec())
                        .map_err(|m| Status {
                            code: 3,
                            message: m,
                        })
                }
                "UpdateContainers" => {
                    let req =
                        api::UpdateContainersRequest::decode(payload.as_slice()).map_err(|e| {
                            Status {
                                code: 3,
                                message: format!("UpdateContainers: {e}"),
                            }
                        })?;
                    let Some(u) = updates else {
                        return Err(Status {
                            code: UNIMPLEMENTED,
                            message: "this runtime applies no unsolicited updates".into(),
                        });
                    };
                    u(req)
                        .await
                        .map(|failed| api::UpdateContainersResponse { failed }.encode_to_vec())
                        .map_err(|m| Status {
                            code: 2,
                            message: m,
                        })
                }
                m => Err(Status {
                    code: UNIMPLEMENTED,
                    message: format!("method {m} is not served"),
                }),
            }
        })
    })
}

impl Plugin {
    /// Connects over `stream`: registration, then `Configure`. `preset`
    /// names a pre-installed plugin (its file's index and name).
    pub async fn connect(
        stream: UnixStream,
        preset: Option<(String, String)>,
        setup: &Setup,
        updates: Option<super::Updates>,
    ) -> Result<Plugin, String> {
        let (tx, rx) = oneshot::channel();
        let registered: Registered = Arc::new(Mutex::new(Some(tx)));
        let conn = Conn::start(stream, runtime_service(registered, preset, updates));
        let reg = tokio::select! {
            r = rx => r.map_err(|_| "registration: no answer".to_string())?,
            why = conn.closed() => Err(format!("failed to register plugin, connection closed ({why})")),
            _ = tokio::time::sleep(setup.registration_timeout) => {
                Err(format!("plugin registration timed out after {:?}", setup.registration_timeout))
            }
        };
        let (name, idx) = match reg {
            Ok(r) => r,
            Err(e) => {
                conn.close().await;
                return Err(e);
            }
        };
        let req = api::ConfigureRequest {
            config: setup.config.clone(),
            runtime_name: setup.runtime_name.clone(),
            runtime_version: setup.runtime_version.clone(),
            registration_timeout: setup.registration_timeout.as_millis() as i64,
            request_timeout: setup.request_timeout.as_millis() as i64,
            nri_version: "v0.12.0".into(),
        };
        let mut p = Plugin {
            name,
            idx,
            events: 0,
            conn,
            timeout_ms: (setup.request_timeout.as_millis() as u64).into(),
        };
        let rsp: api::ConfigureResponse = match p.call("Configure", &req).await {
            Ok(r) => r,
            Err(e) => {
                p.conn.close().await;
                return Err(format!("failed to configure plugin {}: {e}", p.id()));
            }
        };
        if rsp.events & !valid_events() != 0 {
            p.conn.close().await;
            return Err(format!(
                "plugin {}: invalid plugin events: 0x{:x}",
                p.id(),
                rsp.events & !valid_events()
            ));
        }
        p.events = if rsp.events == 0 {
            valid_events()
        } else {
            rsp.events
        };
        Ok(p)
    }

    /// `idx-name`, as NRI names a plugin.
    pub fn id(&self) -> String {
        format!("{}-{}", self.idx, self.name)
    }

    /// Sets the request timeout.
    pub fn set_timeout(&self, t: Duration) {
        self.timeout_ms
            .store(t.as_millis() as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the plugin wants `event`.
    pub fn wants(&self, event: api::Event) -> bool {
        self.events & bit(event) != 0
    }

    /// Whether its connection is gone.
    pub fn is_closed(&self) -> bool {
        self.conn.is_closed()
    }

    /// Resolves when its connection is gone.
    pub async fn closed(&self) -> String {
        self.conn.closed().await
    }

    /// Drops its connection.
    pub async fn close(&self) {
        self.conn.close().await
    }

    /// Calls `method` with `req`.
    pub async fn call<Req: Message, Rsp: Message + Default>(
        &self,
        method: &str,
        req: &Req,
    ) -> Result<Rsp, CallError> {
        let body = self
            .conn
            .call(
                PLUGIN_SERVICE,
                method,
                req.encode_to_vec(),
                Duration::from_millis(self.timeout_ms.load(std::sync::atomic::Ordering::Relaxed)),
            )
            .await?;
        Rsp::decode(body.as_slice()).map_err(|e| CallError::Closed(format!("{method}: {e}")))
    }

    /// `StateChange`: how a plugin of an older NRI takes a state event.
    pub async fn state_change(
        &self,
        event: api::Event,
        pod: &api::PodSandbox,
        container: Option<&api::Container>,
    ) -> Result<(), CallError> {
        self.call::<_, api::Empty>(
            "StateChange",
            &api::StateChangeEvent {
                event: event as i32,
                pod: Some(pod.clone()),
                container: container.cloned(),
            },
        )
        .await
        .map(drop)
    }
}
