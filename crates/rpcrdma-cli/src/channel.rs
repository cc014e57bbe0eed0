//! Connecting to a [`Target`]: one `Channel` type over every transport, so
//! subcommands stay transport-neutral.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use oncrpc::{Channel, Payload, Request, RpcError};
use oncrpc_tcp::{ClientConfig, TcpChannel};
use rpcrdma::{Bindings, CallReport, RdmaClient, RdmaConfig};

use crate::target::Target;

/// The RPC-over-RDMA client on the software iWARP provider.
pub type RdmaChannel = RdmaClient<iwarp::Device>;

/// A connected channel of any transport.
///
/// `oncrpc::Channel` is not object-safe (its `call` returns `impl Future`),
/// so transports are gathered in this enum; adding one is adding a variant.
#[derive(Debug)]
pub enum AnyChannel {
    /// ONC RPC over TCP.
    Tcp(TcpChannel),
    /// RPC-over-RDMA (RFC 8166) on the software iWARP provider.
    Rdma(RdmaChannel),
}

impl AnyChannel {
    /// Makes a call; RPC-over-RDMA also reports what went on the wire.
    pub async fn call_reported(
        &self,
        req: Request,
    ) -> Result<(Payload, Option<CallReport>), RpcError> {
        match self {
            AnyChannel::Tcp(c) => c.call(req).await.map(|p| (p, None)),
            AnyChannel::Rdma(c) => c.call_with_report(req).await.map(|(p, r)| (p, Some(r))),
        }
    }

    /// Closes the connection (RDMA: disconnects now rather than on drop).
    pub fn close(&self) {
        if let AnyChannel::Rdma(c) = self {
            c.close();
        }
    }
}

impl Channel for AnyChannel {
    async fn call(&self, req: Request) -> Result<Payload, RpcError> {
        match self {
            AnyChannel::Tcp(c) => c.call(req).await,
            AnyChannel::Rdma(c) => c.call(req).await,
        }
    }
}

/// A channel that keeps the [`CallReport`]s of the calls made through it,
/// so a verifying client (`rdmatest::RdmatestClient`) can run on top and
/// the report is still available afterwards.
#[derive(Debug)]
pub struct Recorder<'a> {
    inner: &'a AnyChannel,
    reports: Mutex<Vec<CallReport>>,
}

impl<'a> Recorder<'a> {
    /// Records the calls made on `inner`.
    pub fn new(inner: &'a AnyChannel) -> Self {
        Recorder {
            inner,
            reports: Mutex::new(Vec::new()),
        }
    }

    /// The reports recorded so far (RDMA only; empty for TCP), oldest first.
    pub fn take(&self) -> Vec<CallReport> {
        std::mem::take(&mut *self.reports.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Channel for Recorder<'_> {
    async fn call(&self, req: Request) -> Result<Payload, RpcError> {
        let (payload, report) = self.inner.call_reported(req).await?;
        if let Some(r) = report {
            self.reports
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(r);
        }
        Ok(payload)
    }
}

/// How to connect, whatever the transport.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Bound on connection setup.
    pub timeout: Duration,
    /// TCP: largest record-marking fragment of a call (`None`: one fragment
    /// per call).
    pub max_fragment: Option<usize>,
    /// RDMA: transport configuration.
    pub rdma: RdmaConfig,
    /// RDMA: the device to connect with (one device may carry many
    /// connections).
    pub device: Option<iwarp::Device>,
}

/// Connects to `target` with the RDMATEST Upper-Layer Binding.
pub async fn connect(target: &Target, options: &ConnectOptions) -> anyhow::Result<AnyChannel> {
    connect_with(target, options, Bindings::rdmatest()).await
}

/// Connects to `target`; over RPC-over-RDMA, `bindings` say which items
/// of which programs travel in chunks (e.g. NFSv3 and MOUNT, RFC 8267).
pub async fn connect_with(
    target: &Target,
    options: &ConnectOptions,
    bindings: Bindings,
) -> anyhow::Result<AnyChannel> {
    match target {
        Target::Tcp { addr } => {
            let defaults = ClientConfig::default();
            let config = ClientConfig {
                connect_timeout: options.timeout,
                // Calls carry their own timeout.
                default_timeout: None,
                max_fragment_size: options.max_fragment.unwrap_or(defaults.max_fragment_size),
                ..defaults
            };
            let channel = TcpChannel::connect_with(addr.as_str(), config)
                .await
                .with_context(|| format!("cannot connect to {target}"))?;
            Ok(AnyChannel::Tcp(channel))
        }
        Target::Rdma { addr } => {
            let sockaddr = resolve(addr)
                .await
                .with_context(|| format!("cannot connect to {target}"))?;
            let dev = options.device.clone().unwrap_or_default();
            let config = RdmaConfig {
                connect_timeout: options.timeout,
                ..options.rdma.clone()
            };
            let client = RdmaClient::connect(dev, sockaddr, config, bindings)
                .await
                .with_context(|| format!("cannot connect to {target}"))?;
            Ok(AnyChannel::Rdma(client))
        }
    }
}

/// Resolves `HOST:PORT` to its first address.
pub async fn resolve(addr: &str) -> anyhow::Result<SocketAddr> {
    tokio::net::lookup_host(addr)
        .await
        .with_context(|| format!("cannot resolve {addr}"))?
        .next()
        .with_context(|| format!("{addr} has no address"))
}
