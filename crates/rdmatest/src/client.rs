//! The verifying RDMATEST client, generic over any [`Channel`].

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use oncrpc::{Channel, Credential, Payload, Request, RpcError};
use xdr::XdrRead;

use crate::pattern::verify_pattern;
use crate::proto::*;

/// Bytes of reply besides the results' data that a client provisions for:
/// RPC reply header with a verifier of up to 400 bytes, plus a few words.
const REPLY_OVERHEAD: usize = 512;

/// Why an RDMATEST call failed or returned wrong data.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The RPC itself failed.
    #[error(transparent)]
    Rpc(#[from] RpcError),
    /// The results could not be decoded.
    #[error("malformed results: {0}")]
    BadResults(#[from] xdr::Error),
    /// GET answered with a non-zero status (1: length above the server max).
    #[error("GET refused with status {0}{meaning}", meaning = get_status_meaning(*.0))]
    GetStatus(u32),
    /// A returned length differs from the expected one.
    #[error("{what}: expected {expected} bytes, got {got}")]
    LengthMismatch {
        /// Which item.
        what: &'static str,
        /// Expected length.
        expected: usize,
        /// Received length.
        got: usize,
    },
    /// ECHO returned different bytes.
    #[error("ECHO data differs at offset {offset}")]
    EchoMismatch {
        /// First differing offset.
        offset: usize,
    },
    /// Pattern data is wrong.
    #[error("{what}: pattern mismatch at offset {offset}")]
    PatternMismatch {
        /// Which item.
        what: &'static str,
        /// First wrong offset.
        offset: usize,
    },
    /// PUT's CRC differs from the one computed locally.
    #[error("PUT CRC mismatch: expected {expected:#010x}, server computed {got:#010x}")]
    CrcMismatch {
        /// Local CRC-32C.
        expected: u32,
        /// Server's CRC-32C.
        got: u32,
    },
    /// GET2's marker is not 0xFEEDFACE.
    #[error("GET2 marker {0:#010x} is not 0xFEEDFACE")]
    MarkerMismatch(u32),
}

/// What a non-zero GET status means, for the error text.
fn get_status_meaning(status: u32) -> &'static str {
    match status {
        crate::proto::GET_STATUS_TOO_LONG => " (the length is above the server's maximum)",
        _ => "",
    }
}

/// Results of GET2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Get2Result {
    /// `a` (pattern with `seed`).
    pub a: Bytes,
    /// `b` (pattern with `seed + 1`).
    pub b: Bytes,
}

/// A typed, verifying RDMATEST client over any [`Channel`] (TCP, RDMA,
/// [`LocalChannel`](oncrpc::testing::LocalChannel)).
///
/// Every method checks what it gets back: ECHO bytes, PUT length and
/// CRC-32C, GET/GET2 lengths, pattern bytes and marker; a mismatch is a
/// [`ClientError`].
#[derive(Debug, Clone)]
pub struct RdmatestClient<C> {
    channel: C,
    cred: Credential,
    timeout: Option<Duration>,
}

impl<C: Channel> RdmatestClient<C> {
    /// A client using AUTH_NONE and the channel's default timeout.
    pub fn new(channel: C) -> Self {
        RdmatestClient {
            channel,
            cred: Credential::None,
            timeout: None,
        }
    }

    /// Use this credential for every call.
    pub fn with_cred(mut self, cred: Credential) -> Self {
        self.cred = cred;
        self
    }

    /// Use this timeout for every call.
    pub fn with_timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// The channel.
    pub fn channel(&self) -> &C {
        &self.channel
    }

    fn request(&self, procedure: u32, args: Payload) -> Request {
        Request {
            prog: PROGRAM,
            vers: VERSION,
            procedure,
            cred: self.cred.clone(),
            args,
            result_bufs: Vec::new(),
            max_reply_len: None,
            timeout: self.timeout,
        }
    }

    /// NULL.
    pub async fn null(&self) -> Result<(), ClientError> {
        let res = self
            .channel
            .call(self.request(PROC_NULL, Payload::new()))
            .await?;
        res.decoder().finish()?;
        Ok(())
    }

    /// ECHO `data`; returns the echoed bytes after checking they are equal.
    pub async fn echo(&self, data: Bytes) -> Result<Bytes, ClientError> {
        let mut args = Payload::builder();
        args.opaque_bytes(data.clone());
        let req = self
            .request(PROC_ECHO, args.finish())
            .with_max_reply_len(REPLY_OVERHEAD + xdr::padded_len(data.len()));
        let res = self.channel.call(req).await?;
        let mut d = res.decoder();
        let got = d.opaque(u32::try_from(data.len()).unwrap_or(u32::MAX))?;
        d.finish()?;
        if got != data {
            let offset = got
                .iter()
                .zip(data.iter())
                .position(|(a, b)| a != b)
                .unwrap_or(got.len().min(data.len()));
            return Err(ClientError::EchoMismatch { offset });
        }
        Ok(got)
    }

    /// PUT `data` (sent as a DDP-eligible item); checks the server's length
    /// and CRC-32C against the local ones.
    pub async fn put(&self, data: Bytes) -> Result<PutResult, ClientError> {
        let expected = PutResult {
            length: data.len() as u32,
            crc32c: crc32c::crc32c(&data),
        };
        let mut args = Payload::builder();
        args.ddp_opaque(data);
        let res = self
            .channel
            .call(self.request(PROC_PUT, args.finish()))
            .await?;
        check_put(&res, expected)
    }

