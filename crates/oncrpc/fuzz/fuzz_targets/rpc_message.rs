//! Hostile RPC messages: header decoders, the client core and the
//! dispatcher must never panic; whatever decodes must re-encode to the same
//! bytes; any reply the dispatcher sends must be a decodable reply.
#![no_main]

use std::future::Future;
use std::ops::RangeInclusive;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use oncrpc::{
    decode_reply, Call, ClientCore, DispatchOutcome, Dispatcher, MessageHeader, Payload, Piece,
    ProcError, Service,
};
use xdr::{Decoder, XdrEncode, XdrRead};

struct Echo;
impl Service for Echo {
    fn program(&self) -> u32 {
        0x2000_5244
    }
    fn versions(&self) -> RangeInclusive<u32> {
        1..=2
    }
    async fn handle(&self, call: Call) -> Result<Payload, ProcError> {
        let mut d = call.args.decoder();
        let data = d.opaque(1 << 16)?;
        d.finish()?;
        let mut b = Payload::builder();
        b.ddp_opaque(data);
        Ok(b.finish())
    }
}

fn poll_once<F: Future>(f: F) -> Option<F::Output> {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

fuzz_target!(|data: &[u8]| {
    // 1. Header decode and re-encode.
    let mut d = Decoder::new(data);
    if let Ok(h) = MessageHeader::decode(&mut d) {
        let used = d.position();
        let re = match &h {
            MessageHeader::Call(c) => xdr::encode_to_bytes(c).unwrap(),
            MessageHeader::Reply(r) => xdr::encode_to_bytes(r).unwrap(),
        };
        assert_eq!(&re[..], &data[..used]);
        let n = match &h {
            MessageHeader::Call(c) => c.encoded_len(),
            MessageHeader::Reply(r) => r.encoded_len(),
        };
        assert_eq!(n, used);
    }

    // 2. The message split in two pieces at a data-chosen point (the second
    //    possibly Ddp), through the client core and the dispatcher.
    let cut = data.first().map_or(0, |b| *b as usize).min(data.len());
    let bytes = Bytes::copy_from_slice(data);
    let ddp = data.get(1).is_some_and(|b| b & 1 == 1);
    let second = bytes.slice(cut..);
    let msg = Payload::from_pieces([
        Piece::Xdr(bytes.slice(..cut)),
        if ddp {
            Piece::Ddp(second)
        } else {
            Piece::Xdr(second)
        },
    ]);
    let mut core: ClientCore<()> = ClientCore::with_first_xid(0);
    if let Some(x) = data.get(..4) {
        core.register(u32::from_be_bytes(x.try_into().unwrap()), None, ());
    }
    let _ = core.handle_reply(&msg);
    let _ = decode_reply(&msg);

    let disp = Dispatcher::builder().service(Echo).build();
    if let Some(DispatchOutcome::Reply(r)) = poll_once(disp.dispatch(msg)) {
        let (xid, _) = decode_reply(&r).expect("dispatcher sent an undecodable reply");
        assert_eq!(Some(xid.to_be_bytes().as_slice()), data.get(..4));
        let _ = r.decoder().remaining();
    }
});
