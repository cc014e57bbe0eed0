//! The I/O path: 1 MiB READs and WRITEs with several calls in flight use
//! the cached descriptor (no reopen per call), the descriptor cache stays
//! bounded, and the throughput is printed (`--nocapture`).

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use common::*;
use nfs3::args::*;
use nfs3::procs::{Nfs3Args, Nfs3Res};
use nfs3::types::*;
use nfs3::PayloadEncode;
use nfs3_server::{BlockingMode, NfsService};
use oncrpc::Channel;

const MIB: usize = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_mib_reads_and_writes_in_flight_reuse_one_descriptor() {
    for mode in [
        BlockingMode::Pool,
        BlockingMode::InPlace,
        BlockingMode::Pool,
        BlockingMode::InPlace,
    ] {
        measure(mode).await;
    }
}

async fn measure(mode: BlockingMode) {
    let fx = Fx::new();
    let content: Vec<u8> = (0..64 * MIB).map(|i| (i % 253) as u8).collect();
    std::fs::write(fx.path("f"), &content).unwrap();
    let f = fx.walk("f").await;
    let opens0 = fx.export.counters().fd_opens.load(Ordering::Relaxed);
    let ch = Arc::new(oncrpc::testing::LocalChannel::new(
        oncrpc::Dispatcher::builder()
            .service(NfsService::new(fx.export.clone()).with_blocking_mode(mode))
            .build(),
    ));

    // 64 READs of 1 MiB, 8 in flight.
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let ch = ch.clone();
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for k in 0..8u64 {
                let off = (w * 8 + k) * MIB as u64;
                let a = Read3Args {
                    file: f.clone(),
                    offset: off,
                    count: MIB as u32,
                };
                let req = oncrpc::Request::new(100_003, 3, 6, a.to_payload()).with_cred(root());
                let reply = ch.call(req).await.unwrap();
                assert_eq!(reply.ddp_count(), 1, "READ data is one DDP piece");
                let Nfs3Res::Read(r) = Nfs3Res::decode_payload(6, &reply).unwrap() else {
                    panic!()
                };
                let r = r.into_result().unwrap();
                got.push((off, r.data));
            }
            got
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.extend(t.await.unwrap());
    }
    let read_secs = t.elapsed().as_secs_f64();
    for (off, data) in results {
        assert!(
            data[..] == content[off as usize..off as usize + MIB],
            "data at {off}"
        );
    }

    // 64 UNSTABLE WRITEs of 1 MiB, 8 in flight, then COMMIT.
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let ch = ch.clone();
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            for k in 0..8u64 {
                let off = (w * 8 + k) * MIB as u64;
                let data = bytes::Bytes::from(vec![(w * 8 + k) as u8; MIB]);
                let a = Write3Args {
                    file: f.clone(),
                    offset: off,
                    count: MIB as u32,
                    stable: StableHow::Unstable,
                    data,
                };
                let req = oncrpc::Request::new(100_003, 3, 7, a.to_payload()).with_cred(root());
                let reply = ch.call(req).await.unwrap();
                let Nfs3Res::Write(r) = Nfs3Res::decode_payload(7, &reply).unwrap() else {
                    panic!()
                };
                assert_eq!(r.into_result().unwrap().count, MIB as u32);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let Nfs3Res::Commit(c) = fx
        .call(
            &root(),
            Nfs3Args::Commit(Commit3Args {
                file: f.clone(),
                offset: 0,
                count: 0,
            }),
        )
        .await
    else {
        panic!()
    };
    c.into_result().unwrap();
    let write_secs = t.elapsed().as_secs_f64();
    let on_disk = std::fs::read(fx.path("f")).unwrap();
    for (i, chunk) in on_disk.chunks(MIB).enumerate() {
        assert!(chunk.iter().all(|&b| b == i as u8), "MiB {i}");
    }
    let opens = fx.export.counters().fd_opens.load(Ordering::Relaxed) - opens0;
    assert_eq!(opens, 0, "READ/WRITE reopened the file");
    // Per-call cost of a small procedure (GETATTR) on the blocking pool.
    let t = Instant::now();
    for _ in 0..2000 {
        let a = Getattr3Args { object: f.clone() };
        let req = oncrpc::Request::new(100_003, 3, 1, a.to_payload()).with_cred(root());
        ch.call(req).await.unwrap();
    }
    let getattr_us = t.elapsed().as_secs_f64() * 1e6 / 2000.0;
    // The same procedure executed in place (what the blocking pool costs).
    let who = nfs3_server::cred::Caller::map(&root(), fx.export.options());
    let t = Instant::now();
    for _ in 0..2000 {
        let a = Nfs3Args::Getattr(Getattr3Args { object: f.clone() });
        assert_eq!(
            nfs3_server::nfs::execute(&fx.export, &who, a).status(),
            Nfsstat3::Ok
        );
    }
    let inline_us = t.elapsed().as_secs_f64() * 1e6 / 2000.0;
    println!("{mode:?}: GETATTR, one at a time: {getattr_us:.1} us per call through the dispatcher, {inline_us:.1} us executed in place");
    println!(
        "{mode:?}: 64 x 1 MiB READ, 8 in flight: {:.0} MiB/s; 64 x 1 MiB UNSTABLE WRITE + COMMIT: {:.0} MiB/s; descriptor opens during I/O: {opens}",
        64.0 / read_secs,
        64.0 / write_secs
    );
}

#[tokio::test]
async fn the_descriptor_cache_is_bounded() {
    let fx = Fx::new();
    for i in 0..300 {
        std::fs::write(fx.path(&format!("f{i}")), format!("{i}")).unwrap();
    }
    for i in 0..300 {
        let f = fx.walk(&format!("f{i}")).await;
        let r = fx.read(&root(), &f, 0, 10).await.into_result().unwrap();
        assert_eq!(r.data.as_ref(), format!("{i}").as_bytes());
    }
    assert!(fx.export.cached_fds() <= nfs3_server::export::FD_CACHE_SIZE);
    // The evicted ones still work (reopened by location).
    let f = fx.walk("f0").await;
    assert_eq!(
        fx.read(&root(), &f, 0, 10)
            .await
            .into_result()
            .unwrap()
            .data
            .as_ref(),
        b"0"
    );
}