    /// GET `length` pattern bytes for `seed` into a new buffer; checks the
    /// length and every byte.
    pub async fn get(&self, length: u32, seed: u32) -> Result<Bytes, ClientError> {
        self.get_into(length, seed, BytesMut::with_capacity(length as usize))
            .await
    }

    /// GET into a caller buffer (its capacity must be ≥ `length`; on
    /// RPC-over-RDMA the data is placed directly into it).
    pub async fn get_into(
        &self,
        length: u32,
        seed: u32,
        buf: BytesMut,
    ) -> Result<Bytes, ClientError> {
        let mut args = Payload::builder();
        args.item(&GetArgs { length, seed });
        let req = self.request(PROC_GET, args.finish()).with_result_buf(buf);
        let res = self.channel.call(req).await?;
        let mut d = res.decoder();
        let status = d.u32()?;
        if status != GET_STATUS_OK {
            d.finish()?;
            return Err(ClientError::GetStatus(status));
        }
        let data = d.opaque(length)?;
        d.finish()?;
        check_pattern("GET data", seed, length, &data)?;
        Ok(data)
    }

    /// GET2: two pattern items around the marker; checks everything.
    pub async fn get2(&self, len_a: u32, len_b: u32, seed: u32) -> Result<Get2Result, ClientError> {
        let mut args = Payload::builder();
        args.item(&Get2Args { len_a, len_b, seed });
        let req = self
            .request(PROC_GET2, args.finish())
            .with_result_buf(BytesMut::with_capacity(len_a as usize))
            .with_result_buf(BytesMut::with_capacity(len_b as usize));
        let res = self.channel.call(req).await?;
        let mut d = res.decoder();
        let a = d.opaque(len_a)?;
        let marker = d.u32()?;
        let b = d.opaque(len_b)?;
        d.finish()?;
        check_pattern("GET2 a", seed, len_a, &a)?;
        if marker != GET2_MARKER {
            return Err(ClientError::MarkerMismatch(marker));
        }
        check_pattern("GET2 b", seed.wrapping_add(1), len_b, &b)?;
        Ok(Get2Result { a, b })
    }

    /// SLEEP for `ms` milliseconds on the server.
    pub async fn sleep(&self, ms: u32) -> Result<(), ClientError> {
        let mut args = Payload::builder();
        args.u32(ms);
        let res = self
            .channel
            .call(self.request(PROC_SLEEP, args.finish()))
            .await?;
        res.decoder().finish()?;
        Ok(())
    }
}

fn check_pattern(
    what: &'static str,
    seed: u32,
    length: u32,
    data: &[u8],
) -> Result<(), ClientError> {
    if data.len() != length as usize {
        return Err(ClientError::LengthMismatch {
            what,
            expected: length as usize,
            got: data.len(),
        });
    }
    verify_pattern(seed, data).map_err(|offset| ClientError::PatternMismatch { what, offset })
}

/// Decodes PUT results and checks them against `expected` (the length and
/// CRC-32C of the data sent).
pub fn check_put(res: &Payload, expected: PutResult) -> Result<PutResult, ClientError> {
    let mut d = res.decoder();
    let got: PutResult = d.decode()?;
    d.finish()?;
    if got.length != expected.length {
        return Err(ClientError::LengthMismatch {
            what: "PUT length",
            expected: expected.length as usize,
            got: got.length as usize,
        });
    }
    if got.crc32c != expected.crc32c {
        return Err(ClientError::CrcMismatch {
            expected: expected.crc32c,
            got: got.crc32c,
        });
    }
    Ok(got)
}

/// NULL over `ch` with default options (see [`RdmatestClient::null`]).
pub async fn null<C: Channel>(ch: &C) -> Result<(), ClientError> {
    RdmatestClient::new(ch).null().await
}

/// ECHO over `ch`, verified (see [`RdmatestClient::echo`]).
pub async fn echo<C: Channel>(ch: &C, data: Bytes) -> Result<Bytes, ClientError> {
    RdmatestClient::new(ch).echo(data).await
}

/// PUT over `ch`, verified (see [`RdmatestClient::put`]).
pub async fn put<C: Channel>(ch: &C, data: Bytes) -> Result<PutResult, ClientError> {
    RdmatestClient::new(ch).put(data).await
}

/// GET over `ch`, verified (see [`RdmatestClient::get`]).
pub async fn get<C: Channel>(ch: &C, length: u32, seed: u32) -> Result<Bytes, ClientError> {
    RdmatestClient::new(ch).get(length, seed).await
}

/// GET2 over `ch`, verified (see [`RdmatestClient::get2`]).
pub async fn get2<C: Channel>(
    ch: &C,
    len_a: u32,
    len_b: u32,
    seed: u32,
) -> Result<Get2Result, ClientError> {
    RdmatestClient::new(ch).get2(len_a, len_b, seed).await
}

/// SLEEP over `ch` (see [`RdmatestClient::sleep`]).
pub async fn sleep<C: Channel>(ch: &C, ms: u32) -> Result<(), ClientError> {
    RdmatestClient::new(ch).sleep(ms).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_status_error_says_what_the_status_means() {
        let too_long = ClientError::GetStatus(crate::proto::GET_STATUS_TOO_LONG).to_string();
        assert_eq!(
            too_long,
            "GET refused with status 1 (the length is above the server's maximum)"
        );
        assert_eq!(
            ClientError::GetStatus(7).to_string(),
            "GET refused with status 7"
        );
    }
}
