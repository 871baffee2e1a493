//! The request being served (or the request a job descends from), available to every layer
//! below the HTTP edge (envelope rendering, logs, idempotency records, outbox rows) without
//! threading it through calls.
tokio::task_local! {
    static ORIGIN: Origin;
    static CALLER: CallerSlot;
}

/// What a piece of work descends from: a request id, and the W3C `traceparent` its trace
/// continues from (the request's server span, or the caller's own when tracing is off).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Origin {
    pub request_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// Runs `fut` with `id` as the current request id. A plain function, not an `async fn`:
/// an `async fn` would keep its `fut` argument beside the scope holding it, doubling the
/// size of every request's future (and of each copy of it).
pub fn scope<F: std::future::Future>(
    id: String,
    fut: F,
) -> impl std::future::Future<Output = F::Output> {
    within(
        Origin {
            request_id: id,
            traceparent: None,
        },
        fut,
    )
}

/// Runs `fut` as descending from `origin`.
pub fn within<F: std::future::Future>(
    origin: Origin,
    fut: F,
) -> impl std::future::Future<Output = F::Output> {
    ORIGIN.scope(origin, fut)
}

/// The current request id, or a fresh one outside a request (CLI, jobs).
pub fn request_id() -> String {
    ORIGIN
        .try_with(|o| o.request_id.clone())
        .unwrap_or_else(|_| new_request_id())
}

/// What the current work descends from, if it runs inside a request or a job.
pub fn origin() -> Option<Origin> {
    ORIGIN.try_with(Origin::clone).ok()
}

/// Who the request's caller is, once verified, and whether a read of it saw the primary.
#[derive(Default)]
struct CallerSlot {
    id: std::cell::Cell<Option<uuid::Uuid>>,
    read_primary: std::cell::Cell<bool>,
}

/// Runs `fut` with a slot for the request's caller: whoever the request's credential proves
/// it is (an integration, an operator), once a layer below has verified it (`set_caller`).
pub fn with_caller_slot<F: std::future::Future>(
    fut: F,
) -> impl std::future::Future<Output = F::Output> {
    CALLER.scope(CallerSlot::default(), fut)
}

/// Records the request's verified caller: an integration's id, or an operator's. Outside a
/// request (CLI, jobs) there is no slot and nothing is recorded.
pub fn set_caller(id: uuid::Uuid) {
    let _ = CALLER.try_with(|c| c.id.set(Some(id)));
}

/// The request's verified caller, once its credential has been checked.
pub fn caller() -> Option<uuid::Uuid> {
    CALLER.try_with(|c| c.id.get()).ok().flatten()
}

/// Records that a lag-tolerant read of this request was served by the primary: the caller
/// may have seen more than a replica has yet.
pub fn set_read_primary() {
    let _ = CALLER.try_with(|c| c.read_primary.set(true));
}

pub fn read_primary() -> bool {
    CALLER.try_with(|c| c.read_primary.get()).unwrap_or(false)
}

pub fn new_request_id() -> String {
    format!("req_{}", uuid::Uuid::now_v7().simple())
}

/// The client's address as the service sees it (the peer's IP, no port): what failure
/// budgets and anonymous rate limits are kept per.
pub fn client_address(remote: &poem::web::RemoteAddr) -> String {
    remote
        .as_socket_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|| remote.to_string())
}
