//! What the command lines print. A reader that closes the pipe early (`wallet-api openapi |
//! head`) has what it wanted, so the command ends quietly with success instead of panicking
//! in `println!` on the closed pipe.
use std::io::{self, Write};

/// Prints `text` and a newline on stdout. A closed pipe ends the process quietly (exit 0):
/// nothing after it could be read anyway.
pub fn line(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(0),
        done => done,
    }
}
