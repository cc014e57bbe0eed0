//! Running servers of `rpcrdma serve` and `rpcrdma nfsd`: one
//! [`Running`] per listener of any transport, the one-line readiness
//! announcement, SIGINT/SIGTERM, and the graceful stop (stop accepting,
//! let in-flight calls finish, close).

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use oncrpc::Dispatcher;
use oncrpc_tcp::{ServerConfig, TcpServer};
use tokio::task::JoinHandle;

use crate::rpcbind::Mapping;

/// A started server of some transport.
pub struct Running {
    /// "tcp 127.0.0.1:20049" and the like: transport and bound address.
    pub name: String,
    /// "tcp" or "rdma" (the rpcbind netid, without the IPv6 `6`).
    pub transport: &'static str,
    /// The bound address.
    pub addr: SocketAddr,
    /// Asks the server to stop gracefully.
    stop: Box<dyn Fn() + Send + Sync>,
    /// Completes when the server has stopped.
    task: JoinHandle<anyhow::Result<()>>,
}

/// Asks every server to stop (each stops accepting at once and drains).
pub fn stop_all(running: &[Running]) {
    for server in running {
        (server.stop)();
    }
}

/// Waits for every server of `running` to finish its in-flight calls and
/// close; the first failure is returned after all have finished.
pub async fn drain(running: Vec<Running>) -> anyhow::Result<()> {
    let mut result = Ok(());
    for server in running {
        let outcome = server
            .task
            .await
            .with_context(|| format!("server {} panicked", server.name))
            .and_then(|r| r.with_context(|| format!("server {} failed", server.name)));
        if let Err(e) = outcome {
            result = result.and(Err(e));
        }
    }
    result
}

/// The bound address of the listener `m` was made for (its universal
/// address if none matches, which cannot happen).
pub fn listener_of(running: &[Running], m: &Mapping) -> String {
    running
        .iter()
        .find(|s| crate::rpcbind::universal_address(s.addr) == m.uaddr)
        .map(|s| s.addr.to_string())
        .unwrap_or_else(|| m.uaddr.clone())
}

/// Binds an ONC RPC over TCP server of `dispatcher` on `addr`; `label`
/// starts its name (`tcp`, or `mount` for a MOUNT-only listener).
pub async fn start_tcp(
    addr: &str,
    label: &str,
    config: ServerConfig,
    dispatcher: Arc<Dispatcher>,
) -> anyhow::Result<Running> {
    let server = TcpServer::bind(addr, dispatcher, config)
        .await
        .with_context(|| format!("cannot listen on tcp {addr}"))?;
    let local = server.local_addr()?;
    let handle = server.shutdown_handle();
    Ok(Running {
        name: format!("{label} {local}"),
        transport: "tcp",
        addr: local,
        stop: Box::new(move || handle.shutdown()),
        task: tokio::spawn(async move { Ok(server.run().await?) }),
    })
}

/// Binds an RPC-over-RDMA server of `dispatcher` with the Upper-Layer
/// Bindings `bindings` on `addr`, on the software iWARP device.
pub async fn start_rdma(
    addr: &str,
    device: &iwarp::Device,
    config: &rpcrdma::RdmaConfig,
    dispatcher: &Arc<Dispatcher>,
    bindings: rpcrdma::Bindings,
) -> anyhow::Result<Running> {
    let sockaddr = crate::channel::resolve(addr)
        .await
        .with_context(|| format!("cannot listen on rdma {addr}"))?;
    let server = rpcrdma::RdmaServer::bind(
        device.clone(),
        sockaddr,
        Dispatcher::clone(dispatcher),
        config.clone(),
        bindings,
    )
    .await
    .with_context(|| format!("cannot listen on rdma {addr}"))?;
    let local = server.local_addr();
    // `stop` starts the graceful shutdown (stop accepting, drain in-flight
    // calls, close); the task completes when it is done.
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let tx = std::sync::Mutex::new(Some(tx));
    let device = device.clone();
    let task = tokio::spawn(async move {
        let _ = rx.await;
        server.shutdown().await;
        let stats = server.stats();
        tracing::info!(
            dispatched = stats.dispatched.load(std::sync::atomic::Ordering::Relaxed),
            "rdma server stopped"
        );
        device
            .flush_capture()
            .context("cannot write the capture file")?;
        Ok(())
    });
    Ok(Running {
        name: format!("rdma {local}"),
        transport: "rdma",
        addr: local,
        stop: Box::new(move || {
            if let Some(tx) = tx.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = tx.send(());
            }
        }),
        task,
    })
}

/// Prints a line on stdout and flushes it at once (scripts wait for it).
pub fn announce(line: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// SIGINT and SIGTERM, registered at creation.
pub struct Signals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers (before announcing readiness, so a signal sent
    /// as soon as "listening" is printed is handled, not fatal).
    pub fn new() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Signals {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// Waits for the next signal; returns its name.
    pub async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => "SIGINT",
                _ = self.terminate.recv() => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "interrupt"
        }
    }
}

/// The rpcbind part of the ready line: the netids registered and, when
/// several listeners share a netid, which were left out.
pub fn registered_note(running: &[Running], r: &crate::rpcbind::Registered) -> String {
    let netids: Vec<String> = r.mappings().iter().map(|m| m.netid.clone()).collect();
    let mut line = format!("; registered with rpcbind as {}", netids.join(", "));
    if !r.skipped().is_empty() {
        let first: Vec<String> = r
            .mappings()
            .iter()
            .map(|m| format!("{} {}", m.netid, listener_of(running, m)))
            .collect();
        let left_out: Vec<String> = r
            .skipped()
            .iter()
            .map(|m| format!("{} {}", m.netid, listener_of(running, m)))
            .collect();
        line.push_str(&format!(
            " (first listener of each netid: {}); not registered: {} \
             (rpcbind holds one address per netid)",
            first.join(", "),
            left_out.join(", ")
        ));
    }
    line
}

/// After a signal: stop accepting, remove the rpcbind mappings (bounded by
/// [`crate::rpcbind::UNREGISTER_LIMIT`]: a hung rpcbind must not delay the
/// exit), then wait for the in-flight calls. A second signal during the
/// wait exits at once with an error (status 1).
pub async fn shut_down(
    running: Vec<Running>,
    registered: Option<crate::rpcbind::Registered>,
    stop: &mut Signals,
) -> anyhow::Result<()> {
    stop_all(&running);
    if let Some(mut r) = registered {
        if let Err(e) = r.unregister(crate::rpcbind::UNREGISTER_LIMIT).await {
            eprintln!(
                "rpcrdma: warning: cannot unregister from rpcbind: {}",
                crate::report::error_chain(&e)
            );
        }
    }
    tokio::select! {
        result = drain(running) => result,
        second = stop.recv() => {
            anyhow::bail!("{second} again during shutdown: exiting without waiting for calls in progress")
        }
    }
}
