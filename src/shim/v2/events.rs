//! The events endpoint a shim v2 runtime publishes to (`TTRPC_ADDRESS`):
//! a ttrpc server of `containerd.services.events.ttrpc.v1.Events/Forward`
//! inside the shim's loop. Each Forward is answered at once; the task
//! exits and OOM kills in it come back as [`Event`]s. Only a peer of this
//! process's own uid is served, as containerd's ttrpc server requires.

use crate::api::containerd::{ForwardRequest, TaskExit, TaskOom};
use crate::ttrpc::{
    encode_frame, take_frame, Request, Response, Status, TYPE_REQUEST, TYPE_RESPONSE,
};
use prost::Message;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

/// What a shim told.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A process exited: the init when `exec_id` is empty.
    Exit {
        container_id: String,
        exec_id: String,
        status: i32,
        exited_at: i64,
    },
    Oom {
        container_id: String,
    },
}

pub struct Events {
    listener: UnixListener,
    conns: Vec<(UnixStream, Vec<u8>)>,
}

impl Events {
    pub fn bind(path: &Path) -> std::io::Result<Events> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        listener.set_nonblocking(true)?;
        Ok(Events {
            listener,
            conns: Vec::new(),
        })
    }

    /// What the loop polls for this endpoint.
    pub fn fds(&self) -> Vec<BorrowedFd<'_>> {
        std::iter::once(self.listener.as_fd())
            .chain(self.conns.iter().map(|(c, _)| c.as_fd()))
            .collect()
    }

    /// Accepts new publishers, answers what they sent; the events in it.
    pub fn pump(&mut self) -> Vec<Event> {
        while let Ok((c, _)) = self.listener.accept() {
            let same_user = rustix::net::sockopt::socket_peercred(&c)
                .is_ok_and(|cred| cred.uid == rustix::process::geteuid());
            if same_user && c.set_nonblocking(true).is_ok() {
                self.conns.push((c, Vec::new()));
            }
        }
        let mut out = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        self.conns.retain_mut(|(c, buf)| {
            loop {
                match c.read(&mut chunk) {
                    Ok(0) => return false,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(_) => return false,
                }
            }
            loop {
                match take_frame(buf) {
                    Ok(Some((id, TYPE_REQUEST, body))) => {
                        let resp = answer(&body, &mut out);
                        let Ok(frame) = encode_frame(id, TYPE_RESPONSE, &resp.encode_to_vec())
                        else {
                            return false;
                        };
                        // A small answer on a socket the peer reads: it
                        // fits its buffer; a peer that stopped reading is
                        // dropped.
                        let _ = c.set_nonblocking(false);
                        let _ = c.set_write_timeout(Some(std::time::Duration::from_secs(1)));
                        let ok = c.write_all(&frame).is_ok();
                        let _ = c.set_nonblocking(true);
                        if !ok {
                            return false;
                        }
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => return true,
                    Err(_) => return false,
                }
            }
        });
        out
    }
}

fn answer(body: &[u8], out: &mut Vec<Event>) -> Response {
    let fail = |code, message: String| Response {
        status: Some(Status { code, message }),
        payload: Vec::new(),
    };
    let Ok(req) = Request::decode(body) else {
        return fail(3, "not a ttrpc request".into());
    };
    if req.service != "containerd.services.events.ttrpc.v1.Events" || req.method != "Forward" {
        return fail(
            12,
            format!("{}/{} is not served here", req.service, req.method),
        );
    }
    let Ok(f) = ForwardRequest::decode(req.payload.as_slice()) else {
        return fail(3, "not a ForwardRequest".into());
    };
    if let Some(e) = f.envelope.and_then(|e| e.event).and_then(|a| event(&a)) {
        out.push(e);
    }
    Response {
        status: None,
        payload: Vec::new(),
    }
}

