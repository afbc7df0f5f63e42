//! The Debian package of this build's binary, made by
//! `packaging/build-deb.sh` (uncompressed: a test's package need not be
//! small).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds the .deb into `out`; its path.
pub fn build_package(out: &Path) -> PathBuf {
    let o = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/packaging/build-deb.sh"
        ))
        .env("HUSK", env!("CARGO_BIN_EXE_husk"))
        .env("DEB_COMPRESSION", "none")
        .env("OUT", out)
        .output()
        .expect("run build-deb.sh");
    assert!(
        o.status.success(),
        "build-deb.sh: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())
}
