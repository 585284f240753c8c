//! Placeholder bench.
fn main() {}
