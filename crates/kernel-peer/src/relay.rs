//! `cut-relay`: a TCP relay whose connections can be cut on demand, for the
//! scenario in which the connection under an iWARP stream breaks in the
//! middle of a transfer. Each accepted connection is relayed to the
//! target; SIGUSR1 aborts every connection relayed so far (both sides get
//! a TCP RST: the sockets close with a zero linger time). New connections
//! are relayed as before.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use anyhow::Context;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

/// Relays `listen` to `target` until SIGTERM or SIGINT; SIGUSR1 cuts.
pub async fn run(listen: SocketAddr, target: SocketAddr) -> anyhow::Result<u8> {
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let (cut_tx, _) = watch::channel(0u64);
    let cut_tx = Arc::new(cut_tx);
    let relayed = Arc::new(AtomicU64::new(0));
    let mut usr1 = signal(SignalKind::user_defined1())?;
    let mut term = signal(SignalKind::terminate())?;
    println!("cut-relay listening on {listen}, relaying to {target}");
    loop {
        tokio::select! {
            a = listener.accept() => {
                let (client, peer) = a?;
                let n = relayed.fetch_add(1, Relaxed);
                println!("connection {n} from {peer}");
                let cut = cut_tx.subscribe();
                tokio::spawn(async move {
                    if let Err(e) = relay(client, target, cut).await {
                        println!("connection {n}: {e:#}");
                    }
                });
            }
            _ = usr1.recv() => {
                let gen = *cut_tx.borrow() + 1;
                cut_tx.send_replace(gen);
                println!("cut: every relayed connection aborted (cut {gen})");
            }
            _ = term.recv() => return Ok(0),
            _ = tokio::signal::ctrl_c() => return Ok(0),
        }
    }
}

async fn relay(
    client: TcpStream,
    target: SocketAddr,
    mut cut: watch::Receiver<u64>,
) -> anyhow::Result<()> {
    let server = TcpStream::connect(target).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let start = *cut.borrow_and_update();
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = async {
        let r = tokio::io::copy(&mut cr, &mut sw).await;
        let _ = sw.shutdown().await;
        r
    };
    let down = async {
        let r = tokio::io::copy(&mut sr, &mut cw).await;
        let _ = cw.shutdown().await;
        r
    };
    let copying = async { tokio::try_join!(up, down) };
    let waiting = async {
        while cut.changed().await.is_ok() {
            if *cut.borrow() != start {
                return true;
            }
        }
        false
    };
    let cut_now = tokio::select! {
        r = copying => { r?; false }
        c = waiting => c,
    };
    if cut_now {
        // Both sockets aborted: a zero linger time makes close send an RST.
        let c = cr.reunite(cw).context("reuniting the client socket")?;
        let s = sr.reunite(sw).context("reuniting the server socket")?;
        socket2::SockRef::from(&c).set_linger(Some(std::time::Duration::ZERO))?;
        socket2::SockRef::from(&s).set_linger(Some(std::time::Duration::ZERO))?;
    }
    Ok(())
}
