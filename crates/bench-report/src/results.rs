//! The measured runs, grouped by point and transport, and the medians the
//! page reports.

use std::collections::BTreeMap;

use anyhow::{bail, Result};

use crate::measure::{Point, Run, Transport};

/// Latency percentiles of one run, in microseconds, as the plot shows them.
pub const PERCENTILES: [(&str, &str); 5] = [
    ("min", "min"),
    ("p50", "p50"),
    ("p99", "p99"),
    ("p999", "p99.9"),
    ("max", "max"),
];

/// Every run, by point and transport.
#[derive(Debug)]
pub struct ResultSet {
    runs: BTreeMap<(Point, Transport), Vec<Run>>,
}

/// The median of `v` (the mean of the middle two for an even count).
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

impl ResultSet {
    /// Groups `runs`; every point must have been measured over both
    /// transports.
    pub fn new(runs: Vec<Run>) -> Result<ResultSet> {
        let mut map: BTreeMap<(Point, Transport), Vec<Run>> = BTreeMap::new();
        for r in runs {
            map.entry((r.point.clone(), r.transport))
                .or_default()
                .push(r);
        }
        for (p, _) in map.keys() {
            for t in Transport::BOTH {
                if !map.contains_key(&(p.clone(), t)) {
                    bail!(
                        "{} {} was not measured over {}",
                        p.proc_,
                        p.size,
                        t.scheme()
                    );
                }
            }
        }
        if map.is_empty() {
            bail!("no runs");
        }
        Ok(ResultSet { runs: map })
    }

    /// The points measured, in order.
    pub fn points(&self) -> Vec<Point> {
        let mut v: Vec<Point> = self.runs.keys().map(|(p, _)| p.clone()).collect();
        v.dedup();
        v
    }

    /// The runs of one point over one transport.
    pub fn runs(&self, p: &Point, t: Transport) -> &[Run] {
        self.runs
            .get(&(p.clone(), t))
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The median over rounds of a numeric field (`/`-separated path into
    /// the JSON, e.g. `latency_us/p50`).
    pub fn median(&self, p: &Point, t: Transport, field: &str) -> Option<f64> {
        median(
            self.runs(p, t)
                .iter()
                .filter_map(|r| lookup(&r.json, field))
                .collect(),
        )
    }

    /// RDMA's median over TCP's.
    pub fn ratio(&self, p: &Point, field: &str) -> Option<f64> {
        let r = self.median(p, Transport::Rdma, field)?;
        let t = self.median(p, Transport::Tcp, field)?;
        (t > 0.0).then(|| r / t)
    }

    /// The run whose `field` is the median (the lower middle one for an
    /// even count): a whole run, so its percentiles belong together.
    pub fn median_run(&self, p: &Point, t: Transport, field: &str) -> Option<&Run> {
        let mut v: Vec<(&Run, f64)> = self
            .runs(p, t)
            .iter()
            .filter_map(|r| lookup(&r.json, field).map(|x| (r, x)))
            .collect();
        v.sort_by(|a, b| a.1.total_cmp(&b.1));
        let n = v.len();
        (n > 0).then(|| v[(n - 1) / 2].0)
    }

    /// Every command run, in order.
    pub fn commands(&self) -> Vec<&str> {
        let mut all: Vec<&Run> = self.runs.values().flatten().collect();
        all.sort_by_key(|r| r.round);
        all.iter().map(|r| r.command.as_str()).collect()
    }
}

/// A number at `path` (`a/b`) in `v`.
pub fn lookup(v: &serde_json::Value, path: &str) -> Option<f64> {
    path.split('/')
        .try_fold(v, |v, k| v.get(k))
        .and_then(serde_json::Value::as_f64)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::measure::Plan;

    /// Runs for the standard plan with made-up numbers: RDMA at `rdma`
    /// times TCP's throughput, latencies growing with the percentile.
    pub fn fake_runs(rounds: u32, rdma: f64) -> Vec<Run> {
        let plan = Plan::standard(1.0, rounds);
        let mut out = Vec::new();
        for round in 1..=rounds {
            for p in &plan.points {
                for t in Transport::BOTH {
                    let base = 100.0 + (p.size as f64).log2() * 50.0 + f64::from(round);
                    let mb = if t == Transport::Rdma {
                        base * rdma
                    } else {
                        base
                    };
                    let lat = if t == Transport::Rdma { 30.0 } else { 25.0 };
                    out.push(Run {
                        point: p.clone(),
                        transport: t,
                        round,
                        command: format!("rpcrdma bench {}://x {}", t.scheme(), p.proc_),
                        json: serde_json::json!({
                            "errors": 0,
                            "mb_per_sec": mb,
                            "ops_per_sec": 1000.0,
                            "cpu_sec_per_gb": if p.size > 0 { serde_json::json!(0.3) } else { serde_json::Value::Null },
                            "cpu_us_per_call": 20.0,
                            "latency_us": {"min": lat / 2.0, "p50": lat, "p99": lat * 3.0,
                                           "p999": lat * 6.0, "max": lat * 20.0, "mean": lat},
                        }),
                    });
                }
            }
        }
        out
    }

    #[test]
    fn medians_and_ratios() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![1.0, 2.0]), Some(1.5));
        assert_eq!(median(vec![f64::NAN]), None);
        let set = ResultSet::new(fake_runs(3, 0.5)).unwrap();
        let p = &set.points()[0];
        let r = set.ratio(p, "mb_per_sec").unwrap();
        assert!((r - 0.5).abs() < 1e-9, "{r}");
        let null = set
            .points()
            .into_iter()
            .find(|p| p.proc_ == "null")
            .unwrap();
        assert_eq!(
            set.median(&null, Transport::Tcp, "latency_us/p99"),
            Some(75.0)
        );
        assert_eq!(
            set.median_run(&null, Transport::Rdma, "latency_us/p50")
                .unwrap()
                .round,
            2
        );
        assert_eq!(set.commands().len(), 90);
    }

    #[test]
    fn a_point_missing_a_transport_is_refused() {
        let mut runs = fake_runs(1, 1.0);
        runs.retain(|r| !(r.point.proc_ == "put" && r.transport == Transport::Tcp));
        assert!(ResultSet::new(runs).is_err());
    }
}
