//! The ids a pod's or a container's process may run as: 0..=2^31-1,
//! wherever they come from (an image's `User`, its passwd or group file,
//! a security context). The kernel's setresuid reads -1 (4294967295) as
//! "unchanged", so an id beyond the bound would run the process as the
//! server's root; a string of digits is always an id, never a name.

/// An id out of range, said whole.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct IdError(pub String);

/// The largest id a container may run as (containerd's bound).
pub const MAX_ID: u32 = i32::MAX as u32;

/// An id: a string of digits, within 0..=[`MAX_ID`]. `Ok(None)` for a
/// string that is not all digits (a name).
pub fn parse_id(s: &str, kind: &str, what: &dyn Fn() -> String) -> Result<Option<u32>, IdError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(None);
    }
    match s.parse::<u64>() {
        Ok(n) if n <= u64::from(MAX_ID) => Ok(Some(n as u32)),
        _ => Err(IdError(format!(
            "{}: {kind} {s} is out of range (0 to {MAX_ID})",
            what()
        ))),
    }
}

/// `n` as an id within 0..=[`MAX_ID`], or an error naming `what`.
pub fn in_range(n: i64, what: &str) -> Result<u32, IdError> {
    match u32::try_from(n) {
        Ok(v) if v <= MAX_ID => Ok(v),
        _ => Err(IdError(format!(
            "{what} {n} is out of range (0 to {MAX_ID})"
        ))),
    }
}
