//! A TCP proxy on loopback that a test can cut, to take a dependency "down" for one app
//! without touching the shared server.
use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use tokio::{net::TcpListener, task::AbortHandle};

pub struct Proxy {
    pub port: u16,
    conns: Arc<Mutex<Vec<AbortHandle>>>,
    accept: AbortHandle,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().unwrap().port();
        let conns: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let c = conns.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let h = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                c.lock().unwrap().push(h.abort_handle());
            }
        })
        .abort_handle();
        Proxy {
            port,
            conns,
            accept,
        }
    }

    /// Closes every connection and stops accepting new ones: to the app, the server is gone.
    pub fn cut(&self) {
        self.accept.abort();
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}
