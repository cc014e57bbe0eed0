//! The wire oracle of the test suite: a capture of real traffic is decoded
//! by `tshark` (Wireshark's dissectors, independent of our code) and judged
//! per iWARP TCP connection.
//!
//! * [`resegment`] re-packetizes the capture one MPA frame per TCP segment
//!   (same bytes, same sequence numbers, each frame emitted when its last
//!   byte was captured), because tshark 4.0's rpcordma dissector keeps its
//!   reassembly state per frame and its MPA heuristic drops an FPDU start
//!   shorter than 8 bytes left after a reassembled PDU: coalesced loopback
//!   segments would otherwise show spurious failures.
//! * [`tshark`] runs tshark with the project's options and streams its
//!   output: the verbose and fields passes on the re-packetized capture, and
//!   TCP's own sequence analysis (lost, out-of-order, retransmitted segments,
//!   windows, resets) on the original capture.
//! * [`parse`] turns tshark's verbose text (`-V -O …`) into per-frame
//!   records of the iWARP and RPC layers, and its `-T fields` output into
//!   per-frame TCP stream and expert information.
//! * [`judge`](mod@judge) checks every connection: MPA negotiation, "Good CRC32" on
//!   every FPDU, no expert warnings or errors (TCP's flow-control warnings
//!   and RSTs are counted, not failed), MSN/MO in sequence per untagged
//!   queue, Read Responses matching Read Requests in order and size, every
//!   RDMA Send of an RPC-over-RDMA connection decoding as `rpcordma`, every
//!   call from the requester carrying its RPC call (same XID) inline or
//!   reassembled by tshark from its Read chunks, every reply carrying its
//!   RPC reply inline (reduced when it has Write chunks) or, for
//!   RDMA_NOMSG, reassembled from the Reply chunk.
//! * [`report`] prints the summary.
//!
//! What tshark 4.0 cannot show, and how the judge deals with it (facts from
//! Wireshark's `packet-rpcrdma.c`):
//! * Chunk segments are filed per connection by handle and offset, so a
//!   handle offered twice on a connection cannot be reassembled. A handle
//!   offered again while the call that offered it is unanswered fails
//!   (RFC 8166 §3.4.5); once that call's reply was seen the handle may be
//!   reused (Linux does), and such a chunk is judged without tshark: a
//!   Read chunk read in full before the reply, a Reply chunk written by
//!   an RDMA Write before the RDMA_NOMSG reply.
//! * Write-chunk data is re-inserted into the reply only for programs whose
//!   dissector reports where the reduced data item sits (NFS does, an RPC
//!   program unknown to Wireshark cannot): for Write chunks the oracle
//!   checks the reduced reply and the RDMA Writes, and counts them.
//! * RFC 8166 §3.4.6 forbids XDR roundup padding in a Write chunk, but
//!   the NFS dissector expects it after the data tshark re-inserted: an
//!   NFS READ reply whose Write chunk (of exactly the data's length), or a
//!   READLINK reply whose Write chunk, is not a multiple of 4 shows as
//!   malformed NFS. Only that report, last in such a reply, is excused,
//!   listed and counted in the verdict line.
//! * `packet_is_rpcordma` reads the 16-byte header before checking the
//!   length, so RDMA Sends shorter than that on connections that do not
//!   carry RPC-over-RDMA show as malformed RPCoRDMA: counted, not failed.
//!
//! Faults are excused only where they were answered as the protocol
//! requires, and are listed: a connection with an RDMAP Terminate is judged
//! fully up to it, and only failures in the frames its sender received
//! after its own last FPDU (the fault it answered) are excused; a call
//! whose RPC message does not decode is excused when the responder answers
//! its XID with RDMA_ERROR; operations still outstanding when a peer closed
//! or reset the connection (Read Requests, chunk reassemblies) are excused
//! as cut by the close. A fault without such an answer fails.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod judge;
pub mod parse;
pub mod report;
pub mod resegment;
pub mod tshark;

pub use judge::{judge, Verdict};
pub use tshark::{check_file, Error};
