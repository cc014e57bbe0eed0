//! The wire oracle of the test suite: a capture of real traffic is decoded
//! by `tshark` (Wireshark's dissectors, independent of our code) and judged
//! per iWARP TCP connection.
//!
//! * [`tshark`] runs tshark with the project's options and streams its
//!   output.
//! * [`parse`] turns tshark's verbose text (`-V -O …`) into per-frame
//!   records of the iWARP and RPC layers, and its `-T fields` output into
//!   per-frame TCP stream and expert information.
//! * [`judge`] checks every connection: MPA negotiation, "Good CRC32" on
//!   every FPDU, no expert warnings or errors from the RDMA/RPC layers (and
//!   none from TCP but flow control), MSN/MO in sequence per untagged queue,
//!   Read Responses matching Read Requests, every RDMA Send of an
//!   RPC-over-RDMA connection decoding as `rpcordma` and its RPC (same XID)
//!   decoding as `rpc`, directly or reassembled from chunks.
//! * [`report`] prints the summary.
//!
//! Which chunks tshark 4.0 can reassemble over iWARP (facts from Wireshark's
//! `packet-rpcrdma.c`): Read chunks (reassembled in the frame of the last
//! Read Response, when every segment of the chunk has its own STag — the
//! dissector files segments by handle alone), Reply chunks (reassembled in
//! the RDMA_NOMSG reply), multi-segment Sends. Write chunks are only
//! reinserted when the upper-layer dissector reports where the reduced data
//! item sits (NFS does; an RPC program unknown to Wireshark cannot), so for
//! them the oracle checks that the reduced RPC message decodes with the same
//! XID and that the RDMA Writes are well formed — and says so in the report.
//! tshark 4.0 also keeps that reassembly state per *frame*: when a reply
//! with a Write list shares a TCP segment with the chunk's last RDMA Write,
//! it hands the chunk data to the RPC dissector instead of the reply
//! ("Continuation data"); such replies are counted, not failed.
//!
//! Negative tests (bad CRCs, invalid STags, Sends without receives…) end
//! their connection with an RDMAP Terminate. Such a connection is judged
//! fully up to the Terminate; only failures in the frames its sender
//! received after its own last FPDU (the fault it answered) are excused,
//! and listed. A fault without a Terminate, or one the terminating peer
//! kept talking past, fails.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod judge;
pub mod parse;
pub mod report;
pub mod resegment;
pub mod tshark;

pub use judge::{judge, Verdict};
pub use tshark::{check_file, Error};
