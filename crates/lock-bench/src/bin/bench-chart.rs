//! Renders the acquire-latency chart of a side-by-side benchmark run as SVG.
//!
//! Reads the JSON lines of a run (one result object per line) and draws, per
//! scenario (`uncontended`, `parallel`, `contended`), the p50, p99 and p99.9
//! of `acquire_us` for every implementation as grouped bars on a log scale.
//!
//! ```text
//! cargo run --release -p lock-bench --bin bench-chart -- --input results.jsonl --output docs/performance-latency.svg
//! ```

use std::ops::Range;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde_json::Value;

const SCENARIOS: [&str; 3] = ["uncontended", "parallel", "contended"];
const OURS: &str = "platform-lock";
/// Ours first, then the peers in the order the peer suite lists them; unknown impls go last.
const ORDER: &str =
    "platform-lock raw redis-py python-redis-lock node-redlock redis-semaphore rslock";
/// JSON key, legend label, bar colour.
const PERCENTILES: [(&str, &str, RGBColor); 3] = [
    ("p50", "p50", RGBColor(66, 133, 244)),
    ("p99", "p99", RGBColor(251, 140, 0)),
    ("p999", "p99.9", RGBColor(211, 47, 47)),
];
const SIZE: (u32, u32) = (1200, 900);
const OURS_BAND: RGBColor = RGBColor(255, 243, 196);
const TITLE: &str = "Lock acquire latency by implementation";

#[derive(Parser, Debug)]
#[command(about = "Renders acquire-latency percentiles from bench JSON lines as an SVG chart")]
struct Args {
    /// JSON-lines results file, or `-` for stdin.
    #[arg(long)]
    input: PathBuf,
    /// Where to write the SVG.
    #[arg(long)]
    output: PathBuf,
    /// Chart title.
    #[arg(long)]
    title: Option<String>,
}

#[derive(Debug, Clone)]
struct Row {
    name: String,
    scenario: &'static str,
    workers: Option<u64>,
    /// Same order as `PERCENTILES`; `None` where missing or unplottable on a log axis.
    acquire: [Option<f64>; 3],
}

/// One x slot per implementation with ticks only at slot centres, so that every tick label is
/// an impl name; plotters' own f64 axis would pick "nice" ticks between them.
#[derive(Debug, Clone, Copy)]
struct Slots(usize);

impl Ranged for Slots {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;
    fn map(&self, v: &f64, (from, to): (i32, i32)) -> i32 {
        from + ((v + 0.5) / self.0 as f64 * f64::from(to - from)).round() as i32
    }
    fn key_points<H: KeyPointHint>(&self, _: H) -> Vec<f64> {
        (0..self.0).map(|i| i as f64).collect()
    }
    fn range(&self) -> Range<f64> {
        -0.5..self.0 as f64 - 0.5
    }
}

fn main() -> ExitCode {
    if let Err(msg) = run(&Args::parse()) {
        eprintln!("bench-chart: {msg}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn run(args: &Args) -> Result<(), String> {
    let (shown, source, bytes) = if args.input.as_os_str() == "-" {
        let mut buf = Vec::new();
        let read = std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf).map(|_| buf);
        ("stdin".to_owned(), "stdin".to_owned(), read)
    } else {
        let name = args.input.file_name().unwrap_or_default().to_string_lossy();
        (
            args.input.display().to_string(),
            name.into_owned(),
            std::fs::read(&args.input),
        )
    };
    let bytes = bytes.map_err(|e| format!("cannot read {shown}: {e}"))?;
    // Lossy, so a mangled line is skipped like any other bad line instead of failing the file.
    let (rows, notes) = parse(&String::from_utf8_lossy(&bytes));
    for note in &notes {
        eprintln!("bench-chart: {shown}: {note}");
    }
    if rows.is_empty() {
        let skipped = notes.len();
        return Err(format!(
            "{shown}: no usable result lines ({skipped} skipped)"
        ));
    }
    let title = args.title.as_deref().unwrap_or(TITLE);
    let svg = render(&rows, title, &source).map_err(|e| format!("cannot draw chart: {e}"))?;
    std::fs::write(&args.output, svg)
        .map_err(|e| format!("cannot write {}: {e}", args.output.display()))
}

/// The plottable rows, sorted for drawing, and a note per skipped line (one more for repeats).
fn parse(text: &str) -> (Vec<Row>, Vec<String>) {
    let (mut rows, mut notes) = (Vec::new(), Vec::new());
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        match row(line) {
            Ok(Some(r)) => rows.push(r),
            Ok(None) => {}
            Err(why) => notes.push(format!("line {} skipped: {why}", i + 1)),
        }
    }
    // Reversed first so that the stable sort puts the latest of repeated impl/scenario lines
    // first and dedup keeps it: a re-run supersedes the earlier result.
    rows.reverse();
    let rank = |n: &str| ORDER.split(' ').position(|k| k == n).unwrap_or(usize::MAX);
    let key = |r: &Row| (rank(&r.name), r.name.clone(), r.scenario);
    rows.sort_by_key(key);
    let before = rows.len();
    rows.dedup_by(|a, b| (&a.name, a.scenario) == (&b.name, b.scenario));
    if rows.len() < before {
        notes.push(format!(
            "{} repeated impl/scenario line(s) superseded by later ones",
            before - rows.len()
        ));
    }
    (rows, notes)
}

