//! Pure decisions: tool authority and provider translation, trigger admission, egress, outward actions and routing.
#![forbid(unsafe_code)]
