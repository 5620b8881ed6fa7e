//! `CliError`: everything a subcommand can fail with. Subcommands return it; `main` renders
//! it once, as `replog: error: {error}` on standard error, and exits with status 1.
//!
//! Errors in the command line itself (a missing argument, a bad value, two actions that
//! cannot go together) never get here: clap reports them, with a usage line, and exits 2.

use std::io;
use std::path::PathBuf;

/// What went wrong, rendered once by `main`. Each variant's text is the one line printed
/// after `replog: error: `.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// The arguments parse but make no sense, e.g. an empty bootstrap list.
    #[error("{0}")]
    Usage(&'static str),
    /// `replog node --config FILE`'s file does not read, or a setting in it is wrong (the
    /// text names the file and line).
    #[error("{0}")]
    Config(String),
    /// A broker, the client or the library refused or failed.
    #[error(transparent)]
    Broker(#[from] replog::Error),
    /// A broker refused the client's login, or asked for one the client was not given.
    #[error(
        "authentication failed{}: {reason} ({})",
        .user.as_ref().map(|u| format!(" for user {u:?}")).unwrap_or_default(),
        .user.as_ref().map_or(
            "give a login in --command-config: sasl.mechanism, sasl.username, sasl.password",
            |_| "check sasl.username and sasl.password in --command-config"
        )
    )]
    Login {
        /// The user it logged in as, if it tried to.
        user: Option<String>,
        /// Why, as the broker told it.
        reason: String,
    },
    /// No broker hosts the topic (the library's `UnknownTopic`, or its `UnknownPartition`
    /// named by topic, for the commands that take a topic rather than one partition).
    #[error("unknown topic {0:?}")]
    UnknownTopic(String),
    /// A bootstrap server's name did not resolve.
    #[error("{server}: {source}")]
    Resolve {
        /// The `HOST:PORT` as given.
        server: String,
        /// Why it did not resolve.
        source: io::Error,
    },
    /// A file or directory could not be read.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
    /// A file's contents are not what the option reading it needs.
    #[error("{}:{line}: {reason}", .path.display())]
    BadFile {
        /// The file.
        path: PathBuf,
        /// The line at fault, counted from 1.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// An environment variable's value is not what it must be.
    #[error("{name}: {reason}")]
    BadEnv {
        /// The variable.
        name: &'static str,
        /// What is wrong with its value (never the value: it may hold a password).
        reason: String,
    },
    /// Standard input could not be read.
    #[error(transparent)]
    Stdin(io::Error),
    /// The demo's temporary directory could not be made.
    #[error(transparent)]
    TempDir(io::Error),
    /// The tokio runtime could not be started.
    #[error("cannot start the async runtime: {0}")]
    Runtime(io::Error),
    /// The metrics listener could not be set up.
    #[error("metrics: {0}")]
    Metrics(String),
    /// The demo's embedded cluster did not come up or behave as the tutorial needs.
    #[error("{0}")]
    Demo(&'static str),
    /// Some lines of a `produce` were not acknowledged.
    #[error(
        "{failed} of {lines} records were not acknowledged (first: line {first_line}: {first})"
    )]
    NotAcknowledged {
        /// How many lines failed.
        failed: u64,
        /// How many lines were read.
        lines: u64,
        /// The first that failed, counted from 1.
        first_line: u64,
        /// Why it failed.
        first: replog::Error,
    },
    /// Some partitions' preferred replicas could not take over (each named above).
    #[error("leader election failed for {failed} of {asked} partitions")]
    ElectionsFailed {
        /// How many failed.
        failed: usize,
        /// How many were asked for.
        asked: usize,
    },
}

impl CliError {
    /// `e`, from a request about `topic`: an unknown partition is reported as an unknown
    /// topic.
    pub(crate) fn about_topic(topic: &str, e: replog::Error) -> CliError {
        match e {
            replog::Error::UnknownPartition(_) | replog::Error::UnknownTopic(_) => {
                CliError::UnknownTopic(topic.to_string())
            }
            other => CliError::Broker(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_renders_as_one_line() {
        let io = || io::Error::from(io::ErrorKind::NotFound);
        let cases = [
            (
                CliError::Usage("no bootstrap server given"),
                "no bootstrap server given",
            ),
            (
                CliError::about_topic(
                    "t",
                    replog::Error::UnknownPartition(replog::PartitionId::new("t", 3)),
                ),
                "unknown topic \"t\"",
            ),
            (
                CliError::about_topic("t", replog::Error::TopicExists("t".into())),
                "topic t already exists",
            ),
            (
                CliError::Io {
                    path: PathBuf::from("/x/y"),
                    source: io(),
                },
                "/x/y: entity not found",
            ),
            (
                CliError::Resolve {
                    server: "h:1".into(),
                    source: io(),
                },
                "h:1: entity not found",
            ),
            (
                CliError::Login {
                    user: Some("alice".into()),
                    reason: "invalid credentials with SASL mechanism PLAIN".into(),
                },
                "authentication failed for user \"alice\": invalid credentials with SASL \
                 mechanism PLAIN (check sasl.username and sasl.password in --command-config)",
            ),
            (
                CliError::Login {
                    user: None,
                    reason: "log in first".into(),
                },
                "authentication failed: log in first (give a login in --command-config: \
                 sasl.mechanism, sasl.username, sasl.password)",
            ),
            (
                CliError::Runtime(io()),
                "cannot start the async runtime: entity not found",
            ),
        ];
        for (e, text) in cases {
            assert_eq!(e.to_string(), text);
        }
    }
}
