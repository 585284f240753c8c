//! Strict parsing of palisade's input formats, with precise diagnostics.
//!
//! This crate reads text that it is handed and returns typed values plus
//! [`Diagnostic`]s; it never opens files, reads the environment or the clock.
//! Every diagnostic names a stable [`code`](Diagnostic::code), the file, the
//! 1-based line and column of the offending node, and the authored path of
//! that node inside the document.

#![forbid(unsafe_code)]

pub mod diagnostic;
pub mod host_policy;

pub use diagnostic::{Diagnostic, LineIndex, Path, PathSegment, Severity};
