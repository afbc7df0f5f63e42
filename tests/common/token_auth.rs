//! A bearer-token front for a real registry, as Docker Hub and most cloud
//! registries run: requests without a valid token get a 401 challenge
//! naming a token realm; the realm trades basic credentials (GET) or a
//! refresh token (POST, OAuth2) for a token; valid requests are forwarded
//! to the registry behind. Plain HTTP/1.1 on 127.0.0.1, one request per
//! connection.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

pub struct TokenFront {
    pub port: u16,
    pub token_requests: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TokenFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub const USER: &str = "tokenuser";
pub const PASS: &str = "tokenpass";
pub const REFRESH: &str = "refresh-123";
pub const TOKEN: &str = "granted-token-42";

fn basic_ok(h: &str) -> bool {
    use base64::Engine as _;
    let want = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASS}"));
    h == format!("Basic {want}")
}

pub async fn start(upstream: u16) -> TokenFront {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let c2 = count.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = l.accept().await else {
                return;
            };
            let count = c2.clone();
            tokio::spawn(async move {
                let _ = serve_one(sock, port, upstream, count).await;
            });
        }
    });
    TokenFront {
        port,
        token_requests: count,
        task,
    }
}

async fn serve_one(
    sock: tokio::net::TcpStream,
    port: u16,
    upstream: u16,
    count: Arc<AtomicUsize>,
) -> std::io::Result<()> {
    let (r, mut w) = sock.into_split();
    let mut r = BufReader::new(r);
    let mut line = String::new();
    r.read_line(&mut line).await?;
    let mut parts = line.split_whitespace();
    let (method, target) = (
        parts.next().unwrap_or("").to_string(),
        parts.next().unwrap_or("").to_string(),
    );
    let mut headers = Vec::new();
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).await?;
        let h = h.trim_end().to_string();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap_or(0);
            }
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    let header = |k: &str| {
        headers
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };

    let (status, ctype, extra, payload): (u16, String, Vec<(String, String)>, Vec<u8>) = if target
        .starts_with("/token")
    {
        count.fetch_add(1, Ordering::SeqCst);
        let form = String::from_utf8_lossy(&body).to_string();
        if method == "GET" && basic_ok(&header("authorization")) {
            (
                200,
                "application/json".into(),
                vec![],
                format!("{{\"token\":\"{TOKEN}\",\"expires_in\":300}}").into_bytes(),
            )
        } else if method == "POST"
            && form.contains("grant_type=refresh_token")
            && form.contains(&format!("refresh_token={REFRESH}"))
        {
            (
                200,
                "application/json".into(),
                vec![],
                format!("{{\"access_token\":\"{TOKEN}\",\"expires_in\":300}}").into_bytes(),
            )
        } else {
            (
                401,
                "application/json".into(),
                vec![],
                b"{\"errors\":[{\"code\":\"UNAUTHORIZED\"}]}".to_vec(),
            )
        }
    } else if header("authorization") != format!("Bearer {TOKEN}") {
        let repo = target
            .trim_start_matches("/v2/")
            .split("/manifests/")
            .next()
            .unwrap_or("")
            .split("/blobs/")
            .next()
            .unwrap_or("")
            .to_string();
        let challenge = format!("Bearer realm=\"http://127.0.0.1:{port}/token\",service=\"husk-test\",scope=\"repository:{repo}:pull\"");
        (
            401,
            "application/json".into(),
            vec![("WWW-Authenticate".into(), challenge)],
            b"{\"errors\":[{\"code\":\"UNAUTHORIZED\"}]}".to_vec(),
        )
    } else {
        let resp = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{upstream}{target}"))
            .header("accept", header("accept"))
            .send()
            .await
            .map_err(std::io::Error::other)?;
        let status = resp.status().as_u16();
        let ctype = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let mut extra = Vec::new();
        if let Some(d) = resp
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
        {
            extra.push(("Docker-Content-Digest".to_string(), d.to_string()));
        }
        (
            status,
            ctype,
            extra,
            resp.bytes().await.map_err(std::io::Error::other)?.to_vec(),
        )
    };
    let mut head = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        payload.len()
    );
    if !ctype.is_empty() {
        head.push_str(&format!("Content-Type: {ctype}\r\n"));
    }
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    w.write_all(head.as_bytes()).await?;
    w.write_all(&payload).await?;
    w.shutdown().await
}
