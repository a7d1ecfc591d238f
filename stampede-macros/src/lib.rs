//! The `#[cached]` attribute of stampede (arrives with the macro issue).
#![forbid(unsafe_code)]
