//! CDI devices through a real husk serve: a test vendor's spec (a
//! `/dev/null`-like node, a mount, environment, a group) seen inside
//! containers that ask by `cdi_devices` and by `cdi.k8s.io/` annotation;
//! a later spec dir overriding an earlier one; and the refusals (a name
//! no spec defines, a spec that does not parse, a device two files of one
//! dir define), each InvalidArgument naming it with nothing left behind.
#![allow(clippy::unwrap_used)]

mod common;

use common::ctr::*;
use common::pod;
use husk::api::cri::*;
use tonic::Code;

fn vendor_spec(mount_source: &std::path::Path, env: &str) -> String {
    format!(
        r#"{{"cdiVersion": "0.6.0", "kind": "test.husk.dev/null",
  "containerEdits": {{"env": ["CDI_SPEC=1"]}},
  "devices": [{{"name": "n0", "containerEdits": {{
      "deviceNodes": [{{"path": "/dev/cdi-null", "hostPath": "/dev/null"}}],
      "mounts": [{{"hostPath": "{}", "containerPath": "/etc/cdi-vendor", "options": ["ro"]}}],
      "env": ["{env}"],
      "additionalGIDs": [4242]}}}}]}}"#,
        mount_source.display()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn cdi_devices_are_injected_or_refused() {
    if !common::require_root() {
        return;
    }
    let dirs = tempfile::tempdir().unwrap();
    let (etc, run) = (dirs.path().join("etc"), dirs.path().join("run"));
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::create_dir_all(&run).unwrap();
    let source = dirs.path().join("vendor.conf");
    std::fs::write(&source, "vendor config\n").unwrap();
    std::fs::write(
        etc.join("vendor.json"),
        vendor_spec(&source, "CDI_FROM=etc"),
    )
    .unwrap();
    let p = pod::setup_with(
        vec![],
        "/usr/lib/cni",
        vec![
            "--cdi-spec-dirs".into(),
            format!("{}:{}", etc.display(), run.display()),
        ],
    )
    .await;
    let app = app_image(&p).await;
    let mut pc = pod_config(&p, "cdi");
    pod::host_network(&mut pc);
    let pod_id = pod::run(&p.h, pc.clone()).await.unwrap();

    // By the CRI field.
    let mut c = ccfg(&app, "field", &[], &[]);
    c.cdi_devices = vec![CdiDevice {
        name: "test.husk.dev/null=n0".into(),
    }];
    let id = create_start(&p.h, &pod_id, &pc, c).await;
    let node = sh(&p, &id, "stat -c '%F %t:%T' /dev/cdi-null").await;
    assert_eq!(node.trim(), "character special file 1:3");
    sh(&p, &id, "echo gone > /dev/cdi-null").await;
    assert_eq!(sh(&p, &id, "cat /etc/cdi-vendor").await, "vendor config\n");
    assert_eq!(sh(&p, &id, "echo $CDI_FROM $CDI_SPEC").await, "etc 1\n");
    assert!(sh(&p, &id, "id -G")
        .await
        .split_whitespace()
        .any(|g| g == "4242"));
    stop_remove(&p.h, &id).await;

    // By annotation, with a later dir's YAML spec overriding the device.
    std::fs::write(
        run.join("vendor.yaml"),
        "cdiVersion: 1.0.0\nkind: test.husk.dev/null\ndevices:\n- name: n0\n  containerEdits:\n    env: [CDI_FROM=run]\n    deviceNodes: [{path: /dev/cdi-null, hostPath: /dev/null}]\n",
    )
    .unwrap();
    let mut c = ccfg(&app, "annotated", &[], &[]);
    c.annotations
        .insert("cdi.k8s.io/test".into(), "test.husk.dev/null=n0".into());
    let id = create_start(&p.h, &pod_id, &pc, c).await;
    assert_eq!(sh(&p, &id, "echo $CDI_FROM").await, "run\n");
    assert_eq!(
        sh(&p, &id, "test -e /etc/cdi-vendor || echo absent").await,
        "absent\n"
    );
    stop_remove(&p.h, &id).await;

    // Refusals, before anything is made.
    let containers = p.h.root().join("containers");
    let before = common::count_files(&containers);
    let refused = |name: &str, device: &str| {
        let mut c = ccfg(&app, name, &[], &[]);
        c.cdi_devices = vec![CdiDevice {
            name: device.into(),
        }];
        c
    };
    let e = try_create(
        &p.h,
        &pod_id,
        &pc,
        refused("unknown", "test.husk.dev/null=n9"),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("test.husk.dev/null=n9"), "{e:?}");
    let e = try_create(&p.h, &pod_id, &pc, refused("malformed", "no-kind"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    std::fs::write(run.join("broken.yaml"), "cdiVersion: [").unwrap();
    let e = try_create(
        &p.h,
        &pod_id,
        &pc,
        refused("broken", "test.husk.dev/null=n0"),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("broken.yaml"), "{e:?}");
    std::fs::remove_file(run.join("broken.yaml")).unwrap();
    std::fs::write(
        run.join("again.json"),
        vendor_spec(&source, "CDI_FROM=again"),
    )
    .unwrap();
    let e = try_create(
        &p.h,
        &pod_id,
        &pc,
        refused("conflict", "test.husk.dev/null=n0"),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains("again.json") && e.message().contains("vendor.yaml"),
        "{e:?}"
    );
    assert_eq!(
        common::count_files(&containers),
        before,
        "a refused create left files"
    );
    stop_remove_pod(&p.h, &pod_id).await;
    assert!(pod::leftovers(&p).is_empty(), "{:?}", pod::leftovers(&p));
}
