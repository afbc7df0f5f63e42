//! A blocking ttrpc client of one shim v2 runtime's Task service, for the
//! shim's single-threaded loop: one call at a time, each under a timeout,
//! with containerd's namespace in the request's metadata (a Go shim
//! refuses a call without it).

use crate::ttrpc::{
    encode_frame, take_frame, KeyValue, Request, Response, TYPE_REQUEST, TYPE_RESPONSE,
};
use prost::Message;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// The namespace husk's tasks live in, as containerd's CRI names it.
pub const NAMESPACE: &str = "k8s.io";

/// How a call failed.
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// The shim answered with an error status (a gRPC code).
    Status { code: i32, message: String },
    /// No answer within the timeout.
    Timeout(Duration),
    /// The connection is gone, or spoke no ttrpc.
    Closed(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Status { message, .. } => f.write_str(message),
            CallError::Timeout(d) => write!(f, "the shim did not answer within {d:?}"),
            CallError::Closed(why) => write!(f, "the shim's connection closed: {why}"),
        }
    }
}

impl CallError {
    /// The shim API's code for it.
    pub fn code(&self) -> i32 {
        match self {
            CallError::Status { code, .. } => *code,
            CallError::Timeout(_) => 4,
            CallError::Closed(_) => 14,
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, CallError::Status { code: 5, .. })
    }
}

/// A connection to a shim's task socket.
pub struct Client {
    sock: UnixStream,
    /// The next stream id (a client's are odd).
    next: u32,
    /// `containerd.task.v3.Task` or `containerd.task.v2.Task`.
    pub service: String,
    buf: Vec<u8>,
}

/// Connects to a shim's address: `unix:///path`, or (no scheme) an
/// abstract socket, as containerd dials it.
pub fn dial(address: &str) -> std::io::Result<UnixStream> {
    if let Some(p) = address.strip_prefix("unix://") {
        return UnixStream::connect(p);
    }
    if address.contains("://") {
        return Err(std::io::Error::other(format!(
            "{address}: husk dials shims on unix sockets only"
        )));
    }
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(address.as_bytes())?;
    UnixStream::connect_addr(&addr)
}

impl Client {
    pub fn connect(address: &str, version: i32) -> std::io::Result<Client> {
        let sock = dial(address)?;
        Ok(Client {
            sock,
            next: 1,
            service: format!("containerd.task.v{}.Task", if version >= 3 { 3 } else { 2 }),
            buf: Vec::new(),
        })
    }

    /// Calls `method` with `req`; its answer.
    pub fn call<Q: Message, R: Message + Default>(
        &mut self,
        method: &str,
        req: &Q,
        timeout: Duration,
    ) -> Result<R, CallError> {
        let id = self.next;
        self.next = self.next.wrapping_add(2);
        let env = Request {
            service: self.service.clone(),
            method: method.into(),
            payload: req.encode_to_vec(),
            timeout_nano: timeout.as_nanos().min(i64::MAX as u128) as i64,
            metadata: vec![KeyValue {
                key: "containerd-namespace-ttrpc".into(),
                value: NAMESPACE.into(),
            }],
        };
        let frame =
            encode_frame(id, TYPE_REQUEST, &env.encode_to_vec()).map_err(CallError::Closed)?;
        let deadline = Instant::now() + timeout;
        let _ = self.sock.set_write_timeout(Some(timeout));
        self.sock
            .write_all(&frame)
            .map_err(|e| CallError::Closed(format!("write: {e}")))?;
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            while let Some((sid, kind, body)) =
                take_frame(&mut self.buf).map_err(CallError::Closed)?
            {
                // An answer to a call that timed out earlier is dropped.
                if sid != id || kind != TYPE_RESPONSE {
                    continue;
                }
                let resp = Response::decode(body.as_slice()).map_err(|e| {
                    CallError::Closed(format!("a response that is not ttrpc's: {e}"))
                })?;
                if let Some(s) = resp.status.filter(|s| s.code != 0) {
                    return Err(CallError::Status {
                        code: s.code,
                        message: s.message,
                    });
                }
                return R::decode(resp.payload.as_slice())
                    .map_err(|e| CallError::Closed(format!("{method}'s answer: {e}")));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(CallError::Timeout(timeout));
            }
            let _ = self.sock.set_read_timeout(Some(left));
            match self.sock.read(&mut chunk) {
                Ok(0) => return Err(CallError::Closed("EOF".into())),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(CallError::Timeout(timeout))
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(CallError::Closed(format!("read: {e}"))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::containerd::{StartRequest, StartResponse};
    use crate::ttrpc::Status;

    /// A server that answers each request with `answer(request)`.
    fn serve(answer: fn(Request) -> Response) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.sock");
        let l = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        std::thread::spawn(move || {
            let (mut c, _) = l.accept().expect("accept");
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                while let Some((id, _, body)) = take_frame(&mut buf).expect("frame") {
                    let req = Request::decode(body.as_slice()).expect("request");
                    let out = answer(req).encode_to_vec();
                    c.write_all(&encode_frame(id, TYPE_RESPONSE, &out).expect("frame"))
                        .expect("write");
                }
                match c.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
        });
        let addr = format!("unix://{}", path.display());
        (dir, addr)
    }

    #[test]
    fn a_call_carries_the_namespace_and_the_service_of_the_version() {
        let (_d, addr) = serve(|req| {
            let ns = req
                .metadata
                .iter()
                .find(|k| k.key == "containerd-namespace-ttrpc")
                .map(|k| k.value.clone());
            let pid = if ns.as_deref() == Some("k8s.io")
                && req.service == "containerd.task.v3.Task"
                && req.method == "Start"
            {
                StartRequest::decode(req.payload.as_slice())
                    .expect("start")
                    .id
                    .len() as u32
            } else {
                0
            };
            Response {
                status: None,
                payload: StartResponse { pid }.encode_to_vec(),
            }
        });
        let mut c = Client::connect(&addr, 3).expect("connect");
        let r: StartResponse = c
            .call(
                "Start",
                &StartRequest {
                    id: "abcd".into(),
                    exec_id: String::new(),
                },
                Duration::from_secs(5),
            )
            .expect("answered");
        assert_eq!(r.pid, 4);
    }

    #[test]
    fn an_error_status_comes_back_with_its_code() {
        let (_d, addr) = serve(|_| Response {
            status: Some(Status {
                code: 5,
                message: "container x: not found".into(),
            }),
            payload: Vec::new(),
        });
        let mut c = Client::connect(&addr, 2).expect("connect");
        let e = c
            .call::<_, StartResponse>("Start", &StartRequest::default(), Duration::from_secs(5))
            .expect_err("an error");
        assert!(e.is_not_found(), "{e:?}");
        assert_eq!(e.to_string(), "container x: not found");
    }
}
