//! What the command lines print. A reader that closes the pipe early (`wallet-api openapi |
//! head`) has what it wanted: the command goes on quietly instead of panicking in
//! `println!`, so an action it was asked for still completes and its exit code still says
//! how it went (a ledger check that fails still exits 1).
use std::io::{self, Write};

/// Prints `text` and a newline on stdout; a closed pipe drops the text silently.
pub fn line(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        done => done,
    }
}
