//! The `pi` preset. CONTRACT(i19): filled by the agent's helper.

use super::{AgentName, AgentPreset, TestedWith};

pub(super) fn preset() -> AgentPreset {
    AgentPreset {
        name: AgentName::Pi,
        tested: TestedWith {
            package: "@mariozechner/pi-coding-agent",
            version: "0.73.1",
            bin: "pi",
        },
        relays: Vec::new(),
        env: Vec::new(),
        files: Vec::new(),
        state_dirs: Vec::new(),
        protected_home: Vec::new(),
        protected_workdir: Vec::new(),
        denied_hosts: Vec::new(),
    }
}
