//! Tests of the oncrpc core.

mod client;
mod dispatch;
mod msg;
mod payload;

/// Run a future to completion on a fresh current-thread runtime.
pub(crate) fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(f)
}
