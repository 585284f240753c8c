//! The `claude` preset. CONTRACT(i19): filled by the agent's helper.

use super::{AgentName, AgentPreset, TestedWith};

pub(super) fn preset() -> AgentPreset {
    AgentPreset {
        name: AgentName::Claude,
        tested: TestedWith {
            package: "@anthropic-ai/claude-code",
            version: "2.1.197",
            bin: "claude",
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
