//! The shim process: fork away from the server, become a subreaper, and
//! run the single-threaded loop (API socket, SIGCHLD self-pipe, container
//! log pipes, exec pipes) until asked to shut down.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

use super::monitor::*;

/// How long the monitor must have been quiet before it trims itself.
const QUIET: std::time::Duration = std::time::Duration::from_secs(2);

/// The write end of the SIGCHLD self-pipe.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_sigchld(_: libc::c_int) {
    let fd = WAKE_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = 1u8;
        // SAFETY: write(2) is async-signal-safe; the pipe is non-blocking,
        // so a full pipe just drops the byte (a wake-up is already pending).
        unsafe {
            libc::write(fd, (&b as *const u8).cast(), 1);
        }
    }
}

fn redirect_stdio(log: &Path) -> io::Result<()> {
    let null = File::open("/dev/null")?;
    let log = OpenOptions::new().create(true).append(true).open(log)?;
    // SAFETY: dup2 onto the standard descriptors with valid open fds.
    unsafe {
        libc::dup2(null.as_raw_fd(), 0);
        libc::dup2(log.as_raw_fd(), 1);
        libc::dup2(log.as_raw_fd(), 2);
    }
    Ok(())
}

/// The monitor's own mount namespace, a copy of the node's with its
/// propagation kept: the pod's mounts are attached in it under the
/// server's `dirs`, which are private mounts (`crate::sandbox::podns`), so
/// none of them reaches the node; where the node shares a mount, the pod's
/// copy is its peer (a kubelet's volumes come in, a container's
/// Bidirectional volume reaches the node). What the copy brought along
/// under `dirs` (another pod's rootfs or pins, made in the node's
/// namespace a moment before that pod took them) is dropped from it.
fn own_mount_namespace(dirs: &str) -> io::Result<()> {
    // SAFETY: the monitor is single-threaded; a new mount namespace changes
    // no memory and no descriptor.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS) }?;
    for dir in dirs.split(':').filter(|d| !d.is_empty()) {
        // Were it shared, an unmount here would take another pod's mounts
        // from the node too.
        if crate::sys::propagates(Path::new(dir)) != Some(false) {
            return Err(io::Error::other(format!(
                "{dir} is not a private mount: the pod's mounts would propagate"
            )));
        }
        for m in crate::sys::mounts_under(Path::new(dir)) {
            if m != Path::new(dir) {
                let _ = rustix::mount::unmount(&m, rustix::mount::UnmountFlags::DETACH);
            }
        }
    }
    Ok(())
}

