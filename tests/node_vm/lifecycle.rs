//! A pod's life on cgroup v2, of the kubelet's usual shape (a PID
//! namespace per container, so no pause; its sysctls set by the server):
//! exec, attach and port-forward through the streaming server; a stop that
//! leaves nothing in the cgroup (through `cgroup.kill`); kill -9 of husk
//! serve and recovery; and nothing left after removal, cgroups included.

use super::*;
use common::ctr::{app_image, ccfg, container_status, create_start};
use common::pod::{leftovers, pause_pid, run, setup, status};
use common::stream::{attach_echo, exec_url, stdio};
use husk::streaming::client::{self, PortForwarder, Tls, Transport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn exec_stream(h: &Husk, id: &str, cmd: &[&str]) -> (i32, String) {
    let url = exec_url(h, id, cmd, false, false).await;
    let (io, o, _) = stdio(None, false);
    let code = client::remotecommand(&url, Transport::Spdy, &Tls::default(), io)
        .await
        .unwrap();
    (code, o.text())
}

async fn http_get(pf: &PortForwarder, port: u16) -> Option<String> {
    let (mine, theirs) = tokio::io::duplex(64 * 1024);
    let (mut r, mut w) = tokio::io::split(mine);
    w.write_all(b"GET /index.html HTTP/1.0\r\n\r\n")
        .await
        .ok()?;
    let reader = tokio::spawn(async move {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s).await;
        s
    });
    pf.forward(port, theirs).await.ok()?;
    drop(w);
    reader.await.ok()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "runs in the node VM (cgroup_v2_node)"]
async fn guest_exec_attach_port_forward_restart_and_cleanup() {
    guest();
    let mut p = setup(vec![]).await;
    let parent = kubelet_parent(&mut p);
    let image = app_image(&p).await;
    let mut pc = pod_under(&p, "life", &parent);
    let linux = pc.linux.as_mut().unwrap();
    linux.security_context = Some(LinuxSandboxSecurityContext {
        namespace_options: Some(NamespaceOption {
            pid: NamespaceMode::Container as i32,
            ..Default::default()
        }),
        ..Default::default()
    });
    linux.sysctls = [
        (
            "net.ipv4.ip_unprivileged_port_start".to_string(),
            "1024".to_string(),
        ),
        ("kernel.shmmni".to_string(), "2048".to_string()),
    ]
    .into();
    let pod = run(&p.h, pc.clone()).await.unwrap();
    assert_eq!(pause_pid(&status(&p.h, &pod).await.unwrap()), 0);
    let web = create_start(
        &p.h,
        &pod,
        &pc,
        ccfg(
            &image,
            "web",
            &[
                "sh",
                "-c",
                "mkdir -p /tmp/www && echo hello-v2 > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www",
            ],
            &[],
        ),
    )
    .await;
    let mut cat = ccfg(&image, "cat", &["cat"], &[]);
    cat.stdin = true;
    let cat = create_start(&p.h, &pod, &pc, cat).await;

    // exec, attach, port-forward.
    let (code, text) =
        exec_stream(&p.h, &web, &["sh", "-c", "cat /proc/self/cgroup; exit 3"]).await;
    assert_eq!((code, text.trim()), (3, "0::/"));
    let seen = out(
        &p.h,
        &web,
        "cat /proc/sys/net/ipv4/ip_unprivileged_port_start /proc/sys/kernel/shmmni",
    )
    .await;
    assert_eq!(
        seen.split_whitespace().collect::<Vec<_>>(),
        ["1024", "2048"]
    );
    let mut rt = p.h.runtime().await;
    let (_, echoed) =
        attach_echo(&mut rt, &cat, Transport::WebSocket, "echo-through-attach\n").await;
    assert!(echoed.contains("echo-through-attach"));
    let url =
        p.h.runtime()
            .await
            .port_forward(PortForwardRequest {
                pod_sandbox_id: pod.clone(),
                port: vec![],
            })
            .await
            .unwrap()
            .into_inner()
            .url;
    let pf = PortForwarder::connect(&url, Transport::Spdy, &Tls::default())
        .await
        .unwrap();
    let page = crate::wait_for!(60, "httpd", {
        match http_get(&pf, 8080).await {
            Some(s) if s.contains("hello-v2") => Some(s),
            _ => None,
        }
    });
    assert!(page.contains("200 OK"), "{page}");
    pf.close().await;

    // A stop leaves nothing in the container's cgroup: an exec'd process
    // that outlives the init included.
    out(&p.h, &web, "(sleep 3600 &) ; echo started").await;
    let web_cg = v2_dir(&format!("{parent}/{web}"));
    assert!(read(&web_cg.join("cgroup.procs")).lines().count() >= 2);
    p.h.runtime()
        .await
        .stop_container(StopContainerRequest {
            container_id: web.clone(),
            timeout: 2,
        })
        .await
        .unwrap();
    let left = std::fs::read_to_string(web_cg.join("cgroup.procs")).unwrap_or_default();
    assert!(left.trim().is_empty(), "left in the cgroup: {left}");

    // kill -9 of the server: the pod runs on and is found again.
    p.h.kill9();
    p.h.restart().await;
    let st = container_status(&p.h, &cat).await;
    assert_eq!(st.state, ContainerState::ContainerRunning as i32);
    assert_eq!(
        container_status(&p.h, &web).await.state,
        ContainerState::ContainerExited as i32
    );
    assert_eq!(out(&p.h, &cat, "cat /proc/self/cgroup").await, "0::/");

    common::pod::remove_listed(&p).await;
    assert_eq!(leftovers(&p), Vec::<String>::new());
    let left = child_cgroups(&v2_dir(&parent));
    assert!(left.is_empty(), "cgroups left under the pod: {left:?}");
    remove_parent(&parent);
}
