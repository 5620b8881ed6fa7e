//! `replog node --config FILE`: a TOML file of the broker's settings, each named as its flag
//! (`election-timeout-ms = 500`, or with underscores), and `--print-config`, the effective
//! settings in the same form.
//!
//! The file is read before the command line is parsed and turned into the flags it names,
//! put before the ones given: one parser, one set of names, checks and defaults for both. A
//! flag given on the command line wins over the file's setting of it (a list flag too: the
//! file's `peer` list is then not used). A key that names no flag, a value of the wrong shape
//! and a value the flag refuses are errors naming the file's line.
//!
//! ```toml
//! id = 1
//! listen = "127.0.0.1:9092"
//! data = "/var/lib/replog"
//! peer = ["2@127.0.0.1:9093", "3@127.0.0.1:9094"]
//! kafka-listen = "127.0.0.1:19092"
//! election-timeout-ms = 1000
//! authorization = true
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::error::CliError;

/// Flags of `replog node` that a file may not set: the file's own, and help.
const NOT_SETTINGS: [&str; 3] = ["config", "print-config", "help"];

/// Where each setting of the file given to `replog node --config` was, by flag: for errors
/// the parser finds in the flags made of them.
#[derive(Debug, Default)]
pub(crate) struct Origins {
    file: PathBuf,
    lines: BTreeMap<String, usize>,
}

impl Origins {
    /// "FILE:LINE" for the setting that became `--long`, if the file set it.
    pub(crate) fn of(&self, long: &str) -> Option<String> {
        let line = self.lines.get(long)?;
        Some(format!("{}:{line}", self.file.display()))
    }
}

/// `args` (the process's arguments) with the settings of `replog node --config FILE` put in
/// as flags right after `node`, and where each came from; `args` unchanged for any other
/// command or without `--config`. `node` is `replog node`'s command, for its flags.
pub(crate) fn expand(
    args: Vec<OsString>,
    node: &clap::Command,
) -> Result<(Vec<OsString>, Origins), CliError> {
    let Some(at) = node_position(&args) else {
        return Ok((args, Origins::default()));
    };
    let after: Vec<String> = args
        .get(at + 1..)
        .unwrap_or_default()
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let Some(file) = flag_value(&after, "config") else {
        return Ok((args, Origins::default()));
    };
    let file = PathBuf::from(file);
    let text = std::fs::read_to_string(&file).map_err(|e| config_error(&file, None, &e))?;
    let given: BTreeSet<String> = after
        .iter()
        .filter_map(|a| a.strip_prefix("--"))
        .map(|a| a.split_once('=').map_or(a, |(name, _)| name).to_string())
        .collect();
    let (flags, origins) = settings_as_flags(&file, &text, node, &given)?;
    let mut out = args;
    out.splice(at + 1..at + 1, flags.into_iter().map(OsString::from));
    Ok((out, origins))
}

/// The flags the settings in `text` (the file `file`) stand for, less those in `given` (the
/// command line's, which win), and where each was.
fn settings_as_flags(
    file: &Path,
    text: &str,
    node: &clap::Command,
    given: &BTreeSet<String>,
) -> Result<(Vec<String>, Origins), CliError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| config_error(file, None, &e.to_string().trim_end()))?;
    let known: BTreeMap<String, bool> = node
        .get_arguments()
        .filter_map(|a| {
            let long = a.get_long()?;
            Some((long.to_string(), a.get_action().takes_values()))
        })
        .filter(|(long, _)| !NOT_SETTINGS.contains(&long.as_str()))
        .collect();
    let mut origins = Origins {
        file: file.to_path_buf(),
        lines: BTreeMap::new(),
    };
    let mut flags = Vec::new();
    for (key, value) in &table {
        let line = line_of(text, key);
        let long = key.replace('_', "-");
        let Some(&takes_value) = known.get(&long) else {
            let why =
                format!("unknown setting {key:?} (settings are named as `replog node`'s flags)");
            return Err(config_error(file, line, &why));
        };
        if let Some(line) = line {
            origins.lines.insert(long.clone(), line);
        }
        if given.contains(&long) {
            continue;
        }
        let values: Vec<&toml::Value> = match value {
            toml::Value::Array(items) => items.iter().collect(),
            one => vec![one],
        };
        for v in values {
            let text = match v {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::Boolean(b) if !takes_value => {
                    if *b {
                        flags.push(format!("--{long}"));
                    }
                    continue;
                }
                toml::Value::Boolean(b) => b.to_string(),
                _ => {
                    let why = format!("{key:?} is a string, number, boolean or a list of them");
                    return Err(config_error(file, line, &why));
                }
            };
            if !takes_value {
                let why = format!("{key:?} is a switch: true or false");
                return Err(config_error(file, line, &why));
            }
            flags.push(format!("--{long}"));
            flags.push(text);
        }
    }
    Ok((flags, origins))
}