/// Runs the shim for the sandbox state dir `dir`. Returns only in the
/// parent (right after the monitor has forked off), or on a setup error.
pub fn run(dir: &Path) -> io::Result<()> {
    // Descriptors the server inherited from whoever started it (a lock, a
    // socket) must not be held for the pod's lifetime.
    // SAFETY: close_range on descriptors this process has not opened; only
    // stdin, stdout and stderr are kept.
    unsafe {
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
    }
    // A monitor with a mount namespace of its own keeps the node's root,
    // to open what the node names (a log path, a namespace a plugin
    // pinned) as the node sees it (`client::node_root`).
    if std::env::var_os(super::client::MOUNT_NS_ENV).is_some() {
        use std::os::fd::IntoRawFd;
        let fd = rustix::fs::open(
            "/",
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?
        .into_raw_fd();
        if fd != super::client::NODE_ROOT_FD {
            return Err(io::Error::other(format!(
                "the node's root came as descriptor {fd}, not {}",
                super::client::NODE_ROOT_FD
            )));
        }
    }
    std::fs::create_dir_all(dir.join("exits"))?;
    let sock = dir.join("shim.sock");
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock)?;
    let (wake_r, wake_w) = rustix::pipe::pipe_with(
        rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
    )?;
    let (ready_r, ready_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;

    // SAFETY: the process is single-threaded here (no runtime was started),
    // so fork is safe; the child only continues this function.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid > 0 {
        // Return (and exit) only once the monitor is ready to serve.
        drop(ready_w);
        let mut b = [0u8; 1];
        return match rustix::io::read(&ready_r, &mut b) {
            Ok(1) => Ok(()),
            _ => Err(io::Error::other(
                "the shim monitor failed to start (see shim.log)",
            )),
        };
    }
    drop(ready_r);
    // The monitor: its own session, reparented away from the server.
    rustix::process::setsid()?;
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 1) has no memory effects.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    std::env::set_current_dir("/")?;
    if let Some(dirs) = std::env::var_os(super::client::MOUNT_NS_ENV) {
        own_mount_namespace(&dirs.to_string_lossy())?;
    }
    redirect_stdio(&dir.join("shim.log"))?;
    // libcontainer reports why a create failed through `tracing`.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .try_init();
    WAKE_FD.store(wake_w.as_raw_fd(), Ordering::Relaxed);
    // SAFETY: installing an async-signal-safe handler for SIGCHLD.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigchld as *const () as usize;
        sa.sa_flags = libc::SA_RESTART | libc::SA_NOCLDSTOP;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGCHLD, &sa, std::ptr::null_mut());
    }
    crate::store::atomic::write_state_file(
        &dir.join("shim.pid"),
        std::process::id().to_string().as_bytes(),
    )?;
    crate::store::atomic::write_state_file(
        &dir.join("address"),
        sock.display().to_string().as_bytes(),
    )?;
    rustix::io::write(&ready_w, b"1")?;
    drop(ready_w);

    let mut shim = Shim {
        dir: dir.to_path_buf(),
        youki: dir.join("youki"),
        containers: HashMap::new(),
        shutdown: false,
        logs: HashMap::new(),
        pipes: Vec::new(),
        execs: Vec::new(),
        streams: Default::default(),
        oom: super::oom::OomWatch::new(),
        oci: HashMap::new(),
        v2: Default::default(),
    };
    listener.set_nonblocking(true)?;
    // Once quiet for a while after its start or a request, the monitor
    // trims itself (`sys::trim_resident`): it keeps resident only the code
    // of its poll loop, not that of everything it ran once.
    let mut trim_at = Some(std::time::Instant::now() + QUIET);
    while !shim.shutdown {
        let pipes_ready = {
            let mut fds = vec![
                rustix::event::PollFd::new(&listener, rustix::event::PollFlags::IN),
                rustix::event::PollFd::new(&wake_r, rustix::event::PollFlags::IN),
            ];
            for (fd, _, _) in &shim.pipes {
                fds.push(rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN));
            }
            for x in &shim.execs {
                for fd in x.pipes.iter().flatten() {
                    fds.push(rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN));
                }
            }
            let stream_fds = shim.streams.poll_fds();
            let first_stream = fds.len();
            for fd in &stream_fds {
                fds.push(rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN));
            }
            let first_oom = fds.len();
            if let Some(fd) = shim.oom.fd() {
                fds.push(rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN));
            }
            // Shim v2 runtimes' events and logs: taken by each reap.
            let v2_fds = shim.v2.poll_fds();
            for fd in &v2_fds {
                fds.push(rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN));
            }
            let timeout = shim
                .execs
                .iter()
                .filter_map(|x| x.wake_at())
                .chain(trim_at)
                .min()
                .map(|at| {
                    let d = at.saturating_duration_since(std::time::Instant::now());
                    rustix::event::Timespec {
                        tv_sec: d.as_secs() as i64,
                        tv_nsec: d.subsec_nanos() as i64,
                    }
                });
            match rustix::event::poll(&mut fds, timeout.as_ref()) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            let streams_ready = fds[first_stream..first_oom]
                .iter()
                .any(|f| !f.revents().is_empty());
            let oom_ready = fds[first_oom..].iter().any(|f| !f.revents().is_empty());
            (
                fds[2..first_stream].iter().any(|f| !f.revents().is_empty()),
                streams_ready,
                oom_ready,
            )
        };
        let (pipes_ready, streams_ready, oom_ready) = pipes_ready;
        if oom_ready {
            shim.oom.on_ready();
        }
        if pipes_ready {
            shim.drain_logs(None);
        }
        if streams_ready {
            let ended = shim.streams.check_conns();
            for exec_id in ended.execs {
                shim.v2_kill_exec(&exec_id);
            }
            for id in ended.stdins {
                if shim.v2.has(&id) {
                    shim.v2_close_stdin(&id, "");
                }
            }
        }
        shim.poll_execs();
        let mut buf = [0u8; 64];
        while rustix::io::read(wake_r.as_fd(), &mut buf)
            .map(|n| n > 0)
            .unwrap_or(false)
        {}
        shim.reap();
        // An exec whose pipes closed before it was reaped is answered now,
        // not at the end of its drain grace.
        shim.poll_execs();
        if trim_at.is_some_and(|at| at <= std::time::Instant::now()) {
            crate::sys::trim_resident();
            trim_at = None;
        }
        loop {
            match listener.accept() {
                Ok((conn, _)) => {
                    let _ = conn.set_nonblocking(false);
                    shim.serve_one(conn);
                    shim.reap();
                    shim.poll_execs();
                    // Keep the idle monitor small: return freed heap now,
                    // and its code once quiet.
                    crate::sys::release_memory();
                    trim_at = Some(std::time::Instant::now() + QUIET);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
    let _ = std::fs::remove_file(&sock);
    let _ = std::fs::remove_file(dir.join("address"));
    let _ = std::fs::remove_file(dir.join("shim.pid"));
    std::process::exit(0);
}