/// A result line's row; `None` for lock-bench's own `watchdog` line, which has no latency
/// percentiles to compare (bench-table summarises it).
fn row(line: &str) -> Result<Option<Row>, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON ({e})"))?;
    let obj = v.as_object().ok_or("not a JSON object")?;
    // A failed run has an error instead of numbers; a null error is taken as none.
    if let Some(err) = obj.get("error").filter(|e| !e.is_null()) {
        return Err(format!("run reported error {err}"));
    }
    let text = |k: &str| {
        obj.get(k)
            .and_then(Value::as_str)
            .ok_or(format!("no \"{k}\" string"))
    };
    let (name, sc) = (text("impl")?, text("scenario")?);
    if sc == "watchdog" {
        return Ok(None);
    }
    let scenario = SCENARIOS
        .into_iter()
        .find(|&s| s == sc)
        .ok_or(format!("scenario {sc:?} is not charted"))?;
    let acq = obj
        .get("acquire_us")
        .and_then(Value::as_object)
        .ok_or("no \"acquire_us\" object")?;
    let acquire = PERCENTILES.map(|(key, ..)| {
        acq.get(key)
            .and_then(Value::as_f64)
            .filter(|v| v.is_finite() && *v > 0.0)
    });
    if acquire.iter().all(Option::is_none) {
        return Err("no positive p50/p99/p999 in \"acquire_us\"".into());
    }
    let workers = obj.get("workers").and_then(Value::as_u64);
    Ok(Some(Row {
        name: name.to_owned(),
        scenario,
        workers,
        acquire,
    }))
}

/// Human units on the axis and bars: a log axis in raw µs reads badly past 100000.
fn fmt_us(us: f64) -> String {
    let (v, unit) = match us {
        u if u >= 1e6 => (u / 1e6, "s"),
        u if u >= 1e3 => (u / 1e3, "ms"),
        u => (u, "µs"),
    };
    let digits = if v >= 10.0 || v.fract() == 0.0 { 0 } else { 1 };
    format!("{v:.digits$}{unit}")
}

