//! PNG line charts of the scaling data (`--plot DIR`), drawn with plotters'
//! bitmap backend.
//!
//! Text needs a TrueType font: the first of `SHEAF_BENCH_FONT` and a few
//! usual system paths that exists is loaded once and registered as
//! "sans-serif". This module knows charts, not engines or suites.

use std::path::Path;
use std::sync::OnceLock;

use plotters::prelude::*;

use crate::engines::Result;
use crate::report::Chart;

const FONT_CANDIDATES: [&str; 5] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
];

/// Distinct, print-friendly line colours (sheafdb, when present, is first).
const COLORS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

const WIDTH_PX: u32 = 960;
const HEIGHT_PX: u32 = 600;

fn register_font() -> Result<()> {
    static REGISTERED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let from_env = std::env::var("SHEAF_BENCH_FONT").ok();
            let path = from_env
                .iter()
                .map(String::as_str)
                .chain(FONT_CANDIDATES)
                .find(|p| Path::new(p).is_file())
                .ok_or("no TrueType font found; set SHEAF_BENCH_FONT to a .ttf file")?;
            let bytes: &'static [u8] = Box::leak(
                std::fs::read(path)
                    .map_err(|e| e.to_string())?
                    .into_boxed_slice(),
            );
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{path} is not a usable font"))
        })
        .clone()
        .map_err(Into::into)
}

/// Draws every chart with data into `dir` (created if missing); returns the
/// files written.
pub fn write_charts(dir: &Path, charts: &[Chart]) -> Result<Vec<String>> {
    std::fs::create_dir_all(dir)?;
    register_font()?;
    let mut written = Vec::new();
    for chart in charts
        .iter()
        .filter(|c| c.series.iter().any(|s| !s.points.is_empty()))
    {
        let path = dir.join(&chart.file);
        draw(&path, chart)?;
        written.push(path.display().to_string());
    }
    Ok(written)
}

fn bounds(chart: &Chart) -> (f64, f64, f64) {
    let xs = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0));
    let (x_min, x_max) = xs.fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let y_max = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let x_max = if x_max > x_min { x_max } else { x_min + 1.0 };
    (x_min, x_max, if y_max > 0.0 { y_max * 1.1 } else { 1.0 })
}

fn draw(path: &Path, chart: &Chart) -> Result<()> {
    let root = BitMapBackend::new(path, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE)?;
    let (x_min, x_max, y_max) = bounds(chart);
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(&chart.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(80);
    if chart.log_x {
        let mut ctx = builder.build_cartesian_2d((x_min..x_max).log_scale(), 0.0..y_max)?;
        configure_and_draw(&mut ctx, chart)?;
    } else {
        let mut ctx = builder.build_cartesian_2d(x_min..x_max, 0.0..y_max)?;
        configure_and_draw(&mut ctx, chart)?;
    }
    root.present()?;
    Ok(())
}

fn configure_and_draw<'a, X>(
    ctx: &mut ChartContext<
        'a,
        BitMapBackend<'a>,
        Cartesian2d<X, plotters::coord::types::RangedCoordf64>,
    >,
    chart: &Chart,
) -> Result<()>
where
    X: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    ctx.configure_mesh()
        .x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| crate::report::format_value(*v, ""))
        .label_style(("sans-serif", 14))
        .draw()?;
    for (i, series) in chart.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()].to_rgba();
        ctx.draw_series(LineSeries::new(
            series.points.iter().copied(),
            color.stroke_width(2),
        ))?
        .label(&series.name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        ctx.draw_series(
            series
                .points
                .iter()
                .map(|&p| Circle::new(p, 3, color.filled())),
        )?;
    }
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Series;

    #[test]
    fn draws_a_png_when_a_font_exists() {
        if register_font().is_err() {
            eprintln!("no font on this machine; chart test skipped");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let chart = Chart {
            file: "t.png".into(),
            title: "t".into(),
            x_label: "threads".into(),
            y_label: "ops/s".into(),
            log_x: true,
            series: vec![Series {
                name: "a".into(),
                points: vec![(1.0, 10.0), (2.0, 20.0), (4.0, 15.0)],
            }],
        };
        let files = write_charts(dir.path(), &[chart]).unwrap();
        assert_eq!(files.len(), 1);
        let bytes = std::fs::read(dir.path().join("t.png")).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
    }
}
