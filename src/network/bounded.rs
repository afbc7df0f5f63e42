//! Running a CNI plugin within bounds: its input fed, its output read up
//! to a size, its whole process group killed at a deadline (a hung plugin,
//! or a child it left holding the pipes).

use std::io::Write;
/// Most a plugin may print on stdout or stderr; the rest is dropped.
const MAX_PLUGIN_OUTPUT: u64 = 4 << 20;

pub enum Bounded {
    TimedOut,
    Io(std::io::Error),
}

/// Feeds `input` to a started plugin and collects its output, killing its
/// whole process group when `timeout` passes (a hung plugin, or one whose
/// child keeps the pipes open). Output is read up to a bound.
pub fn run(
    mut child: std::process::Child,
    input: Vec<u8>,
    timeout: std::time::Duration,
) -> Result<std::process::Output, Bounded> {
    use std::io::Read;
    let deadline = std::time::Instant::now() + timeout;
    let reader = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(r) = r {
                let mut r = r.take(MAX_PLUGIN_OUTPUT);
                let _ = r.read_to_end(&mut buf);
                // Whatever is left is drained, so the plugin never blocks.
                let _ = std::io::copy(r.get_mut(), &mut std::io::sink());
            }
            buf
        })
    };
    let stdin = child.stdin.take();
    let writer = std::thread::spawn(move || {
        if let Some(mut s) = stdin {
            let _ = s.write_all(&input);
        }
    });
    let out = reader(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let mut pause = std::time::Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Ok(st),
            Ok(None) if std::time::Instant::now() >= deadline => break Err(Bounded::TimedOut),
            Ok(None) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(50));
            }
            Err(e) => break Err(Bounded::Io(e)),
        }
    };
    // The plugin's group goes either way: a child it left behind would
    // hold the pipes (and run on unseen).
    if let Some(pg) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process_group(pg, rustix::process::Signal::KILL);
    }
    let status = match status {
        Ok(st) => st,
        Err(e) => {
            let _ = child.wait();
            return Err(e);
        }
    };
    let _ = writer.join();
    Ok(std::process::Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}
