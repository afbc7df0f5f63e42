//! A container's executable missing or not runnable, on husk's own path
//! and under runc 1.4.3 (`../shared/shims/`) side by side in one server:
//! husk answers as runc does.
//!
//! - Not found, not executable, a directory: CreateContainer (and an
//!   ExecSync) fails with FailedPrecondition and runc's words
//!   (`exec: "x": executable file not found in $PATH`), which the kubelet
//!   shows as the container's reason; nothing of the container is left.
//! - Found, but the kernel refuses it (its interpreter is missing): the
//!   container starts, says `exec /bin/x: no such file or directory` on
//!   stderr (its log, one line, nothing of the runtime's own) and exits
//!   255.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::{ccfg, create_start, pod_config, wait_exited};
use common::images::{busybox_entries, Compression, Entry, Format, Layer, Pusher};
use common::pod::*;
use husk::api::cri::*;
use tonic::Code;

async fn image(p: &Pod) -> String {
    let mut e = busybox_entries();
    e.push(Entry::File(
        "bin/noint".into(),
        b"#!/bin/missing\necho hi\n".to_vec(),
        0o755,
    ));
    e.push(Entry::File(
        "bin/noexec".into(),
        b"#!/bin/sh\necho hi\n".to_vec(),
        0o644,
    ));
    let img = common::images::Image::with_config(
        vec![Layer::new(&e, Compression::Gzip)],
        "amd64",
        serde_json::json!({"Env": ["PATH=/bin"]}),
    );
    Pusher::new(&p.reg)
        .image("app/payload", "v1", &img, Format::Oci)
        .await;
    let r = format!("{}/app/payload:v1", p.reg.host());
    p.h.pull(&r).await.unwrap();
    r
}

/// What CreateContainer answered for `cmd`: its code and message.
async fn create_fails(
    p: &Pod,
    pod: &str,
    pc: &PodSandboxConfig,
    image: &str,
    cmd: &[&str],
) -> (Code, String) {
    let e =
        p.h.runtime()
            .await
            .create_container(CreateContainerRequest {
                pod_sandbox_id: pod.into(),
                config: Some(ccfg(image, "bad", cmd, &[])),
                sandbox_config: Some(pc.clone()),
            })
            .await
            .expect_err("refused at create");
    (e.code(), e.message().to_string())
}

/// The words runc says, after the handler's own prefix.
fn words(msg: &str) -> &str {
    &msg[msg
        .find("exec: \"")
        .unwrap_or_else(|| panic!("runc's words in {msg:?}"))..]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_or_unrunnable_executable_fails_as_runc_says() {
    if !common::require_root() {
        return;
    }
    let runc = common::shared("shims/runc-1.4.3");
    let cfg = format!(
        "[runtimes.runc14]\ntype = \"oci\"\npath = \"{}\"\n",
        runc.display()
    );
    let p = setup_config(vec![], "/usr/lib/cni", vec![], &cfg).await;
    let image = image(&p).await;

    let mut said = Vec::new();
    for handler in ["", "runc14"] {
        let pc = pod_config(&p, &format!("payload{handler}"));
        let pod = run_under(&p.h, pc.clone(), handler).await.unwrap();
        let mut answers = Vec::new();
        for cmd in ["no-such-exe", "/bin/nope", "/bin/noexec", "noexec", "/bin"] {
            let (code, msg) = create_fails(&p, &pod, &pc, &image, &[cmd]).await;
            assert_eq!(code, Code::FailedPrecondition, "{handler:?} {cmd}: {msg}");
            answers.push(words(&msg).to_string());
        }
        // Nothing of the refused containers is listed.
        let mine = list_containers(&p)
            .await
            .into_iter()
            .filter(|c| c.pod_sandbox_id == pod)
            .count();
        assert_eq!(mine, 0, "{handler:?}");

        // Found, but the kernel cannot run it.
        let id = create_start(&p.h, &pod, &pc, ccfg(&image, "noint", &["noint"], &[])).await;
        let st = wait_exited(&p.h, &id).await;
        assert_eq!(
            (st.exit_code, st.reason.as_str()),
            (255, "Error"),
            "{handler:?}"
        );
        let log =
            std::fs::read_to_string(std::path::Path::new(&pc.log_directory).join("noint/0.log"))
                .unwrap();
        let lines: Vec<&str> = log
            .lines()
            .map(|l| l.splitn(4, ' ').nth(3).unwrap_or(""))
            .collect();
        answers.push(lines.join("\n"));

        // An exec of a missing command in a running container.
        let sleeper = create_start(
            &p.h,
            &pod,
            &pc,
            ccfg(&image, "sleeper", &["sleep", "100"], &[]),
        )
        .await;
        let e =
            p.h.runtime()
                .await
                .exec_sync(ExecSyncRequest {
                    container_id: sleeper,
                    cmd: vec!["no-such".into()],
                    timeout: 10,
                })
                .await
                .expect_err("refused");
        assert_eq!(e.code(), Code::FailedPrecondition, "{handler:?}: {e:?}");
        answers.push(words(e.message()).to_string());
        said.push(answers);
    }
    assert_eq!(
        said[0],
        [
            "exec: \"no-such-exe\": executable file not found in $PATH",
            "exec: \"/bin/nope\": stat /bin/nope: no such file or directory",
            "exec: \"/bin/noexec\": permission denied",
            "exec: \"noexec\": executable file not found in $PATH",
            "exec: \"/bin\": is a directory",
            "exec /bin/noint: no such file or directory",
            "exec: \"no-such\": executable file not found in $PATH",
        ]
    );
    assert_eq!(said[0], said[1], "husk's own path and runc 1.4.3");

    remove_listed(&p).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
}
