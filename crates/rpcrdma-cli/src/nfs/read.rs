//! READ as a client should send it over either transport: with a Write
//! chunk for the data (RFC 8267 §3.1) only when the reply might not fit
//! the connection's reply inline threshold, as Linux's client decides.
//! A READ whose whole reply fits inline costs no memory registration, no
//! RDMA Write and no invalidation; over TCP the buffer is never used.

use bytes::BytesMut;
use nfs3::args::Read3Args;
use nfs3::client::{Error, Nfs3Client};
use nfs3::procs::proc3;
use nfs3::res::{Read3Res, Read3ResOk};
use nfs3::types::NfsFh3;

use super::wire::Wire;
use crate::channel::AnyChannel;

/// Bytes of a READ reply besides the data: RPC-over-RDMA header without
/// chunks (28), RPC reply header with an AUTH_NONE verifier (24), and the
/// `READ3resok` around the data (status, `post_op_attr` of 88, `count`,
/// `eof`, the data's length word and pad: 4 + 88 + 4 + 4 + 4 + 3), with
/// room to spare.
pub const READ_REPLY_OVERHEAD: u32 = 256;

/// Whether a READ of `count` bytes may come back inline on `ch`: over
/// RPC-over-RDMA when its largest reply fits the reply inline threshold;
/// never over TCP (there the result buffer is simply not used).
pub fn fits_inline(ch: &AnyChannel, count: u32) -> bool {
    match ch {
        AnyChannel::Rdma(c) => c
            .thresholds()
            .is_some_and(|t| count.saturating_add(READ_REPLY_OVERHEAD) <= t.reply_inline),
        AnyChannel::Tcp(_) => false,
    }
}

/// READ up to `count` bytes at `offset`: inline when the reply fits, else
/// placed into `buf` by the server through a Write chunk.
pub async fn read(
    nfs: &Nfs3Client<Wire>,
    fh: &NfsFh3,
    offset: u64,
    count: u32,
    buf: BytesMut,
) -> Result<Read3ResOk, Error> {
    if !fits_inline(nfs.channel().inner(), count) {
        return nfs.read_into(fh, offset, count, buf).await;
    }
    let args = Read3Args {
        file: fh.clone(),
        offset,
        count,
    };
    let r: Read3Res = nfs.call(proc3::READ, &args).await?;
    let ok = r.into_result().map_err(|status| Error::Nfs {
        procedure: "READ",
        status,
    })?;
    if ok.data.len() > count as usize || ok.count as usize != ok.data.len() {
        return Err(Error::Protocol {
            procedure: "READ",
            reason: format!(
                "asked for {count} bytes, got count {} and {} bytes of data",
                ok.count,
                ok.data.len()
            ),
        });
    }
    Ok(ok)
}
