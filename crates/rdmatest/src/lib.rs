//! # rdmatest — the RDMATEST test program
//!
//! Program `0x20005244` (536891972), version 1, used to exercise RPC
//! transports (TCP and RPC-over-RDMA) end to end:
//!
//! | proc | name | arguments | results | DDP-eligible |
//! |---|---|---|---|---|
//! | 0 | NULL | void | void | none |
//! | 1 | ECHO | `opaque data<>` | `opaque data<>` (same bytes) | none |
//! | 2 | PUT | `opaque data<>` | `struct { uint32 length; uint32 crc32c; }` | argument `data` |
//! | 3 | GET | `struct { uint32 length; uint32 seed; }` | `union switch (uint32 status) { case 0: opaque data<>; default: void; }` | result `data` |
//! | 4 | GET2 | `struct { uint32 len_a; uint32 len_b; uint32 seed; }` | `struct { opaque a<>; uint32 marker; opaque b<>; }` | results `a`, `b` |
//! | 5 | SLEEP | `uint32 milliseconds` | void | none |
//!
//! Pattern data is `data[i] = (seed + i) mod 256` (`b` of GET2 uses
//! `seed + 1`); GET2's marker is `0xFEEDFACE`; the CRC is CRC-32C
//! (Castagnoli). GET answers status 1 when the length exceeds the server's
//! maximum (default 16 MiB).
//!
//! * [`proto`]: numbers, argument/result types, the DDP-eligibility table;
//! * [`server::RdmatestServer`]: the [`oncrpc::Service`], emitting
//!   DDP-eligible results as `Ddp` pieces;
//! * [`client::RdmatestClient`]: typed calls over any [`oncrpc::Channel`]
//!   that verify what comes back;
//! * [`pattern`]: pattern generators and checks.
//!
//! ```
//! use oncrpc::{Dispatcher, testing::LocalChannel};
//! use rdmatest::{RdmatestClient, RdmatestServer};
//!
//! let d = Dispatcher::builder().service(RdmatestServer::default()).build();
//! let client = RdmatestClient::new(LocalChannel::new(d));
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
//! rt.block_on(async {
//!     let data = client.get(1000, 7).await.unwrap();
//!     assert_eq!(data[0], 7);
//!     client.put(data).await.unwrap();
//! });
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod client;
pub mod pattern;
pub mod proto;
pub mod server;

pub use client::{ClientError, Get2Result, RdmatestClient};
pub use proto::{Get2Args, GetArgs, PutResult, PROGRAM, VERSION};
pub use server::{RdmatestServer, ServerConfig};
