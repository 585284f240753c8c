//! Linux worker sandboxes that fail closed: namespaces, host masks, Landlock, seccomp, capabilities.
