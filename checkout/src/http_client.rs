//! The workspace's one HTTP client (`reqwest`, async) for callers that do
//! not own an async runtime: the payment provider adapter
//! ([`crate::http_provider`]) and the outbox's HTTP sink in the gateway.
//!
//! The client's connections and timers live on a one-thread runtime this
//! type owns, so they outlive whichever runtime or thread a caller is on,
//! and a call ([`HttpClient::spawn`]) is a future that any executor can
//! await: the gateway's runtime, or [`wait`] on a blocking thread (the
//! checkout drivers on the gateway's bounded pool, the relay, the
//! reconcilers, a test).

use std::future::Future;

/// A `reqwest` client and the runtime its I/O runs on.
pub struct HttpClient {
    client: reqwest::Client,
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient").finish_non_exhaustive()
    }
}

/// The client could not be built (TLS roots, the runtime's thread).
#[derive(Debug, thiserror::Error)]
#[error("HTTP client: {0}")]
pub struct ClientError(String);

impl HttpClient {
    /// Builds `builder`'s client and a runtime whose one thread is named
    /// `thread_name`.
    pub fn new(builder: reqwest::ClientBuilder, thread_name: &str) -> Result<Self, ClientError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(thread_name)
            .enable_all()
            .build()
            .map_err(|e| ClientError(e.to_string()))?;
        // Built inside the runtime: whatever the client spawns lands there.
        let client = {
            let _entered = runtime.enter();
            builder.build().map_err(|e| ClientError(e.to_string()))?
        };
        Ok(Self {
            client,
            runtime: Some(runtime),
        })
    }

    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// Runs `call` on the client's runtime; its output, or `None` when
    /// the runtime stopped before the call ended (shutdown, a panic).
    pub fn spawn<F>(&self, call: F) -> impl Future<Output = Option<F::Output>> + Send + 'static
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let handle = self.runtime.as_ref().map(|runtime| runtime.spawn(call));
        async move {
            match handle {
                Some(handle) => handle.await.ok(),
                None => None,
            }
        }
    }
}

impl Drop for HttpClient {
    fn drop(&mut self) {
        // Dropping a runtime blocks until its tasks stop, which panics on
        // an async thread (a gateway shutting down): let them go instead.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Waits for `future` on the calling thread. For blocking threads only
/// (never a runtime's worker): the synchronous store steps between
/// provider calls run there.
pub fn wait<F: Future>(future: F) -> F::Output {
    futures_executor::block_on(future)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_runs_on_the_clients_runtime_and_is_waited_for_anywhere() {
        let http = HttpClient::new(reqwest::Client::builder(), "http-test").unwrap();
        let name = wait(http.spawn(async { std::thread::current().name().map(str::to_owned) }));
        assert_eq!(name, Some(Some("http-test".to_owned())));
        // Dropped inside another runtime's task without a panic.
        let outer = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        outer.block_on(async move { drop(http) });
    }
}
