//! The sticky session-taint state machine.
#![forbid(unsafe_code)]
