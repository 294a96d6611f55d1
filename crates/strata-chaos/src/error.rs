//! The harness's own errors: a run that could not be carried out at all
//! (bad configuration, strata would not start, the work dir is unusable).
//! What strata does wrong under attack is not an error here but a line in
//! the [`Report`](crate::Report).

/// Why a run could not be carried out.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting is out of range or inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A file or process operation of the harness failed.
    #[error("{context}: {source}")]
    Io {
        /// What the harness was doing.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// `strata serve` exited or did not listen in time.
    #[error("strata serve did not start: {reason} (log: {log})\n{tail}")]
    StrataStart {
        /// What went wrong.
        reason: String,
        /// Path of strata's log file.
        log: String,
        /// The last lines of that log.
        tail: String,
    },
}

impl Error {
    /// An [`Error::Io`] with `context`.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io { context: context.into(), source }
    }
}
