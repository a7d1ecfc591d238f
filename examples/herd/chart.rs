//! `herd --chart PATH`: origin calls per 100 ms window over the run, one panel per
//! strategy on one shared scale, as an SVG (plotters' SVG backend: no system libraries).
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::error::Error;
use std::path::Path;
use std::time::Duration;

/// The width of one bar.
pub const WINDOW: Duration = Duration::from_millis(100);

/// Origin calls per `WINDOW`, from zero to the window of the last call (or `run`'s end).
fn per_window(calls_at: &[Duration], run: Duration) -> Vec<u32> {
    let index = |t: Duration| (t.as_nanos() / WINDOW.as_nanos()) as usize;
    let last = calls_at.iter().copied().max().unwrap_or_default().max(run);
    let mut windows = vec![0; index(last) + 1];
    for &t in calls_at {
        windows[index(t)] += 1;
    }
    windows
}

const COLOURS: [RGBColor; 6] = [
    RGBColor(204, 37, 41),
    RGBColor(57, 106, 177),
    RGBColor(62, 150, 81),
    RGBColor(107, 76, 154),
    RGBColor(218, 124, 48),
    RGBColor(83, 81, 84),
];

/// Draws each strategy (its name, and when each origin call started from the start of
/// load) into an SVG at `path`. `run` is how long load was applied.
pub fn draw(
    path: &Path,
    title: &str,
    run: Duration,
    strategies: &[(&str, Vec<Duration>)],
) -> Result<(), Box<dyn Error>> {
    let windows: Vec<Vec<u32>> = strategies
        .iter()
        .map(|(_, calls_at)| per_window(calls_at, run))
        .collect();
    let bars = windows.iter().map(Vec::len).max().unwrap_or(1);
    let seconds = bars as f64 * WINDOW.as_secs_f64();
    let highest = windows.iter().flatten().copied().max().unwrap_or(0);
    // Headroom above the tallest bar for its label.
    let top = (highest + highest / 6).max(4);

    let panel_height = 190;
    let height = 60 + panel_height * strategies.len() as u32;
    let root = SVGBackend::new(path, (960, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let panels = root.split_evenly((strategies.len(), 1));
    for (i, ((panel, (name, _)), windows)) in
        panels.iter().zip(strategies).zip(&windows).enumerate()
    {
        let colour = COLOURS[i % COLOURS.len()];
        let calls: u32 = windows.iter().sum();
        let busiest = windows.iter().copied().max().unwrap_or(0);
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!("{name}: {calls} origin calls, at most {busiest} in one 100 ms window"),
                ("sans-serif", 15),
            )
            .margin_left(10)
            .margin_right(20)
            .x_label_area_size(36)
            .y_label_area_size(48)
            .build_cartesian_2d(0.0..seconds, 0..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(WHITE)
            .x_desc("seconds of load")
            .y_desc("calls / 100 ms")
            .y_labels(5)
            .draw()?;
        let left = |w: usize| w as f64 * WINDOW.as_secs_f64();
        chart.draw_series(
            windows
                .iter()
                .enumerate()
                .filter(|&(_, &count)| count > 0)
                .map(|(w, &count)| {
                    Rectangle::new([(left(w), 0), (left(w + 1), count)], colour.filled())
                }),
        )?;
        chart.draw_series(
            windows
                .iter()
                .enumerate()
                .filter(|&(_, &count)| count > 0)
                .map(|(w, &count)| {
                    Text::new(
                        count.to_string(),
                        ((left(w) + left(w + 1)) / 2.0, count),
                        ("sans-serif", 12)
                            .into_font()
                            .color(&BLACK)
                            .pos(Pos::new(HPos::Center, VPos::Bottom)),
                    )
                }),
        )?;
    }
    root.present()?;
    Ok(())
}
