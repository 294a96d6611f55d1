//! The HTML report: one self-contained page (inline CSS and SVG, no
//! script, no external resource) that opens from a file in any browser.
//!
//! Per workload it shows the numbers, the gate verdicts, a latency CDF
//! drawn from the full histogram, and IOPS and p99 over time from the time
//! series; then the machine, the command line and the job file. Every piece
//! of text from the report is HTML-escaped: workload names and job files
//! are user input.
//!
//! The CDF's y axis is in "nines" (-log10(1 - p)), so 90 %, 99 %, 99.9 %
//! and 99.99 % are evenly spaced and the tail, which is what a storage
//! latency plot is for, is not squashed into the top pixel.

use std::fmt::Write as _;

use crate::histogram::Histogram;
use crate::report::{Report, WorkloadReport};
use crate::result::{LatencySummary, Sample};

const W: f64 = 640.0;
const H: f64 = 300.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 40.0;
const TOP: f64 = 20.0;
const BOTTOM: f64 = 45.0;
/// The CDF plot stops at 99.999 %.
const MAX_NINES: f64 = 5.0;

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn px(v: f64) -> String {
    format!("{v:.1}")
}

/// A readable number for axis labels.
fn tick_label(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if v >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// "Nice" linear ticks from 0 to at least `max`.
fn linear_ticks(max: f64) -> Vec<f64> {
    if !(max.is_finite() && max > 0.0) {
        return vec![0.0, 1.0];
    }
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let n = (max / step).ceil() as usize;
    (0..=n.max(1)).map(|i| i as f64 * step).collect()
}

fn svg_open(out: &mut String, title: &str, class: &str) {
    let _ = write!(
        out,
        "<svg class=\"{class}\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\">\
         <title>{}</title><rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{}\" height=\"{}\" class=\"frame\"/>",
        escape(title),
        W - LEFT - RIGHT,
        H - TOP - BOTTOM
    );
}

fn axis_labels(out: &mut String, x: &str, y: &str) {
    let _ = write!(
        out,
        "<text x=\"{}\" y=\"{}\" class=\"axis\" text-anchor=\"middle\">{}</text>\
         <text x=\"14\" y=\"{}\" class=\"axis\" text-anchor=\"middle\" transform=\"rotate(-90 14 {})\">{}</text>",
        px(LEFT + (W - LEFT - RIGHT) / 2.0),
        px(H - 6.0),
        escape(x),
        px(TOP + (H - TOP - BOTTOM) / 2.0),
        px(TOP + (H - TOP - BOTTOM) / 2.0),
        escape(y)
    );
}

fn x_tick(out: &mut String, x: f64, label: &str) {
    let _ = write!(
        out,
        "<line x1=\"{0}\" y1=\"{TOP}\" x2=\"{0}\" y2=\"{1}\" class=\"grid\"/>\
         <text x=\"{0}\" y=\"{2}\" class=\"tick\" text-anchor=\"middle\">{3}</text>",
        px(x),
        px(H - BOTTOM),
        px(H - BOTTOM + 15.0),
        escape(label)
    );
}

fn y_tick(out: &mut String, y: f64, label: &str) {
    let _ = write!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" class=\"grid\"/>\
         <text x=\"{2}\" y=\"{3}\" class=\"tick\" text-anchor=\"end\">{4}</text>",
        px(y),
        px(W - RIGHT),
        px(LEFT - 5.0),
        px(y + 4.0),
        escape(label)
    );
}

fn polyline(out: &mut String, pts: &[(f64, f64)], class: &str) {
    let _ = write!(out, "<polyline class=\"{class}\" points=\"");
    for (x, y) in pts {
        let _ = write!(out, "{},{} ", px(*x), px(*y));
    }
    out.push_str("\"/>");
}

