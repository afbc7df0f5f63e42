//! Real containers' CRI log files, record by record, as containerd writes
//! them, and read back by the kubelet's rules (a record's text plus a
//! newline, cut off again when the record is partial): a last
//! line the container never ended, lines at the length limit, stdout and
//! stderr interleaved, a restart (each attempt its own file), and
//! ReopenContainerLog in the middle of a line.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::{app_image, ccfg, create_start, pod_config, stop_remove_pod, wait_exited};
use common::pod::*;
use husk::api::cri::*;
use husk::kubelet::kit::log_reader::{Options, Reader};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

type Rec = (String, String, String);

/// (stream, tag, text) of each record; every record is whole and dated.
fn records(path: &Path) -> Vec<Rec> {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.is_empty() || text.ends_with('\n'), "a torn record");
    text.lines()
        .map(|l| {
            let mut p = l.splitn(4, ' ');
            let ts = p.next().unwrap();
            assert!(ts.ends_with('Z') && ts.len() == 30, "timestamp {ts}");
            let r = (
                p.next().unwrap().to_string(),
                p.next().unwrap().to_string(),
                p.next().unwrap_or("").to_string(),
            );
            assert!(["P", "F"].contains(&r.1.as_str()), "{l}");
            r
        })
        .collect()
}

fn rec(stream: &str, tag: &str, text: &str) -> Rec {
    (stream.into(), tag.into(), text.into())
}

fn of(stream: &str, recs: &[Rec]) -> Vec<Rec> {
    recs.iter().filter(|r| r.0 == stream).cloned().collect()
}

/// What `kubectl logs` shows of each file in turn, read by husk kubelet's
/// reader of the kubelet's rules: a partial record's text goes on in the
/// stream's next record; a last line never ended is shown as it is.
fn kubelet_reads(files: &[&Path]) -> String {
    let mut out = Vec::new();
    for f in files {
        let mut r = Reader::default();
        let o = Options::default();
        out.extend(r.lines(&std::fs::read(f).unwrap(), &o).concat());
        out.extend(r.finish(&o).concat());
    }
    String::from_utf8(out).unwrap()
}

fn log_file(pc: &PodSandboxConfig, rel: &str) -> PathBuf {
    Path::new(&pc.log_directory).join(rel)
}

