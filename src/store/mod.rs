//! Durable records on disk: atomic, versioned JSON files.
//!
//! A record is written to a temp file beside its destination, fsynced,
//! renamed into place and the directory fsynced, so a reader (or a restart
//! after `kill -9`) sees either the old record or the new one, never a torn
//! one. Every record carries a `version` field; readers refuse versions newer
//! than they understand.

pub mod atomic;
pub mod modes;