/// The event an Any holds, when husk acts on its kind.
pub fn event(a: &prost_types::Any) -> Option<Event> {
    let name = a.type_url.rsplit('/').next().unwrap_or("");
    match name {
        "containerd.events.TaskExit" => {
            let x = TaskExit::decode(a.value.as_slice()).ok()?;
            let exec_id = if x.id == x.container_id || x.id.is_empty() {
                String::new()
            } else {
                x.id
            };
            Some(Event::Exit {
                container_id: x.container_id,
                exec_id,
                status: x.exit_status as i32,
                exited_at: x
                    .exited_at
                    .map(|t| t.seconds * 1_000_000_000 + t.nanos as i64)
                    .unwrap_or_else(crate::sys::now_ns),
            })
        }
        "containerd.events.TaskOOM" => {
            let x = TaskOom::decode(a.value.as_slice()).ok()?;
            Some(Event::Oom {
                container_id: x.container_id,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::containerd::Envelope;

    fn forward(type_url: &str, value: Vec<u8>) -> Vec<u8> {
        let f = ForwardRequest {
            envelope: Some(Envelope {
                timestamp: None,
                namespace: "k8s.io".into(),
                topic: "/tasks/exit".into(),
                event: Some(prost_types::Any {
                    type_url: type_url.into(),
                    value,
                }),
            }),
        };
        let req = Request {
            service: "containerd.services.events.ttrpc.v1.Events".into(),
            method: "Forward".into(),
            payload: f.encode_to_vec(),
            timeout_nano: 0,
            metadata: Vec::new(),
        };
        encode_frame(7, TYPE_REQUEST, &req.encode_to_vec()).expect("frame")
    }

    #[test]
    fn forwarded_exits_and_ooms_are_told_and_answered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ev.sock");
        let mut ev = Events::bind(&path).expect("bind");
        let mut c = UnixStream::connect(&path).expect("connect");
        let exit = TaskExit {
            container_id: "c1".into(),
            id: "c1".into(),
            pid: 42,
            exit_status: 3,
            exited_at: Some(prost_types::Timestamp {
                seconds: 1,
                nanos: 5,
            }),
        };
        c.write_all(&forward("containerd.events.TaskExit", exit.encode_to_vec()))
            .expect("write");
        let exec = TaskExit {
            id: "x9".into(),
            ..exit.clone()
        };
        c.write_all(&forward("containerd.events.TaskExit", exec.encode_to_vec()))
            .expect("write");
        let oom = TaskOom {
            container_id: "c1".into(),
        };
        c.write_all(&forward("containerd.events.TaskOOM", oom.encode_to_vec()))
            .expect("write");
        c.write_all(&forward("containerd.events.TaskStart", Vec::new()))
            .expect("write");
        let mut got = Vec::new();
        for _ in 0..100 {
            got.extend(ev.pump());
            if got.len() == 3 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(
            got,
            vec![
                Event::Exit {
                    container_id: "c1".into(),
                    exec_id: String::new(),
                    status: 3,
                    exited_at: 1_000_000_005
                },
                Event::Exit {
                    container_id: "c1".into(),
                    exec_id: "x9".into(),
                    status: 3,
                    exited_at: 1_000_000_005
                },
                Event::Oom {
                    container_id: "c1".into()
                },
            ]
        );
        // Four answers, each an empty success.
        let mut buf = Vec::new();
        let mut chunk = [0u8; 1024];
        let mut answers = 0;
        c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        while answers < 4 {
            let n = c.read(&mut chunk).expect("read");
            assert!(n > 0, "closed after {answers} answers");
            buf.extend_from_slice(&chunk[..n]);
            while let Some((id, kind, body)) = take_frame(&mut buf).expect("frame") {
                assert_eq!((id, kind), (7, TYPE_RESPONSE));
                let r = Response::decode(body.as_slice()).expect("response");
                assert!(r.status.is_none(), "{r:?}");
                answers += 1;
            }
        }
    }
}