/// Where `node` stands among `args` as the subcommand (after the program's name and the
/// global flags, which take a value each).
fn node_position(args: &[OsString]) -> Option<usize> {
    let mut i = 1;
    // Bounded by the arguments: each turn moves past one or two.
    while let Some(a) = args.get(i) {
        let a = a.to_string_lossy();
        if a == "node" {
            return Some(i);
        }
        if !a.starts_with("--") {
            return None;
        }
        i += if a.contains('=') { 1 } else { 2 };
    }
    None
}

/// The value of `--name VALUE` or `--name=VALUE` in `args`.
fn flag_value(args: &[String], name: &str) -> Option<String> {
    let flag = format!("--{name}");
    let mut it = args.iter();
    // Bounded by the arguments.
    while let Some(a) = it.next() {
        if *a == flag {
            return it.next().cloned();
        }
        if let Some(v) = a.strip_prefix(&flag).and_then(|r| r.strip_prefix('=')) {
            return Some(v.to_string());
        }
    }
    None
}

/// The line (from 1) on which `key` is set in `text`.
fn line_of(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let l = l.trim_start();
            let rest = l
                .strip_prefix(key)
                .or_else(|| l.strip_prefix(&format!("\"{key}\"")));
            rest.is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map(|i| i + 1)
}

fn config_error(file: &Path, line: Option<usize>, why: &dyn std::fmt::Display) -> CliError {
    let at = line.map_or(String::new(), |l| format!(":{l}"));
    CliError::Config(format!("{}{at}: {why}", file.display()))
}

/// `replog node`'s effective settings as a config file would hold them, from what the
/// command line (the file's settings included) parsed to: every flag with a value, given or
/// defaulted, and every switch.
pub(crate) fn print_config(node: &clap::Command, matches: &clap::ArgMatches) -> String {
    let mut out = String::new();
    for arg in node.get_arguments() {
        let (Some(long), id) = (arg.get_long(), arg.get_id().as_str()) else {
            continue;
        };
        if NOT_SETTINGS.contains(&long) {
            continue;
        }
        let Ok(Some(raw)) = matches.try_get_raw(id) else {
            continue;
        };
        let values: Vec<String> = raw.map(|v| v.to_string_lossy().into_owned()).collect();
        let list = arg.get_num_args().is_some_and(|n| n.max_values() > 1)
            || matches!(arg.get_action(), clap::ArgAction::Append);
        let value = if !arg.get_action().takes_values() {
            values.first().cloned().unwrap_or_else(|| "false".into())
        } else if list {
            let items: Vec<String> = values.iter().map(|v| toml_scalar(v)).collect();
            format!("[{}]", items.join(", "))
        } else {
            values.first().map_or_else(String::new, |v| toml_scalar(v))
        };
        out.push_str(&format!("{long} = {value}\n"));
    }
    out
}

