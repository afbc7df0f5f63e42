//! A stand-in Kubernetes API server for the `husk kubelet --kubeconfig`
//! tests (CI has no kube-apiserver). It speaks the API conventions the
//! kubelet relies on, over plain HTTP/1.1 on 127.0.0.1 with a bearer
//! token, for any resource path (`/api/v1/...`, `/apis/G/V/...`):
//!
//! - GET of an object or a list (`fieldSelector` `spec.nodeName=` and
//!   `metadata.name=`), the list carrying the store's resourceVersion;
//! - watches (`watch=true`) from a resourceVersion: ADDED / MODIFIED /
//!   DELETED events as chunked JSON lines, BOOKMARK events when asked,
//!   410 Gone (an ERROR event) for a compacted resourceVersion, the
//!   stream ended at `timeoutSeconds`;
//! - POST (409 AlreadyExists), merge PATCH (of `/status`: the status
//!   only; a `metadata.uid` in the patch is a precondition, 409), DELETE
//!   with DeleteOptions: a pod with a grace period gets its
//!   deletionTimestamp and deletionGracePeriodSeconds; grace 0 (or any
//!   other kind) removes; a UID precondition that fails is 409.
//!
//! A TokenRequest (POST `serviceaccounts/NAME/token`) is answered with a
//! token naming the service account and the pod it is bound to.
//!
//! Faults for the tests: every request answered 503 (`unavailable`),
//! watches cut every N ms (`break_watches_ms`), history compacted
//! (`compact`: the next watch from an old resourceVersion gets 410), and
//! a token that no longer matches (401).

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio::sync::Notify;

#[derive(Default)]
pub(super) struct Store {
    pub(super) rv: u64,
    /// Object path (`/api/v1/namespaces/ns/pods/name`) → object.
    objects: BTreeMap<String, Value>,
    /// (resourceVersion, event type, object path, object).
    pub(super) log: Vec<(u64, String, String, Value)>,
    pub(super) compacted_below: u64,
}

pub struct Shared {
    store: Mutex<Store>,
    pub(super) changed: Notify,
    pub token: Mutex<String>,
    pub unavailable: AtomicBool,
    /// Cut every watch after this many ms (0: never).
    pub break_watches_ms: AtomicU64,
    /// Requests seen: (method, path without query).
    pub requests: Mutex<Vec<(String, String)>>,
    /// Bumped to end every open watch.
    pub(super) generation: AtomicU64,
    /// Refuse this many TokenRequests with 403 (the node authorizer of a
    /// real API server does until it has seen the pod bound to the node).
    pub token_refusals: AtomicU64,
    /// Take a request without a bearer token as a client authenticated by
    /// its certificate (which plain HTTP cannot carry): the TLS bootstrap
    /// tests' credential after the bootstrap token.
    pub certificate_clients: AtomicBool,
}

