//! The `opencode` preset. CONTRACT(i19): filled by the agent's helper.

use super::{AgentName, AgentPreset, TestedWith};

pub(super) fn preset() -> AgentPreset {
    AgentPreset {
        name: AgentName::OpenCode,
        tested: TestedWith {
            package: "opencode-ai",
            version: "1.18.33",
            bin: "opencode",
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
