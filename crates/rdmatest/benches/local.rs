//! RDMATEST over the in-memory LocalChannel: the RDMA-like piece path
//! (DDP items never copied by the RPC layer, GET placed into the caller's
//! buffer) against the TCP-like flattened path as baseline, same run.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use oncrpc::testing::{LocalChannel, LocalMode};
use oncrpc::Dispatcher;
use rdmatest::pattern::pattern;
use rdmatest::{RdmatestClient, RdmatestServer};

const LEN: usize = 1 << 20;

fn client(mode: LocalMode) -> RdmatestClient<LocalChannel> {
    let d = Dispatcher::builder()
        .service(RdmatestServer::default())
        .build();
    RdmatestClient::new(LocalChannel::with_mode(d, mode))
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let data: Bytes = pattern(3, LEN);
    for (proc_name, is_get) in [("get_1mib", true), ("put_1mib", false)] {
        let mut g = c.benchmark_group(proc_name);
        g.throughput(Throughput::Bytes(LEN as u64));
        for (name, mode) in [
            ("pieces", LocalMode::Pieces),
            ("flatten", LocalMode::Flatten),
        ] {
            let cl = client(mode);
            g.bench_function(name, |b| {
                b.iter(|| {
                    rt.block_on(async {
                        if is_get {
                            cl.get(LEN as u32, 3).await.unwrap();
                        } else {
                            cl.put(data.clone()).await.unwrap();
                        }
                    })
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
