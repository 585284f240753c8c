//! The `codex` preset. CONTRACT(i19): filled by the agent's helper.

use super::{AgentName, AgentPreset, TestedWith};

pub(super) fn preset() -> AgentPreset {
    AgentPreset {
        name: AgentName::Codex,
        tested: TestedWith {
            package: "@openai/codex",
            version: "0.171.0",
            bin: "codex",
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