fn render(rows: &[Row], title: &str, source: &str) -> Result<String, Box<dyn std::error::Error>> {
    let values = || {
        rows.iter()
            .flat_map(|r| r.acquire.iter().flatten().copied())
    };
    // One y range for all panels, so that bar heights compare across scenarios too.
    // Margins of 2 and 1.5: the shortest bar stays visible, the tallest has room for its label.
    let lo = 10f64.powf(
        (values().fold(f64::INFINITY, f64::min) / 2.0)
            .log10()
            .floor(),
    );
    let hi = 10f64.powf((values().fold(0.0, f64::max) * 1.5).log10().ceil());
    let font = |size: u32| ("sans-serif", size).into_font();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE)?;
        let (header, rest) = root.split_vertically(64);
        let (body, footer) = rest.split_vertically(SIZE.1 - 64 - 32);
        header.draw(&Text::new(
            title.to_owned(),
            (24, 14),
            font(30).style(FontStyle::Bold),
        ))?;
        for (i, (_, label, color)) in PERCENTILES.iter().enumerate() {
            let x = 880 + 90 * i as i32;
            header.draw(&Rectangle::new([(x, 20), (x + 18, 38)], color.filled()))?;
            header.draw(&Text::new(*label, (x + 24, 21), font(20)))?;
        }
        let caption =
            format!("source: {source} · highlighted: {OURS} (ours) · log scale, lower is better");
        footer.draw(&Text::new(
            caption,
            (24, 8),
            font(17).color(&RGBColor(90, 90, 90)),
        ))?;

        let present: Vec<_> = SCENARIOS
            .into_iter()
            .filter(|s| rows.iter().any(|r| r.scenario == *s))
            .collect();
        for (area, scenario) in body.split_evenly((present.len(), 1)).iter().zip(present) {
            let rows: Vec<&Row> = rows.iter().filter(|r| r.scenario == scenario).collect();
            let mut workers = rows.iter().map(|r| r.workers);
            let panel = match workers.next().flatten() {
                Some(w) if workers.all(|x| x == Some(w)) => {
                    format!("{scenario} — {w} worker{}", if w == 1 { "" } else { "s" })
                }
                _ => scenario.to_owned(),
            };
            let mut chart = ChartBuilder::on(area)
                .caption(panel, font(24).style(FontStyle::Bold))
                .margin(8)
                .margin_right(20)
                .x_label_area_size(30)
                .y_label_area_size(90)
                .build_cartesian_2d(Slots(rows.len()), (lo..hi).log_scale())?;
            let label = |x: &f64| match rows.get(x.round().max(0.0) as usize) {
                Some(r) if r.name == OURS => format!("{OURS} (ours)"),
                Some(r) => r.name.clone(),
                None => String::new(),
            };
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_label_formatter(&label)
                .y_label_formatter(&|y| fmt_us(*y))
                .x_label_style(font(19))
                .y_label_style(font(16))
                .y_desc("acquire latency")
                .axis_desc_style(font(17))
                .light_line_style(RGBColor(240, 240, 240))
                .draw()?;
            let plot = chart.plotting_area();
            let on_top = TextStyle::from(font(14)).pos(Pos::new(HPos::Center, VPos::Bottom));
            for (i, r) in rows.iter().enumerate().map(|(i, r)| (i as f64, r)) {
                if r.name == OURS {
                    // A band rather than a colour of its own: the colours already mean percentiles.
                    plot.draw(&Rectangle::new(
                        [(i - 0.5, lo), (i + 0.5, hi)],
                        OURS_BAND.filled(),
                    ))?;
                }
                for (k, (_, _, color)) in PERCENTILES.iter().enumerate() {
                    let Some(v) = r.acquire[k] else { continue };
                    let x0 = i - 0.36 + 0.24 * k as f64;
                    plot.draw(&Rectangle::new([(x0, lo), (x0 + 0.22, v)], color.filled()))?;
                    plot.draw(&Text::new(fmt_us(v), (x0 + 0.11, v), on_top.clone()))?;
                }
            }
        }
        root.present()?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"{"impl":"rslock","scenario":"contended","workers":8,"acquire_us":{"p50":120.5,"p99":4e4,"p999":9e4}}
{"impl":"platform-lock","scenario":"contended","workers":8,"acquire_us":{"p50":95,"p99":3000,"p999":7000}}
{"impl":"redis-py","scenario":"uncontended","workers":1,"acquire_us":{"p50":80,"p99":300,"p999":null}}
{"impl":"rslock","scenario":"uncontended","workers":1,"acquire_us":{"p50":70,"p99":200,"p999":900}}
{"impl":"rslock","scenario":"contended","workers":8,"acquire_us":{"p50":111,"p99":4e4,"p999":9e4}}
{"impl":"node-redlock","scenario":"contended","error":"timed out"}
not json at all
"#;

    #[test]
    fn renders_every_impl_and_scenario() {
        let (rows, notes) = parse(SAMPLE);
        assert_eq!(notes.len(), 3, "two bad lines and one repeat: {notes:?}");
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0].name, OURS);
        let again = rows
            .iter()
            .find(|r| r.name == "rslock" && r.scenario == "contended");
        assert_eq!(
            again.and_then(|r| r.acquire[0]),
            Some(111.0),
            "the later line wins"
        );
        let svg = render(&rows, "t", "sample.jsonl").expect("renders");
        for needle in [
            "platform-lock",
            "rslock",
            "redis-py",
            "contended — 8 workers",
            "uncontended",
            "sample.jsonl",
        ] {
            assert!(svg.contains(needle), "missing {needle}");
        }
        assert!(
            !svg.contains("parallel"),
            "a scenario without data gets no panel"
        );
    }

    #[test]
    fn no_usable_lines_is_an_error() {
        let dir = std::env::temp_dir().join(format!("bench-chart-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let input = dir.join("bad.jsonl");
        std::fs::write(
            &input,
            "[1,2]\n{\"impl\":\"x\",\"scenario\":\"parallel\",\"error\":\"boom\"}\n",
        )
        .expect("write");
        let args = Args {
            input,
            output: dir.join("out.svg"),
            title: None,
        };
        let err = run(&args).expect_err("must fail");
        assert!(
            err.contains("bad.jsonl") && err.contains("no usable"),
            "{err}"
        );
        assert!(!args.output.exists());
        let missing = Args {
            input: dir.join("absent.jsonl"),
            ..args
        };
        assert!(
            run(&missing)
                .expect_err("must fail")
                .contains("cannot read")
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
