//! The kit: the vocabulary every other room of the kubelet speaks and
//! that depends on none of them: its settings, the CRI client and the
//! runtime's view of a pod, resource quantities, the API defaults of a
//! Pod, the labels on what it creates, back-off, the event recorder, and
//! where a pod stands in its lifecycle.

pub mod api_error;
pub mod backoff;
pub mod defaults;
pub mod labels;
pub mod log_reader;
pub mod node_config;
pub mod progress;
pub mod quantity;
pub mod recorder;
pub mod runtime;
pub mod runtime_node;
pub mod settings;
