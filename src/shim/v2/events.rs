//! The events endpoint a shim v2 runtime publishes to (`TTRPC_ADDRESS`):
//! a ttrpc server of `containerd.services.events.ttrpc.v1.Events/Forward`
//! on a thread of the monitor's own. Each Forward is answered at once; the task
//! exits and OOM kills in it come back as [`Event`]s. Only a peer of this
//! process's own uid is served, as containerd's ttrpc server requires.

use crate::api::containerd::{ForwardRequest, TaskExit, TaskOom};
use crate::ttrpc::{
    encode_frame, take_frame, Request, Response, Status, TYPE_REQUEST, TYPE_RESPONSE,
};
use prost::Message;
use rustix::pipe::{pipe_with, PipeFlags};
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex};

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

/// The endpoint: a thread of its own serves it, so that a shim that waits
/// for its Forward to be answered before it answers a call (runwasi's
/// shims publish TaskCreate inside Create) is answered while the monitor
/// waits on that call. What it told waits in a queue; a byte in the wake
/// pipe tells the monitor's loop.
pub struct Events {
    wake: OwnedFd,
    queue: Arc<Mutex<Vec<Event>>>,
    /// Its closing ends the thread.
    _stop: OwnedFd,
}

impl Events {
    pub fn bind(path: &Path) -> std::io::Result<Events> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        listener.set_nonblocking(true)?;
        let (wake, wake_w) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        let (stop_r, stop) = pipe_with(PipeFlags::CLOEXEC)?;
        let queue: Arc<Mutex<Vec<Event>>> = Arc::default();
        let q = queue.clone();
        std::thread::Builder::new()
            .name("v2-events".into())
            .spawn(move || serve(listener, stop_r, wake_w, q))?;
        Ok(Events {
            wake,
            queue,
            _stop: stop,
        })
    }

    /// What the loop polls for this endpoint.
    pub fn fds(&self) -> Vec<BorrowedFd<'_>> {
        vec![self.wake.as_fd()]
    }

    /// The events told since the last call.
    pub fn pump(&mut self) -> Vec<Event> {
        let mut b = [0u8; 64];
        while matches!(rustix::io::read(&self.wake, &mut b), Ok(n) if n > 0) {}
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The endpoint's thread: until `stop` closes, accepts publishers and
/// answers each Forward at once.
fn serve(listener: UnixListener, stop: OwnedFd, wake: OwnedFd, queue: Arc<Mutex<Vec<Event>>>) {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut conns: Vec<(UnixStream, Vec<u8>)> = Vec::new();
    loop {
        let stopped = {
            let mut fds = vec![
                PollFd::new(&stop, PollFlags::IN),
                PollFd::new(&listener, PollFlags::IN),
            ];
            fds.extend(conns.iter().map(|(c, _)| PollFd::new(c, PollFlags::IN)));
            match poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(_) => return,
            }
            !fds[0].revents().is_empty()
        };
        if stopped {
            return;
        }
        let told = serve_once(&listener, &mut conns);
        if !told.is_empty() {
            queue.lock().unwrap_or_else(|p| p.into_inner()).extend(told);
            let _ = rustix::io::write(&wake, &[1]);
        }
    }
}

/// Accepts new publishers, answers what they sent; the events in it.
fn serve_once(listener: &UnixListener, conns: &mut Vec<(UnixStream, Vec<u8>)>) -> Vec<Event> {
    while let Ok((c, _)) = listener.accept() {
        let same_user = rustix::net::sockopt::socket_peercred(&c)
            .is_ok_and(|cred| cred.uid == rustix::process::geteuid());
        if same_user && c.set_nonblocking(true).is_ok() {
            conns.push((c, Vec::new()));
        }
    }
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    conns.retain_mut(|(c, buf)| {
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
                    let Ok(frame) = encode_frame(id, TYPE_RESPONSE, &resp.encode_to_vec()) else {
                        return false;
                    };
                    // A small answer on a socket the peer reads: it fits
                    // its buffer; a peer that stopped reading is dropped.
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

    #[test]
    fn a_forward_is_answered_while_the_monitor_is_busy() {
        // runwasi's shims wait for TaskCreate's answer inside Create: the
        // monitor, waiting on that Create, never pumps meanwhile.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ev.sock");
        let mut ev = Events::bind(&path).expect("bind");
        let mut c = UnixStream::connect(&path).expect("connect");
        c.write_all(&forward("containerd.events.TaskCreate", Vec::new()))
            .expect("write");
        c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("timeout");
        let mut buf = Vec::new();
        let mut chunk = [0u8; 1024];
        loop {
            let n = c.read(&mut chunk).expect("answered without a pump");
            assert!(n > 0, "closed");
            buf.extend_from_slice(&chunk[..n]);
            if let Some((id, kind, _)) = take_frame(&mut buf).expect("frame") {
                assert_eq!((id, kind), (7, TYPE_RESPONSE));
                break;
            }
        }
        // An exit then wakes the loop's poll.
        let exit = TaskExit {
            container_id: "c1".into(),
            id: "c1".into(),
            exit_status: 1,
            ..Default::default()
        };
        c.write_all(&forward("containerd.events.TaskExit", exit.encode_to_vec()))
            .expect("write");
        let mut fds = [rustix::event::PollFd::new(
            &ev.wake,
            rustix::event::PollFlags::IN,
        )];
        let ts = rustix::event::Timespec {
            tv_sec: 10,
            tv_nsec: 0,
        };
        assert_eq!(rustix::event::poll(&mut fds, Some(&ts)).expect("poll"), 1);
        let got = ev.pump();
        assert!(
            matches!(&got[..], [Event::Exit { status: 1, .. }]),
            "{got:?}"
        );
    }
}
