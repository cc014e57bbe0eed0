//! DDP / RDMAP / Read Request / Terminate parsers on arbitrary ULPDU bytes:
//! never panic; parsed values re-emit to equal values; Terminate
//! construction from arbitrary offending bytes never panics.
#![no_main]

use iwarp::wire::ddp::DdpRepr;
use iwarp::wire::rdmap::{RdmapRepr, ReadRequestRepr};
use iwarp::wire::terminate::{TerminateCause, TerminateRepr, MAX_BODY_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = DdpRepr::parse_bytes(data) {
        let (b, n) = d.to_bytes();
        assert_eq!(DdpRepr::parse_bytes(&b[..n]).unwrap(), d);
    }
    if let Ok(r) = RdmapRepr::parse_ulpdu(data) {
        let mut b = [0u8; 18];
        let n = r.emit(&mut b).unwrap();
        assert_eq!(RdmapRepr::parse_ulpdu(&b[..n]).unwrap(), r);
    }
    if let Ok(rr) = ReadRequestRepr::parse(data) {
        assert_eq!(ReadRequestRepr::parse(&rr.to_bytes()).unwrap(), rr);
    }
    if let Ok(t) = TerminateRepr::parse(data) {
        let mut b = [0u8; MAX_BODY_LEN];
        let n = t.emit_body(&mut b).unwrap();
        assert_eq!(TerminateRepr::parse(&b[..n]).unwrap(), t);
    }
    if let Some(&sel) = data.first() {
        let causes: Vec<TerminateCause> = TerminateCause::all().collect();
        let cause = causes[sel as usize % causes.len()];
        let t = TerminateRepr::for_cause(cause, &data[1..]);
        let (u, n) = t.to_ulpdu();
        assert_eq!(n, t.ulpdu_len());
        assert_eq!(TerminateRepr::parse(&u[18..n]).unwrap(), t);
    }
});
