//! What a request must carry, checked the same way by every handler: an
//! id that may not be empty, and a list filter's label selector.

use tonic::Status;

/// An id the caller must give: InvalidArgument naming the field if empty
/// (an empty id never names an object, and no prefix lookup may match it).
pub(crate) fn required(field: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!("{field} is required")));
    }
    Ok(())
}

/// Whether `labels` has every pair of a list filter's label selector.
pub(crate) fn selected(
    selector: &std::collections::HashMap<String, String>,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}
