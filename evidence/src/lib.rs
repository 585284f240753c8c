//! A sealed, append-only journal that detects tampering, reordering and truncation.
#![forbid(unsafe_code)]
