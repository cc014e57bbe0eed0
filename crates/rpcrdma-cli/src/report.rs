//! Human-readable summaries of what a call put on the wire, from the
//! transport's [`CallReport`], and of errors.

use rdmatest::ClientError;
use rpcrdma::{CallKind, CallReport, ReplyMode};

use crate::size::format_size;

/// The call's and reply's message kinds and chunks in a few words, e.g.
/// `Chunked Call (RDMA_MSG, 1 Read chunk 1.00 MiB) -> Short Reply (RDMA_MSG,
/// Write chunk 0: 1.00 MiB)`.
pub fn describe(r: &CallReport) -> String {
    let mut call = vec![r.call_message.to_string()];
    if r.read_chunks > 0 {
        call.push(format!(
            "{} Read chunk{} {} in {} segment{}",
            r.read_chunks,
            plural(r.read_chunks),
            format_size(r.read_chunk_bytes),
            r.read_segments,
            plural(r.read_segments)
        ));
    }
    if r.position_zero_bytes > 0 {
        call.push(format!(
            "Position-Zero Read chunk {}",
            format_size(r.position_zero_bytes)
        ));
    }
    if r.write_chunks > 0 {
        let pads = match r.write_pad_segments {
            0 => String::new(),
            1 => " with an XDR pad segment".into(),
            n => format!(" with {n} XDR pad segments"),
        };
        call.push(format!(
            "{} Write chunk{} offered{pads}",
            r.write_chunks,
            plural(r.write_chunks)
        ));
    }
    if r.reply_chunk_offered {
        call.push("Reply chunk offered".into());
    }
    call.push(format!("Send {}", format_size(r.call_send_bytes)));

    let mut reply = vec![r.reply_message.to_string()];
    for (i, n) in r.write_chunk_bytes.iter().enumerate() {
        if *n == 0 {
            reply.push(format!("Write chunk {i} unused"));
        } else {
            reply.push(format!("Write chunk {i}: {}", format_size(*n)));
        }
    }
    if r.reply_chunk_bytes > 0 {
        reply.push(format!("Reply chunk {}", format_size(r.reply_chunk_bytes)));
    }
    reply.push(format!("Send {}", format_size(r.reply_recv_bytes)));
    if r.remote_invalidated {
        reply.push("remote invalidation".into());
    }
    format!(
        "{} ({}) -> {} ({})",
        call_kind(r.call_kind),
        call.join(", "),
        reply_mode(r.reply_mode),
        reply.join(", ")
    )
}

/// "Short Call", "Chunked Call" or "Long Call" (RFC 8166 §3.5).
pub fn call_kind(k: CallKind) -> &'static str {
    match k {
        CallKind::Short => "Short Call",
        CallKind::Chunked => "Chunked Call",
        CallKind::Long => "Long Call",
    }
}

/// "Short Reply", "Long Reply" or "RDMA_ERROR".
pub fn reply_mode(m: ReplyMode) -> &'static str {
    match m {
        ReplyMode::Short => "Short Reply",
        ReplyMode::Long => "Long Reply",
        ReplyMode::Error => "RDMA_ERROR",
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// An error and its causes on one line, `outer: cause: root cause`, each
/// cause's text shown once: a library error whose message already quotes
/// its source (e.g. `verbs error: i/o error: connection refused`, whose
/// source is that same i/o error) does not repeat it.
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut last = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !last.is_empty() && last.ends_with(text.as_str()) {
            // Already said at the end of the previous message.
            last = text;
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
        last = text;
    }
    out
}

/// `ERR_CHUNK` or `ERR_VERS` when the call failed with an RDMA_ERROR.
pub fn rdma_error_kind(e: &ClientError) -> Option<&'static str> {
    let ClientError::Rpc(oncrpc::RpcError::Transport(inner)) = e else {
        return None;
    };
    match inner.downcast_ref::<rpcrdma::TransportError>()? {
        rpcrdma::TransportError::ErrChunk => Some("ERR_CHUNK"),
        rpcrdma::TransportError::ErrVers { .. } => Some("ERR_VERS"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    #[derive(Debug, thiserror::Error)]
    #[error("i/o error: refused")]
    struct Io;

    #[derive(Debug, thiserror::Error)]
    #[error("verbs error: {0}")]
    struct Quoting(#[source] Io);

    #[derive(Debug, thiserror::Error)]
    #[error("transport failed")]
    struct Terse(#[source] Io);

    #[test]
    fn a_cause_quoted_by_its_parent_is_shown_once() {
        let e = anyhow::Error::new(Quoting(Io)).context("cannot connect to rdma://h:1");
        assert_eq!(
            error_chain(&e),
            "cannot connect to rdma://h:1: verbs error: i/o error: refused"
        );
    }

    #[test]
    fn a_cause_not_quoted_is_shown() {
        let e = anyhow::Error::new(Terse(Io)).context("cannot connect");
        assert_eq!(
            error_chain(&e),
            "cannot connect: transport failed: i/o error: refused"
        );
    }
}
