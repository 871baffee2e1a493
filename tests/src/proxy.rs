//! A TCP proxy on loopback that a test can break, to take a dependency "down" for one app
//! without touching the shared server: `cut` closes every connection and refuses new ones
//! (a server that stopped), `black_hole` stops moving bytes while keeping every connection
//! open (packets dropped: nothing is refused, nothing answers), `heal` restores traffic.
use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::AbortHandle,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Pass,
    BlackHole,
    Down,
}

pub struct Proxy {
    pub port: u16,
    mode: watch::Sender<Mode>,
    conns: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().unwrap().port();
        let conns: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (mode, _) = watch::channel(Mode::Pass);
        let c = conns.clone();
        let m = mode.clone();
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                if *m.borrow() == Mode::Down {
                    drop(inbound);
                    continue;
                }
                let rx = m.subscribe();
                let h = tokio::spawn(relay(inbound, upstream, rx));
                let mut all = c.lock().unwrap();
                all.retain(|h| !h.is_finished());
                all.push(h.abort_handle());
            }
        })
        .abort_handle();
        Proxy {
            port,
            mode,
            conns,
            accept,
        }
    }

    /// Closes every connection and refuses new ones: to the app, the server is gone.
    pub fn cut(&self) {
        self.mode.send_replace(Mode::Down);
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    /// Stops moving bytes in either direction; connections stay open, new ones are taken
    /// and get no answer.
    pub fn black_hole(&self) {
        self.mode.send_replace(Mode::BlackHole);
    }

    /// Traffic flows again: held bytes go on where they stopped, as TCP would deliver
    /// them once the network came back.
    pub fn heal(&self) {
        self.mode.send_replace(Mode::Pass);
    }
}

/// A proxy in front of what this test run's database URL names (PostgreSQL, or the pooler
/// in the scaled mode), and the run's database URL through it.
pub async fn database() -> (Proxy, String) {
    in_front_of(&crate::test_config().database_url.expect("a database URL")).await
}

/// A proxy in front of the server a postgres:// URL names, and the URL through it.
pub async fn in_front_of(url: &str) -> (Proxy, String) {
    let target = address_of(url);
    let proxy = Proxy::start(target.parse().expect("a numeric database address")).await;
    let proxied = proxy.route(url);
    (proxy, proxied)
}

/// The `host:port` a postgres:// URL names.
pub fn address_of(url: &str) -> String {
    let parsed = reqwest::Url::parse(url).expect("a postgres:// database URL");
    let host = parsed.host_str().expect("a database host");
    format!("{host}:{}", parsed.port().unwrap_or(5432))
}

impl Proxy {
    /// `url` (naming the server this proxy fronts) through this proxy.
    pub fn route(&self, url: &str) -> String {
        let routed = url.replacen(&address_of(url), &format!("127.0.0.1:{}", self.port), 1);
        assert_ne!(routed, url, "{url} names its server's address");
        routed
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// Waits while the proxy is black-holed; false once it is down.
async fn flowing(mode: &mut watch::Receiver<Mode>) -> bool {
    match mode.wait_for(|m| *m != Mode::BlackHole).await {
        Ok(m) => *m == Mode::Pass,
        Err(_) => false,
    }
}

async fn relay(inbound: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<Mode>) {
    if !flowing(&mut mode).await {
        return;
    }
    let Ok(outbound) = TcpStream::connect(upstream).await else {
        return;
    };
    let (ri, wi) = inbound.into_split();
    let (ro, wo) = outbound.into_split();
    tokio::join!(pump(ri, wo, mode.clone()), pump(ro, wi, mode));
}

/// Returns once the proxy is down (or dropped).
async fn down(mode: &mut watch::Receiver<Mode>) {
    let _ = mode.wait_for(|m| *m == Mode::Down).await;
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => {
                    let _ = to.shutdown().await;
                    return;
                }
                Ok(n) => n,
            },
            () = down(&mut mode) => return,
        };
        // Read while black-holed, a chunk is held (and nothing more is read) until traffic
        // flows again.
        if !flowing(&mut mode).await || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