/// The latency CDF of a histogram: x is latency (log scale, µs), y is the
/// fraction of I/Os at or below it, in nines.
pub fn cdf_svg(h: &Histogram) -> String {
    let mut out = String::new();
    svg_open(&mut out, "Latency CDF", "cdf");
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let total = h.count();
    if total == 0 {
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{}\" class=\"axis\">no I/O recorded</text>",
            px(LEFT + 20.0),
            px(TOP + 30.0)
        );
        out.push_str("</svg>");
        return out;
    }
    // Latency range in µs, widened to whole decades.
    let lo_us = (h.min().max(1) as f64 / 1000.0).max(0.001);
    let hi_us = (h.max().max(1) as f64 / 1000.0).max(lo_us * 10.0);
    let (d0, d1) = (lo_us.log10().floor(), hi_us.log10().ceil());
    let x_of = |us: f64| LEFT + (us.max(10f64.powf(d0)).log10() - d0) / (d1 - d0) * pw;
    let y_of = |nines: f64| TOP + ph - nines.min(MAX_NINES) / MAX_NINES * ph;
    for d in (d0 as i32)..=(d1 as i32) {
        let us = 10f64.powi(d);
        x_tick(&mut out, x_of(us), &format!("{} us", tick_label(us)));
    }
    for (n, label) in [(0.0, "0%"), (1.0, "90%"), (2.0, "99%"), (3.0, "99.9%"), (4.0, "99.99%"), (5.0, "99.999%")] {
        y_tick(&mut out, y_of(n), label);
    }
    // A step per bucket: up at the bucket's upper bound to the cumulative
    // fraction. The last bucket reaches p = 1, plotted at the top.
    let mut pts = vec![(x_of(h.min() as f64 / 1000.0), y_of(0.0))];
    let mut seen = 0u64;
    let mut prev_y = y_of(0.0);
    for (_, high, count) in h.buckets() {
        seen += count;
        let x = x_of(high.min(h.max()) as f64 / 1000.0);
        let p = seen as f64 / total as f64;
        let nines = if seen == total { MAX_NINES } else { -(1.0 - p).log10() };
        pts.push((x, prev_y));
        prev_y = y_of(nines);
        pts.push((x, prev_y));
    }
    polyline(&mut out, &pts, "line");
    axis_labels(&mut out, "latency (log scale)", "I/Os at or below");
    out.push_str("</svg>");
    out
}

