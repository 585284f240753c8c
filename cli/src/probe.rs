//! `palisade probe`: report every isolation layer as active, degraded or
//! unavailable, with the kernel facts behind it, and the read observer a
//! governed session would run (`read_observer`; it does not decide
//! readiness: only a policy naming watched paths needs it).

use std::process::ExitCode;

use palisade_isolate::{LayerStatus, probe_thorough};

/// Arguments of `palisade probe`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    format: Format,
}

/// Output formats.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Format {
    /// Aligned table.
    Human,
    /// One JSON object.
    Json,
}

/// Runs `palisade probe`. Exits 0 when the built-in profiles can launch
/// (every required layer present; Landlock at least at the profiles'
/// minimum ABI, possibly degraded), 1 otherwise.
pub(crate) fn run(args: Args) -> Result<ExitCode, String> {
    let report = probe_thorough();
    let observer = palisade_isolate::observe::probe();
    let (observer_word, observer_mark) = observer_status(&observer);
    let min_abi = palisade_isolate::Profile::governed().min_landlock_abi();
    // The values a launch of the built-in profiles applies (a policy's
    // `[worker] limits` lowers them and adds the cgroup's).
    let rlimits = palisade_isolate::Profile::governed().rlimits().describe();
    let all_required = report.layers.iter().all(|(l, s)| match l {
        palisade_isolate::Layer::Cgroups => true,
        palisade_isolate::Layer::Landlock => {
            !matches!(s, LayerStatus::Unavailable { .. })
                && report.landlock_abi.unwrap_or(0) >= min_abi
        }
        _ => s.is_active(),
    });
    match args.format {
        Format::Json => {
            let v = serde_json::json!({
                "kernel": report.kernel_release,
                "arch": report.arch,
                "uid": report.uid,
                "landlock_abi": report.landlock_abi,
                "layers": report
                    .layers
                    .iter()
                    .map(|(l, s)| crate::run::layer_json(*l, s))
                    .chain(std::iter::once(serde_json::json!({
                        "layer": "read_observer",
                        "status": observer_word,
                        "detail": observer.facts,
                    })))
                    .collect::<Vec<_>>(),
                "ready": all_required,
                "rlimits": rlimits,
            });
            println!("{v:#}");
        }
        Format::Human => {
            println!(
                "kernel {} ({}), uid {}",
                report.kernel_release, report.arch, report.uid
            );
            for (l, s) in &report.layers {
                let mark = match s {
                    LayerStatus::Active { .. } => "active",
                    LayerStatus::Degraded { .. } => "DEGRADED",
                    LayerStatus::Unavailable { .. } => "UNAVAILABLE",
                    _ => "?",
                };
                println!("{:<14} {:<12} {}", l.name(), mark, s.detail());
            }
            println!(
                "{:<14} {:<12} {}",
                "read_observer", observer_mark, observer.facts
            );
            println!("{:<14} {:<12} {}", "limits", "values", rlimits.join(" "));
            println!(
                "{}",
                if all_required {
                    "ready: every required layer is active"
                } else {
                    "not ready: `palisade run` refuses until the missing layers are available"
                }
            );
        }
    }
    Ok(if all_required {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The read observer's status word (`active`, `degraded`, `unavailable`)
/// and its mark in the human table.
fn observer_status(s: &palisade_isolate::observe::ObserverSupport) -> (&'static str, &'static str) {
    use palisade_isolate::observe::ObserverMode;
    match s.mode {
        Some(ObserverMode::Permission) => ("active", "active"),
        Some(_) => ("degraded", "DEGRADED"),
        None => ("unavailable", "UNAVAILABLE"),
    }
}
