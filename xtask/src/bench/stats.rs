//! Order statistics over benchmark samples, and the result model every
//! suite fills: rows (one subject on one case), ratios and goal checks.

use serde_json::{Value, json};

/// Which direction is better for a figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Better {
    /// Durations, memory: smaller is better.
    Lower,
    /// Throughput, rates: larger is better.
    Higher,
}

impl Better {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Lower => "lower",
            Self::Higher => "higher",
        }
    }
}

/// The value at quantile `q` (0.0..=1.0) of `sorted`, nearest-rank.
pub(crate) fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let last = sorted.len() - 1;
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "q is clamped to 0..=1 and the index to the slice"
    )]
    let idx = ((q.clamp(0.0, 1.0) * last as f64).round() as usize).min(last);
    sorted.get(idx).copied()
}

/// Sorts a copy of `samples`, dropping NaNs.
pub(crate) fn sorted(samples: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    v
}

/// Min, median and max of a set of per-run figures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Summary {
    pub(crate) min: f64,
    pub(crate) median: f64,
    pub(crate) max: f64,
    pub(crate) runs: usize,
}

impl Summary {
    pub(crate) fn of(samples: &[f64]) -> Option<Self> {
        let s = sorted(samples);
        Some(Self {
            min: *s.first()?,
            median: median_sorted(&s)?,
            max: *s.last()?,
            runs: s.len(),
        })
    }
}

fn median_sorted(s: &[f64]) -> Option<f64> {
    let n = s.len();
    if n == 0 {
        return None;
    }
    if n % 2 == 1 {
        s.get(n / 2).copied()
    } else {
        Some((s.get(n / 2 - 1)? + s.get(n / 2)?) / 2.0)
    }
}

/// One subject measured on one case.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    /// What was measured, e.g. `/bin/true` or `bulk 1 GiB`.
    pub(crate) case: String,
    /// Who was measured, e.g. `palisade strict` or `bwrap`.
    pub(crate) subject: String,
    pub(crate) unit: String,
    pub(crate) better: Better,
    pub(crate) summary: Summary,
    /// Extra named figures (pooled p50/p99 for latencies, …).
    pub(crate) extra: Vec<(String, f64)>,
    /// True for palisade's own rows.
    pub(crate) palisade: bool,
}

impl Row {
    pub(crate) fn new(
        case: &str,
        subject: &str,
        unit: &str,
        better: Better,
        samples: &[f64],
    ) -> Option<Self> {
        Some(Self {
            case: case.to_owned(),
            subject: subject.to_owned(),
            unit: unit.to_owned(),
            better,
            summary: Summary::of(samples)?,
            extra: Vec::new(),
            palisade: subject.starts_with("palisade"),
        })
    }

    pub(crate) fn to_json(&self) -> Value {
        let extra: serde_json::Map<String, Value> = self
            .extra
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        json!({
            "case": self.case,
            "subject": self.subject,
            "unit": self.unit,
            "better": self.better.as_str(),
            "min": self.summary.min,
            "median": self.summary.median,
            "max": self.summary.max,
            "runs": self.summary.runs,
            "extra": extra,
            "palisade": self.palisade,
        })
    }
}

/// How a goal compares a figure with its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cmp {
    /// At most the target.
    Le,
    /// At least the target.
    Ge,
    /// Strictly above the target.
    Gt,
}

/// A goal from an issue, checked against one figure.
#[derive(Clone, Debug)]
pub(crate) struct GoalCheck {
    /// What the figure is, e.g. `median wall time palisade strict / bwrap, /bin/true`.
    pub(crate) what: String,
    pub(crate) value: f64,
    pub(crate) unit: String,
    pub(crate) cmp: Cmp,
    pub(crate) target: f64,
}

impl GoalCheck {
    pub(crate) fn met(&self) -> bool {
        match self.cmp {
            Cmp::Le => self.value <= self.target,
            Cmp::Ge => self.value >= self.target,
            Cmp::Gt => self.value > self.target,
        }
    }

    pub(crate) fn goal_text(&self) -> String {
        let op = match self.cmp {
            Cmp::Le => "≤",
            Cmp::Ge => "≥",
            Cmp::Gt => ">",
        };
        format!("{op} {}{}", fmt_num(self.target), unit_suffix(&self.unit))
    }

    /// "met", or "missed by …" with the distance to the target, absolute
    /// and relative.
    pub(crate) fn verdict(&self) -> String {
        if self.met() {
            return "met".to_owned();
        }
        let diff = (self.value - self.target).abs();
        let rel = if self.target == 0.0 {
            String::new()
        } else {
            format!(" ({:.0}%)", diff / self.target.abs() * 100.0)
        };
        let word = match self.cmp {
            Cmp::Le => "over",
            Cmp::Ge | Cmp::Gt => "short",
        };
        format!(
            "**missed**: {}{} {word}{rel}",
            fmt_num(diff),
            unit_suffix(&self.unit)
        )
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({
            "what": self.what,
            "value": self.value,
            "unit": self.unit,
            "goal": self.goal_text(),
            "target": self.target,
            "met": self.met(),
            "verdict": self.verdict(),
        })
    }
}

fn unit_suffix(unit: &str) -> String {
    match unit {
        "" | "×" => unit.to_owned(),
        u => format!(" {u}"),
    }
}

/// Formats a figure with about four significant digits.
pub(crate) fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".to_owned()
    } else if a >= 10_000.0 {
        grouped(v)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A large figure rounded to an integer with thousands separators.
fn grouped(v: f64) -> String {
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 { format!("-{out}") } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_figures_get_separators() {
        assert_eq!(fmt_num(1_000_000.0), "1,000,000");
        assert_eq!(fmt_num(802_212.4), "802,212");
        assert_eq!(fmt_num(-123_456.0), "-123,456");
        assert_eq!(fmt_num(99_999.0), "99,999");
        assert_eq!(fmt_num(9_999.0), "9999");
        assert_eq!(fmt_num(0.5), "0.500");
    }

    #[test]
    fn summary_has_min_median_max() {
        let s = Summary::of(&[5.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((s.min, s.median, s.max, s.runs), (1.0, 2.5, 5.0, 4));
        assert!(Summary::of(&[]).is_none());
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Some(51.0));
        assert_eq!(quantile(&v, 0.99), Some(99.0));
        assert_eq!(quantile(&v, 1.0), Some(100.0));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn goal_verdict_says_by_how_much() {
        let g = GoalCheck {
            what: "ratio".into(),
            value: 1.25,
            unit: "×".into(),
            cmp: Cmp::Le,
            target: 1.0,
        };
        assert!(!g.met());
        assert_eq!(g.verdict(), "**missed**: 0.250× over (25%)");
        let ok = GoalCheck {
            value: 0.9,
            ..g.clone()
        };
        assert!(ok.met());
        assert_eq!(ok.verdict(), "met");
        let gt = GoalCheck {
            value: 1.0,
            cmp: Cmp::Gt,
            ..g
        };
        assert!(!gt.met(), "> is strict");
    }
}
