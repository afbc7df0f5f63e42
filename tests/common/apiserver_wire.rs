//! The stand-in API server's wire: HTTP/1.1 requests read and routed to
//! the store (tests/common/apiserver.rs), JSON responses, and watches as
//! chunked streams of JSON events (BOOKMARK when asked, 410 Gone for a
//! compacted resourceVersion, ended at `timeoutSeconds`, when cut, or when
//! the server is made unavailable).

use super::apiserver::{field_matches, kind_of, status, Shared, Target};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub(super) fn query(q: &str) -> BTreeMap<String, String> {
    q.split('&')
        .filter_map(|kv| kv.split_once('=').or(Some((kv, ""))))
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.to_string(), unescape(v)))
        .collect()
}

pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn respond(c: &mut TcpStream, code: u16, body: &Value) -> std::io::Result<()> {
    let b = serde_json::to_vec(body).unwrap();
    let head = format!(
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        b.len()
    );
    c.write_all(head.as_bytes()).await?;
    c.write_all(&b).await
}

async fn chunk(c: &mut TcpStream, v: &Value) -> std::io::Result<()> {
    let mut b = serde_json::to_vec(v).unwrap();
    b.push(b'\n');
    c.write_all(format!("{:x}\r\n", b.len()).as_bytes()).await?;
    c.write_all(&b).await?;
    c.write_all(b"\r\n").await?;
    c.flush().await
}

pub(super) async fn serve(mut c: TcpStream, s: Arc<Shared>) {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        // One request head.
        let (method, target, headers, used) = loop {
            let mut hs = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut hs);
            if let Ok(httparse::Status::Complete(n)) = req.parse(&buf) {
                let headers: Vec<(String, String)> = req
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_ascii_lowercase(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect();
                break (
                    req.method.unwrap_or("").to_string(),
                    req.path.unwrap_or("").to_string(),
                    headers,
                    n,
                );
            }
            let mut tmp = [0u8; 8192];
            match c.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        };
        buf.drain(..used);
        let header = |k: &str| headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let len: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < len {
            let mut tmp = [0u8; 8192];
            match c.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        }
        let body: Value = serde_json::from_slice(&buf[..len]).unwrap_or(Value::Null);
        buf.drain(..len);
        let (path, q) = target.split_once('?').unwrap_or((&target, ""));
        let q = query(q);
        s.requests
            .lock()
            .unwrap()
            .push((method.clone(), path.to_string()));
        if s.unavailable.load(Ordering::SeqCst) {
            let _ = respond(
                &mut c,
                503,
                &status(
                    503,
                    "ServiceUnavailable",
                    "the server is currently unable to handle the request",
                ),
            )
            .await;
            continue;
        }
        let token = s.token.lock().unwrap().clone();
        let auth = header("authorization");
        let by_certificate = auth.is_none() && s.certificate_clients.load(Ordering::SeqCst);
        if auth.as_deref() != Some(&format!("Bearer {token}")) && !by_certificate {
            let _ = respond(&mut c, 401, &status(401, "Unauthorized", "Unauthorized")).await;
            continue;
        }
        let Some(t) = Target::parse(path) else {
            let _ = respond(
                &mut c,
                404,
                &status(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                ),
            )
            .await;
            continue;
        };
        let watching = matches!(q.get("watch").map(|s| s.as_str()), Some("true") | Some("1"));
        let (code, v) = match method.as_str() {
            "GET" if watching => {
                let _ = watch(&mut c, &s, &t, &q).await;
                return;
            }
            "GET" if t.name.is_none() => (200, s.list_at(&t, &q)),
            "GET" => match s.get(&t.key()) {
                Some(v) => (200, v),
                None => t.not_found(),
            },
            "POST" if t.name.is_none() => s.create_at(&t, body),
            "POST"
                if t.sub.as_deref() == Some("token")
                    && s
                        .token_refusals
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok() =>
            {
                (403, status(403, "Forbidden", "serviceaccounts \"default\" is forbidden: no relationship found between node and this object"))
            }
            "POST" if t.sub.as_deref() == Some("token") => {
                let pod = body["spec"]["boundObjectRef"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let sa = t.name.clone().unwrap_or_default();
                let mut b = body.clone();
                b["status"] = json!({"token": format!("token-for-{sa}-bound-to-{pod}"),
                                     "expirationTimestamp": "2099-01-01T00:00:00Z"});
                (201, b)
            }
            "PATCH" if t.name.is_some() => s.patch_at(&t, &body),
            "PUT" if t.name.is_some() => {
                let mut p = body.clone();
                if t.sub.as_deref() != Some("status") {
                    if let Some(o) = p.as_object_mut() {
                        o.remove("status");
                    }
                }
                s.patch_at(&t, &p)
            }
            "DELETE" if t.name.is_some() => s.delete_at(&t, &body),
            _ => (405, status(405, "MethodNotAllowed", "method not allowed")),
        };
        if respond(&mut c, code, &v).await.is_err() {
            return;
        }
    }
}

async fn watch(
    c: &mut TcpStream,
    s: &Shared,
    t: &Target,
    q: &BTreeMap<String, String>,
) -> std::io::Result<()> {
    c.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    .await?;
    let from: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let bookmarks = q
        .get("allowWatchBookmarks")
        .map(|v| v == "true")
        .unwrap_or(false);
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let deadline = Instant::now() + Duration::from_secs(timeout);
    let cut_ms = s.break_watches_ms.load(Ordering::SeqCst);
    let cut = (cut_ms > 0).then(|| Instant::now() + Duration::from_millis(cut_ms));
    let generation = s.generation.load(Ordering::SeqCst);
    let selector = q.get("fieldSelector").cloned();
    let compacted = s.lock().compacted_below;
    {
        if from > 0 && from < compacted {
            chunk(c, &json!({"type": "ERROR", "object": status(410, "Expired", "too old resource version")})).await?;
            return c.write_all(b"0\r\n\r\n").await;
        }
    }
    let mut sent = from;
    let mut last_bookmark = Instant::now();
    loop {
        let notified = s.changed.notified();
        let events: Vec<(u64, String, Value)> = {
            let st = s.lock();
            let evs: Vec<_> = st
                .log
                .iter()
                .filter(|(rv, _, k, obj)| {
                    *rv > sent && t.lists(k) && field_matches(obj, selector.as_deref())
                })
                .map(|(rv, ty, _, obj)| (*rv, ty.clone(), obj.clone()))
                .collect();
            sent = sent.max(st.rv);
            evs
        };
        for (_, ty, obj) in events {
            chunk(c, &json!({"type": ty, "object": obj})).await?;
        }
        if bookmarks && last_bookmark.elapsed() >= Duration::from_secs(1) {
            let (kind, api_version) = kind_of(&t.resource);
            chunk(c, &json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": sent.to_string()}}})).await?;
            last_bookmark = Instant::now();
        }
        let now = Instant::now();
        let end = cut.map_or(deadline, |x| x.min(deadline));
        if now >= end
            || s.generation.load(Ordering::SeqCst) != generation
            || s.unavailable.load(Ordering::SeqCst)
        {
            return c.write_all(b"0\r\n\r\n").await;
        }
        let _ = tokio::time::timeout((end - now).min(Duration::from_millis(500)), notified).await;
    }
}