#[tokio::test(flavor = "multi_thread")]
async fn log_records_at_every_edge() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let image = app_image(&p).await;
    let pc = pod_config(&p, "logs");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    let sh = |name: &str, script: &str| ccfg(&image, name, &["/bin/sh", "-c", script], &[]);

    // The stream ends in the middle of a line: a partial record, and the
    // FallbackToLogsOnError message is what the container wrote.
    let id = create_start(
        &p.h,
        &pod,
        &pc,
        sh("done", "echo started; printf DONE; exit 1"),
    )
    .await;
    assert_eq!(wait_exited(&p.h, &id).await.exit_code, 1);
    let first = log_file(&pc, "done/0.log");
    assert_eq!(
        records(&first),
        vec![rec("stdout", "F", "started"), rec("stdout", "P", "DONE")]
    );
    assert_eq!(kubelet_reads(&[&first]), "started\nDONE");
    assert_eq!(
        husk::kubelet::managers::status::log_tail(first.to_str().unwrap(), 80, 2048),
        "started\nDONE"
    );

    // Its restart writes a file of its own; the first keeps its records.
    let mut c = sh("done", "echo second; printf tail >&2");
    c.metadata.as_mut().unwrap().attempt = 1;
    c.log_path = "done/1.log".into();
    let id = create_start(&p.h, &pod, &pc, c).await;
    wait_exited(&p.h, &id).await;
    assert_eq!(
        records(&log_file(&pc, "done/1.log")),
        vec![rec("stdout", "F", "second"), rec("stderr", "P", "tail")]
    );
    assert_eq!(records(&first).len(), 2);

    // The line-length limit (16 KiB): a line of exactly the limit is one
    // full record; one byte more is cut after the limit; an unfinished
    // line of the limit is one partial.
    const MAX: usize = 16 * 1024;
    let fill = |n: usize, c: char| format!("head -c {n} /dev/zero | tr '\\0' {c}");
    let script = format!(
        "{}; echo; {}; echo; {}",
        fill(MAX, 'x'),
        fill(MAX + 1, 'y'),
        fill(MAX, 'z')
    );
    let id = create_start(&p.h, &pod, &pc, sh("limit", &script)).await;
    wait_exited(&p.h, &id).await;
    let limit = log_file(&pc, "limit/0.log");
    let x = |n: usize, c: &str| c.repeat(n);
    assert_eq!(
        records(&limit),
        vec![
            rec("stdout", "F", &x(MAX, "x")),
            rec("stdout", "P", &x(MAX, "y")),
            rec("stdout", "F", "y"),
            rec("stdout", "P", &x(MAX, "z")),
        ]
    );
    assert_eq!(
        kubelet_reads(&[&limit]),
        format!("{}\n{}\n{}", x(MAX, "x"), x(MAX + 1, "y"), x(MAX, "z"))
    );

    // stdout and stderr interleaved, each line unfinished for a while:
    // each stream's lines stay whole.
    let script =
        "printf out-a; echo err >&2; printf warn >&2; echo ' out-b'; echo ing >&2; printf end";
    let id = create_start(&p.h, &pod, &pc, sh("mixed", script)).await;
    wait_exited(&p.h, &id).await;
    let mixed = records(&log_file(&pc, "mixed/0.log"));
    assert_eq!(
        of("stdout", &mixed),
        vec![rec("stdout", "F", "out-a out-b"), rec("stdout", "P", "end")]
    );
    assert_eq!(
        of("stderr", &mixed),
        vec![rec("stderr", "F", "err"), rec("stderr", "F", "warning")]
    );

    // ReopenContainerLog in the middle of a line: what the container wrote
    // before it ends the old file (as a partial), the rest of the line
    // starts the new one. `mark` on stderr follows `hal` on stdout, so
    // once it is in the file, `hal` is in the shim's hands.
    let script = "printf hal; echo mark >&2; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo f; printf end";
    let id = create_start(&p.h, &pod, &pc, sh("reopen", script)).await;
    let log = log_file(&pc, "reopen/0.log");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("mark")
    {
        assert!(Instant::now() < deadline, "no mark in {}", log.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let old = log.with_extension("log.1");
    std::fs::rename(&log, &old).unwrap();
    let mut rt = p.h.runtime().await;
    rt.reopen_container_log(ReopenContainerLogRequest {
        container_id: id.clone(),
    })
    .await
    .unwrap();
    let r = rt
        .exec_sync(ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["touch".into(), "/tmp/go".into()],
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.exit_code, 0, "{r:?}");
    wait_exited(&p.h, &id).await;
    assert_eq!(
        records(&old),
        vec![rec("stderr", "F", "mark"), rec("stdout", "P", "hal")]
    );
    assert_eq!(
        records(&log),
        vec![rec("stdout", "F", "f"), rec("stdout", "P", "end")]
    );
    assert_eq!(kubelet_reads(&[&old, &log]), "mark\nhalf\nend");

    stop_remove_pod(&p.h, &pod).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}

/// Whoever sees a container exited finds all it wrote in its log: the shim
/// drains the pipes before it records the exit, as containerd waits for
/// its IO copy before it reports a task's exit. (The kubelet reads a
/// FallbackToLogsOnError termination message right after the exit.)
/// Each container's status is polled tightly, so the first EXITED seen
/// is checked, twenty times over.
#[tokio::test(flavor = "multi_thread")]
async fn the_log_holds_every_line_once_the_exit_is_seen() {
    if !common::require_root() {
        return;
    }
    let p = setup(vec![]).await;
    let image = app_image(&p).await;
    let pc = pod_config(&p, "drain");
    let pod = run(&p.h, pc.clone()).await.unwrap();
    for i in 0..20 {
        let name = format!("c{i}");
        let script = "echo out; echo err >&2; exit 3";
        let id = create_start(&p.h, &pod, &pc, ccfg(&image, &name, &[], &[script])).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let st = common::ctr::container_status(&p.h, &id).await;
            if st.state == ContainerState::ContainerExited as i32 {
                assert_eq!(st.exit_code, 3);
                break;
            }
            assert!(Instant::now() < deadline, "{name} did not exit");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let recs = records(&log_file(&pc, &format!("{name}/0.log")));
        assert!(
            recs.contains(&rec("stdout", "F", "out")) && recs.contains(&rec("stderr", "F", "err")),
            "{name}: {recs:?}"
        );
    }
    stop_remove_pod(&p.h, &pod).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
