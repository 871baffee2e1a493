//! The id of the request being served, available to every layer below the HTTP edge
//! (envelope rendering, logs, idempotency records) without threading it through calls.
tokio::task_local! {
    static REQUEST_ID: String;
}

/// Runs `fut` with `id` as the current request id. A plain function, not an `async fn`:
/// an `async fn` would keep its `fut` argument beside the scope holding it, doubling the
/// size of every request's future (and of each copy of it).
pub fn scope<F: std::future::Future>(
    id: String,
    fut: F,
) -> impl std::future::Future<Output = F::Output> {
    REQUEST_ID.scope(id, fut)
}

/// The current request id, or a fresh one outside a request (CLI, jobs).
pub fn request_id() -> String {
    REQUEST_ID
        .try_with(|id| id.clone())
        .unwrap_or_else(|_| new_request_id())
}

pub fn new_request_id() -> String {
    format!("req_{}", uuid::Uuid::now_v7().simple())
}
