//! Seccomp profiles for containers.
//!
//! - Unset (and the deprecated empty path) or `Unconfined`: no filter.
//! - `RuntimeDefault`: husk's default profile, an allowlist with the same
//!   reach as containerd's and Docker's default profiles. Every system call
//!   it does not name fails with EPERM. On top of the common list:
//!   - calls that need a capability are allowed only when the container's
//!     bounding set holds it (mount, unshare and setns with
//!     CAP_SYS_ADMIN; kcmp and process_vm_* with CAP_SYS_PTRACE; ...);
//!   - without CAP_SYS_ADMIN, clone(2) may not create namespaces, and
//!     clone3 fails with ENOSYS (its flags cannot be inspected, and ENOSYS
//!     makes libc fall back to clone);
//!   - personality(2) is limited to the harmless personas;
//!   - x86-64 adds arch_prctl and modify_ldt.
//!
//!   Names the host's libseccomp does not know are skipped when the filter
//!   is built, so the list may name calls newer than the host.
//! - `Localhost`: the OCI fields (`defaultAction`, `architectures`,
//!   `syscalls`, `defaultErrnoRet`, `flags`) of the JSON profile at the path.
//! - Privileged containers get no filter.

use super::ProfileError;
use crate::api::cri::{security_profile::ProfileType, SecurityProfile};
use serde_json::{json, Value};

/// The system calls every container may make under the default profile,
/// separated by whitespace.
pub const ALLOWED: &str = "\
    accept accept4 access adjtimex alarm bind brk capget capset chdir chmod chown chown32 \
    clock_adjtime clock_adjtime64 clock_getres clock_getres_time64 clock_gettime \
    clock_gettime64 clock_nanosleep clock_nanosleep_time64 close close_range connect \
    copy_file_range creat dup dup2 dup3 epoll_create epoll_create1 epoll_ctl epoll_ctl_old \
    epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old eventfd eventfd2 execve execveat exit \
    exit_group faccessat faccessat2 fadvise64 fadvise64_64 fallocate fanotify_mark fchdir \
    fchmod fchmodat fchown fchown32 fchownat fcntl fcntl64 fdatasync fgetxattr flistxattr \
    flock fork fremovexattr fsetxattr fstat fstat64 fstatat64 fstatfs fstatfs64 fsync \
    ftruncate ftruncate64 futex futex_time64 futex_waitv futimesat getcpu getcwd getdents \
    getdents64 getegid getegid32 geteuid geteuid32 getgid getgid32 getgroups getgroups32 \
    getitimer getpeername getpgid getpgrp getpid getppid getpriority getrandom getresgid \
    getresgid32 getresuid getresuid32 getrlimit get_robust_list getrusage getsid getsockname \
    getsockopt get_thread_area gettid gettimeofday getuid getuid32 getxattr \
    inotify_add_watch inotify_init inotify_init1 inotify_rm_watch io_cancel ioctl io_destroy \
    io_getevents io_pgetevents io_pgetevents_time64 ioprio_get ioprio_set io_setup io_submit \
    io_uring_enter io_uring_register io_uring_setup ipc kill landlock_add_rule \
    landlock_create_ruleset landlock_restrict_self lchown lchown32 lgetxattr link linkat \
    listen listxattr llistxattr _llseek lremovexattr lseek lsetxattr lstat lstat64 madvise \
    membarrier memfd_create memfd_secret mincore mkdir mkdirat mknod mknodat mlock mlock2 \
    mlockall mmap mmap2 mprotect mq_getsetattr mq_notify mq_open mq_timedreceive \
    mq_timedreceive_time64 mq_timedsend mq_timedsend_time64 mq_unlink mremap msgctl msgget \
    msgrcv msgsnd msync munlock munlockall munmap nanosleep newfstatat _newselect open \
    openat openat2 pause pidfd_open pidfd_send_signal pipe pipe2 poll ppoll ppoll_time64 \
    prctl pread64 preadv preadv2 prlimit64 process_mrelease pselect6 pselect6_time64 ptrace \
    pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv recv recvfrom \
    recvmmsg recvmmsg_time64 recvmsg remap_file_pages removexattr rename renameat renameat2 \
    restart_syscall rmdir rseq rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo \
    rt_sigreturn rt_sigsuspend rt_sigtimedwait rt_sigtimedwait_time64 rt_tgsigqueueinfo \
    sched_getaffinity sched_getattr sched_getparam sched_get_priority_max \
    sched_get_priority_min sched_getscheduler sched_rr_get_interval \
    sched_rr_get_interval_time64 sched_setaffinity sched_setattr sched_setparam \
    sched_setscheduler sched_yield seccomp select semctl semget semop semtimedop \
    semtimedop_time64 send sendfile sendfile64 sendmmsg sendmsg sendto setfsgid setfsgid32 \
    setfsuid setfsuid32 setgid setgid32 setgroups setgroups32 setitimer setpgid setpriority \
    setregid setregid32 setresgid setresgid32 setresuid setresuid32 setreuid setreuid32 \
    setrlimit set_robust_list setsid setsockopt set_thread_area set_tid_address setuid \
    setuid32 setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4 \
    sigprocmask sigreturn socket socketcall socketpair splice stat stat64 statfs statfs64 \
    statx symlink symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create \
    timer_delete timer_getoverrun timer_gettime timer_gettime64 timer_settime \
    timer_settime64 timerfd_create timerfd_gettime timerfd_gettime64 timerfd_settime \
    timerfd_settime64 times tkill truncate truncate64 ugetrlimit umask uname unlink unlinkat \
    utime utimensat utimensat_time64 utimes vfork vmsplice wait4 waitid waitpid write writev";

