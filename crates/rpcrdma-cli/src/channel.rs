//! Connecting to a [`Target`]: one `Channel` type over every transport, so
//! subcommands stay transport-neutral.

use std::time::Duration;

use anyhow::{bail, Context};
use oncrpc::{Channel, Payload, Request, RpcError};
use oncrpc_tcp::{ClientConfig, TcpChannel};

use crate::target::Target;

/// A connected channel of any transport.
///
/// `oncrpc::Channel` is not object-safe (its `call` returns `impl Future`),
/// so transports are gathered in this enum; adding one is adding a variant.
#[derive(Debug)]
pub enum AnyChannel {
    /// ONC RPC over TCP.
    Tcp(TcpChannel),
}

impl Channel for AnyChannel {
    async fn call(&self, req: Request) -> Result<Payload, RpcError> {
        match self {
            AnyChannel::Tcp(c) => c.call(req).await,
        }
    }
}

/// How to connect, whatever the transport.
#[derive(Debug, Clone, Copy)]
pub struct ConnectOptions {
    /// Bound on connection setup.
    pub timeout: Duration,
    /// TCP: largest record-marking fragment of a call (`None`: one fragment
    /// per call).
    pub max_fragment: Option<usize>,
}

/// Connects to `target`.
pub async fn connect(target: &Target, options: ConnectOptions) -> anyhow::Result<AnyChannel> {
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
        Target::Rdma { .. } => {
            bail!(
                "cannot connect to {target}: the rdma transport is not available yet (use tcp://)"
            )
        }
    }
}
