//! The RDMATEST server: an [`oncrpc::Service`].

use std::ops::RangeInclusive;
use std::sync::OnceLock;
use std::time::Duration;

use oncrpc::{Call, Payload, ProcError, Service};
use xdr::XdrRead;

use crate::pattern::PatternSource;
use crate::proto::*;

/// Server limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConfig {
    /// Longest GET/GET2 data the server produces; longer GET requests get
    /// status 1, longer GET2 requests GARBAGE_ARGS. Default 16 MiB.
    pub max_get_len: u32,
    /// Longest ECHO argument accepted (else GARBAGE_ARGS). Default 16 MiB.
    pub max_echo_len: u32,
    /// Longest PUT argument accepted (else GARBAGE_ARGS). Default 16 MiB.
    pub max_put_len: u32,
    /// Longest SLEEP accepted in milliseconds (else GARBAGE_ARGS).
    /// Default 60 000.
    pub max_sleep_ms: u32,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_get_len: DEFAULT_MAX_DATA,
            max_echo_len: DEFAULT_MAX_DATA,
            max_put_len: DEFAULT_MAX_DATA,
            max_sleep_ms: 60_000,
        }
    }
}

/// The RDMATEST service (program [`PROGRAM`], version [`VERSION`]).
///
/// * ECHO returns its argument as plain XDR (not DDP-eligible), zero-copy.
/// * PUT reads its DDP-eligible argument zero-copy and returns its length
///   and CRC-32C.
/// * GET/GET2 results are [`Piece::Ddp`](oncrpc::Piece) slices of one shared
///   pattern buffer (allocated on first use, `max_get_len + 256` bytes).
/// * SLEEP waits on the tokio timer (needs a tokio runtime).
#[derive(Debug, Default)]
pub struct RdmatestServer {
    config: ServerConfig,
    patterns: OnceLock<PatternSource>,
}

impl RdmatestServer {
    /// A server with the given limits.
    pub fn new(config: ServerConfig) -> Self {
        RdmatestServer {
            config,
            patterns: OnceLock::new(),
        }
    }

    /// The limits.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    fn pattern(&self, seed: u32, len: u32) -> Result<bytes::Bytes, ProcError> {
        self.patterns
            .get_or_init(|| PatternSource::new(self.config.max_get_len as usize))
            .get(seed, len as usize)
            .ok_or(ProcError::SystemErr)
    }

    async fn run(&self, call: Call) -> Result<Payload, ProcError> {
        let mut d = call.args.decoder();
        let mut out = Payload::builder();
        match call.procedure {
            PROC_NULL => d.finish()?,
            PROC_ECHO => {
                let data = d.opaque(self.config.max_echo_len)?;
                d.finish()?;
                out.opaque_bytes(data);
            }
            PROC_PUT => {
                let data = d.opaque(self.config.max_put_len)?;
                d.finish()?;
                let res = PutResult {
                    length: data.len() as u32,
                    crc32c: crc32c::crc32c(&data),
                };
                out.item(&res);
            }
            PROC_GET => {
                let args: GetArgs = d.decode()?;
                d.finish()?;
                if args.length > self.config.max_get_len {
                    out.u32(GET_STATUS_TOO_LONG);
                } else {
                    out.u32(GET_STATUS_OK);
                    out.ddp_opaque(self.pattern(args.seed, args.length)?);
                }
            }
            PROC_GET2 => {
                let args: Get2Args = d.decode()?;
                d.finish()?;
                let max = self.config.max_get_len;
                if args.len_a > max || args.len_b > max {
                    return Err(ProcError::GarbageArgs);
                }
                out.ddp_opaque(self.pattern(args.seed, args.len_a)?);
                out.u32(GET2_MARKER);
                out.ddp_opaque(self.pattern(args.seed.wrapping_add(1), args.len_b)?);
            }
            PROC_SLEEP => {
                let ms = d.u32()?;
                d.finish()?;
                if ms > self.config.max_sleep_ms {
                    return Err(ProcError::GarbageArgs);
                }
                tokio::time::sleep(Duration::from_millis(ms.into())).await;
            }
            _ => return Err(ProcError::ProcUnavail),
        }
        Ok(out.finish())
    }
}

impl Service for RdmatestServer {
    fn program(&self) -> u32 {
        PROGRAM
    }

    fn versions(&self) -> RangeInclusive<u32> {
        VERSION..=VERSION
    }

    fn handle(
        &self,
        call: Call,
    ) -> impl std::future::Future<Output = Result<Payload, ProcError>> + Send {
        self.run(call)
    }
}