/// Allowed on x86-64 only.
const ALLOWED_X86_64: &[&str] = &["arch_prctl", "modify_ldt"];

/// System calls allowed when the container's bounding set holds the
/// capability.
const BY_CAPABILITY: &[(&str, &[&str])] = &[
    ("CAP_DAC_READ_SEARCH", &["open_by_handle_at"]),
    (
        "CAP_SYS_ADMIN",
        &[
            "bpf",
            "clone",
            "clone3",
            "fanotify_init",
            "fsconfig",
            "fsmount",
            "fsopen",
            "fspick",
            "lookup_dcookie",
            "mount",
            "mount_setattr",
            "move_mount",
            "name_to_handle_at",
            "open_tree",
            "perf_event_open",
            "quotactl",
            "quotactl_fd",
            "setdomainname",
            "sethostname",
            "setns",
            "syslog",
            "umount",
            "umount2",
            "unshare",
        ],
    ),
    ("CAP_SYS_BOOT", &["reboot"]),
    ("CAP_SYS_CHROOT", &["chroot"]),
    (
        "CAP_SYS_MODULE",
        &["delete_module", "init_module", "finit_module"],
    ),
    ("CAP_SYS_PACCT", &["acct"]),
    (
        "CAP_SYS_PTRACE",
        &[
            "kcmp",
            "pidfd_getfd",
            "process_madvise",
            "process_vm_readv",
            "process_vm_writev",
            "ptrace",
        ],
    ),
    ("CAP_SYS_RAWIO", &["iopl", "ioperm"]),
    (
        "CAP_SYS_TIME",
        &["settimeofday", "stime", "clock_settime", "clock_settime64"],
    ),
    ("CAP_SYS_TTY_CONFIG", &["vhangup"]),
    ("CAP_SYSLOG", &["syslog"]),
    ("CAP_BPF", &["bpf"]),
    ("CAP_PERFMON", &["perf_event_open"]),
];