pub struct ApiServer {
    pub port: u16,
    pub s: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(super) fn now() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let (y, m, day) = civil(days);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 → (year, month, day).
pub fn civil(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// RFC 7386 JSON merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

pub(super) fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

/// 409 when a UID precondition does not match the object.
fn uid_conflict(obj: &Value, uid: Option<&str>) -> Option<(u16, Value)> {
    let uid = uid?;
    (obj["metadata"]["uid"].as_str() != Some(uid)).then(|| {
        (
            409,
            status(
                409,
                "Conflict",
                "Precondition failed: UID in precondition does not match",
            ),
        )
    })
}

/// A parsed resource path.
pub struct Target {
    /// `/api/v1` or `/apis/G/V`.
    pub(super) prefix: String,
    pub(super) namespace: Option<String>,
    pub(super) resource: String,
    pub(super) name: Option<String>,
    pub sub: Option<String>,
}

impl Target {
    pub fn parse(path: &str) -> Option<Target> {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (prefix, rest) = match segs.as_slice() {
            ["api", v, rest @ ..] => (format!("/api/{v}"), rest),
            ["apis", g, v, rest @ ..] => (format!("/apis/{g}/{v}"), rest),
            _ => return None,
        };
        let (namespace, rest) = match rest {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
            r => (None, r),
        };
        let (resource, name, sub) = match rest {
            [r] => (r, None, None),
            [r, n] => (r, Some(n.to_string()), None),
            [r, n, s] => (r, Some(n.to_string()), Some(s.to_string())),
            _ => return None,
        };
        Some(Target {
            prefix,
            namespace,
            resource: resource.to_string(),
            name,
            sub,
        })
    }

    pub(super) fn collection(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{}/namespaces/{ns}/{}", self.prefix, self.resource),
            None => format!("{}/{}", self.prefix, self.resource),
        }
    }

    /// 404 for the object this path names.
    pub(super) fn not_found(&self) -> (u16, Value) {
        let name = self.name.clone().unwrap_or_default();
        let msg = format!("{} \"{name}\" not found", self.resource);
        (404, status(404, "NotFound", &msg))
    }

    pub fn key(&self) -> String {
        format!(
            "{}/{}",
            self.collection(),
            self.name.clone().unwrap_or_default()
        )
    }

    /// Whether an object path is in this (possibly all-namespace) list.
    pub fn lists(&self, key: &str) -> bool {
        if self.namespace.is_some() {
            return key.rsplit_once('/').map(|(c, _)| c) == Some(self.collection().as_str());
        }
        let Some((coll, _)) = key.rsplit_once('/') else {
            return false;
        };
        coll == self.collection()
            || (coll.starts_with(&format!("{}/namespaces/", self.prefix))
                && coll.ends_with(&format!("/{}", self.resource)))
    }
}

pub(super) fn kind_of(resource: &str) -> (&'static str, &'static str) {
    match resource {
        "pods" => ("Pod", "v1"),
        "nodes" => ("Node", "v1"),
        "events" => ("Event", "v1"),
        "secrets" => ("Secret", "v1"),
        "configmaps" => ("ConfigMap", "v1"),
        "services" => ("Service", "v1"),
        "serviceaccounts" => ("ServiceAccount", "v1"),
        "leases" => ("Lease", "coordination.k8s.io/v1"),
        "runtimeclasses" => ("RuntimeClass", "node.k8s.io/v1"),
        "certificatesigningrequests" => ("CertificateSigningRequest", "certificates.k8s.io/v1"),
        _ => ("Object", "v1"),
    }
}

pub(super) fn field_matches(obj: &Value, selector: Option<&str>) -> bool {
    let Some(sel) = selector else { return true };
    sel.split(',').filter(|t| !t.is_empty()).all(|term| {
        let Some((k, v)) = term.split_once('=') else {
            return true;
        };
        let got = match k {
            "spec.nodeName" => obj["spec"]["nodeName"].as_str(),
            "metadata.name" => obj["metadata"]["name"].as_str(),
            "metadata.namespace" => obj["metadata"]["namespace"].as_str(),
            _ => return true,
        };
        got.unwrap_or("") == v
    })
}

impl Shared {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, st: &mut Store, kind: &str, key: &str, obj: Value) {
        st.log.push((st.rv, kind.into(), key.into(), obj));
        self.changed.notify_waiters();
    }

    /// Stores an object (create or replace), bumping its resourceVersion.
    fn put(&self, st: &mut Store, key: &str, mut obj: Value, created: bool) -> Value {
        st.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        st.objects.insert(key.into(), obj.clone());
        self.record(
            st,
            if created { "ADDED" } else { "MODIFIED" },
            key,
            obj.clone(),
        );
        obj
    }

    fn remove(&self, st: &mut Store, key: &str) -> Option<Value> {
        let mut obj = st.objects.remove(key)?;
        st.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        self.record(st, "DELETED", key, obj.clone());
        Some(obj)
    }

    // Accessors for the tests.

    pub fn get(&self, path: &str) -> Option<Value> {
        self.lock().objects.get(path).cloned()
    }

    /// Objects of a resource (any namespace), e.g. `pods`, `events`.
    pub fn list(&self, resource: &str) -> Vec<Value> {
        let st = self.lock();
        st.objects
            .iter()
            .filter(|(k, _)| k.rsplit('/').nth(1) == Some(resource))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Creates an object at its collection path; returns it as stored.
    pub fn create(&self, collection: &str, obj: Value) -> Value {
        let t = Target::parse(collection).unwrap();
        let (code, v) = self.create_at(&t, obj);
        assert_eq!(code, 201, "create {collection}: {v}");
        v
    }

    /// Merge-patches the object at `path` (its status included), as a
    /// controller would.
    pub fn patch(&self, path: &str, patch: Value) -> Value {
        let mut st = self.lock();
        let mut obj = st.objects.get(path).cloned().unwrap();
        merge(&mut obj, &patch);
        self.put(&mut st, path, obj, false)
    }

    /// A graceful delete (pods get a deletionTimestamp) or, grace 0, a removal.
    pub fn delete(&self, path: &str, grace: Option<i64>) {
        let t = Target::parse(path).unwrap();
        let body = json!({"gracePeriodSeconds": grace});
        self.delete_at(&t, &body);
    }

    /// Ends the history before now: a watch resuming from an older
    /// resourceVersion gets 410 Gone; open watches are cut.
    pub fn compact(&self) {
        let mut st = self.lock();
        st.compacted_below = st.rv + 1;
        drop(st);
        self.cut_watches();
    }

    pub fn cut_watches(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    pub fn count(&self, method: &str, path_contains: &str) -> usize {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, p)| m == method && p.contains(path_contains))
            .count()
    }