/// A time series plot of one field of the samples.
pub fn series_svg(samples: &[Sample], title: &str, y_label: &str, value: impl Fn(&Sample) -> f64) -> String {
    let mut out = String::new();
    svg_open(&mut out, title, "series");
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let pts: Vec<(f64, f64)> =
        samples.iter().map(|s| (s.t_s, value(s))).filter(|(t, v)| t.is_finite() && v.is_finite()).collect();
    if pts.is_empty() {
        let _ =
            write!(out, "<text x=\"{}\" y=\"{}\" class=\"axis\">no samples</text>", px(LEFT + 20.0), px(TOP + 30.0));
        out.push_str("</svg>");
        return out;
    }
    let t_max = pts.iter().map(|p| p.0).fold(0.0, f64::max).max(1.0);
    let v_max = pts.iter().map(|p| p.1).fold(0.0, f64::max);
    let xt = linear_ticks(t_max);
    let yt = linear_ticks(v_max);
    let (x_hi, y_hi) = (*xt.last().unwrap_or(&1.0), *yt.last().unwrap_or(&1.0));
    let x_of = |t: f64| LEFT + t / x_hi * pw;
    let y_of = |v: f64| TOP + ph - v / y_hi * ph;
    for t in &xt {
        x_tick(&mut out, x_of(*t), &format!("{}s", trim(*t)));
    }
    for v in &yt {
        y_tick(&mut out, y_of(*v), &tick_label(*v));
    }
    let scaled: Vec<(f64, f64)> = pts.iter().map(|(t, v)| (x_of(*t), y_of(*v))).collect();
    polyline(&mut out, &scaled, "line");
    axis_labels(&mut out, "time since start of measurement", y_label);
    out.push_str("</svg>");
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}\
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .7em;text-align:right;border-bottom:1px solid #eee}\
th:first-child,td:first-child{text-align:left}.pass{color:#137333;font-weight:bold}.fail{color:#c5221f;font-weight:bold}\
pre{background:#f6f6f6;padding:.7em;overflow:auto}svg{display:block;margin:.5em 0;font-size:11px}\
.frame{fill:none;stroke:#888}.grid{stroke:#e4e4e4}.line{fill:none;stroke:#1a73e8;stroke-width:1.6}\
.tick{fill:#555}.axis{fill:#222}.plots{display:flex;flex-wrap:wrap;gap:1em}";

fn verdict(passed: bool) -> &'static str {
    if passed { "<span class=\"pass\">PASS</span>" } else { "<span class=\"fail\">FAIL</span>" }
}

fn lat_row(out: &mut String, label: &str, l: &LatencySummary) {
    let _ = write!(out, "<tr><td>{label}</td>");
    for v in [l.min_us, l.mean_us, l.p50_us, l.p95_us, l.p99_us, l.p999_us, l.p9999_us, l.max_us] {
        let _ = write!(out, "<td>{v:.1}</td>");
    }
    out.push_str("</tr>");
}

fn workload_section(out: &mut String, w: &WorkloadReport) {
    let _ = write!(out, "<h2 id=\"w-{0}\">{0} {1}</h2>", escape(&w.name), verdict(w.passed));
    let Some(r) = &w.result else {
        let _ =
            write!(out, "<p class=\"fail\">did not run: {}</p>", escape(w.error.as_deref().unwrap_or("unknown error")));
        return;
    };
    let s = &r.spec;
    let _ = write!(
        out,
        "<p>{} &middot; bs {} &middot; iodepth {} &middot; jobs {} &middot; target {}{}{}{}{}</p>",
        crate::report::pattern_name(s.rw),
        crate::units::format_size(u64::from(s.bs)),
        s.iodepth,
        s.jobs,
        escape(&s.target.to_string()),
        if s.verify { " &middot; verify" } else { "" },
        if s.digests { " &middot; digests" } else { "" },
        if s.poll_us > 0 { format!(" &middot; busy poll {} us", s.poll_us) } else { String::new() },
        if s.disable_sqflow { " &middot; SQ flow control disabled" } else { "" }
    );
    if let Some(why) = &r.aborted {
        let _ = write!(out, "<p class=\"fail\">aborted: {}</p>", escape(why));
    }
    let _ = write!(
        out,
        "<table><tr><th>duration</th><th>I/Os</th><th>IOPS</th><th>MB/s</th><th>client CPU</th><th>errors</th><th>verify mismatches</th></tr>\
         <tr><td>{:.1} s</td><td>{}</td><td>{:.0}</td><td>{:.1}</td><td>{:.1}%</td><td>{}</td><td>{}</td></tr></table>",
        r.duration_s, r.ios, r.iops, r.mbps, r.cpu.percent, r.errors, r.verify_failures
    );
    out.push_str(
        "<table><tr><th>latency (us)</th><th>min</th><th>mean</th><th>p50</th><th>p95</th><th>p99</th>\
         <th>p99.9</th><th>p99.99</th><th>max</th></tr>",
    );
    lat_row(out, "all", &r.latency);
    if r.read_latency != LatencySummary::default() {
        lat_row(out, "read", &r.read_latency);
    }
    if r.write_latency != LatencySummary::default() {
        lat_row(out, "write", &r.write_latency);
    }
    out.push_str("</table>");
    if !w.gates.is_empty() {
        out.push_str("<table><tr><th>gate</th><th>measured</th><th>limit</th><th>baseline</th><th></th></tr>");
        for g in &w.gates {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{:.1}</td><td>{} {:.1}</td><td>{}</td><td>{}</td></tr>",
                escape(&g.gate),
                g.actual,
                escape(&g.op),
                g.threshold,
                g.baseline.map(|b| format!("{b:.1}")).unwrap_or_default(),
                verdict(g.passed)
            );
        }
        out.push_str("</table>");
    }
    out.push_str("<div class=\"plots\">");
    out.push_str(&cdf_svg(&r.histogram));
    out.push_str(&series_svg(&r.timeseries, "IOPS over time", "IOPS", |s| s.iops));
    out.push_str(&series_svg(&r.timeseries, "p99 latency over time", "p99 latency (us)", |s| s.p99_us));
    out.push_str("</div>");
}

/// Renders a report as one self-contained HTML page.
pub fn render(report: &Report) -> String {
    let mut out = String::with_capacity(64 << 10);
    let _ = write!(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>strata bench: {0}</title>\
         <style>{STYLE}</style></head><body><h1>strata bench: {0} {1}</h1>",
        escape(&report.name),
        verdict(report.passed)
    );
    let _ = write!(
        out,
        "<p>started {} &middot; finished {} &middot; {} workload(s)</p>",
        escape(&report.started_at),
        escape(&report.finished_at),
        report.workloads.len()
    );
    if let Some(b) = &report.baseline {
        let _ = write!(
            out,
            "<p>baseline: {} (started {}, commit {}{})</p>",
            escape(&b.path),
            escape(&b.started_at),
            escape(&b.git_commit),
            b.signed_by.as_ref().map(|k| format!(", signed by {}", escape(k))).unwrap_or_default()
        );
    }
    if let Some(sl) = &report.stop_loss {
        let _ = write!(
            out,
            "<p>stop-loss: abort when a gate is breached by more than {}% for {}</p>",
            sl.margin_pct,
            escape(&crate::units::format_duration(sl.sustain))
        );
    }
    for w in &report.workloads {
        workload_section(&mut out, w);
    }
    let s = &report.system;
    let _ = write!(
        out,
        "<h2>System</h2><table>\
         <tr><td>strata</td><td>{} ({})</td></tr><tr><td>kernel</td><td>{}</td></tr>\
         <tr><td>CPU</td><td>{} &times; {}</td></tr><tr><td>host</td><td>{}</td></tr></table>",
        escape(&s.strata_version),
        escape(&s.git_commit),
        escape(&s.kernel),
        s.cores,
        escape(&s.cpu_model),
        escape(&s.hostname)
    );
    let _ = write!(out, "<h2>Command line</h2><pre>{}</pre>", escape(&report.command_line.join(" ")));
    if let Some(j) = &report.job_file {
        let _ = write!(out, "<h2>Job file {}</h2><pre>{}</pre>", escape(&j.path), escape(&j.contents));
    }
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn the_page_holds_the_plots_and_is_self_contained() {
        let mut r = sample_report();
        r.workloads[0].name = "<script>alert(1)</script>".into();
        if let Some(j) = r.job_file.as_mut() {
            j.contents = "gates = [\"p99_us <= 200\"] # & more".into();
        }
        let page = render(&r);
        assert!(page.starts_with("<!DOCTYPE html>"));
        // Per workload that ran: a CDF and two time series.
        assert_eq!(page.matches("<svg class=\"cdf\"").count(), 2);
        assert_eq!(page.matches("<svg class=\"series\"").count(), 4);
        assert!(page.contains("<polyline"));
        assert!(page.contains("<title>Latency CDF</title>") && page.contains("<title>IOPS over time</title>"));
        // Nothing to fetch, nothing to run.
        for banned in ["<script", "src=", "href=", "<link", "http:", "https:", "@import", "url("] {
            assert!(!page.contains(banned), "page contains {banned:?}");
        }
        // User text is escaped.
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.contains("p99_us &lt;= 200"));
        assert!(page.contains("# &amp; more"));
    }

    #[test]
    fn the_workload_line_names_busy_polling_and_disabled_sq_flow_control() {
        let mut r = sample_report();
        let page = render(&r);
        assert!(!page.contains("busy poll") && !page.contains("SQ flow control"), "off: not mentioned");
        if let Some(res) = r.workloads[0].result.as_mut() {
            res.spec.poll_us = 100;
            res.spec.disable_sqflow = true;
        }
        let page = render(&r);
        assert!(page.contains(" &middot; busy poll 100 us"), "{page}");
        assert!(page.contains(" &middot; SQ flow control disabled"), "{page}");
    }

    #[test]
    fn the_cdf_climbs_to_the_top_at_the_maximum() {
        let mut h = Histogram::new();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let svg = cdf_svg(&h);
        let pts = svg.split("points=\"").nth(1).unwrap().split('"').next().unwrap();
        let ys: Vec<f64> = pts.split_whitespace().map(|p| p.split(',').nth(1).unwrap().parse().unwrap()).collect();
        assert_eq!(ys.first().copied(), Some(TOP + H - TOP - BOTTOM), "starts at 0 %");
        assert_eq!(ys.last().copied(), Some(TOP), "ends at the top");
        assert!(ys.windows(2).all(|w| w[1] <= w[0]), "never goes down");
    }

    #[test]
    fn empty_data_draws_a_note_instead_of_a_line() {
        assert!(cdf_svg(&Histogram::new()).contains("no I/O recorded"));
        assert!(series_svg(&[], "t", "y", |s| s.iops).contains("no samples"));
    }

    #[test]
    fn ticks_cover_the_range() {
        assert_eq!(linear_ticks(95.0), vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        assert_eq!(linear_ticks(0.0), vec![0.0, 1.0]);
        assert_eq!(tick_label(1500.0), "1.5k");
        assert_eq!(tick_label(2_000_000.0), "2M");
    }
}
