//! A small horizontal bar-chart writer: one panel per case, one bar per
//! subject at its median with a min–max whisker. Plain SVG text, no
//! plotting dependency.

use std::fmt::Write;

use super::stats::fmt_num;

/// One bar: label, min, median, max, whether it is palisade's.
#[derive(Clone, Debug)]
pub(crate) struct Bar {
    pub(crate) label: String,
    pub(crate) min: f64,
    pub(crate) median: f64,
    pub(crate) max: f64,
    pub(crate) palisade: bool,
}

/// One panel: a case with its own scale.
#[derive(Clone, Debug)]
pub(crate) struct Panel {
    pub(crate) title: String,
    pub(crate) unit: String,
    pub(crate) lower_is_better: bool,
    pub(crate) bars: Vec<Bar>,
}

const WIDTH: f64 = 760.0;
const LABEL_W: f64 = 210.0;
const BAR_W: f64 = 420.0;
const ROW_H: f64 = 22.0;
const TITLE_H: f64 = 28.0;
const GAP: f64 = 14.0;

/// Renders `panels` under a `title` as an SVG document.
pub(crate) fn chart(title: &str, panels: &[Panel]) -> String {
    #[allow(clippy::cast_precision_loss, reason = "a handful of bars")]
    let height = 40.0
        + panels
            .iter()
            .map(|p| TITLE_H + ROW_H * p.bars.len() as f64 + GAP)
            .sum::<f64>();
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n\
         <text x=\"10\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
        esc(title)
    );
    let mut y = 40.0;
    for p in panels {
        let hint = if p.lower_is_better {
            "lower is better"
        } else {
            "higher is better"
        };
        let _ = writeln!(
            s,
            "<text x=\"10\" y=\"{:.1}\" font-weight=\"bold\">{} ({}, {hint}; bar = median, line = min–max)</text>",
            y + 16.0,
            esc(&p.title),
            esc(&p.unit)
        );
        y += TITLE_H;
        let scale = p
            .bars
            .iter()
            .map(|b| b.max.max(b.median))
            .fold(0.0_f64, f64::max);
        let x_of = |v: f64| {
            if scale > 0.0 {
                LABEL_W + (v.max(0.0) / scale) * BAR_W
            } else {
                LABEL_W
            }
        };
        for b in &p.bars {
            let fill = if b.palisade { "#2b6cb0" } else { "#a0aec0" };
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                LABEL_W - 8.0,
                y + 15.0,
                esc(&b.label)
            );
            let _ = writeln!(
                s,
                "<rect x=\"{LABEL_W}\" y=\"{:.1}\" width=\"{:.1}\" height=\"14\" fill=\"{fill}\"/>",
                y + 4.0,
                x_of(b.median) - LABEL_W
            );
            let (x1, x2, ym) = (x_of(b.min), x_of(b.max), y + 11.0);
            let _ = writeln!(
                s,
                "<path d=\"M{x1:.1} {ym:.1}H{x2:.1}M{x1:.1} {:.1}V{:.1}M{x2:.1} {:.1}V{:.1}\" stroke=\"#1a202c\" fill=\"none\"/>",
                ym - 4.0,
                ym + 4.0,
                ym - 4.0,
                ym + 4.0
            );
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                x_of(b.max.max(b.median)) + 6.0,
                y + 15.0,
                esc(&fmt_num(b.median))
            );
            y += ROW_H;
        }
        y += GAP;
    }
    s.push_str("</svg>\n");
    s
}

fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_largest_and_text_is_escaped() {
        let p = Panel {
            title: "a <b> & c".into(),
            unit: "ms".into(),
            lower_is_better: true,
            bars: vec![
                Bar {
                    label: "palisade".into(),
                    min: 1.0,
                    median: 2.0,
                    max: 4.0,
                    palisade: true,
                },
                Bar {
                    label: "bwrap".into(),
                    min: 1.0,
                    median: 1.0,
                    max: 1.0,
                    palisade: false,
                },
            ],
        };
        let svg = chart("t", &[p]);
        assert!(svg.starts_with("<svg ") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("a &lt;b&gt; &amp; c"));
        // Median 2 of scale 4 is half the bar area.
        assert!(
            svg.contains(&format!("width=\"{:.1}\"", BAR_W / 2.0)),
            "{svg}"
        );
        assert!(svg.contains(&format!("width=\"{:.1}\"", BAR_W / 4.0)));
    }
}