    pub(super) fn create_at(&self, t: &Target, mut obj: Value) -> (u16, Value) {
        let Some(name) = obj["metadata"]["name"].as_str().map(String::from) else {
            return (422, status(422, "Invalid", "metadata.name: Required value"));
        };
        let key = format!("{}/{name}", t.collection());
        let mut st = self.lock();
        if st.objects.contains_key(&key) {
            return (
                409,
                status(
                    409,
                    "AlreadyExists",
                    &format!("{} \"{name}\" already exists", t.resource),
                ),
            );
        }
        let (kind, api_version) = kind_of(&t.resource);
        obj["kind"] = json!(kind);
        obj["apiVersion"] = json!(api_version);
        if let Some(ns) = &t.namespace {
            obj["metadata"]["namespace"] = json!(ns);
        }
        obj["metadata"]["uid"] = json!(format!("{:032x}", rand::random::<u128>()));
        obj["metadata"]["creationTimestamp"] = json!(now());
        if t.resource == "pods" && obj["status"]["phase"].is_null() {
            obj["status"] = json!({"phase": "Pending"});
        }
        (201, self.put(&mut st, &key, obj, true))
    }

    pub(super) fn delete_at(&self, t: &Target, opts: &Value) -> (u16, Value) {
        let key = t.key();
        let mut st = self.lock();
        let Some(obj) = st.objects.get(&key).cloned() else {
            return (
                404,
                status(404, "NotFound", &format!("{} not found", t.resource)),
            );
        };
        if let Some(c) = uid_conflict(&obj, opts["preconditions"]["uid"].as_str()) {
            return c;
        }
        let grace = opts["gracePeriodSeconds"].as_i64().unwrap_or_else(|| {
            obj["spec"]["terminationGracePeriodSeconds"]
                .as_i64()
                .unwrap_or(30)
        });
        if t.resource == "pods" && grace > 0 {
            let current = obj["metadata"]["deletionGracePeriodSeconds"].as_i64();
            // A first graceful delete, or a shorter grace period for one under way.
            if current.is_none_or(|g| grace < g) {
                let mut obj = obj;
                if obj["metadata"]["deletionTimestamp"].is_null() {
                    obj["metadata"]["deletionTimestamp"] = json!(now());
                }
                obj["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
                let v = self.put(&mut st, &key, obj, false);
                return (200, v);
            }
            return (200, obj);
        }
        let v = self.remove(&mut st, &key).unwrap_or(obj);
        (200, v)
    }

    pub(super) fn patch_at(&self, t: &Target, patch: &Value) -> (u16, Value) {
        let key = t.key();
        let mut st = self.lock();
        let Some(mut obj) = st.objects.get(&key).cloned() else {
            return t.not_found();
        };
        if let Some(c) = uid_conflict(&obj, patch["metadata"]["uid"].as_str()) {
            return c;
        }
        if t.sub.as_deref() == Some("status") {
            merge(&mut obj["status"], &patch["status"]);
        } else {
            let mut p = patch.clone();
            if let Some(o) = p.as_object_mut() {
                o.remove("status");
            }
            merge(&mut obj, &p);
        }
        (200, self.put(&mut st, &key, obj, false))
    }

    pub(super) fn list_at(&self, t: &Target, q: &BTreeMap<String, String>) -> Value {
        let st = self.lock();
        let items: Vec<Value> = st
            .objects
            .iter()
            .filter(|(k, v)| {
                t.lists(k) && field_matches(v, q.get("fieldSelector").map(|s| s.as_str()))
            })
            .map(|(_, v)| v.clone())
            .collect();
        let (kind, api_version) = kind_of(&t.resource);
        json!({"kind": format!("{kind}List"), "apiVersion": api_version,
               "metadata": {"resourceVersion": st.rv.to_string()}, "items": items})
    }
}

/// Starts the server with a fresh store and `token` as the only credential.
pub async fn start(token: &str) -> ApiServer {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let s = Arc::new(Shared {
        store: Mutex::new(Store::default()),
        changed: Notify::new(),
        token: Mutex::new(token.into()),
        unavailable: AtomicBool::new(false),
        break_watches_ms: AtomicU64::new(0),
        requests: Mutex::new(Vec::new()),
        generation: AtomicU64::new(0),
        token_refusals: AtomicU64::new(0),
        certificate_clients: AtomicBool::new(false),
    });
    let s2 = s.clone();
    let task = tokio::spawn(async move {
        while let Ok((c, _)) = l.accept().await {
            tokio::spawn(super::apiserver_wire::serve(c, s2.clone()));
        }
    });
    ApiServer { port, s, task }
}

impl ApiServer {
    /// A kubeconfig for this server and token.
    pub fn kubeconfig(&self, token: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'http://127.0.0.1:{}'}}\nusers:\n- name: u\n  user: {{token: '{token}'}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
            self.port
        )
    }
}
