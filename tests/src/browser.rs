//! A real browser for the console's tests: Debian's headless Chromium driven through its
//! chromedriver over WebDriver (fantoccini). `tests/run.sh` installs both packages; a
//! machine without them fails these tests loudly rather than skipping them.
use std::{
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::OnceLock,
    time::Duration,
};

use fantoccini::{Client, ClientBuilder, Locator};
use tokio::sync::{Semaphore, SemaphorePermit};

/// One browser at a time: each is a few hundred megabytes and the machine has two cores.
fn gate() -> &'static Semaphore {
    static GATE: OnceLock<Semaphore> = OnceLock::new();
    GATE.get_or_init(|| Semaphore::new(1))
}

fn find(names: &[&str]) -> PathBuf {
    for n in names {
        for dir in ["/usr/bin", "/usr/local/bin", "/usr/lib/chromium"] {
            let p = PathBuf::from(dir).join(n);
            if p.exists() {
                return p;
            }
        }
    }
    panic!(
        "{names:?} not found: install Debian's chromium and chromium-driver (tests/run.sh does)"
    );
}

pub struct Browser {
    pub client: Client,
    driver: Child,
    _turn: SemaphorePermit<'static>,
}

impl Browser {
    pub async fn start() -> Browser {
        let turn = gate().acquire().await.expect("the browser gate");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new(find(&["chromedriver"]))
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let chromium = find(&["chromium", "chromium-browser"]);
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1366,900", "--hide-scrollbars", "--force-device-scale-factor=1"],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let mut last = None;
        for _ in 0..100 {
            match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    return Browser {
                        client,
                        driver,
                        _turn: turn,
                    };
                }
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("chromedriver did not start a session: {last:?}");
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("navigates");
    }

    /// The text of the whole page (read again if the page was replaced meanwhile).
    pub async fn text(&self) -> String {
        for _ in 0..50 {
            let body = self
                .client
                .find(Locator::Css("body"))
                .await
                .expect("a body");
            match body.text().await {
                Ok(t) => return t,
                Err(e) if stale(&e) => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(e) => panic!("the page's text: {e}"),
            }
        }
        panic!("the page kept changing");
    }

    pub async fn path(&self) -> String {
        self.client
            .current_url()
            .await
            .expect("a url")
            .path()
            .to_string()
    }

    pub async fn fill(&self, css: &str, value: &str) {
        let e = self
            .client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"));
        e.clear().await.expect("clears");
        e.send_keys(value).await.expect("types");
    }

    pub async fn choose(&self, css: &str, value: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .select_by_value(value)
            .await
            .expect("selects");
    }

    /// Clicks a link or a form's button and waits until the page it leads to has replaced
    /// this one (the old document's root goes stale), so what is read next is the new page.
    pub async fn click(&self, css: &str) {
        let old = self
            .client
            .find(Locator::Css("html"))
            .await
            .expect("a document");
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .click()
            .await
            .expect("clicks");
        for _ in 0..200 {
            match old.tag_name().await {
                Err(e) if stale(&e) => break,
                _ => tokio::time::sleep(Duration::from_millis(25)).await,
            }
        }
        self.client
            .wait()
            .for_element(Locator::Css("body"))
            .await
            .expect("the next page");
    }

    pub async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(Locator::Css(css))
            .await
            .expect("finds")
            .len()
    }

    /// Saves a PNG of the page as `<name>.png` where screenshots go: the directory
    /// `WALLET_CONSOLE_SCREENSHOTS` names (`docs/console` to refresh the documentation's),
    /// else the test run's own directory.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        // A relative directory is the repository's (tests run in `tests/`).
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let dir = std::env::var_os("WALLET_CONSOLE_SCREENSHOTS")
            .map(|d| root.join(d))
            .unwrap_or_else(|| std::env::temp_dir().join("wallet-console-screenshots"));
        std::fs::create_dir_all(&dir).expect("the screenshot directory");
        let png = self.client.screenshot().await.expect("a screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("the screenshot is saved");
        path
    }

    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn stale(e: &fantoccini::error::CmdError) -> bool {
    format!("{e:?}").contains("StaleElementReference")
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
    }
}