/// personality(2) values allowed: PER_LINUX, UNAME26, PER_LINUX32,
/// UNAME26|PER_LINUX32, and the query (0xffffffff).
const PERSONAS: &[u64] = &[0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

/// The namespace flags of clone(2): CLONE_NEWNS, NEWCGROUP, NEWUTS,
/// NEWIPC, NEWUSER, NEWPID and NEWNET.
const CLONE_NAMESPACES: u64 = 0x7E02_0000;

const EPERM: u32 = 1;
const ENOSYS: u32 = 38;

/// The default profile in OCI form for a container whose bounding set is
/// `bounding` (names in the `CAP_*` form).
pub fn runtime_default(bounding: &[String]) -> Value {
    let has = |c: &str| bounding.iter().any(|b| b == c);
    let allowed: Vec<&str> = ALLOWED.split_whitespace().collect();
    let mut rules = vec![json!({"names": allowed, "action": "SCMP_ACT_ALLOW"})];
    for p in PERSONAS {
        rules.push(json!({
            "names": ["personality"],
            "action": "SCMP_ACT_ALLOW",
            "args": [{"index": 0, "value": p, "op": "SCMP_CMP_EQ"}],
        }));
    }
    if cfg!(target_arch = "x86_64") {
        rules.push(json!({"names": ALLOWED_X86_64, "action": "SCMP_ACT_ALLOW"}));
    }
    for (cap, names) in BY_CAPABILITY {
        if has(cap) {
            rules.push(json!({"names": names, "action": "SCMP_ACT_ALLOW"}));
        }
    }
    if !has("CAP_SYS_ADMIN") {
        rules.push(json!({
            "names": ["clone"],
            "action": "SCMP_ACT_ALLOW",
            "args": [{"index": 0, "value": CLONE_NAMESPACES, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
        }));
        rules.push(json!({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS}));
    }
    json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": EPERM,
        "architectures": architectures(),
        "syscalls": rules,
    })
}

fn architectures() -> &'static [&'static str] {
    if cfg!(target_arch = "x86_64") {
        &["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]
    } else if cfg!(target_arch = "aarch64") {
        &["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"]
    } else {
        &[]
    }
}

/// Profiles follow runc's reading of `SCMP_CMP_MASKED_EQ` (`value` is
/// the mask, `valueTwo` the value the masked argument must equal), which
/// containerd's and Docker's profiles are written for. libcontainer reads
/// the two the other way round, so they are swapped on the way in: a
/// profile means the same under husk as under runc.
fn for_libcontainer(mut p: Value) -> Value {
    for rule in p["syscalls"].as_array_mut().into_iter().flatten() {
        for arg in rule["args"].as_array_mut().into_iter().flatten() {
            if arg["op"] == "SCMP_CMP_MASKED_EQ" {
                let mask = arg["value"].take();
                let datum = arg.get("valueTwo").cloned().unwrap_or(json!(0));
                arg["value"] = datum;
                arg["valueTwo"] = mask;
            }
        }
    }
    p
}

/// The `linux.seccomp` of a container, or None for no filter.
pub fn profile(
    p: Option<&SecurityProfile>,
    deprecated_path: &str,
    privileged: bool,
    bounding: &[String],
) -> Result<Option<Value>, ProfileError> {
    if privileged {
        return Ok(None);
    }
    let (kind, reference) = match p {
        Some(p) => (
            ProfileType::try_from(p.profile_type).unwrap_or(ProfileType::RuntimeDefault),
            p.localhost_ref.clone(),
        ),
        None => match deprecated_path {
            "" | "unconfined" => return Ok(None),
            "runtime/default" | "docker/default" => (ProfileType::RuntimeDefault, String::new()),
            other => (
                ProfileType::Localhost,
                other.trim_start_matches("localhost/").to_string(),
            ),
        },
    };
    match kind {
        ProfileType::Unconfined => Ok(None),
        ProfileType::RuntimeDefault => Ok(Some(for_libcontainer(runtime_default(bounding)))),
        ProfileType::Localhost => {
            let text = std::fs::read(&reference)
                .map_err(|e| ProfileError(format!("seccomp profile {reference:?}: {e}")))?;
            let v: Value = serde_json::from_slice(&text)
                .map_err(|e| ProfileError(format!("seccomp profile {reference:?}: {e}")))?;
            let mut out = serde_json::Map::new();
            for k in [
                "defaultAction",
                "defaultErrnoRet",
                "architectures",
                "flags",
                "syscalls",
            ] {
                if let Some(x) = v.get(k) {
                    out.insert(k.to_string(), x.clone());
                }
            }
            if !out.contains_key("defaultAction") {
                return Err(ProfileError(format!(
                    "seccomp profile {reference:?} has no defaultAction"
                )));
            }
            Ok(Some(for_libcontainer(Value::Object(out))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(p: &Value, name: &str) -> Vec<Value> {
        p["syscalls"]
            .as_array()
            .expect("rules")
            .iter()
            .filter(|r| {
                r["names"]
                    .as_array()
                    .expect("names")
                    .iter()
                    .any(|n| n == name)
            })
            .cloned()
            .collect()
    }

    #[test]
    fn the_default_is_an_allowlist_widened_by_capabilities() {
        let plain = runtime_default(&["CAP_CHOWN".into()]);
        assert_eq!(plain["defaultAction"], "SCMP_ACT_ERRNO");
        assert_eq!(plain["defaultErrnoRet"], 1);
        assert_eq!(allowed(&plain, "read").len(), 1);
        for denied in [
            "mount",
            "unshare",
            "setns",
            "kexec_load",
            "reboot",
            "init_module",
            "bpf",
        ] {
            assert!(allowed(&plain, denied).is_empty(), "{denied}");
        }
        // clone only without namespace flags; clone3 answers ENOSYS.
        let clone = allowed(&plain, "clone");
        assert_eq!(clone.len(), 1);
        assert_eq!(clone[0]["args"][0]["op"], "SCMP_CMP_MASKED_EQ");
        assert_eq!(allowed(&plain, "clone3")[0]["errnoRet"], 38);
        let swapped = for_libcontainer(plain.clone());
        let arg = &allowed(&swapped, "clone")[0]["args"][0];
        assert_eq!(
            (&arg["value"], &arg["valueTwo"]),
            (&json!(0), &json!(0x7E02_0000u64))
        );

        let admin = runtime_default(&["CAP_SYS_ADMIN".into(), "CAP_SYS_PTRACE".into()]);
        for name in ["mount", "unshare", "setns", "clone3", "process_vm_readv"] {
            let r = allowed(&admin, name);
            assert_eq!(r.len(), 1, "{name}");
            assert_eq!(r[0]["action"], "SCMP_ACT_ALLOW", "{name}");
            assert!(r[0].get("args").is_none(), "{name}");
        }
        assert!(allowed(&admin, "reboot").is_empty());
        assert_eq!(allowed(&admin, "personality").len(), PERSONAS.len());
    }

    #[test]
    fn profile_selection() {
        assert_eq!(profile(None, "", false, &[]).expect("unset"), None);
        let rd = SecurityProfile {
            profile_type: ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        };
        assert!(profile(Some(&rd), "", false, &[])
            .expect("default")
            .is_some());
        assert_eq!(profile(Some(&rd), "", true, &[]).expect("privileged"), None);
        let un = SecurityProfile {
            profile_type: ProfileType::Unconfined as i32,
            localhost_ref: String::new(),
        };
        assert_eq!(
            profile(Some(&un), "", false, &[]).expect("unconfined"),
            None
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("p.json");
        std::fs::write(&f, r#"{"defaultAction":"SCMP_ACT_ERRNO","archMap":[],"syscalls":[{"names":["read"],"action":"SCMP_ACT_ALLOW"}]}"#).expect("w");
        let lh = SecurityProfile {
            profile_type: ProfileType::Localhost as i32,
            localhost_ref: f.display().to_string(),
        };
        let v = profile(Some(&lh), "", false, &[])
            .expect("localhost")
            .expect("some");
        assert_eq!(v["defaultAction"], "SCMP_ACT_ERRNO");
        assert!(v.get("archMap").is_none(), "only OCI fields pass");
        let missing = SecurityProfile {
            profile_type: ProfileType::Localhost as i32,
            localhost_ref: "/nonexistent".into(),
        };
        assert!(profile(Some(&missing), "", false, &[]).is_err());
    }
}
