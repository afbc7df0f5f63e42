//! The port-forward side of husk's streaming client: a SPDY session (or
//! SPDY tunnelled in WebSocket binary messages) with a data and an error
//! stream per forwarded connection, or the WebSocket channel form.

use super::*;

/// A port-forward connection: forwards local streams to pod ports.
pub struct PortForwarder {
    session: spdy::Session,
    next: AtomicU32,
}

impl PortForwarder {
    /// Connects over SPDY, or SPDY tunnelled through a WebSocket.
    pub async fn connect(
        url: &str,
        transport: Transport,
        tls: &Tls,
    ) -> Result<PortForwarder, ClientError> {
        let session = match transport {
            Transport::Spdy => spdy_connect(url, tls, &["portforward.k8s.io"]).await?.0,
            Transport::WebSocket => {
                let (conn, proto) =
                    ws_connect(url, tls, &[crate::streaming::portforward::TUNNEL_PROTOCOL]).await?;
                if proto != crate::streaming::portforward::TUNNEL_PROTOCOL {
                    return Err(ClientError::Remote(format!(
                        "the server chose websocket protocol {proto:?}, not the SPDY tunnel"
                    )));
                }
                let (s, mut incoming) = spdy::Session::start(ws::tunnel(conn, false), false)?;
                tokio::spawn(async move {
                    while let Some(i) = incoming.recv().await {
                        i.writer.reset().await;
                    }
                });
                s
            }
        };
        Ok(PortForwarder {
            session,
            next: AtomicU32::new(0),
        })
    }

    /// Forwards one local connection to `port` until both sides are done.
    pub async fn forward<S>(&self, port: u16, local: S) -> Result<(), ClientError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let id = self.next.fetch_add(1, Ordering::Relaxed).to_string();
        let h = |kind: &str| {
            Headers::new()
                .with("streamType", kind)
                .with("port", &port.to_string())
                .with("requestID", &id)
        };
        let wait = Duration::from_secs(30);
        let (mut err_r, err_w) = self.session.open(h("error"), wait).await?;
        err_w.close().await;
        let (data_r, data_w) = self.session.open(h("data"), wait).await?;
        let errors = tokio::spawn(async move {
            let mut m = Vec::new();
            while let Some(d) = err_r.recv().await {
                m.extend_from_slice(&d);
            }
            m
        });
        let (mut lr, mut lw) = tokio::io::split(local);
        let up = async move {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match lr.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if data_w.send(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                }
            }
            data_w.close().await;
        };
        let down = async {
            let mut rx = data_r.into_channel();
            while let Some(d) = rx.recv().await {
                if lw.write_all(&d).await.is_err() {
                    break;
                }
            }
            let _ = lw.shutdown().await;
        };
        // As client-go does: done once the remote side is, whether or not
        // the local side has finished sending.
        let up = tokio::spawn(up);
        down.await;
        up.abort();
        let msg = errors.await.unwrap_or_default();
        if !msg.is_empty() {
            return Err(ClientError::Remote(format!(
                "an error occurred forwarding {port}: {}",
                String::from_utf8_lossy(&msg)
            )));
        }
        Ok(())
    }

    pub async fn close(self) {
        self.session.close().await;
    }
}

/// The WebSocket channel form: one local stream per port in the URL's
/// request, forwarded until they end.
pub async fn forward_ws_channels<S>(
    url: &str,
    tls: &Tls,
    locals: Vec<(u16, S)>,
) -> Result<(), ClientError>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (conn, proto) = ws_connect(url, tls, &["v4.channel.k8s.io"]).await?;
    if proto != "v4.channel.k8s.io" {
        return Err(ClientError::Remote(format!(
            "unexpected websocket protocol {proto:?}"
        )));
    }
    let (mut reader, writer) = ws::split(conn, false);
    let mut sinks: Vec<Option<tokio::io::WriteHalf<S>>> = Vec::new();
    let mut errors: Vec<Vec<u8>> = Vec::new();
    let mut ups = Vec::new();
    for (i, (_, s)) in locals.into_iter().enumerate() {
        let (mut r, w) = tokio::io::split(s);
        sinks.push(Some(w));
        errors.push(Vec::new());
        let wr = writer.clone();
        ups.push(tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match r.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if channels::ws_send(&wr, (2 * i) as u8, false, &buf[..n])
                            .await
                            .is_err()
                        {
                            break;
                        }
                    }
                }
            }
        }));
    }
    // Each channel starts with its port (2 bytes), which is not data.
    let mut seen = vec![false; sinks.len() * 2];
    while let Some(m) = reader.next().await? {
        let Some((ch, data)) = channels::ws_decode(m, false) else {
            continue;
        };
        let (i, is_err) = ((ch / 2) as usize, ch % 2 == 1);
        let Some(first) = seen.get_mut(ch as usize) else {
            continue;
        };
        let data = if !*first {
            *first = true;
            data.get(2..).unwrap_or_default().to_vec()
        } else {
            data
        };
        if is_err {
            errors[i].extend_from_slice(&data);
        } else if let Some(Some(w)) = sinks.get_mut(i) {
            if w.write_all(&data).await.is_err() {
                sinks[i] = None;
            }
        }
    }
    for s in sinks.iter_mut().flatten() {
        let _ = s.shutdown().await;
    }
    for u in ups {
        u.abort();
    }
    let msgs: Vec<String> = errors
        .iter()
        .filter(|e| !e.is_empty())
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .collect();
    if msgs.is_empty() {
        Ok(())
    } else {
        Err(ClientError::Remote(msgs.join("; ")))
    }
}
