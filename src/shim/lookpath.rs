//! A container process's executable: found as runc finds it, and its
//! failures told in runc's words.
//!
//! - Before the init reports ready (so at CreateContainer, or at an exec's
//!   start), `argv[0]` is looked up in the process's `PATH` as Go's
//!   `exec.LookPath` does in `runc init`. A missing or unusable executable
//!   fails there with runc's message (`exec: "x": executable file not
//!   found in $PATH`), which the kubelet shows as the container's reason.
//! - The payload is then started with execv(2) on the path found. If the
//!   kernel still refuses it (an interpreter or dynamic loader missing, a
//!   binary of another architecture), the process says so on its stderr
//!   (`exec /app: exec format error`, the container's log) and exits 255,
//!   as runc's init does. Nothing of libcontainer's own tracing reaches the
//!   container's log.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What a failed lookup's message starts with; the shim finds the
/// message in libcontainer's error chain by it.
pub(super) const MARK: &str = "exec: \"";

/// A failed create or exec as the shim API tells it: the payload's
/// executable not found or not runnable is the request's problem,
/// FailedPrecondition (9) with runc's words after `what`, as an OCI
/// runtime's refusal is; anything else is husk's, Internal (13) as it was
/// said (`e` already names what failed).
pub(super) fn failure(what: &str, e: String) -> (i32, String) {
    match e.find(MARK) {
        Some(i) => (9, format!("{what}: {}", &e[i..])),
        None => (13, e),
    }
}

/// The executable `name` names for a process whose `PATH` is `path_var`:
/// Go's `exec.LookPath`, with its error text.
pub(super) fn look_path(name: &str, path_var: &str) -> Result<PathBuf, String> {
    if name.is_empty() {
        return Err(format!("{MARK}\": executable file not found in $PATH"));
    }
    if name.contains('/') {
        return find_executable(Path::new(name))
            .map(|()| PathBuf::from(name))
            .map_err(|e| format!("{MARK}{name}\": {e}"));
    }
    for dir in path_var.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let p = Path::new(dir).join(name);
        if find_executable(&p).is_ok() {
            if !p.is_absolute() {
                return Err(format!(
                    "{MARK}{name}\": cannot run executable found relative to current directory"
                ));
            }
            return Ok(p);
        }
    }
    Err(format!(
        "{MARK}{name}\": executable file not found in $PATH"
    ))
}

/// Go's `findExecutable`: a file (not a directory) this process may
/// execute, as eaccess(2) judges it for the process's effective ids.
fn find_executable(p: &Path) -> Result<(), String> {
    let meta =
        std::fs::metadata(p).map_err(|e| format!("stat {}: {}", p.display(), errno_text(&e)))?;
    if meta.is_dir() {
        return Err(errno_text(&std::io::Error::from_raw_os_error(libc::EISDIR)));
    }
    let c = CString::new(p.as_os_str().as_bytes()).map_err(|_| "invalid argument".to_string())?;
    // SAFETY: faccessat(2) on a NUL-terminated path.
    let r = unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::X_OK, libc::AT_EACCESS) };
    if r == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOSYS) | Some(libc::EPERM) => {
            use std::os::unix::fs::PermissionsExt;
            if meta.permissions().mode() & 0o111 != 0 {
                Ok(())
            } else {
                Err(errno_text(&std::io::Error::from_raw_os_error(libc::EACCES)))
            }
        }
        _ => Err(errno_text(&e)),
    }
}

/// An errno as Go prints it: the C library's text, lower-cased first
/// letter, no "(os error N)".
pub(super) fn errno_text(e: &std::io::Error) -> String {
    let Some(n) = e.raw_os_error() else {
        return e.to_string();
    };
    // SAFETY: strerror returns a static, NUL-terminated string.
    let s = unsafe { std::ffi::CStr::from_ptr(libc::strerror(n)) }
        .to_string_lossy()
        .into_owned();
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => s,
    }
}

/// The process's `argv[0]` and `PATH` from its spec.
fn argv_and_path(
    spec: &libcontainer::oci_spec::runtime::Spec,
) -> Result<(Vec<String>, String), String> {
    let p = spec.process().as_ref().ok_or("the spec has no process")?;
    let args = p.args().clone().unwrap_or_default();
    if args.is_empty() {
        return Err("the process has no args".into());
    }
    let path = p
        .env()
        .as_ref()
        .and_then(|e| e.iter().find_map(|v| v.strip_prefix("PATH=")))
        .unwrap_or("")
        .to_string();
    Ok((args, path))
}

