//! The SVG plots of the page, drawn with `plotters`.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use crate::measure::{size_label, Transport};
use crate::results::{ResultSet, PERCENTILES};

const WIDTH: u32 = 960;
const HEIGHT: u32 = 420;

fn color(t: Transport) -> RGBColor {
    match t {
        Transport::Rdma => RGBColor(31, 119, 180),
        Transport::Tcp => RGBColor(214, 39, 40),
    }
}

/// Throughput (MB/s, median round) against message size, GET on the left
/// and PUT on the right, one line per transport.
pub fn throughput(set: &ResultSet, path: &Path) -> Result<()> {
    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(WIDTH / 2);
    for (area, proc_, title) in [(&left, "get", "GET"), (&right, "put", "PUT")] {
        let series: Vec<(Transport, Vec<(f64, f64)>)> = Transport::BOTH
            .iter()
            .map(|&t| {
                let pts = set
                    .points()
                    .iter()
                    .filter(|p| p.proc_ == proc_ && p.size > 0)
                    .filter_map(|p| {
                        let mb = set.median(p, t, "mb_per_sec")?;
                        Some(((p.size as f64).log2(), mb))
                    })
                    .collect();
                (t, pts)
            })
            .collect();
        let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.1.clone()).collect();
        if all.is_empty() {
            return Err(anyhow!("no {title} points to plot"));
        }
        let x0 = all.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
        let x1 = all.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
        let ymax = all.iter().map(|p| p.1).fold(0.0, f64::max) * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("{title}, depth 4: throughput by message size"),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d((x0 - 0.3)..(x1 + 0.3), 0.0..ymax.max(1.0))?;
        chart
            .configure_mesh()
            .x_desc("message size")
            .y_desc("MB/s (10^6 bytes per second)")
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_labels(((x1 - x0) / 2.0) as usize + 1)
            .x_label_formatter(&|x| {
                let r = x.round();
                if (x - r).abs() < 1e-6 && r >= 0.0 {
                    size_label(1u64 << (r as u32))
                } else {
                    String::new()
                }
            })
            .draw()?;
        for (t, pts) in series {
            let c = color(t);
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
                .label(t.label())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// Latency percentiles of NULL at depth 1 (the median round by p50), one
/// line per transport, on a logarithmic axis.
pub fn latency(set: &ResultSet, path: &Path) -> Result<()> {
    let null = set
        .points()
        .into_iter()
        .find(|p| p.proc_ == "null")
        .ok_or_else(|| anyhow!("no NULL point to plot"))?;
    let series: Vec<(Transport, Vec<(f64, f64)>)> = Transport::BOTH
        .iter()
        .filter_map(|&t| {
            let run = set.median_run(&null, t, "latency_us/p50")?;
            let pts = PERCENTILES
                .iter()
                .enumerate()
                .filter_map(|(i, (k, _))| {
                    let v = run.json["latency_us"][k].as_f64()?;
                    Some((i as f64, v.max(1.0)))
                })
                .collect();
            Some((t, pts))
        })
        .collect();
    let all: Vec<f64> = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .collect();
    if all.is_empty() {
        return Err(anyhow!("no latency to plot"));
    }
    let ymin = all.iter().copied().fold(f64::INFINITY, f64::min) / 1.5;
    let ymax = all.iter().copied().fold(0.0, f64::max) * 1.5;
    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let last = (PERCENTILES.len() - 1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "NULL, depth 1: latency percentiles (one connection)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.4..(last + 0.4), (ymin.max(0.5)..ymax).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency, µs (log scale)")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .x_labels(PERCENTILES.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let r = x.round();
            if (x - r).abs() < 1e-6 && r >= 0.0 && r <= last {
                PERCENTILES[r as usize].1.to_owned()
            } else {
                String::new()
            }
        })
        .draw()?;
    for (t, pts) in series {
        let c = color(t);
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
            .label(t.label())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::tests::fake_runs;

    #[test]
    fn plots_are_svg_with_both_transports() {
        let set = ResultSet::new(fake_runs(2, 0.8)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t.svg");
        let l = dir.path().join("l.svg");
        throughput(&set, &t).unwrap();
        latency(&set, &l).unwrap();
        for p in [&t, &l] {
            let svg = std::fs::read_to_string(p).unwrap();
            assert!(svg.starts_with("<svg"), "{}", &svg[..40.min(svg.len())]);
            assert!(svg.contains("RPC-over-RDMA") && svg.contains("RPC over TCP"));
        }
        let svg = std::fs::read_to_string(&t).unwrap();
        assert!(svg.contains("4KiB") && svg.contains("16MiB"), "size labels");
        assert!(svg.contains("polyline"), "lines drawn");
        let svg = std::fs::read_to_string(&l).unwrap();
        assert!(svg.contains("p99.9"));
    }
}
