//! Time as an integration sees it: real time, or a sandbox integration's test clock moved
//! forward to watch what expires (`clock`), and moving it (`test_clock`).
pub mod clock;
pub mod test_clock;