/// A flag's value as TOML: a number as it is, anything else as a string.
fn toml_scalar(v: &str) -> String {
    if v.parse::<i64>().is_ok() {
        v.to_string()
    } else {
        toml::Value::String(v.to_string()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> clap::Command {
        use clap::CommandFactory;
        crate::Cli::command()
            .find_subcommand("node")
            .cloned()
            .expect("replog node")
    }

    fn expand_with(text: &str, extra: &[&str]) -> Result<Vec<String>, String> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("node.toml");
        std::fs::write(&file, text).unwrap();
        let mut args: Vec<OsString> = ["replog", "node", "--config"]
            .into_iter()
            .map(OsString::from)
            .collect();
        args.push(file.clone().into());
        args.extend(extra.iter().map(OsString::from));
        expand(args, &node())
            .map(|(a, _)| {
                a.iter()
                    .skip(2)
                    .map(|a| a.to_string_lossy().into_owned())
                    .take_while(|a| a != "--config")
                    .collect()
            })
            .map_err(|e| e.to_string().replace(&file.display().to_string(), "FILE"))
    }

    #[test]
    fn settings_become_flags_and_the_command_line_wins() {
        let text = "id = 1\nlisten = \"127.0.0.1:9092\"\npeer = [\"2@127.0.0.1:9093\", \"3@127.0.0.1:9094\"]\nelection_timeout_ms = 500\nauthorization = true\njoin = false\n";
        let flags = expand_with(text, &["--election-timeout-ms", "700"]).unwrap();
        // toml's table is ordered by key.
        assert_eq!(
            flags,
            [
                "--authorization",
                "--id",
                "1",
                "--listen",
                "127.0.0.1:9092",
                "--peer",
                "2@127.0.0.1:9093",
                "--peer",
                "3@127.0.0.1:9094",
            ]
        );
    }

    #[test]
    fn bad_settings_name_their_line() {
        let err = expand_with("id = 1\n\nelection-timeot-ms = 5\n", &[]).unwrap_err();
        assert!(
            err.starts_with("FILE:3: unknown setting \"election-timeot-ms\""),
            "{err}"
        );
        let err = expand_with("id = 1\njoin = \"yes\"\n", &[]).unwrap_err();
        assert!(err.starts_with("FILE:2: \"join\" is a switch"), "{err}");
        let err = expand_with("id = 1\nlisten = { a = 1 }\n", &[]).unwrap_err();
        assert!(err.starts_with("FILE:2: \"listen\" is a string"), "{err}");
        let err = expand_with("id = = 1\n", &[]).unwrap_err();
        assert!(err.starts_with("FILE: "), "{err}");
        assert!(err.contains("line 1"), "{err}");
        let err = expand_with("config = \"other.toml\"\n", &[]).unwrap_err();
        assert!(err.contains("unknown setting \"config\""), "{err}");
    }

    #[test]
    fn the_effective_settings_print_as_a_config_file_that_reads_back() {
        use clap::CommandFactory;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("node.toml");
        std::fs::write(
            &file,
            "id = 2\nlisten = \"127.0.0.1:9093\"\ndata = \"/tmp/d\"\npeer = [\"1@127.0.0.1:9092\"]\n",
        )
        .unwrap();
        let args: Vec<OsString> = ["replog", "node", "--print-config", "--config"]
            .into_iter()
            .map(OsString::from)
            .chain([file.clone().into_os_string()])
            .collect();
        let (args, _) = expand(args, &node()).unwrap();
        let matches = crate::Cli::command().try_get_matches_from(&args).unwrap();
        let (_, node_matches) = matches.subcommand().unwrap();
        let printed = print_config(&node(), node_matches);
        assert!(printed.contains("id = 2\n"), "{printed}");
        assert!(
            printed.contains("listen = \"127.0.0.1:9093\"\n"),
            "{printed}"
        );
        assert!(
            printed.contains("peer = [\"1@127.0.0.1:9092\"]\n"),
            "{printed}"
        );
        assert!(
            printed.contains("election-timeout-ms = 1000\n"),
            "{printed}"
        );
        assert!(printed.contains("authorization = false\n"), "{printed}");
        // What it prints is a config file that gives the same settings.
        std::fs::write(&file, &printed).unwrap();
        let again: Vec<OsString> = ["replog", "node", "--print-config", "--config"]
            .into_iter()
            .map(OsString::from)
            .chain([file.into_os_string()])
            .collect();
        let (again, _) = expand(again, &node()).unwrap();
        let matches = crate::Cli::command().try_get_matches_from(&again).unwrap();
        let (_, node_matches) = matches.subcommand().unwrap();
        assert_eq!(print_config(&node(), node_matches), printed);
    }
}
