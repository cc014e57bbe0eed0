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

/// Connects to `target`; `timeout` bounds connection setup.
pub async fn connect(target: &Target, timeout: Duration) -> anyhow::Result<AnyChannel> {
    match target {
        Target::Tcp { addr } => {
            let config = ClientConfig {
                connect_timeout: timeout,
                // Calls carry their own timeout.
                default_timeout: None,
                ..ClientConfig::default()
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