/// The check before the init reports ready.
pub(super) fn validate(
    spec: &libcontainer::oci_spec::runtime::Spec,
) -> Result<(), libcontainer::workload::ExecutorValidationError> {
    let (args, path) = argv_and_path(spec)
        .map_err(libcontainer::workload::ExecutorValidationError::ArgValidationError)?;
    look_path(&args[0], &path)
        .map(drop)
        .map_err(libcontainer::workload::ExecutorValidationError::ArgValidationError)
}

/// Replaces the process with the payload; on failure, says why on stderr
/// and exits 255 (it never returns into libcontainer, whose tracing would
/// land in the container's log).
pub(super) fn exec(spec: &libcontainer::oci_spec::runtime::Spec) -> ! {
    let fail = |msg: String| -> ! {
        let line = format!("{msg}\n");
        // SAFETY: write(2) to stderr, then _exit(2): nothing else runs.
        unsafe {
            libc::write(2, line.as_ptr().cast(), line.len());
            libc::_exit(255)
        }
    };
    let (args, path) = argv_and_path(spec).unwrap_or_else(|e| fail(e));
    let exe = look_path(&args[0], &path).unwrap_or_else(|e| fail(e));
    let Ok(c_exe) = CString::new(exe.as_os_str().as_bytes()) else {
        fail(format!("exec {}: invalid argument", exe.display()))
    };
    let Ok(c_args) = args
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()
    else {
        fail(format!("exec {}: invalid argument", exe.display()))
    };
    let mut argv: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    loop {
        // SAFETY: execv(2) with NUL-terminated strings and a NULL-ended
        // argv that outlive the call; the environment is the process's,
        // set by libcontainer.
        unsafe { libc::execv(c_exe.as_ptr(), argv.as_ptr()) };
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            fail(format!("exec {}: {}", exe.display(), errno_text(&e)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_name_reads_as_runc_says_it() {
        let d = tempfile::tempdir().expect("tmp");
        let path = d.path().display().to_string();
        assert_eq!(
            look_path("no-such-exe", &path),
            Err("exec: \"no-such-exe\": executable file not found in $PATH".into())
        );
        let abs = d.path().join("nope");
        assert_eq!(
            look_path(&abs.display().to_string(), &path),
            Err(format!(
                "exec: \"{0}\": stat {0}: no such file or directory",
                abs.display()
            ))
        );
        assert_eq!(
            look_path(&path, ""),
            Err(format!("exec: \"{path}\": is a directory"))
        );
    }

    #[test]
    fn an_executable_is_found_in_path_order_and_a_plain_file_is_not() {
        use std::os::unix::fs::PermissionsExt;
        let a = tempfile::tempdir().expect("tmp");
        let b = tempfile::tempdir().expect("tmp");
        let plain = a.path().join("tool");
        std::fs::write(&plain, "x").expect("write");
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let exe = b.path().join("tool");
        std::fs::write(&exe, "x").expect("write");
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let path = format!("{}:{}", a.path().display(), b.path().display());
        assert_eq!(look_path("tool", &path), Ok(exe));
        // Named by its path, a file without an execute bit is refused.
        assert_eq!(
            look_path(&plain.display().to_string(), &path),
            Err(format!("exec: \"{}\": permission denied", plain.display()))
        );
        // Found only through an empty (current directory) PATH entry.
        assert!(look_path("tool", "")
            .expect_err("not found")
            .ends_with("executable file not found in $PATH"));
    }

    #[test]
    fn a_lookup_failure_is_the_request_s_and_keeps_only_runc_s_words() {
        let chain = "create container c: failed to create container: exec process failed \
                     with error error in executing process : exec: \"x\": executable file not found in $PATH";
        assert_eq!(
            failure("create container c", chain.into()),
            (
                9,
                "create container c: exec: \"x\": executable file not found in $PATH".into()
            )
        );
        assert_eq!(
            failure("create container c", "fork: out of memory".into()),
            (13, "fork: out of memory".into())
        );
    }

    #[test]
    fn errno_reads_as_go_prints_it() {
        let t = |n| errno_text(&std::io::Error::from_raw_os_error(n));
        assert_eq!(t(libc::ENOENT), "no such file or directory");
        assert_eq!(t(libc::ENOEXEC), "exec format error");
        assert_eq!(t(libc::EACCES), "permission denied");
    }
}
