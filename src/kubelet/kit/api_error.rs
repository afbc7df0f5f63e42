//! An API server's answer, described for logs and tests of its code.

/// An error in one line: the API's code, reason and message, or the
/// transport's error.
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} {}: {}", s.code, s.reason, s.message),
        other => other.to_string(),
    }
}

/// The status code of an API error (None: not an API answer).
pub fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}
