//! The logs of the serving commands (`strata serve`, `strata node`,
//! `strata kv serve`): one `tracing` subscriber writing to stderr, set up
//! here and nowhere else.
//!
//! - The level filter comes from `RUST_LOG` (an `EnvFilter` directive such
//!   as `info,strata_target=debug`); without it, or when it does not
//!   parse, `info`.
//! - `text` (the default) is one human-readable line per event. It is
//!   coloured only when stderr is a terminal and `NO_COLOR` is not set
//!   (<https://no-color.org>): a log file, a pipe or the journal gets no
//!   escape sequences.
//! - `json` is one JSON object per line, for log shippers: `timestamp`,
//!   `level`, `target`, `fields` (with the event's `message`) and, inside
//!   a span, `span` and `spans`. It is never coloured.
//!
//! What a command prints for its user (addresses, the admin token's file)
//! goes to stdout and is not part of the log.

use std::io::IsTerminal;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Whether text logs are coloured: stderr is a terminal and `NO_COLOR` is
/// unset or empty.
pub fn use_ansi() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !no_color && std::io::stderr().is_terminal()
}

/// Installs the process's log subscriber: `format` lines on stderr,
/// filtered by `RUST_LOG` (default `info`).
///
/// # Errors
///
/// A subscriber is already installed (this is called twice).
pub fn init(format: LogFormat) -> anyhow::Result<()> {
    // As before this module existed: an unset or unparsable RUST_LOG
    // means `info`, never a refusal to start.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder.with_ansi(use_ansi()).try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
    installed.map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_format_reads_from_toml_and_the_command_line() {
        #[derive(serde::Deserialize)]
        struct F {
            log_format: LogFormat,
        }
        let f: F = toml::from_str("log_format = \"json\"").unwrap();
        assert_eq!(f.log_format, LogFormat::Json);
        assert!(toml::from_str::<F>("log_format = \"xml\"").is_err());
        assert_eq!(<LogFormat as clap::ValueEnum>::from_str("text", false), Ok(LogFormat::Text));
    }
}
